// Shared helpers of the model, engine and parity tests: temporary files, tiny random models, a
// GGUF rewriter for building broken files, and a trivial "sinks + recent" evictor.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "kvcache/eviction.h"
#include "model/model.h"
#include "model/random_model.h"
#include "model/session.h"
#include "util/error.h"

namespace kvec::testing_helpers {

// A per-process temporary directory, removed at exit.
inline const std::filesystem::path& temp_dir() {
    struct Dir {
        std::filesystem::path path;
        Dir() {
            std::string name = "kvec-test-";
            name += std::to_string(::getpid());
            path = std::filesystem::path(::testing::TempDir()) / name;
            std::filesystem::create_directories(path);
        }
        ~Dir() {
            std::error_code ec;
            std::filesystem::remove_all(path, ec);
        }
    };
    static Dir dir;
    return dir.path;
}

inline std::string temp_path(const std::string& name) { return (temp_dir() / name).string(); }

// A fixed, varied prompt for the family tests: token i is (i * mul + add) mod vocab.
inline std::vector<int32_t> token_cycle(int n, int mul, int add, int vocab = 512) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = (i * mul + add) % vocab;
    return t;
}

// The logits of every position [tokens, n_vocab] of one prefill of tokens on a fresh session.
inline std::vector<float> prefill_logits(const Model& m, std::span<const int32_t> tokens,
                                         const SessionOptions& options) {
    Session s(m, options);
    const auto a = s.prefill(tokens, true);
    return {a.begin(), a.end()};
}

// The largest |a[i] - b[i]| (logits against logits).
inline float max_abs_diff(std::span<const float> a, std::span<const float> b) {
    float d = 0;
    for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
    return d;
}

// A tiny model: 2 layers, embd 128, 4 heads of 32, 2 KV heads, ff 256, a 512-token slice of the
// SentencePiece vocabulary.
inline RandomModelSpec tiny_spec(const std::string& arch = "llama") {
    RandomModelSpec s;
    s.arch = arch;
    s.n_layer = 2;
    s.n_embd = 128;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.n_ff = 256;
    s.n_vocab = 512;
    s.n_ctx = 256;
    s.seed = 7;
    return s;
}

// Session options with F32 cache entries (the exact cache the parity checks compare against).
inline SessionOptions f32_options(int n_batch = 512) {
    SessionOptions o;
    o.kv_type_k = o.kv_type_v = KvType::F32;
    o.n_batch = n_batch;
    return o;
}

// The message of the kvec::Error that loading `path` throws, "" when it loads.
inline std::string load_error(const std::string& path) {
    try {
        Model::load(path);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

inline std::string write_model(const RandomModelSpec& spec, const std::string& name) {
    const std::string path = temp_path(name);
    write_random_model(spec, path);
    return path;
}

// Copies a GGUF file, letting the caller drop or replace tensors and change metadata.
struct Rewrite {
    std::function<bool(const std::string&)> drop_tensor = [](const std::string&) { return false; };
    std::vector<std::pair<std::string, gguf::Value>> set_metadata;
    std::function<bool(const std::string&)> drop_key = [](const std::string&) { return false; };
    // Replaces a tensor by an F32 tensor of the given dims (zeros).
    std::vector<std::pair<std::string, std::vector<int64_t>>> reshape;
};

inline void rewrite_gguf(const std::string& in, const std::string& out, const Rewrite& r) {
    auto f = gguf::File::open(in);
    gguf::Writer w;
    for (const auto& [k, v] : f->metadata()) {
        if (!r.drop_key(k)) w.set(k, v);
    }
    for (const auto& [k, v] : r.set_metadata) w.set(k, v);
    for (const auto& t : f->tensors()) {
        if (r.drop_tensor(t.name)) continue;
        auto it = std::find_if(r.reshape.begin(), r.reshape.end(), [&](const auto& p) { return p.first == t.name; });
        if (it != r.reshape.end()) {
            int64_t n = 1;
            for (int64_t d : it->second) n *= d;
            std::vector<float> zeros(static_cast<size_t>(n));
            w.add_tensor(t.name, GgmlType::F32, it->second, zeros.data(), zeros.size() * sizeof(float));
            continue;
        }
        std::vector<int64_t> dims(t.ne.begin(), t.ne.begin() + t.n_dims);
        w.add_tensor(t.name, t.type, dims, t.data, t.nbytes);
    }
    w.write(out);
}

// Keeps the first n_sink entries and the last n_recent + h * head_skew entries of KV head h
// (a different count per head, to exercise variable-length heads). Records what it saw.
class SinkRecentEvictor : public Evictor {
public:
    SinkRecentEvictor(int n_sink, int n_recent, int head_skew = 0, ObservationRequest request = {})
        : n_sink_(n_sink), n_recent_(n_recent), head_skew_(head_skew), request_(request) {}

    ObservationRequest request() const override { return request_; }
    void begin_sequence(int32_t n_prompt) override { sequences.push_back(n_prompt); }

    bool on_prefill(const LayerView& view, KeepLists& keep) override { return select(view, keep); }
    bool on_decode(const LayerView& view, KeepLists& keep) override { return select(view, keep); }

    std::vector<int32_t> sequences;
    std::vector<LayerView> calls;                 // views seen (their pointers are stale later)
    std::function<void(const LayerView&)> inspect;  // called with every live view

private:
    bool select(const LayerView& view, KeepLists& keep) {
        calls.push_back(view);
        if (inspect) inspect(view);
        for (int h = 0; h < view.n_head_kv; ++h) {
            const int32_t n = view.heads[static_cast<size_t>(h)].n_entries;
            const int32_t recent = n_recent_ + h * head_skew_;
            for (int32_t i = 0; i < n; ++i) {
                if (i < n_sink_ || i >= n - recent) keep[static_cast<size_t>(h)].push_back(i);
            }
        }
        return true;
    }

    int n_sink_, n_recent_, head_skew_;
    ObservationRequest request_;
};

}  // namespace kvec::testing_helpers
