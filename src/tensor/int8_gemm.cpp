// Scalar parts of the int8 matmul (see int8_gemm.h): activation quantisation reference, the
// unpacking of every quantised block type into the common panel form, and the reference dot
// products the AVX2 kernels are tested against. Compiled for the baseline ISA.
#include "tensor/int8_gemm.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "quant/blocks.h"
#include "tensor/int8_decode.h"
#include "util/error.h"
#include "util/fp16.h"

namespace kvec::int8 {

using namespace kvec::quant;

bool has_panel_form(GgmlType type) {
    switch (type) {
        case GgmlType::Q8_0:
        case GgmlType::Q4_0:
        case GgmlType::Q4_1:
        case GgmlType::Q5_0:
        case GgmlType::Q5_1:
        case GgmlType::Q2_K:
        case GgmlType::Q3_K:
        case GgmlType::Q4_K:
        case GgmlType::Q5_K:
        case GgmlType::Q6_K:
        case GgmlType::IQ4_NL:
        case GgmlType::IQ4_XS:
        case GgmlType::MXFP4:
            return true;
        default:
            return false;
    }
}

bool panel_fits_six_bits(GgmlType type) {
    switch (type) {
        case GgmlType::Q4_0:  // q - 8
        case GgmlType::Q4_1:  // q
        case GgmlType::Q5_0:  // q - 16
        case GgmlType::Q5_1:  // q
        case GgmlType::Q2_K:  // q
        case GgmlType::Q3_K:  // q - 4
        case GgmlType::Q4_K:  // q
        case GgmlType::Q5_K:  // q
        case GgmlType::Q6_K:  // q - 32
            return true;
        default:
            return false;
    }
}

bool panel_has_min(GgmlType type) {
    switch (type) {
        case GgmlType::Q4_1:
        case GgmlType::Q5_1:
        case GgmlType::Q2_K:
        case GgmlType::Q4_K:
        case GgmlType::Q5_K:
            return true;
        default:
            return false;
    }
}

void quantize_row_ref(const float* x, int64_t k, int8_t* q, float* d, float* hsum, int32_t* qsum) {
    KVEC_CHECK(k % kBlock == 0);
    for (int64_t b = 0; b < k / kBlock; ++b) {
        const float* xb = x + b * kBlock;  // [32]
        float amax = 0.0f;
        for (int e = 0; e < kBlock; ++e) amax = std::fmax(amax, std::fabs(xb[e]));
        const float db = amax / 127.0f;
        const float id = db != 0.0f ? 1.0f / db : 0.0f;
        int sums[2] = {0, 0};
        for (int e = 0; e < kBlock; ++e) {
            float v = xb[e] * id;
            v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
            if (v != v) v = 0.0f;
            const int qi = static_cast<int>(std::nearbyint(v));  // round half to even, as cvtps2dq
            q[b * kBlock + e] = static_cast<int8_t>(qi);
            sums[e / 16] += qi;
        }
        d[b] = db;
        hsum[2 * b] = db * static_cast<float>(sums[0]);
        hsum[2 * b + 1] = db * static_cast<float>(sums[1]);
        if (qsum != nullptr) {
            qsum[2 * b] = sums[0];
            qsum[2 * b + 1] = sums[1];
        }
    }
}

namespace {

// One weight row of nb blocks of 32 into q [nb*32], s [nb*2], m [nb*2] (m null: no min).
using RowUnpacker = void (*)(const uint8_t* src, int64_t nb, int8_t* q, float* s, float* m);

inline void set_halves(float* p, int64_t b, float lo, float hi) {
    p[2 * b] = lo;
    p[2 * b + 1] = hi;
}

void unpack_q8_0(const uint8_t* src, int64_t nb, int8_t* q, float* s, float*) {
    const auto* x = reinterpret_cast<const BlockQ8_0*>(src);
    for (int64_t b = 0; b < nb; ++b) {
        std::memcpy(q + b * 32, x[b].qs, 32);
        const float d = fp16_to_float(x[b].d);
        set_halves(s, b, d, d);
    }
}

// Nibbles of 16 bytes: low nibbles are elements 0..15, high nibbles 16..31.
inline void nibbles(const uint8_t* qs, int8_t* q, int offset) {
    for (int e = 0; e < 16; ++e) {
        q[e] = static_cast<int8_t>((qs[e] & 15) - offset);
        q[e + 16] = static_cast<int8_t>((qs[e] >> 4) - offset);
    }
}

void unpack_q4_0(const uint8_t* src, int64_t nb, int8_t* q, float* s, float*) {
    const auto* x = reinterpret_cast<const BlockQ4_0*>(src);
    for (int64_t b = 0; b < nb; ++b) {
        nibbles(x[b].qs, q + b * 32, 8);
        const float d = fp16_to_float(x[b].d);
        set_halves(s, b, d, d);
    }
}

void unpack_q4_1(const uint8_t* src, int64_t nb, int8_t* q, float* s, float* m) {
    const auto* x = reinterpret_cast<const BlockQ4_1*>(src);
    for (int64_t b = 0; b < nb; ++b) {
        nibbles(x[b].qs, q + b * 32, 0);
        const float d = fp16_to_float(x[b].d), mn = fp16_to_float(x[b].m);
        set_halves(s, b, d, d);
        set_halves(m, b, mn, mn);
    }
}

inline void fifth_bits(const uint8_t* qh4, int8_t* q) {
    uint32_t qh;
    std::memcpy(&qh, qh4, 4);  // little-endian, as the file
    for (int e = 0; e < 32; ++e) q[e] = static_cast<int8_t>(q[e] + static_cast<int8_t>(((qh >> e) & 1u) << 4));
}

void unpack_q5_0(const uint8_t* src, int64_t nb, int8_t* q, float* s, float*) {
    const auto* x = reinterpret_cast<const BlockQ5_0*>(src);
    for (int64_t b = 0; b < nb; ++b) {
        int8_t* qb = q + b * 32;
        nibbles(x[b].qs, qb, 0);
        fifth_bits(x[b].qh, qb);
        for (int e = 0; e < 32; ++e) qb[e] = static_cast<int8_t>(qb[e] - 16);
        const float d = fp16_to_float(x[b].d);
        set_halves(s, b, d, d);
    }
}

void unpack_q5_1(const uint8_t* src, int64_t nb, int8_t* q, float* s, float* m) {
    const auto* x = reinterpret_cast<const BlockQ5_1*>(src);
    for (int64_t b = 0; b < nb; ++b) {
        nibbles(x[b].qs, q + b * 32, 0);
        fifth_bits(x[b].qh, q + b * 32);
        const float d = fp16_to_float(x[b].d), mn = fp16_to_float(x[b].m);
        set_halves(s, b, d, d);
        set_halves(m, b, mn, mn);
    }
}

// K-quants: nb counts blocks of 32, i.e. 8 per super-block of 256.
void unpack_q2_k(const uint8_t* src, int64_t nb, int8_t* q, float* s, float* m) {
    const auto* x = reinterpret_cast<const BlockQ2_K*>(src);
    for (int64_t sb = 0; sb < nb / 8; ++sb) {
        const BlockQ2_K& blk = x[sb];
        const float d = fp16_to_float(blk.d), dmin = fp16_to_float(blk.dmin);
        int8_t* qs = q + sb * QK_K;  // [256]
        for (int e = 0; e < QK_K; ++e) {
            qs[e] = static_cast<int8_t>((blk.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3);
        }
        for (int j = 0; j < 16; ++j) {  // sub-blocks of 16 = halves
            s[sb * 16 + j] = d * static_cast<float>(blk.scales[j] & 15);
            m[sb * 16 + j] = -dmin * static_cast<float>(blk.scales[j] >> 4);
        }
    }
}

void unpack_q3_k(const uint8_t* src, int64_t nb, int8_t* q, float* s, float*) {
    const auto* x = reinterpret_cast<const BlockQ3_K*>(src);
    for (int64_t sb = 0; sb < nb / 8; ++sb) {
        const BlockQ3_K& blk = x[sb];
        const float d = fp16_to_float(blk.d);
        int8_t* qs = q + sb * QK_K;  // [256]
        for (int e = 0; e < QK_K; ++e) {
            const int low = (blk.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
            const int h = (blk.hmask[e % 32] >> (4 * (e / 128) + (e % 128) / 32)) & 1;
            qs[e] = static_cast<int8_t>(low - (h ? 0 : 4));
        }
        for (int j = 0; j < 16; ++j) s[sb * 16 + j] = d * static_cast<float>(q3k_scale(j, blk.scales) - 32);
    }
}

void unpack_q4_k(const uint8_t* src, int64_t nb, int8_t* q, float* s, float* m) {
    const auto* x = reinterpret_cast<const BlockQ4_K*>(src);
    for (int64_t sb = 0; sb < nb / 8; ++sb) {
        const BlockQ4_K& blk = x[sb];
        const float d = fp16_to_float(blk.d), dmin = fp16_to_float(blk.dmin);
        int8_t* qs = q + sb * QK_K;  // [256]
        for (int c = 0; c < 4; ++c) {  // 64 elements per 32 bytes: low nibbles then high nibbles
            for (int l = 0; l < 32; ++l) {
                qs[64 * c + l] = static_cast<int8_t>(blk.qs[32 * c + l] & 15);
                qs[64 * c + 32 + l] = static_cast<int8_t>(blk.qs[32 * c + l] >> 4);
            }
        }
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, mn;
            get_scale_min_k4(j, blk.scales, &sc, &mn);
            const int64_t b = sb * 8 + j;
            set_halves(s, b, d * sc, d * sc);
            set_halves(m, b, -dmin * mn, -dmin * mn);
        }
    }
}

void unpack_q5_k(const uint8_t* src, int64_t nb, int8_t* q, float* s, float* m) {
    const auto* x = reinterpret_cast<const BlockQ5_K*>(src);
    for (int64_t sb = 0; sb < nb / 8; ++sb) {
        const BlockQ5_K& blk = x[sb];
        const float d = fp16_to_float(blk.d), dmin = fp16_to_float(blk.dmin);
        int8_t* qs = q + sb * QK_K;  // [256]
        for (int c = 0; c < 4; ++c) {
            for (int l = 0; l < 32; ++l) {
                const int hi0 = (blk.qh[l] >> (2 * c)) & 1, hi1 = (blk.qh[l] >> (2 * c + 1)) & 1;
                qs[64 * c + l] = static_cast<int8_t>((blk.qs[32 * c + l] & 15) | (hi0 << 4));
                qs[64 * c + 32 + l] = static_cast<int8_t>((blk.qs[32 * c + l] >> 4) | (hi1 << 4));
            }
        }
        for (int j = 0; j < 8; ++j) {
            uint8_t sc, mn;
            get_scale_min_k4(j, blk.scales, &sc, &mn);
            const int64_t b = sb * 8 + j;
            set_halves(s, b, d * sc, d * sc);
            set_halves(m, b, -dmin * mn, -dmin * mn);
        }
    }
}

void unpack_q6_k(const uint8_t* src, int64_t nb, int8_t* q, float* s, float*) {
    const auto* x = reinterpret_cast<const BlockQ6_K*>(src);
    for (int64_t sb = 0; sb < nb / 8; ++sb) {
        const BlockQ6_K& blk = x[sb];
        const float d = fp16_to_float(blk.d);
        int8_t* qs = q + sb * QK_K;  // [256]
        for (int e = 0; e < QK_K; ++e) {
            const int quarter = (e % 128) / 32;
            const uint8_t lb = blk.ql[64 * (e / 128) + 32 * (quarter % 2) + e % 32];
            const int low = quarter / 2 ? lb >> 4 : lb & 15;
            const int high = (blk.qh[32 * (e / 128) + e % 32] >> (2 * quarter)) & 3;
            qs[e] = static_cast<int8_t>((low | (high << 4)) - 32);
        }
        for (int j = 0; j < 16; ++j) s[sb * 16 + j] = d * static_cast<float>(blk.scales[j]);
    }
}

// 16 bytes of grid indices (nibbles ordered as Q4_0) through a 16-entry level table.
inline void grid_nibbles(const uint8_t* qs, const int8_t* table, int8_t* q) {
    for (int e = 0; e < 16; ++e) {
        q[e] = table[qs[e] & 15];
        q[e + 16] = table[qs[e] >> 4];
    }
}

void unpack_iq4_nl(const uint8_t* src, int64_t nb, int8_t* q, float* s, float*) {
    const auto* x = reinterpret_cast<const BlockIQ4_NL*>(src);
    for (int64_t b = 0; b < nb; ++b) {
        grid_nibbles(x[b].qs, kIq4nlValues, q + b * 32);
        const float d = fp16_to_float(x[b].d);
        set_halves(s, b, d, d);
    }
}

void unpack_iq4_xs(const uint8_t* src, int64_t nb, int8_t* q, float* s, float*) {
    const auto* x = reinterpret_cast<const BlockIQ4_XS*>(src);
    for (int64_t sb = 0; sb < nb / 8; ++sb) {
        const float d = fp16_to_float(x[sb].d);
        for (int j = 0; j < 8; ++j) {
            const int64_t b = sb * 8 + j;
            grid_nibbles(x[sb].qs + 16 * j, kIq4nlValues, q + b * 32);
            const float dl = d * static_cast<float>(iq4xs_scale(x[sb], j) - 32);
            set_halves(s, b, dl, dl);
        }
    }
}

void unpack_mxfp4(const uint8_t* src, int64_t nb, int8_t* q, float* s, float*) {
    const auto* x = reinterpret_cast<const BlockMXFP4*>(src);
    for (int64_t b = 0; b < nb; ++b) {
        grid_nibbles(x[b].qs, kMxfp4Values, q + b * 32);
        const float d = mxfp4_scale(x[b].e);
        set_halves(s, b, d, d);
    }
}

RowUnpacker unpacker_for(GgmlType type) {
    switch (type) {
        case GgmlType::Q8_0: return &unpack_q8_0;
        case GgmlType::Q4_0: return &unpack_q4_0;
        case GgmlType::Q4_1: return &unpack_q4_1;
        case GgmlType::Q5_0: return &unpack_q5_0;
        case GgmlType::Q5_1: return &unpack_q5_1;
        case GgmlType::Q2_K: return &unpack_q2_k;
        case GgmlType::Q3_K: return &unpack_q3_k;
        case GgmlType::Q4_K: return &unpack_q4_k;
        case GgmlType::Q5_K: return &unpack_q5_k;
        case GgmlType::Q6_K: return &unpack_q6_k;
        case GgmlType::IQ4_NL: return &unpack_iq4_nl;
        case GgmlType::IQ4_XS: return &unpack_iq4_xs;
        case GgmlType::MXFP4: return &unpack_mxfp4;
        default: return nullptr;
    }
}

}  // namespace

namespace {

RowUnpacker checked_unpacker(GgmlType type, float* min) {
    const RowUnpacker fn = unpacker_for(type);
    if (fn == nullptr) fail("weight type {} has no int8 form", ggml_type_name(type));
    if (panel_has_min(type) && min == nullptr) fail("weight type {} needs a min buffer", ggml_type_name(type));
    return fn;
}

}  // namespace

void unpack_rows(const WeightView& w, int64_t r0, int64_t n, int8_t* q, float* scale, float* min) {
    const RowUnpacker fn = checked_unpacker(w.type, min);
    if (w.n_in % kBlock != 0) fail("int8 matmul needs rows of whole 32-element blocks, got {}", w.n_in);
    const int64_t nb = w.n_in / kBlock;
    thread_local std::vector<uint8_t> natural;  // [row_bytes] a repacked row's blocks
    if (w.decode_rows != nullptr) natural.resize(w.row_bytes);
    for (int64_t r = 0; r < n; ++r) {
        const uint8_t* src = w.row(r0 + r);
        if (w.decode_rows != nullptr) {  // read the repacked rows, which are in memory, not the mapped ones
            decode::restore_row(w.type, w.decode_rows + static_cast<size_t>(r0 + r) * w.row_bytes, w.n_in, natural.data());
            src = natural.data();
        }
        fn(src, nb, q + r * w.n_in, scale + r * nb * 2, min != nullptr ? min + r * nb * 2 : nullptr);
    }
}

void unpack_blocks(GgmlType type, const uint8_t* src, int64_t nb, int8_t* q, float* scale, float* min) {
    checked_unpacker(type, min)(src, nb, q, scale, min);
}

void gemm_ref(const QuantRows& x, int64_t nx, const Panel& w, int64_t nw, float* y, int64_t ldy) {
    KVEC_CHECK(x.k == w.k && x.k % kBlock == 0);
    const int64_t k = x.k, nb = k / kBlock;
    for (int64_t i = 0; i < nx; ++i) {
        for (int64_t j = 0; j < nw; ++j) {
            double acc = 0.0;
            for (int64_t b = 0; b < nb; ++b) {
                for (int h = 0; h < 2; ++h) {
                    int32_t s = 0;
                    for (int e = 16 * h; e < 16 * h + 16; ++e) {
                        s += int32_t{x.q[i * k + b * kBlock + e]} * int32_t{w.q[j * k + b * kBlock + e]};
                    }
                    acc += static_cast<double>(x.d[i * nb + b]) * w.scale[(j * nb + b) * 2 + h] * s;
                    if (w.min != nullptr) {
                        acc += static_cast<double>(w.min[(j * nb + b) * 2 + h]) * x.hsum[(i * nb + b) * 2 + h];
                    }
                }
            }
            y[i * ldy + j] = static_cast<float>(acc);
        }
    }
}

bool has_load_panels(GgmlType type) {
    return type == GgmlType::Q8_0 || type == GgmlType::Q4_K || type == GgmlType::Q6_K;
}

size_t load_panels_bytes(GgmlType type, int64_t n_rows, int64_t k) {
    KVEC_CHECK(has_load_panels(type));
    return type == GgmlType::Q8_0 ? q8_0_panels_bytes(n_rows, k) : k_panels_bytes(type, n_rows, k);
}

void pack_load_panels(GgmlType type, const uint8_t* w, size_t row_bytes, int64_t n_rows, int64_t k, uint8_t* out) {
    KVEC_CHECK(has_load_panels(type));
    if (type == GgmlType::Q8_0) {
        pack_q8_0_panels(w, row_bytes, n_rows, k, out);
    } else {
        pack_k_panels(type, w, row_bytes, n_rows, k, out);
    }
}

void gemm_load_panels(GgmlType type, const QuantRows& x, int64_t nx, const uint8_t* panels, int64_t nw, float* y,
                      int64_t ldy) {
    KVEC_CHECK(has_load_panels(type));
    if (type == GgmlType::Q8_0) {
        gemm_q8_0_panels(x, nx, panels, nw, y, ldy);
    } else {
        gemm_k_panels(type, x, nx, panels, nw, y, ldy);
    }
}

}  // namespace kvec::int8
