// Provenance of evaluation results: engine version, the git commit the binary was built from.
#pragma once

#include <string>

namespace kvec::eval {

std::string engine_version();  // KVEC_VERSION, e.g. "0.1.0"
// The commit of the checkout at build time ("<sha>" or "<sha>-dirty" when tracked files had
// uncommitted changes), "unknown" outside a git checkout.
std::string git_commit();

}  // namespace kvec::eval
