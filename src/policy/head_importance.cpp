#include "policy/head_importance.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>

#include "util/atomic_file.h"
#include "util/error.h"

namespace kvec::policy {

namespace {

constexpr const char* kFormat = "kvec-head-importance";
constexpr uintmax_t kMaxBytes = 16u << 20;  // a 10,000-head model's scores take well under 1 MiB

}  // namespace

HeadImportance read_head_importance(const std::string& path) {
    // A small regular file: never a device, a pipe or a directory, nothing that reads for ever.
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (ec || !std::filesystem::is_regular_file(status)) fail("head importance file '{}' cannot be read (not a regular file)", path);
    const auto size = std::filesystem::file_size(path, ec);
    if (ec || size > kMaxBytes) fail("head importance file '{}' is larger than {} bytes", path, kMaxBytes);
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("head importance file '{}' cannot be read", path);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
        fail("head importance file '{}': not JSON (at byte {})", path, e.byte);
    }
    if (!j.is_object() || j.value("format", std::string()) != kFormat) {
        fail("head importance file '{}': not a {} file (write one with kvec head-scores)", path, kFormat);
    }
    HeadImportance h;
    try {
        h.model = j.value("model", std::string());
        h.sha256 = j.value("sha256", std::string());
        h.method = j.value("method", std::string());
        h.items = j.value("items", int64_t{0});
        const auto& rows = j.at("scores");
        if (!rows.is_array() || rows.empty()) fail("head importance file '{}': 'scores' is not a non-empty table", path);
        for (const auto& row : rows) {
            if (!row.is_array() || row.empty()) fail("head importance file '{}': a row of 'scores' is empty", path);
            std::vector<double> r;
            for (const auto& v : row) {
                if (!v.is_number()) fail("head importance file '{}': a score is not a number", path);
                const double x = v.get<double>();
                if (!std::isfinite(x) || x < 0) fail("head importance file '{}': score {} is not finite and >= 0", path, x);
                r.push_back(x);
            }
            if (!h.scores.empty() && r.size() != h.scores.front().size()) {
                fail("head importance file '{}': rows of {} and {} heads", path, h.scores.front().size(), r.size());
            }
            h.scores.push_back(std::move(r));
        }
        if (j.contains("n_layer") && j.at("n_layer").get<int64_t>() != h.n_layer()) {
            fail("head importance file '{}': n_layer {} but {} rows", path, j.at("n_layer").get<int64_t>(), h.n_layer());
        }
        if (j.contains("n_head_kv") && j.at("n_head_kv").get<int64_t>() != h.n_head_kv()) {
            fail("head importance file '{}': n_head_kv {} but rows of {}", path, j.at("n_head_kv").get<int64_t>(),
                 h.n_head_kv());
        }
    } catch (const nlohmann::json::exception& e) {
        fail("head importance file '{}': {}", path, e.what());
    }
    return h;
}

void write_head_importance(const HeadImportance& h, const std::string& path) {
    nlohmann::ordered_json j;
    j["format"] = kFormat;
    j["version"] = 1;
    j["model"] = h.model;
    j["sha256"] = h.sha256;
    j["method"] = h.method;
    j["items"] = h.items;
    j["n_layer"] = h.n_layer();
    j["n_head_kv"] = h.n_head_kv();
    j["scores"] = h.scores;
    write_file_atomic(path, j.dump(1) + "\n");
}

std::vector<std::vector<int64_t>> headkv_budgets(const std::vector<std::vector<double>>& scores, int64_t b,
                                                 double beta) {
    if (!(beta >= 0.0 && beta <= 1.0)) fail("headkv: beta {} is outside [0, 1]", beta);
    if (b < 0) fail("headkv: negative budget {}", b);
    const size_t L = scores.size();
    const size_t H = L == 0 ? 0 : scores.front().size();
    const auto base = static_cast<int64_t>(std::floor((1.0 - beta) * static_cast<double>(b) + 1e-9));
    const int64_t total = static_cast<int64_t>(L * H) * b;
    const int64_t pool = total - static_cast<int64_t>(L * H) * base;
    double sum = 0.0;
    for (const auto& row : scores) sum = std::accumulate(row.begin(), row.end(), sum);
    std::vector<std::vector<int64_t>> out(L, std::vector<int64_t>(H, base));
    std::vector<std::pair<double, size_t>> remainder;  // (fractional part, flat index)
    int64_t given = 0;
    for (size_t l = 0; l < L; ++l) {
        for (size_t h = 0; h < H; ++h) {
            const double share = sum > 0 ? scores[l][h] / sum : 1.0 / static_cast<double>(L * H);
            const double x = share * static_cast<double>(pool);
            const auto whole = static_cast<int64_t>(std::floor(x));
            out[l][h] += whole;
            given += whole;
            remainder.emplace_back(x - static_cast<double>(whole), l * H + h);
        }
    }
    std::stable_sort(remainder.begin(), remainder.end(),
                     [](const auto& a, const auto& c) { return a.first > c.first; });
    for (size_t k = 0; given < pool && k < remainder.size(); ++k, ++given) {
        ++out[remainder[k].second / H][remainder[k].second % H];
    }
    return out;
}

}  // namespace kvec::policy
