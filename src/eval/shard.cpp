#include "eval/shard.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>

#include "util/sha256.h"
#include "util/error.h"

namespace kvec::eval {

namespace {

constexpr const char* kForms = "expected K/N (0-based shard K of N, e.g. 0/4), slurm, or k8s/N";

// A non-negative decimal integer (no sign, no spaces), or nullopt.
std::optional<int64_t> parse_count(std::string_view s) {
    int64_t v = 0;
    if (s.empty() || s.size() > 18) return std::nullopt;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || v < 0) return std::nullopt;
    return v;
}

// Why `s` is not a count: "is too large" for a string of digits beyond int64's 18 digits, else "is
// not a whole number".
const char* not_a_count(std::string_view s) {
    const bool digits = !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos;
    return digits ? "is too large (at most 18 digits)" : "is not a whole number";
}

int64_t count_from(std::string_view text, std::string_view piece) {
    const std::optional<int64_t> n = parse_count(piece);
    if (!n) fail("--shard '{}': the shard count '{}' {} ({})", text, piece, not_a_count(piece), kForms);
    if (*n < 1) fail("--shard '{}': the shard count must be at least 1, got {}", text, *n);
    return *n;
}

int64_t env_number(const EnvLookup& env, const char* name, std::string_view text) {
    const std::optional<std::string> v = env(name);
    if (!v) fail("--shard {}: the environment variable {} is not set", text, name);
    const std::optional<int64_t> n = parse_count(*v);
    if (!n) fail("--shard {}: {}='{}' {}", text, name, *v, not_a_count(*v));
    return *n;
}

Shard checked(Shard s, std::string_view text) {
    if (s.index >= s.count) {
        fail("--shard '{}': shard {} does not exist among {} shards (indices are 0-based: 0 to {})", text, s.index,
             s.count, s.count - 1);
    }
    return s;
}

}  // namespace

EnvLookup process_env() {
    return [](const char* name) -> std::optional<std::string> {
        const char* v = std::getenv(name);
        if (v == nullptr) return std::nullopt;
        return std::string(v);
    };
}

Shard parse_shard(std::string_view text, const EnvLookup& env) {
    Shard s;
    if (text == "slurm") {
        s.source = "slurm";
        const int64_t id = env_number(env, "SLURM_ARRAY_TASK_ID", text);
        const int64_t count = env_number(env, "SLURM_ARRAY_TASK_COUNT", text);
        const int64_t min = env_number(env, "SLURM_ARRAY_TASK_MIN", text);
        if (count < 1) fail("--shard slurm: SLURM_ARRAY_TASK_COUNT must be at least 1, got {}", count);
        if (const std::optional<std::string> max = env("SLURM_ARRAY_TASK_MAX")) {
            const std::optional<int64_t> m = parse_count(*max);
            if (m && *m - min + 1 != count) {
                fail("--shard slurm: the array {}-{} has {} tasks, not one per index; give a contiguous --array "
                     "(such as 0-{}, no step or list)", min, *m, count, count - 1);
            }
        }
        if (id < min) fail("--shard slurm: SLURM_ARRAY_TASK_ID {} is below SLURM_ARRAY_TASK_MIN {}", id, min);
        s.index = id - min;
        s.count = count;
        return checked(s, text);
    }
    if (text.substr(0, 4) == "k8s/") {
        s.source = "k8s";
        s.count = count_from(text, text.substr(4));
        s.index = env_number(env, "JOB_COMPLETION_INDEX", text);
        return checked(s, text);
    }
    const size_t slash = text.find('/');
    if (slash == std::string_view::npos) fail("--shard '{}': {}", text, kForms);
    const std::optional<int64_t> k = parse_count(text.substr(0, slash));
    if (!k) fail("--shard '{}': the shard index '{}' {} ({})", text, text.substr(0, slash), not_a_count(text.substr(0, slash)),
                 kForms);
    s.count = count_from(text, text.substr(slash + 1));
    s.index = *k;
    return checked(s, text);
}

std::string shard_name(const Shard& s) { return fmt::format("{}/{}", s.index, s.count); }

int64_t shard_of(std::string_view id, int64_t count) {
    if (count < 1) fail("shard_of: the shard count must be at least 1, got {}", count);
    const std::string hex = sha256_hex(id);
    const uint64_t h = std::strtoull(hex.substr(0, 16).c_str(), nullptr, 16);
    return static_cast<int64_t>(h % static_cast<uint64_t>(count));
}

std::vector<size_t> shard_items(const std::vector<EvalItem>& items, Protocol protocol, const Shard& s) {
    std::vector<size_t> out;
    for (size_t begin = 0; begin < items.size();) {
        const size_t end = compression_group_end(items, begin, protocol);
        if (shard_of(items[begin].id, s.count) == s.index) {
            for (size_t i = begin; i < end; ++i) out.push_back(i);
        }
        begin = end;
    }
    return out;
}

}  // namespace kvec::eval
