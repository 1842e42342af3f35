#include "model/moe.h"

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

}  // namespace

WeightView expert_matrix(const WeightView& w, int e, int64_t n_out) {
    KVEC_CHECK(e >= 0 && (e + 1) * n_out <= w.n_out);
    WeightView v = w;
    v.data = w.row(int64_t{e} * n_out);
    v.n_out = n_out;
    return v;
}

void route(const float* logits, const Routing& r, int32_t* experts, float* weights) {
    KVEC_CHECK(r.n_used > 0 && r.n_used <= r.n_expert);
    const auto n = static_cast<size_t>(r.n_expert);
    double max = logits[0];
    for (size_t e = 1; e < n; ++e) max = std::max(max, static_cast<double>(logits[e]));
    thread_local std::vector<double> p;  // [n_expert] probabilities
    thread_local std::vector<int32_t> order;  // [n_expert] expert indices
    p.resize(n);
    order.resize(n);
    double sum = 0;
    for (size_t e = 0; e < n; ++e) sum += p[e] = std::exp(static_cast<double>(logits[e]) - max);
    for (size_t e = 0; e < n; ++e) p[e] /= sum;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + r.n_used, order.end(), [&](int32_t a, int32_t b) {
        const double pa = p[static_cast<size_t>(a)], pb = p[static_cast<size_t>(b)];
        return pa > pb || (pa == pb && a < b);
    });
    double chosen = 0;
    for (int k = 0; k < r.n_used; ++k) chosen += p[static_cast<size_t>(order[static_cast<size_t>(k)])];
    const double scale = r.norm_weights ? 1.0 / std::max(chosen, 6.103515625e-5) : 1.0;
    for (int k = 0; k < r.n_used; ++k) {
        experts[k] = order[static_cast<size_t>(k)];
        weights[k] = static_cast<float>(p[static_cast<size_t>(experts[k])] * scale);
    }
}

void ffn(const float* x, int64_t T, const Experts& w, const Routing& r, Scratch& s, float* out) {
    const int64_t E = w.router->n_in, X = r.n_expert, K = r.n_used, F = w.n_ff_exp;
    KVEC_CHECK(w.router->n_out == X && w.gate->n_out == X * F && w.down->n_in == F);
    // Routing: logits [T, X], then experts and weights [T, K] per token.
    grow(s.logits, T * X);
    grow(s.experts, T * K);
    grow(s.weights, T * K);
    matmul(x, T, *w.router, s.logits.data());
    for (int64_t t = 0; t < T; ++t) route(s.logits.data() + t * X, r, s.experts.data() + t * K, s.weights.data() + t * K);

    // Group the (token, slot) pairs by expert, tokens in increasing order within an expert.
    s.start.assign(static_cast<size_t>(X + 1), 0);
    for (int64_t i = 0; i < T * K; ++i) ++s.start[static_cast<size_t>(s.experts[static_cast<size_t>(i)] + 1)];
    for (int64_t e = 0; e < X; ++e) s.start[static_cast<size_t>(e + 1)] += s.start[static_cast<size_t>(e)];
    grow(s.slots, T * K);
    {
        thread_local std::vector<int32_t> fill;  // [n_expert] next free entry per expert
        fill.assign(s.start.begin(), s.start.end() - 1);
        for (int64_t i = 0; i < T * K; ++i) {
            const auto e = static_cast<size_t>(s.experts[static_cast<size_t>(i)]);
            s.slots[static_cast<size_t>(fill[e]++)] = static_cast<int32_t>(i);
        }
    }

    grow(s.xg, T * E);
    grow(s.g, T * F);
    grow(s.u, T * F);
    grow(s.y, T * E);
    std::fill(out, out + T * E, 0.0f);
    for (int e = 0; e < X; ++e) {
        const int32_t b = s.start[static_cast<size_t>(e)], n = s.start[static_cast<size_t>(e) + 1] - b;
        if (n == 0) continue;  // not selected by any token: its rows are never read
        const int32_t* slot = s.slots.data() + b;
        for (int32_t i = 0; i < n; ++i) {
            const int64_t t = slot[i] / K;
            std::copy(x + t * E, x + (t + 1) * E, s.xg.data() + int64_t{i} * E);  // xg [n, E]
        }
        matmul(s.xg.data(), n, expert_matrix(*w.gate, e, F), s.g.data());  // [n, F]
        matmul(s.xg.data(), n, expert_matrix(*w.up, e, F), s.u.data());    // [n, F]
        ops::swiglu(s.g.data(), s.u.data(), s.g.data(), int64_t{n} * F);
        matmul(s.g.data(), n, expert_matrix(*w.down, e, E), s.y.data());  // [n, E]
        for (int32_t i = 0; i < n; ++i) {
            const int64_t t = slot[i] / K;
            const float wt = s.weights[static_cast<size_t>(slot[i])];
            float* o = out + t * E;
            const float* y = s.y.data() + int64_t{i} * E;
            for (int64_t j = 0; j < E; ++j) o[j] += wt * y[j];
        }
    }
}

}  // namespace kvec::moe
