#include "eval/provenance.h"

#include "git_commit.h"  // generated: KVEC_GIT_COMMIT

namespace kvec::eval {

std::string engine_version() { return KVEC_VERSION; }
std::string git_commit() { return KVEC_GIT_COMMIT; }

}  // namespace kvec::eval
