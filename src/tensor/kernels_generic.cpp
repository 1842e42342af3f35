// Baseline-ISA kernels: the float tile kernel (one dot product per (i, j), vectorised by the
// compiler: OpenMP simd reduction, 8 independent partial sums), attention values, fp16 decode.
#include "tensor/kernels.h"

#include <algorithm>

#include "util/fp16.h"

namespace kvec::kernels {

void tile_generic(const float* x, int64_t nx, int64_t ldx, const float* w, int64_t nw,
                  int64_t ldw, int64_t k, float* y, int64_t ldy) {
    for (int64_t i = 0; i < nx; ++i) {
        const float* xi = x + i * ldx;  // [k]
        for (int64_t j = 0; j < nw; ++j) {
            const float* wj = w + j * ldw;  // [k]
            float s = 0.0f;
#pragma omp simd reduction(+ : s) simdlen(8)
            for (int64_t p = 0; p < k; ++p) s += xi[p] * wj[p];
            y[i * ldy + j] = s;
        }
    }
}

void pack_rows6(const float* x, int64_t nx, int64_t ldx, int64_t k, float* xp) {
    for (int64_t g = 0; g < packed_rows(nx) / kPackRows; ++g) {
        float* out = xp + g * k * kPackRows;  // [k, 6]
        for (int r = 0; r < kPackRows; ++r) {
            const int64_t i = g * kPackRows + r;
            if (i < nx) {
                const float* xi = x + i * ldx;  // [k]
                for (int64_t p = 0; p < k; ++p) out[p * kPackRows + r] = xi[p];
            } else {
                for (int64_t p = 0; p < k; ++p) out[p * kPackRows + r] = 0.0f;
            }
        }
    }
}

namespace {
template <class E, class ToFloat>
void keys_t(const E* k, int64_t n, int64_t d, float* kt, int64_t ldkt, ToFloat to_float) {
    const int64_t n_pad = (n + 7) / 8 * 8;
    for (int64_t e = 0; e < d; ++e) {
        float* row = kt + e * ldkt;  // [n_pad]
        for (int64_t j = 0; j < n; ++j) row[j] = to_float(k[j * d + e]);
        for (int64_t j = n; j < n_pad; ++j) row[j] = 0.0f;
    }
}
}  // namespace

void keys_t_f32_generic(const float* k, int64_t n, int64_t d, float* kt, int64_t ldkt) {
    keys_t(k, n, d, kt, ldkt, [](float x) { return x; });
}

void keys_t_f16_generic(const uint16_t* k, int64_t n, int64_t d, float* kt, int64_t ldkt) {
    keys_t(k, n, d, kt, ldkt, fp16_to_float);
}

namespace {
// out[i * ldo + e] += sum_{j < n} p[i * ldp + j] * v[j * ldv + e] for i < nq, e < d: the values'
// product, and the scores' with the query rows as p and the transposed keys as v (as in the AVX2
// kernels).
void accumulate_rows(const float* p, int64_t nq, int64_t ldp, const float* v, int64_t ldv, int64_t n, int64_t d,
                     float* out, int64_t ldo) {
    for (int64_t i = 0; i < nq; ++i) {
        const float* pi = p + i * ldp;  // [n]
        float* oi = out + i * ldo;      // [d]
        for (int64_t j = 0; j < n; ++j) {
            const float pj = pi[j];
            const float* vj = v + j * ldv;  // [d]
#pragma omp simd
            for (int64_t e = 0; e < d; ++e) oi[e] += pj * vj[e];
        }
    }
}
}  // namespace

void attention_scores_generic(const float* q, int64_t nq, int64_t ldq, const float* kt, int64_t ldkt, int64_t d,
                              int64_t n, float* y, int64_t ldy) {
    for (int64_t i = 0; i < nq; ++i) std::fill_n(y + i * ldy, n, 0.0f);
    accumulate_rows(q, nq, ldq, kt, ldkt, d, n, y, ldy);
}

void attention_values_generic(const float* p, int64_t nq, int64_t ldp, const float* v, int64_t n, int64_t d,
                              float* out, int64_t ldo) {
    accumulate_rows(p, nq, ldp, v, d, n, d, out, ldo);
}

void fp16_to_fp32_generic(const uint16_t* src, float* dst, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_float(src[i]);
}

}  // namespace kvec::kernels
