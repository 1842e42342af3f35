#include "engine/session_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <limits>
#include <span>

#include "util/atomic_file.h"
#include "util/error.h"
#include "util/sha256.h"

namespace kvec {

namespace {

constexpr char kMagic[8] = {'K', 'V', 'E', 'C', 'S', 'L', 'O', 'T'};
// 2: quantised keys and values stored rotated (KvCache::key_rotation), 2026-12-02.
constexpr uint32_t kVersion = 2;
constexpr size_t kChecksumBytes = 4 + 64;  // the trailing str: length + hex digest

void put_bytes(std::string& out, const void* p, size_t n) {
    if (n > 0) out.append(static_cast<const char*>(p), n);  // p may be null when n is 0 (an empty head)
}
void put_u32(std::string& out, uint32_t v) { put_bytes(out, &v, 4); }
void put_i32(std::string& out, int32_t v) { put_bytes(out, &v, 4); }
void put_str(std::string& out, const std::string& s) {
    put_u32(out, static_cast<uint32_t>(s.size()));
    out += s;
}

// Reads the file's bytes in order; every read is checked against what is left.
class Reader {
public:
    Reader(const std::string& path, std::string_view bytes) : path_(path), bytes_(bytes) {}

    void get(void* out, size_t n) {
        if (n > bytes_.size() - at_) fail("{}: truncated slot file (needs {} more bytes at offset {})", path_, n, at_);
        if (n == 0) return;  // out may be null (an empty vector's data())
        std::memcpy(out, bytes_.data() + at_, n);
        at_ += n;
    }
    uint32_t u32() {
        uint32_t v = 0;
        get(&v, 4);
        return v;
    }
    int32_t i32() {
        int32_t v = 0;
        get(&v, 4);
        return v;
    }
    // A count of items of `item_bytes` each, which must fit in what is left.
    size_t count(int64_t n, size_t item_bytes, const char* what) {
        if (n < 0 || static_cast<uint64_t>(n) > (bytes_.size() - at_) / std::max<size_t>(item_bytes, 1)) {
            fail("{}: corrupt slot file ({} {} do not fit in its {} bytes)", path_, n, what, bytes_.size());
        }
        return static_cast<size_t>(n);
    }
    std::string str(size_t max_length, const char* what) {
        const size_t n = count(u32(), 1, what);
        if (n > max_length) fail("{}: corrupt slot file ({} of {} bytes)", path_, what, n);
        std::string s(n, '\0');
        get(s.data(), n);
        return s;
    }
    bool at_end() const { return at_ == bytes_.size(); }

private:
    const std::string& path_;
    std::string_view bytes_;
    size_t at_ = 0;
};

}  // namespace

void save_session(const Session& session, const std::string& path, const std::string& model_sha256,
                  const std::string& policy_spec) {
    const KvCache& kv = session.kv_cache();
    const KvCacheConfig& c = kv.config();
    const size_t key_row = kv_row_bytes(c.key_type, c.head_dim), value_row = kv_row_bytes(c.value_type, c.head_dim);
    const Session::SequenceState state = session.sequence_state();

    std::string out;
    out.reserve(256 + state.tokens.size() * 4 + kv.used_bytes());
    put_bytes(out, kMagic, sizeof kMagic);
    put_u32(out, kVersion);
    put_str(out, model_sha256);
    put_str(out, policy_spec);
    for (const uint32_t v : {static_cast<uint32_t>(c.key_type), static_cast<uint32_t>(c.value_type),
                             static_cast<uint32_t>(c.n_layer), static_cast<uint32_t>(c.n_head_kv),
                             static_cast<uint32_t>(c.head_dim), static_cast<uint32_t>(c.n_aux)}) {
        put_u32(out, v);
    }
    put_i32(out, state.n_past);
    put_i32(out, state.n_prompt);
    put_i32(out, state.n_decoded);
    put_u32(out, static_cast<uint32_t>(state.tokens.size()));
    put_bytes(out, state.tokens.data(), state.tokens.size() * 4);
    for (int l = 0; l < c.n_layer; ++l) {
        for (int h = 0; h < c.n_head_kv; ++h) {
            const int32_t n = kv.size(l, h);
            const auto rows = static_cast<size_t>(n);
            put_i32(out, n);
            put_bytes(out, kv.positions(l, h), rows * 4);
            put_bytes(out, kv.key_data(l, h), rows * key_row);
            put_bytes(out, kv.value_data(l, h), rows * value_row);
            for (int a = 0; a < c.n_aux; ++a) put_bytes(out, kv.aux(l, h, a), rows * 4);
        }
    }
    put_str(out, sha256_hex(out));

    write_file_atomic(path, out);
}

SessionFile SessionFile::read(const std::string& path, uint64_t max_bytes) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) fail("cannot open {}: {}", path, errno == ELOOP ? "a symbolic link, not followed" : std::strerror(errno));
    std::string bytes;
    try {
        struct stat st {};
        if (::fstat(fd, &st) != 0) fail("cannot read {}: {}", path, std::strerror(errno));
        if (!S_ISREG(st.st_mode)) fail("{} is not a regular file", path);
        const auto size = static_cast<uint64_t>(st.st_size);
        if (size > max_bytes) fail("{} holds {} bytes, more than the {} a slot file of this server can hold", path, size, max_bytes);
        bytes.resize(static_cast<size_t>(size));
        size_t got = 0;
        while (got < bytes.size()) {
            const ssize_t r = ::read(fd, bytes.data() + got, bytes.size() - got);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) fail("cannot read {}: {}", path, std::strerror(errno));
            if (r == 0) break;  // shorter than fstat said (truncated meanwhile): checked below
            got += static_cast<size_t>(r);
        }
        bytes.resize(got);
    } catch (...) {
        ::close(fd);
        throw;
    }
    ::close(fd);
    if (bytes.size() < sizeof kMagic + 4 || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
        fail("{} is not a kvec slot file (no KVECSLOT header)", path);
    }
    uint32_t version = 0;  // checked before the checksum: another version may end differently
    std::memcpy(&version, bytes.data() + sizeof kMagic, 4);
    if (version != kVersion) fail("{}: slot file version {}, this kvec reads version {}", path, version, kVersion);
    if (bytes.size() < sizeof kMagic + 4 + kChecksumBytes) fail("{}: truncated slot file ({} bytes)", path, bytes.size());
    const std::string_view body(bytes.data(), bytes.size() - kChecksumBytes);
    uint32_t digest_length = 0;
    std::memcpy(&digest_length, bytes.data() + body.size(), 4);
    const std::string_view digest(bytes.data() + body.size() + 4, 64);
    if (digest_length != 64 || digest != sha256_hex(body)) {
        fail("{}: the slot file is corrupt or truncated (its checksum does not match its contents)", path);
    }

    SessionFile s;
    s.path_ = path;
    Reader b(path, body);
    char header[sizeof kMagic + 4];  // magic and version, checked above
    b.get(header, sizeof header);
    s.model_sha256_ = b.str(64, "model hash");
    s.policy_ = b.str(4096, "policy");
    s.key_type_ = b.u32();
    s.value_type_ = b.u32();
    const uint32_t n_layer = b.u32(), n_head_kv = b.u32(), head_dim = b.u32(), n_aux = b.u32();
    if (n_layer == 0 || n_layer > 4096 || n_head_kv == 0 || n_head_kv > 4096 || head_dim == 0 || head_dim > 65536 ||
        n_aux > 4096) {
        fail("{}: corrupt slot file ({} layers, {} KV heads, head dim {}, {} scores)", path, n_layer, n_head_kv,
             head_dim, n_aux);
    }
    s.n_layer_ = static_cast<int>(n_layer);
    s.n_head_kv_ = static_cast<int>(n_head_kv);
    s.head_dim_ = static_cast<int>(head_dim);
    s.n_aux_ = static_cast<int>(n_aux);
    size_t key_row = 0, value_row = 0;
    try {
        key_row = kv_row_bytes(static_cast<KvType>(s.key_type_), s.head_dim_);
        value_row = kv_row_bytes(static_cast<KvType>(s.value_type_), s.head_dim_);
    } catch (const Error& e) {
        fail("{}: corrupt slot file ({})", path, e.what());
    }
    s.state_.n_past = b.i32();
    s.state_.n_prompt = b.i32();
    s.state_.n_decoded = b.i32();
    s.state_.tokens.resize(b.count(b.u32(), 4, "tokens"));
    b.get(s.state_.tokens.data(), s.state_.tokens.size() * 4);
    s.heads_.resize(size_t{n_layer} * n_head_kv);
    for (Head& h : s.heads_) {
        const size_t n = b.count(b.i32(), 4 + key_row + value_row + 4 * size_t{n_aux}, "cache entries");
        h.positions.resize(n);
        h.keys.resize(n * key_row);
        h.values.resize(n * value_row);
        h.aux.resize(n * n_aux);
        b.get(h.positions.data(), n * 4);
        b.get(h.keys.data(), h.keys.size());
        b.get(h.values.data(), h.values.size());
        b.get(h.aux.data(), h.aux.size() * 4);
    }
    if (!b.at_end()) fail("{}: corrupt slot file (bytes after the cache)", path);
    return s;
}

int64_t SessionFile::entries() const {
    int64_t n = 0;
    for (const Head& h : heads_) n += static_cast<int64_t>(h.positions.size());
    return n;
}

void SessionFile::restore(Session& session) const {
    KvCache& kv = session.kv_cache();
    const KvCacheConfig& c = kv.config();
    if (c.n_layer != n_layer_ || c.n_head_kv != n_head_kv_ || c.head_dim != head_dim_) {
        fail("{} holds a cache of {} layers x {} KV heads x head dim {}; this model's is {} x {} x {}", path_,
             n_layer_, n_head_kv_, head_dim_, c.n_layer, c.n_head_kv, c.head_dim);
    }
    if (static_cast<uint32_t>(c.key_type) != key_type_ || static_cast<uint32_t>(c.value_type) != value_type_) {
        fail("{} holds {} keys and {} values; this session stores {} keys and {} values (-ctk / -ctv)", path_,
             kv_type_name(static_cast<KvType>(key_type_)), kv_type_name(static_cast<KvType>(value_type_)),
             kv_type_name(c.key_type), kv_type_name(c.value_type));
    }
    if (c.n_aux != n_aux_) {
        fail("{} holds {} scores per entry; the attached policy keeps {}", path_, n_aux_, c.n_aux);
    }
    try {
        for (int l = 0; l < n_layer_; ++l) {
            for (int h = 0; h < n_head_kv_; ++h) {
                const Head& d = heads_[static_cast<size_t>(l) * n_head_kv_ + h];
                kv.assign(l, h, static_cast<int32_t>(d.positions.size()), d.keys.data(), d.values.data(),
                          d.positions.data(), d.aux);
            }
        }
        session.restore_sequence(state_);
    } catch (const Error& e) {
        kv.clear();
        fail("{}: {}", path_, e.what());
    }
}

}  // namespace kvec
