#include "model/moe.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tensor/matmul.h"
#include "tensor/ops.h"
#include "util/error.h"

namespace kvec::moe {

namespace {

template <typename T>
void grow(std::vector<T>& v, int64_t n) {
    if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
}

// Up to this many tokens, moe::ffn gives each thread whole experts (decode, small batches).
constexpr int64_t kExpertsPerThreadMaxTokens = 16;

}  // namespace

WeightView expert_matrix(const WeightView& w, int e, int64_t n_out) {
    KVEC_CHECK(e >= 0 && (e + 1) * n_out <= w.n_out);
    return w.rows(int64_t{e} * n_out, n_out);
}

void route(const float* logits, const Routing& r, int32_t* experts, float* weights) {
    KVEC_CHECK(r.n_used > 0 && r.n_used <= r.n_expert);
    const auto n = static_cast<size_t>(r.n_expert);
    double max = logits[0];
    for (size_t e = 1; e < n; ++e) max = std::max(max, static_cast<double>(logits[e]));
    thread_local std::vector<double> p;       // [n_expert] probabilities (softmax_selected: logits)
    thread_local std::vector<int32_t> order;  // [n_expert] expert indices
    p.resize(n);
    order.resize(n);
    if (r.softmax_selected) {
        for (size_t e = 0; e < n; ++e) p[e] = logits[e];
    } else {
        double sum = 0;
        for (size_t e = 0; e < n; ++e) sum += p[e] = std::exp(static_cast<double>(logits[e]) - max);
        for (size_t e = 0; e < n; ++e) p[e] /= sum;
    }
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(
        order.begin(), order.begin() + r.n_used, order.end(), [&](int32_t a, int32_t b) {
            const double pa = p[static_cast<size_t>(a)], pb = p[static_cast<size_t>(b)];
            return pa > pb || (pa == pb && a < b);
        });
    if (r.softmax_selected) {  // the chosen logits' softmax (the first is the largest)
        const double top = p[static_cast<size_t>(order[0])];
        double sum = 0;
        for (int k = 0; k < r.n_used; ++k)
            sum += std::exp(p[static_cast<size_t>(order[static_cast<size_t>(k)])] - top);
        for (int k = 0; k < r.n_used; ++k) {
            experts[k] = order[static_cast<size_t>(k)];
            weights[k] =
                static_cast<float>(std::exp(p[static_cast<size_t>(experts[k])] - top) / sum);
        }
        return;
    }
    double chosen = 0;
    for (int k = 0; k < r.n_used; ++k)
        chosen += p[static_cast<size_t>(order[static_cast<size_t>(k)])];
    const double scale = r.norm_weights ? 1.0 / std::max(chosen, 6.103515625e-5) : 1.0;
    for (int k = 0; k < r.n_used; ++k) {
        experts[k] = order[static_cast<size_t>(k)];
        weights[k] = static_cast<float>(p[static_cast<size_t>(experts[k])] * scale);
    }
}

namespace {

// Expert e on its n tokens (slot[i] / K is the token of entry i): y[n, E] =
// (silu(xg . G_e) * (xg . U_e)) . D_e with xg [n, E] the tokens' inputs; g, u [n, F] scratch
// (gpt-oss: each product plus its bias, swiglu_oai for the SwiGLU).
void run_expert(const float* x, const Experts& w, int e, const int32_t* slot, int32_t n, int64_t K,
                float* xg, float* g, float* u, float* y) {
    const int64_t E = w.router->n_in, F = w.n_ff_exp;
    for (int32_t i = 0; i < n; ++i) {
        const int64_t t = slot[i] / K;
        std::copy(x + t * E, x + (t + 1) * E, xg + int64_t{i} * E);
    }
    const WeightView gate = expert_matrix(*w.gate, e, F), up = expert_matrix(*w.up, e, F);
    const MatmulOut gate_up[] = {{&gate, g}, {&up, u}};
    matmul_group(xg, n, gate_up);  // g [n, F], u [n, F]
    if (w.gate_b != nullptr) ops::add_bias(g, w.gate_b + int64_t{e} * F, n, F);
    if (w.up_b != nullptr) ops::add_bias(u, w.up_b + int64_t{e} * F, n, F);
    if (w.swiglu_oai) {
        ops::swiglu_oai(g, u, g, int64_t{n} * F);
    } else {
        ops::swiglu(g, u, g, int64_t{n} * F);
    }
    matmul(g, n, expert_matrix(*w.down, e, E), y);  // [n, E]
    if (w.down_b != nullptr) ops::add_bias(y, w.down_b + int64_t{e} * E, n, E);
}

}  // namespace

void ffn(const float* x, int64_t T, const Experts& w, const Routing& r, Scratch& s, float* out) {
    const int64_t E = w.router->n_in, X = r.n_expert, K = r.n_used, F = w.n_ff_exp;
    KVEC_CHECK(w.router->n_out == X && w.gate->n_out == X * F && w.down->n_in == F);
    // Routing: logits [T, X], then experts and weights [T, K] per token.
    grow(s.logits, T * X);
    grow(s.experts, T * K);
    grow(s.weights, T * K);
    matmul(x, T, *w.router, s.logits.data());
    if (w.router_b != nullptr) ops::add_bias(s.logits.data(), w.router_b, T, X);
    for (int64_t t = 0; t < T; ++t)
        route(s.logits.data() + t * X, r, s.experts.data() + t * K, s.weights.data() + t * K);

    // Group the (token, slot) pairs by expert, tokens in increasing order within an expert.
    s.start.assign(static_cast<size_t>(X + 1), 0);
    for (int64_t i = 0; i < T * K; ++i)
        ++s.start[static_cast<size_t>(s.experts[static_cast<size_t>(i)] + 1)];
    for (int64_t e = 0; e < X; ++e)
        s.start[static_cast<size_t>(e + 1)] += s.start[static_cast<size_t>(e)];
    grow(s.slots, T * K);
    {
        thread_local std::vector<int32_t> fill;  // [n_expert] next free entry per expert
        fill.assign(s.start.begin(), s.start.end() - 1);
        for (int64_t i = 0; i < T * K; ++i) {
            const auto e = static_cast<size_t>(s.experts[static_cast<size_t>(i)]);
            s.slots[static_cast<size_t>(fill[e]++)] = static_cast<int32_t>(i);
        }
    }

    // Outputs y [T * K, E] in the order of `slots`; then each token adds its experts' outputs,
    // weighted, in increasing expert order.
    grow(s.y, T * K * E);
    // The experts some token selected: only their rows are read.
    std::vector<int32_t>& active = s.active;
    active.clear();
    for (int e = 0; e < X; ++e) {
        if (s.start[static_cast<size_t>(e) + 1] > s.start[static_cast<size_t>(e)])
            active.push_back(e);
    }
    const auto n_active = static_cast<int>(active.size());
    if (T <= kExpertsPerThreadMaxTokens && omp_get_max_threads() > 1 && n_active > 1) {
        // Decode and small batches: one parallel region, whole experts per thread (the matmuls
        // inside run on their thread), instead of three synchronised matmuls per expert.
#pragma omp parallel
        {
            thread_local std::vector<float> xg, g, u;  // [n, E], [n, F], [n, F]
#pragma omp for schedule(dynamic, 1)
            for (int a = 0; a < n_active; ++a) {
                const int e = active[static_cast<size_t>(a)];
                const int32_t b = s.start[static_cast<size_t>(e)],
                              n = s.start[static_cast<size_t>(e) + 1] - b;
                grow(xg, int64_t{n} * E);
                grow(g, int64_t{n} * F);
                grow(u, int64_t{n} * F);
                run_expert(x, w, e, s.slots.data() + b, n, K, xg.data(), g.data(), u.data(),
                           s.y.data() + int64_t{b} * E);
            }
        }
    } else {
        grow(s.xg, T * E);
        grow(s.g, T * F);
        grow(s.u, T * F);
        for (const int e : active) {
            const int32_t b = s.start[static_cast<size_t>(e)],
                          n = s.start[static_cast<size_t>(e) + 1] - b;
            run_expert(x, w, e, s.slots.data() + b, n, K, s.xg.data(), s.g.data(), s.u.data(),
                       s.y.data() + int64_t{b} * E);
        }
    }
    std::fill(out, out + T * E, 0.0f);
    for (const int e : active) {
        for (int32_t i = s.start[static_cast<size_t>(e)]; i < s.start[static_cast<size_t>(e) + 1];
             ++i) {
            const int32_t slot = s.slots[static_cast<size_t>(i)];
            const float wt = s.weights[static_cast<size_t>(slot)];
            float* o = out + slot / K * E;
            const float* y = s.y.data() + int64_t{i} * E;
            for (int64_t j = 0; j < E; ++j) o[j] += wt * y[j];
        }
    }
}

}  // namespace kvec::moe
