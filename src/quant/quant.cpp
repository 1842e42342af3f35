// Scalar reference (de)quantisation for every supported tensor type.
//
// The quantisers follow the logic of llama.cpp's reference quantisers (quantize_row_*_ref in
// ggml-quants.c: absmax scales for the 32-element types, make_qkx2 / make_q3 / make_qx style
// scale searches for the k-quants, a scale search on the non-uniform grid for IQ4_NL / IQ4_XS),
// written anew. They are not guaranteed bit-identical to
// llama.cpp, but produce valid blocks with the same error behaviour. Non-finite inputs never
// cause undefined behaviour (every float-to-int conversion is clamped), and scales are clamped
// to the fp16 range so large but finite inputs saturate rather than decode to inf/NaN.
#include "quant/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "quant/blocks.h"
#include "util/error.h"
#include "util/fp16.h"

namespace kvec::quant {
namespace {

constexpr float kGroupMaxEps = 1e-15f;  // llama.cpp's GROUP_MAX_EPS: below this a group is zero
constexpr float kFp16Max = 65504.0f;

// Round to nearest, ties to even (as llama.cpp's nearest_int); NaN maps to 0 and the result is
// clamped to +-2^22 so no conversion can overflow.
inline int nearest_int(float v) {
    if (!(v == v)) return 0;
    constexpr float kLimit = 4194303.0f;
    v = std::clamp(v, -kLimit, kLimit);
    return static_cast<int>(std::nearbyint(v));
}

// Truncating conversion (what llama.cpp's (int8_t)(x + 8.5f) casts do for in-range values),
// clamped to [lo, hi]; NaN maps to lo.
inline int trunc_clamped(float v, int lo, int hi) {
    if (!(v >= static_cast<float>(lo))) return lo;
    if (!(v <= static_cast<float>(hi))) return hi;
    return static_cast<int>(v);
}

inline uint16_t to_half(float v) {
    if (!(v == v)) return float_to_fp16(0.0f);
    return float_to_fp16(std::clamp(v, -kFp16Max, kFp16Max));
}

inline float from_half(uint16_t h) { return fp16_to_float(h); }

// --------------------------------------------------------------------------------------------
// 32-element types

void quantize_q4_0(const float* x, BlockQ4_0* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK4_0) {
        float amax = 0.0f;  // largest magnitude
        float max = 0.0f;   // the value having it, with its sign
        for (int j = 0; j < QK4_0; ++j) {
            if (std::fabs(x[j]) > amax) {
                amax = std::fabs(x[j]);
                max = x[j];
            }
        }
        const float d = max / -8.0f;  // the extreme value maps to -8 exactly
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = to_half(d);
        for (int j = 0; j < QK4_0 / 2; ++j) {
            const int q0 = trunc_clamped(x[j] * id + 8.5f, 0, 15);
            const int q1 = trunc_clamped(x[j + QK4_0 / 2] * id + 8.5f, 0, 15);
            y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
    }
}

void quantize_q4_1(const float* x, BlockQ4_1* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK4_1) {
        float min = std::numeric_limits<float>::max();
        float max = -std::numeric_limits<float>::max();
        for (int j = 0; j < QK4_1; ++j) {
            min = std::min(min, x[j]);
            max = std::max(max, x[j]);
        }
        const float d = (max - min) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = to_half(d);
        y[i].m = to_half(min);
        for (int j = 0; j < QK4_1 / 2; ++j) {
            const int q0 = trunc_clamped((x[j] - min) * id + 0.5f, 0, 15);
            const int q1 = trunc_clamped((x[j + QK4_1 / 2] - min) * id + 0.5f, 0, 15);
            y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
    }
}

void store_qh(uint8_t* qh, uint32_t bits) {
    for (int b = 0; b < 4; ++b) qh[b] = static_cast<uint8_t>(bits >> (8 * b));
}

uint32_t load_qh(const uint8_t* qh) {
    return static_cast<uint32_t>(qh[0]) | (static_cast<uint32_t>(qh[1]) << 8) |
           (static_cast<uint32_t>(qh[2]) << 16) | (static_cast<uint32_t>(qh[3]) << 24);
}

void quantize_q5_0(const float* x, BlockQ5_0* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK5_0) {
        float amax = 0.0f;
        float max = 0.0f;
        for (int j = 0; j < QK5_0; ++j) {
            if (std::fabs(x[j]) > amax) {
                amax = std::fabs(x[j]);
                max = x[j];
            }
        }
        const float d = max / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = to_half(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_0 / 2; ++j) {
            const int q0 = trunc_clamped(x[j] * id + 16.5f, 0, 31);
            const int q1 = trunc_clamped(x[j + QK5_0 / 2] * id + 16.5f, 0, 31);
            y[i].qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
            qh |= static_cast<uint32_t>(q0 >> 4) << j;
            qh |= static_cast<uint32_t>(q1 >> 4) << (j + QK5_0 / 2);
        }
        store_qh(y[i].qh, qh);
    }
}

void quantize_q5_1(const float* x, BlockQ5_1* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK5_1) {
        float min = std::numeric_limits<float>::max();
        float max = -std::numeric_limits<float>::max();
        for (int j = 0; j < QK5_1; ++j) {
            min = std::min(min, x[j]);
            max = std::max(max, x[j]);
        }
        const float d = (max - min) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = to_half(d);
        y[i].m = to_half(min);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_1 / 2; ++j) {
            const int q0 = trunc_clamped((x[j] - min) * id + 0.5f, 0, 31);
            const int q1 = trunc_clamped((x[j + QK5_1 / 2] - min) * id + 0.5f, 0, 31);
            y[i].qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
            qh |= static_cast<uint32_t>(q0 >> 4) << j;
            qh |= static_cast<uint32_t>(q1 >> 4) << (j + QK5_1 / 2);
        }
        store_qh(y[i].qh, qh);
    }
}

// Round half away from zero (C's roundf), clamped to int8's symmetric range.
inline int8_t round_i8(float v) {
    if (!(v == v)) return 0;
    return static_cast<int8_t>(std::clamp(std::round(v), -127.0f, 127.0f));
}

void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = to_half(d);
        for (int j = 0; j < QK8_0; ++j) y[i].qs[j] = round_i8(x[j] * id);
    }
}

void quantize_q8_1(const float* x, BlockQ8_1* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK8_1) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_1; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = to_half(d);
        int sum = 0;
        for (int j = 0; j < QK8_1; ++j) {
            y[i].qs[j] = round_i8(x[j] * id);
            sum += y[i].qs[j];
        }
        y[i].s = to_half(static_cast<float>(sum) * d);
    }
}

// --------------------------------------------------------------------------------------------
// Scale searches for the k-quants (after llama.cpp's make_qx_quants / make_q3_quants /
// make_qkx2_quants).

// Symmetric quantisation of x[0..n) to levels -nmax..nmax-1 (stored in L as l + nmax).
// Weights are x^2 (llama.cpp's rmse_type 1). Tries scales around nmax/max and keeps the one
// minimising the weighted squared error; returns the scale (negative when the extreme value is
// positive: the extreme maps to -nmax).
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
    float max = 0.0f;
    float amax = 0.0f;
    for (int i = 0; i < n; ++i) {
        if (std::fabs(x[i]) > amax) {
            amax = std::fabs(x[i]);
            max = x[i];
        }
    }
    if (!(amax >= kGroupMaxEps)) {  // all (near) zero, or NaN
        std::fill(L, L + n, static_cast<int8_t>(nmax));
        return 0.0f;
    }
    auto quantise_with = [&](float iscale, float* sumlx, float* suml2, bool store) {
        *sumlx = 0.0f;
        *suml2 = 0.0f;
        for (int i = 0; i < n; ++i) {
            const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            if (store) L[i] = static_cast<int8_t>(l + nmax);
            const float w = x[i] * x[i];
            *sumlx += w * x[i] * static_cast<float>(l);
            *suml2 += w * static_cast<float>(l * l);
        }
    };
    float sumlx = 0.0f;
    float suml2 = 0.0f;
    quantise_with(-static_cast<float>(nmax) / max, &sumlx, &suml2, true);
    float scale = suml2 > 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        const float iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
        quantise_with(iscale, &sumlx, &suml2, false);
        if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
            quantise_with(iscale, &sumlx, &suml2, true);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

// Symmetric 3-bit-style quantisation (levels -nmax..nmax-1, stored as l + nmax) with the
// coordinate-descent refinement of llama.cpp's make_q3_quants (weights x^2).
float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
    float max = 0.0f;
    float amax = 0.0f;
    for (int i = 0; i < n; ++i) {
        if (std::fabs(x[i]) > amax) {
            amax = std::fabs(x[i]);
            max = x[i];
        }
    }
    if (!(amax >= kGroupMaxEps)) {
        std::fill(L, L + n, static_cast<int8_t>(nmax));
        return 0.0f;
    }
    const float iscale = -static_cast<float>(nmax) / max;
    float sumlx = 0.0f;
    float suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
        const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = static_cast<int8_t>(l);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * static_cast<float>(l);
        suml2 += w * static_cast<float>(l * l);
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * static_cast<float>(L[i]);
            if (slx > 0.0f) {
                float sl2 = suml2 - w * static_cast<float>(L[i] * L[i]);
                const int new_l = std::clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * static_cast<float>(new_l);
                    sl2 += w * static_cast<float>(new_l * new_l);
                    if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = static_cast<int8_t>(new_l);
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (n_changed == 0) break;
    }
    for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Asymmetric quantisation x ~ scale * L - min_out with L in 0..nmax (min_out >= 0 is returned
// through *min_out). Starts from the min/max grid, then searches nstep+1 candidate scales
// (rmin + rdelta*is + nmax)/(max - min), fitting scale and offset by weighted least squares for
// each, keeping the one with the least weighted error (absolute if use_mad, else squared).
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                       float* min_out, uint8_t* Laux, float rmin, float rdelta, int nstep,
                       bool use_mad) {
    float min = x[0];
    float max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        min = std::min(min, x[i]);
        max = std::max(max, x[i]);
        sum_w += weights[i];
        sum_x += weights[i] * x[i];
    }
    if (min > 0.0f) min = 0.0f;
    if (!(max > min)) {  // constant zero group (or NaN)
        std::fill(L, L + n, uint8_t{0});
        *min_out = (min == min) ? -min : 0.0f;
        return 0.0f;
    }
    auto error_of = [&](float diff) { return use_mad ? std::fabs(diff) : diff * diff; };
    float iscale = static_cast<float>(nmax) / (max - min);
    float scale = 1.0f / iscale;
    float best_error = 0.0f;
    for (int i = 0; i < n; ++i) {
        L[i] = static_cast<uint8_t>(std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax));
        best_error += weights[i] * error_of(scale * L[i] + min - x[i]);
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
        float sum_l = 0.0f;
        float sum_l2 = 0.0f;
        float sum_xl = 0.0f;
        for (int i = 0; i < n; ++i) {
            const int l = std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = static_cast<uint8_t>(l);
            const float w = weights[i];
            sum_l += w * static_cast<float>(l);
            sum_l2 += w * static_cast<float>(l * l);
            sum_xl += w * static_cast<float>(l) * x[i];
        }
        const float det = sum_w * sum_l2 - sum_l * sum_l;
        if (det > 0.0f) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if (this_min > 0.0f) {
                this_min = 0.0f;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0.0f;
            for (int i = 0; i < n; ++i) {
                cur_error += weights[i] * error_of(this_scale * Laux[i] + this_min - x[i]);
            }
            if (cur_error < best_error) {
                std::copy(Laux, Laux + n, L);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *min_out = -min;
    return scale;
}

// Packs 6-bit scale ls and min lm of sub-block j (0..7) as get_scale_min_k4 unpacks them.
void pack_scale_min_k4(int j, int ls, int lm, uint8_t* q) {
    if (j < 4) {
        q[j] = static_cast<uint8_t>((q[j] & 0xC0) | ls);
        q[j + 4] = static_cast<uint8_t>((q[j + 4] & 0xC0) | lm);
    } else {
        q[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
        q[j - 4] = static_cast<uint8_t>(q[j - 4] | ((ls >> 4) << 6));
        q[j] = static_cast<uint8_t>(q[j] | ((lm >> 4) << 6));
    }
}

// --------------------------------------------------------------------------------------------
// k-quants

void quantize_q2_k(const float* x, BlockQ2_K* y, int64_t nb) {
    uint8_t L[QK_K];            // [256] levels 0..3
    uint8_t Laux[16];           // [16] scratch
    float weights[16];          // [16]
    float mins[QK_K / 16];      // [16] per sub-block min (>= 0, subtracted)
    float scales[QK_K / 16];    // [16] per sub-block scale
    constexpr float q4scale = 15.0f;
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        float max_scale = 0.0f;
        float max_min = 0.0f;
        for (int j = 0; j < QK_K / 16; ++j) {
            for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
            scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux,
                                         -0.5f, 0.1f, 15, true);
            max_scale = std::max(max_scale, scales[j]);
            max_min = std::max(max_min, mins[j]);
        }
        std::memset(y[i].scales, 0, sizeof y[i].scales);
        if (max_scale > 0.0f) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < QK_K / 16; ++j) {
                y[i].scales[j] = static_cast<uint8_t>(std::clamp(nearest_int(iscale * scales[j]), 0, 15));
            }
            y[i].d = to_half(max_scale / q4scale);
        } else {
            y[i].d = to_half(0.0f);
        }
        if (max_min > 0.0f) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < QK_K / 16; ++j) {
                const int l = std::clamp(nearest_int(iscale * mins[j]), 0, 15);
                y[i].scales[j] = static_cast<uint8_t>(y[i].scales[j] | (l << 4));
            }
            y[i].dmin = to_half(max_min / q4scale);
        } else {
            y[i].dmin = to_half(0.0f);
        }
        // Re-quantise against the stored (rounded) scales.
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = from_half(y[i].d) * static_cast<float>(y[i].scales[j] & 0xF);
            if (d == 0.0f) continue;
            const float dm = from_half(y[i].dmin) * static_cast<float>(y[i].scales[j] >> 4);
            for (int l = 0; l < 16; ++l) {
                L[16 * j + l] = static_cast<uint8_t>(std::clamp(nearest_int((x[16 * j + l] + dm) / d), 0, 3));
            }
        }
        for (int j = 0; j < QK_K; j += 128) {
            for (int l = 0; l < 32; ++l) {
                y[i].qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) |
                                                          (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
            }
        }
    }
}

void quantize_q3_k(const float* x, BlockQ3_K* y, int64_t nb) {
    int8_t L[QK_K];          // [256] levels 0..7 (value + 4)
    float scales[QK_K / 16];  // [16] signed sub-block scales
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        float max_scale = 0.0f;
        float amax = 0.0f;
        for (int j = 0; j < QK_K / 16; ++j) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            if (std::fabs(scales[j]) > amax) {
                amax = std::fabs(scales[j]);
                max_scale = scales[j];
            }
        }
        std::memset(y[i].scales, 0, sizeof y[i].scales);
        if (max_scale != 0.0f) {
            const float iscale = -32.0f / max_scale;
            for (int j = 0; j < QK_K / 16; ++j) {
                const int l = std::clamp(nearest_int(iscale * scales[j]), -32, 31) + 32;
                if (j < 8) {
                    y[i].scales[j] = static_cast<uint8_t>(l & 0xF);
                } else {
                    y[i].scales[j - 8] = static_cast<uint8_t>(y[i].scales[j - 8] | ((l & 0xF) << 4));
                }
                y[i].scales[j % 4 + 8] =
                    static_cast<uint8_t>(y[i].scales[j % 4 + 8] | ((l >> 4) << (2 * (j / 4))));
            }
            y[i].d = to_half(1.0f / iscale);
        } else {
            y[i].d = to_half(0.0f);
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            const int sc = q3k_scale(j, y[i].scales) - 32;
            const float d = from_half(y[i].d) * static_cast<float>(sc);
            if (d == 0.0f) continue;
            for (int l = 0; l < 16; ++l) {
                L[16 * j + l] = static_cast<int8_t>(std::clamp(nearest_int(x[16 * j + l] / d), -4, 3) + 4);
            }
        }
        // High bit of element j goes to hmask[j % 32], bit j / 32.
        std::memset(y[i].hmask, 0, sizeof y[i].hmask);
        for (int j = 0; j < QK_K; ++j) {
            if (L[j] > 3) {
                y[i].hmask[j % 32] = static_cast<uint8_t>(y[i].hmask[j % 32] | (1 << (j / 32)));
                L[j] = static_cast<int8_t>(L[j] - 4);
            }
        }
        for (int j = 0; j < QK_K; j += 128) {
            for (int l = 0; l < 32; ++l) {
                y[i].qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) |
                                                          (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
            }
        }
    }
}

// Shared by Q4_K (nmax 15) and Q5_K (nmax 31): per 32-element sub-block scale and min, then the
// 6-bit packing of both against the super-block d and dmin. Fills L[256] with levels 0..nmax.
void quantize_k_scales(const float* x, int nmax, float rmin, float rdelta, int nstep, uint16_t* d_out,
                       uint16_t* dmin_out, uint8_t* packed, uint8_t* L) {
    uint8_t Laux[32];          // [32]
    float weights[32];         // [32]
    float mins[QK_K / 32];     // [8]
    float scales[QK_K / 32];   // [8]
    float max_scale = 0.0f;
    float max_min = 0.0f;
    for (int j = 0; j < QK_K / 32; ++j) {
        float sum_x2 = 0.0f;
        for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = std::sqrt(sum_x2 / 32.0f);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                     rmin, rdelta, nstep, false);
        max_scale = std::max(max_scale, scales[j]);
        max_min = std::max(max_min, mins[j]);
    }
    const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
    std::memset(packed, 0, K_SCALE_SIZE);
    for (int j = 0; j < QK_K / 32; ++j) {
        const int ls = std::clamp(nearest_int(inv_scale * scales[j]), 0, 63);
        const int lm = std::clamp(nearest_int(inv_min * mins[j]), 0, 63);
        pack_scale_min_k4(j, ls, lm, packed);
    }
    *d_out = to_half(max_scale / 63.0f);
    *dmin_out = to_half(max_min / 63.0f);
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t sc = 0;
        uint8_t m = 0;
        get_scale_min_k4(j, packed, &sc, &m);
        const float d = from_half(*d_out) * static_cast<float>(sc);
        if (d == 0.0f) continue;
        const float dm = from_half(*dmin_out) * static_cast<float>(m);
        for (int l = 0; l < 32; ++l) {
            L[32 * j + l] = static_cast<uint8_t>(std::clamp(nearest_int((x[32 * j + l] + dm) / d), 0, nmax));
        }
    }
}

void quantize_q4_k(const float* x, BlockQ4_K* y, int64_t nb) {
    uint8_t L[QK_K];  // [256] levels 0..15
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        quantize_k_scales(x, 15, -1.0f, 0.1f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
        uint8_t* q = y[i].qs;
        for (int j = 0; j < QK_K; j += 64, q += 32) {
            for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
        }
    }
}

void quantize_q5_k(const float* x, BlockQ5_K* y, int64_t nb) {
    uint8_t L[QK_K];  // [256] levels 0..31
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        quantize_k_scales(x, 31, -0.5f, 0.1f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        std::memset(y[i].qh, 0, sizeof y[i].qh);
        uint8_t* ql = y[i].qs;
        uint8_t m1 = 1;
        uint8_t m2 = 2;
        for (int n = 0; n < QK_K; n += 64, ql += 32) {
            for (int j = 0; j < 32; ++j) {
                int l1 = L[n + j];
                if (l1 > 15) {
                    l1 -= 16;
                    y[i].qh[j] |= m1;
                }
                int l2 = L[n + j + 32];
                if (l2 > 15) {
                    l2 -= 16;
                    y[i].qh[j] |= m2;
                }
                ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
            }
            m1 = static_cast<uint8_t>(m1 << 2);
            m2 = static_cast<uint8_t>(m2 << 2);
        }
    }
}

void quantize_q6_k(const float* x, BlockQ6_K* y, int64_t nb) {
    int8_t L[QK_K];           // [256] levels 0..63 (value + 32)
    float scales[QK_K / 16];  // [16]
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        float max_scale = 0.0f;
        float max_abs_scale = 0.0f;
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
            if (std::fabs(scales[ib]) > max_abs_scale) {
                max_abs_scale = std::fabs(scales[ib]);
                max_scale = scales[ib];
            }
        }
        std::memset(&y[i], 0, sizeof(BlockQ6_K));
        if (!(max_abs_scale >= kGroupMaxEps)) {
            // All zero: every quant 0 (decodes to scale 0 * (0 - 32) = 0).
            y[i].d = to_half(0.0f);
            continue;
        }
        const float iscale = -128.0f / max_scale;
        y[i].d = to_half(1.0f / iscale);
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            y[i].scales[ib] = static_cast<int8_t>(std::clamp(nearest_int(iscale * scales[ib]), -128, 127));
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = from_half(y[i].d) * static_cast<float>(y[i].scales[j]);
            if (d == 0.0f) continue;
            for (int l = 0; l < 16; ++l) {
                L[16 * j + l] = static_cast<int8_t>(std::clamp(nearest_int(x[16 * j + l] / d), -32, 31) + 32);
            }
        }
        uint8_t* ql = y[i].ql;
        uint8_t* qh = y[i].qh;
        for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; ++l) {
                const int q1 = L[j + l] & 0xF;
                const int q2 = L[j + l + 32] & 0xF;
                const int q3 = L[j + l + 64] & 0xF;
                const int q4 = L[j + l + 96] & 0xF;
                ql[l] = static_cast<uint8_t>(q1 | (q3 << 4));
                ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
                qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                                             ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
            }
        }
    }
}

void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        float max = 0.0f;
        float amax = 0.0f;
        for (int j = 0; j < QK_K; ++j) {
            if (std::fabs(x[j]) > amax) {
                amax = std::fabs(x[j]);
                max = x[j];
            }
        }
        std::memset(&y[i], 0, sizeof(BlockQ8_K));
        if (!(amax > 0.0f) || !std::isfinite(amax)) continue;  // zero (or unusable) block
        const float iscale = -127.0f / max;
        for (int j = 0; j < QK_K; ++j) {
            y[i].qs[j] = static_cast<int8_t>(std::clamp(nearest_int(iscale * x[j]), -127, 127));
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            int sum = 0;
            for (int l = 0; l < 16; ++l) sum += y[i].qs[16 * j + l];
            y[i].bsums[j] = static_cast<int16_t>(sum);
        }
        y[i].d = 1.0f / iscale;
    }
}

// --------------------------------------------------------------------------------------------
// Non-uniform 4-bit grids: IQ4_NL, IQ4_XS (kIq4nlValues) and MXFP4 (kMxfp4Values)
//
// No importance matrix: like llama.cpp without one, each element's squared error is weighted by
// x^2, so the large weights, which matter most to a dot product, are represented best.

// Index of the IQ4_NL level nearest to v (the levels are increasing); NaN maps to the level 1.
int nearest_iq4nl(float v) {
    if (!(v == v)) return 8;
    const int8_t* g = kIq4nlValues;
    if (v <= g[0]) return 0;
    if (v >= g[15]) return 15;
    int lo = 0, hi = 15;  // g[lo] < v <= g[hi]
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        (v > g[mid] ? lo : hi) = mid;
    }
    return v - g[lo] < g[hi] - v ? lo : hi;
}

// The n inputs of an IQ4 block as its quantisers read them, into x: non-finite and huge values
// saturated at a scale fp16 can hold, NaN as 0. Returns the largest magnitude; max gets the
// (first) value having it, with its sign.
float iq4nl_inputs(const float* x_in, int n, float* x, float& max) {
    constexpr float kBig = kFp16Max * 100.0f;
    float amax = 0.0f;
    max = 0.0f;
    for (int j = 0; j < n; ++j) {
        x[j] = x_in[j] == x_in[j] ? std::clamp(x_in[j], -kBig, kBig) : 0.0f;
        if (std::fabs(x[j]) > amax) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    }
    return amax;
}

// Best scale d of n values on the IQ4_NL grid: tries inverse scales around the one that puts the
// largest-magnitude value on the grid's long end (-127), fits d by weighted least squares to the
// levels each trial chose, and keeps the fit with the least weighted error. L receives the levels
// chosen for the returned d (recomputed for it, so that they are the nearest ones).
float iq4nl_scale(const float* x_in, int n, uint8_t* L) {
    float x[32];
    KVEC_CHECK(n <= 32);
    float max = 0.0f;
    const float amax = iq4nl_inputs(x_in, n, x, max);
    if (amax < kGroupMaxEps) {
        for (int j = 0; j < n; ++j) L[j] = 8;
        return 0.0f;
    }
    float best_d = max / static_cast<float>(kIq4nlValues[0]);
    double best_score = -1.0;  // (sum w x v)^2 / sum w v^2: the weighted error is sum w x^2 - score
    for (int t = -7; t <= 7; ++t) {
        const float id = (static_cast<float>(kIq4nlValues[0]) + 0.1f * static_cast<float>(t)) / max;
        double sxv = 0.0, svv = 0.0;
        for (int j = 0; j < n; ++j) {
            const double w = static_cast<double>(x[j]) * x[j];
            const double v = kIq4nlValues[nearest_iq4nl(x[j] * id)];
            sxv += w * x[j] * v;
            svv += w * v * v;
        }
        if (svv > 0.0 && sxv * sxv / svv > best_score) {
            best_score = sxv * sxv / svv;
            best_d = static_cast<float>(sxv / svv);
        }
    }
    best_d = from_half(to_half(best_d));  // the scale as stored
    const float id = best_d != 0.0f ? 1.0f / best_d : 0.0f;
    for (int j = 0; j < n; ++j) L[j] = static_cast<uint8_t>(nearest_iq4nl(x[j] * id));
    return best_d;
}

// Packs 32 levels as Q4_0 does: element j in the low nibble of qs[j], j + 16 in the high one.
void pack_nibbles(const uint8_t* L, uint8_t* qs) {
    for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
}

void quantize_iq4_nl(const float* x, BlockIQ4_NL* y, int64_t nb) {
    uint8_t L[QK4_NL];
    for (int64_t i = 0; i < nb; ++i, x += QK4_NL) {
        y[i].d = to_half(iq4nl_scale(x, QK4_NL, L));
        pack_nibbles(L, y[i].qs);
    }
}

// llama.cpp's one-pass IQ4_NL (quantize_row_iq4_nl_impl with ntry = -1): the levels nearest to
// x * (-127 / max), then d fitted to them by least squares weighted by x^2 (float sums, in
// element order), the levels kept.
void quantize_iq4_nl_one_pass(const float* x_in, BlockIQ4_NL* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x_in += QK4_NL) {
        float x[QK4_NL];
        float max = 0.0f;
        const float amax = iq4nl_inputs(x_in, QK4_NL, x, max);
        uint8_t L[QK4_NL] = {};
        float d = 0.0f;
        if (amax >= kGroupMaxEps) {
            const float id = 1.0f / (max / static_cast<float>(kIq4nlValues[0]));
            float sumqx = 0.0f, sumq2 = 0.0f;
            for (int j = 0; j < QK4_NL; ++j) {
                L[j] = static_cast<uint8_t>(nearest_iq4nl(id * x[j]));
                const float q = kIq4nlValues[L[j]], w = x[j] * x[j];
                sumqx += w * q * x[j];
                sumq2 += w * q * q;
            }
            d = sumq2 > 0.0f ? sumqx / sumq2 : 0.0f;
        }
        y[i].d = to_half(d);
        pack_nibbles(L, y[i].qs);
    }
}

// IQ4_XS: each sub-block of 32 gets its best IQ4_NL scale; the super-block scale d maps the
// largest of them to -32, the sub-block scales become 6-bit multiples of d (ls - 32 in
// [-32, 31]), and every sub-block is quantised again on its stored scale.
void quantize_iq4_xs(const float* x, BlockIQ4_XS* y, int64_t nb) {
    constexpr int kSub = QK_K / 32;
    uint8_t L[32];
    for (int64_t i = 0; i < nb; ++i, x += QK_K) {
        float scales[kSub];
        float max_scale = 0.0f;
        for (int j = 0; j < kSub; ++j) {
            scales[j] = iq4nl_scale(x + 32 * j, 32, L);
            if (std::fabs(scales[j]) > std::fabs(max_scale)) max_scale = scales[j];
        }
        std::memset(&y[i], 0, sizeof(BlockIQ4_XS));
        const float d = from_half(to_half(-max_scale / 32.0f));
        y[i].d = to_half(d);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < kSub; ++j) {
            const int ls = std::clamp(nearest_int(id * scales[j]), -32, 31) + 32;
            y[i].scales_l[j / 2] = static_cast<uint8_t>(y[i].scales_l[j / 2] | ((ls & 15) << (4 * (j % 2))));
            y[i].scales_h = static_cast<uint16_t>(y[i].scales_h | ((ls >> 4) << (2 * j)));
            const float dl = d * static_cast<float>(ls - 32);
            const float idl = dl != 0.0f ? 1.0f / dl : 0.0f;
            for (int e = 0; e < 32; ++e) L[e] = static_cast<uint8_t>(nearest_iq4nl(x[32 * j + e] * idl));
            pack_nibbles(L, y[i].qs + 16 * j);
        }
    }
}

// Index of the MXFP4 value nearest to v (first of equals; NaN: 0).
int nearest_mxfp4(float v) {
    int best = 0;
    float err = std::numeric_limits<float>::infinity();
    for (int k = 0; k < 16; ++k) {
        const float e = std::fabs(v - static_cast<float>(kMxfp4Values[k]));
        if (e < err) {
            err = e;
            best = k;
        }
    }
    return best;
}

// MXFP4: the exponent that puts the largest magnitude in [8, 16) times the scale (llama.cpp's
// choice) or the next one up (no clipping above 12), whichever has the smaller squared error.
void quantize_mxfp4(const float* x, BlockMXFP4* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += QK_MXFP4) {
        float amax = 0.0f;
        for (int j = 0; j < QK_MXFP4; ++j) amax = std::fmax(amax, std::fabs(x[j]));
        int e0 = 0;
        if (amax > 0.0f) e0 = std::isfinite(amax) ? std::ilogb(amax) - 3 + 128 : 254;
        e0 = std::clamp(e0, 0, 254);
        double best_err = std::numeric_limits<double>::infinity();
        uint8_t L[QK_MXFP4], trial[QK_MXFP4];  // the indices of the best exponent, of this one
        for (int e = e0; e <= std::min(e0 + 1, 254); ++e) {
            const float d = mxfp4_scale(static_cast<uint8_t>(e));
            double err = 0.0;
            for (int j = 0; j < QK_MXFP4; ++j) {
                trial[j] = static_cast<uint8_t>(nearest_mxfp4(x[j] / d));
                const double r = x[j] - d * kMxfp4Values[trial[j]];
                err += r * r;
            }
            // The first exponent is always taken (an infinite input makes every error infinite).
            if (e == e0 || !(err >= best_err)) {
                best_err = err;
                y[i].e = static_cast<uint8_t>(e);
                std::memcpy(L, trial, sizeof L);
            }
        }
        pack_nibbles(L, y[i].qs);
    }
}

// --------------------------------------------------------------------------------------------
// Dequantisation

void dequantize_q4_0(const BlockQ4_0* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += QK4_0) {
        const float d = from_half(x[i].d);
        for (int j = 0; j < QK4_0 / 2; ++j) {
            y[j] = static_cast<float>((x[i].qs[j] & 0xF) - 8) * d;
            y[j + QK4_0 / 2] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void dequantize_q4_1(const BlockQ4_1* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += QK4_1) {
        const float d = from_half(x[i].d);
        const float m = from_half(x[i].m);
        for (int j = 0; j < QK4_1 / 2; ++j) {
            y[j] = static_cast<float>(x[i].qs[j] & 0xF) * d + m;
            y[j + QK4_1 / 2] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
        }
    }
}

void dequantize_q5_0(const BlockQ5_0* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += QK5_0) {
        const float d = from_half(x[i].d);
        const uint32_t qh = load_qh(x[i].qh);
        for (int j = 0; j < QK5_0 / 2; ++j) {
            const int h0 = static_cast<int>((qh >> j) & 1) << 4;
            const int h1 = static_cast<int>((qh >> (j + 16)) & 1) << 4;
            y[j] = static_cast<float>(((x[i].qs[j] & 0xF) | h0) - 16) * d;
            y[j + QK5_0 / 2] = static_cast<float>(((x[i].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

void dequantize_q5_1(const BlockQ5_1* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += QK5_1) {
        const float d = from_half(x[i].d);
        const float m = from_half(x[i].m);
        const uint32_t qh = load_qh(x[i].qh);
        for (int j = 0; j < QK5_1 / 2; ++j) {
            const int h0 = static_cast<int>((qh >> j) & 1) << 4;
            const int h1 = static_cast<int>((qh >> (j + 16)) & 1) << 4;
            y[j] = static_cast<float>((x[i].qs[j] & 0xF) | h0) * d + m;
            y[j + QK5_1 / 2] = static_cast<float>((x[i].qs[j] >> 4) | h1) * d + m;
        }
    }
}

void dequantize_q8_0(const BlockQ8_0* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += QK8_0) {
        const float d = from_half(x[i].d);
        for (int j = 0; j < QK8_0; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
    }
}

void dequantize_q8_1(const BlockQ8_1* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += QK8_1) {
        const float d = from_half(x[i].d);
        for (int j = 0; j < QK8_1; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
    }
}

void dequantize_q2_k(const BlockQ2_K* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float d = from_half(x[i].d);
        const float dmin = from_half(x[i].dmin);
        const uint8_t* q = x[i].qs;
        int is = 0;
        for (int n = 0; n < QK_K; n += 128, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; ++half) {  // two groups of 16 per shift
                    const uint8_t sc = x[i].scales[is++];
                    const float dl = d * static_cast<float>(sc & 0xF);
                    const float ml = dmin * static_cast<float>(sc >> 4);
                    for (int l = 0; l < 16; ++l) {
                        *y++ = dl * static_cast<float>((q[l + 16 * half] >> shift) & 3) - ml;
                    }
                }
            }
        }
    }
}

void dequantize_q3_k(const BlockQ3_K* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float d_all = from_half(x[i].d);
        const uint8_t* q = x[i].qs;
        const uint8_t* hm = x[i].hmask;
        int is = 0;
        uint8_t m = 1;
        for (int n = 0; n < QK_K; n += 128, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1)) {
                for (int half = 0; half < 2; ++half) {
                    const float dl = d_all * static_cast<float>(q3k_scale(is++, x[i].scales) - 32);
                    for (int l = 16 * half; l < 16 * half + 16; ++l) {
                        const int low = (q[l] >> shift) & 3;
                        const int v = low - ((hm[l] & m) ? 0 : 4);
                        *y++ = dl * static_cast<float>(v);
                    }
                }
            }
        }
    }
}

void dequantize_q4_k(const BlockQ4_K* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float d = from_half(x[i].d);
        const float dmin = from_half(x[i].dmin);
        const uint8_t* q = x[i].qs;
        for (int j = 0, is = 0; j < QK_K; j += 64, q += 32, is += 2) {
            uint8_t sc = 0;
            uint8_t m = 0;
            get_scale_min_k4(is, x[i].scales, &sc, &m);
            const float d1 = d * sc;
            const float m1 = dmin * m;
            get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc;
            const float m2 = dmin * m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
        }
    }
}

void dequantize_q5_k(const BlockQ5_K* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float d = from_half(x[i].d);
        const float dmin = from_half(x[i].dmin);
        const uint8_t* ql = x[i].qs;
        const uint8_t* qh = x[i].qh;
        uint8_t u1 = 1;
        uint8_t u2 = 2;
        for (int j = 0, is = 0; j < QK_K; j += 64, ql += 32, is += 2) {
            uint8_t sc = 0;
            uint8_t m = 0;
            get_scale_min_k4(is, x[i].scales, &sc, &m);
            const float d1 = d * sc;
            const float m1 = dmin * m;
            get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc;
            const float m2 = dmin * m;
            for (int l = 0; l < 32; ++l) {
                *y++ = d1 * static_cast<float>((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
            }
            for (int l = 0; l < 32; ++l) {
                *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
            }
            u1 = static_cast<uint8_t>(u1 << 2);
            u2 = static_cast<uint8_t>(u2 << 2);
        }
    }
}

void dequantize_q6_k(const BlockQ6_K* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float d = from_half(x[i].d);
        const uint8_t* ql = x[i].ql;
        const uint8_t* qh = x[i].qh;
        const int8_t* sc = x[i].scales;
        for (int n = 0; n < QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
                y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
                y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
                y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
            }
        }
    }
}

void dequantize_q8_k(const BlockQ8_K* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += QK_K) {
        for (int j = 0; j < QK_K; ++j) y[j] = x[i].d * static_cast<float>(x[i].qs[j]);
    }
}

// Nibble j of 16 bytes (element j < 16: low nibble of qs[j], j >= 16: high nibble of qs[j - 16])
// through a 16-entry table, times d.
void dequantize_grid32(const uint8_t* qs, const int8_t* table, float d, float* y) {
    for (int j = 0; j < 16; ++j) {
        y[j] = d * static_cast<float>(table[qs[j] & 0xF]);
        y[j + 16] = d * static_cast<float>(table[qs[j] >> 4]);
    }
}

void dequantize_iq4_nl(const BlockIQ4_NL* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += QK4_NL) dequantize_grid32(x[i].qs, kIq4nlValues, from_half(x[i].d), y);
}

void dequantize_iq4_xs(const BlockIQ4_XS* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i) {
        const float d = from_half(x[i].d);
        for (int j = 0; j < QK_K / 32; ++j, y += 32) {
            dequantize_grid32(x[i].qs + 16 * j, kIq4nlValues, d * static_cast<float>(iq4xs_scale(x[i], j) - 32), y);
        }
    }
}

void dequantize_mxfp4(const BlockMXFP4* x, float* y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, y += QK_MXFP4) dequantize_grid32(x[i].qs, kMxfp4Values, mxfp4_scale(x[i].e), y);
}

int64_t n_blocks(GgmlType type, int64_t n, const char* what) {
    const GgmlTypeTraits& t = ggml_type_traits(type);
    if (n < 0 || n % t.block_size != 0) {
        fail("{}: {} elements is not a multiple of the {} block size {}", what, n, t.name,
             t.block_size);
    }
    return n / t.block_size;
}

}  // namespace

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
    const int64_t nb = n_blocks(type, n, "dequantize_row");
    switch (type) {
        case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
        case GgmlType::F16: {
            const auto* s = static_cast<const uint8_t*>(src);
            for (int64_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, s + 2 * i, 2);
                dst[i] = fp16_to_float(h);
            }
            return;
        }
        case GgmlType::BF16: {
            const auto* s = static_cast<const uint8_t*>(src);
            for (int64_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, s + 2 * i, 2);
                dst[i] = bf16_to_float(h);
            }
            return;
        }
        case GgmlType::Q4_0: dequantize_q4_0(static_cast<const BlockQ4_0*>(src), dst, nb); return;
        case GgmlType::Q4_1: dequantize_q4_1(static_cast<const BlockQ4_1*>(src), dst, nb); return;
        case GgmlType::Q5_0: dequantize_q5_0(static_cast<const BlockQ5_0*>(src), dst, nb); return;
        case GgmlType::Q5_1: dequantize_q5_1(static_cast<const BlockQ5_1*>(src), dst, nb); return;
        case GgmlType::Q8_0: dequantize_q8_0(static_cast<const BlockQ8_0*>(src), dst, nb); return;
        case GgmlType::Q8_1: dequantize_q8_1(static_cast<const BlockQ8_1*>(src), dst, nb); return;
        case GgmlType::Q2_K: dequantize_q2_k(static_cast<const BlockQ2_K*>(src), dst, nb); return;
        case GgmlType::Q3_K: dequantize_q3_k(static_cast<const BlockQ3_K*>(src), dst, nb); return;
        case GgmlType::Q4_K: dequantize_q4_k(static_cast<const BlockQ4_K*>(src), dst, nb); return;
        case GgmlType::Q5_K: dequantize_q5_k(static_cast<const BlockQ5_K*>(src), dst, nb); return;
        case GgmlType::Q6_K: dequantize_q6_k(static_cast<const BlockQ6_K*>(src), dst, nb); return;
        case GgmlType::Q8_K: dequantize_q8_k(static_cast<const BlockQ8_K*>(src), dst, nb); return;
        case GgmlType::IQ4_NL: dequantize_iq4_nl(static_cast<const BlockIQ4_NL*>(src), dst, nb); return;
        case GgmlType::IQ4_XS: dequantize_iq4_xs(static_cast<const BlockIQ4_XS*>(src), dst, nb); return;
        case GgmlType::MXFP4: dequantize_mxfp4(static_cast<const BlockMXFP4*>(src), dst, nb); return;
    }
    fail("dequantize_row: unsupported type {}", static_cast<uint32_t>(type));
}

void quantize_row(GgmlType type, const float* src, void* dst, int64_t n) {
    const int64_t nb = n_blocks(type, n, "quantize_row");
    switch (type) {
        case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
        case GgmlType::F16: {
            auto* d = static_cast<uint8_t*>(dst);
            for (int64_t i = 0; i < n; ++i) {
                const uint16_t h = float_to_fp16(src[i]);
                std::memcpy(d + 2 * i, &h, 2);
            }
            return;
        }
        case GgmlType::BF16: {
            auto* d = static_cast<uint8_t*>(dst);
            for (int64_t i = 0; i < n; ++i) {
                const uint16_t h = float_to_bf16(src[i]);
                std::memcpy(d + 2 * i, &h, 2);
            }
            return;
        }
        case GgmlType::Q4_0: quantize_q4_0(src, static_cast<BlockQ4_0*>(dst), nb); return;
        case GgmlType::Q4_1: quantize_q4_1(src, static_cast<BlockQ4_1*>(dst), nb); return;
        case GgmlType::Q5_0: quantize_q5_0(src, static_cast<BlockQ5_0*>(dst), nb); return;
        case GgmlType::Q5_1: quantize_q5_1(src, static_cast<BlockQ5_1*>(dst), nb); return;
        case GgmlType::Q8_0: quantize_q8_0(src, static_cast<BlockQ8_0*>(dst), nb); return;
        case GgmlType::Q8_1: quantize_q8_1(src, static_cast<BlockQ8_1*>(dst), nb); return;
        case GgmlType::Q2_K: quantize_q2_k(src, static_cast<BlockQ2_K*>(dst), nb); return;
        case GgmlType::Q3_K: quantize_q3_k(src, static_cast<BlockQ3_K*>(dst), nb); return;
        case GgmlType::Q4_K: quantize_q4_k(src, static_cast<BlockQ4_K*>(dst), nb); return;
        case GgmlType::Q5_K: quantize_q5_k(src, static_cast<BlockQ5_K*>(dst), nb); return;
        case GgmlType::Q6_K: quantize_q6_k(src, static_cast<BlockQ6_K*>(dst), nb); return;
        case GgmlType::Q8_K: quantize_q8_k(src, static_cast<BlockQ8_K*>(dst), nb); return;
        case GgmlType::IQ4_NL: quantize_iq4_nl(src, static_cast<BlockIQ4_NL*>(dst), nb); return;
        case GgmlType::IQ4_XS: quantize_iq4_xs(src, static_cast<BlockIQ4_XS*>(dst), nb); return;
        case GgmlType::MXFP4: quantize_mxfp4(src, static_cast<BlockMXFP4*>(dst), nb); return;
    }
    fail("quantize_row: unsupported type {}", static_cast<uint32_t>(type));
}

void quantize_row_one_pass(GgmlType type, const float* src, void* dst, int64_t n) {
    if (type == GgmlType::IQ4_NL) {
        quantize_iq4_nl_one_pass(src, static_cast<BlockIQ4_NL*>(dst), n_blocks(type, n, "quantize_row_one_pass"));
        return;
    }
    quantize_row(type, src, dst, n);
}

}  // namespace kvec::quant
