// Saved conversations: a session's KV cache as stored (compressed by its policy, keys and values
// in their element types, original positions, the policy's per-entry scores), its token history
// and next position, the policy that made it and the SHA-256 of the model file. `kvec serve`'s
// slot save / restore (docs/server.md): compress a document once, ask many questions later.
//
// File layout (little-endian), version 2 (version 1 stored quantised rows unrotated; refused):
//   "KVECSLOT" u32 version
//   str model_sha256 (64 hex digits)   str policy spec ("" = full cache)
//   u32 key_type u32 value_type u32 n_layer u32 n_head_kv u32 head_dim u32 n_aux
//   i32 n_past i32 n_prompt i32 n_decoded u32 n_tokens i32 tokens[n_tokens]
//   per layer, per KV head: i32 n, i32 positions[n], key rows [n], value rows [n], f32 aux[n_aux][n]
//     (the rows as the cache stores them: quantised rows rotated, kvcache/kv_cache.h)
//   str sha256 of every byte before it (integrity)
// where str is u32 length + bytes. Written to a temporary file and renamed, so a crash never
// leaves half a file under the name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/session.h"

namespace kvec {

// Writes the session to path. kvec::Error if the file cannot be written.
void save_session(const Session& session, const std::string& path, const std::string& model_sha256,
                  const std::string& policy_spec);

// A saved session, read whole and checked (magic, version, checksum, every count against the
// bytes there are) before anything is restored.
class SessionFile {
public:
    // kvec::Error naming the file and the problem: not a regular file (a symbolic link is not
    // followed), larger than max_bytes (checked before anything is read), not a kvec slot file,
    // another version, a truncated or corrupt file.
    static SessionFile read(const std::string& path, uint64_t max_bytes = UINT64_MAX);

    const std::string& model_sha256() const { return model_sha256_; }
    const std::string& policy() const { return policy_; }
    int32_t n_past() const { return state_.n_past; }
    int64_t entries() const;  // cache entries over all layers and heads

    // Fills the session (reset first, with the saved policy's evictor attached by the caller):
    // kvec::Error, and the session left empty, when the file's cache does not fit the session's
    // (layers, KV heads, head dim, element types, policy scores) or its sequence (Session::restore_sequence).
    void restore(Session& session) const;

private:
    std::string path_;
    std::string model_sha256_;
    std::string policy_;
    uint32_t key_type_ = 0, value_type_ = 0;
    int n_layer_ = 0, n_head_kv_ = 0, head_dim_ = 0, n_aux_ = 0;
    Session::SequenceState state_;
    struct Head {
        std::vector<int32_t> positions;  // [n]
        std::vector<uint8_t> keys;       // [n] key rows as stored
        std::vector<uint8_t> values;     // [n] value rows as stored
        std::vector<float> aux;          // [n_aux][n]
    };
    std::vector<Head> heads_;  // [n_layer * n_head_kv]
};

}  // namespace kvec
