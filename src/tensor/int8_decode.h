// Decode kernels: int8 dot products on quantised weights read in place, for 1 to kMaxRows
// activation rows (decode, speculative and batched decoding). Each weight row is streamed once per
// call and its blocks are unpacked in registers (nibbles, high bits, scales), then multiplied with
// the activations quantised as in int8_gemm.h (blocks of 32, one float scale each), so the
// integer sums and the error bound are those of int8::gemm_ref on the panel form (int8_gemm.h).
// Only the float accumulation differs (its order, and the offset o taken back in float once per
// group); the tests bound the difference by 1e-5 of the sum of |terms|.
//
// The kernel walks a row in groups: one super-block of 256 elements (K-quants, IQ4_XS) or four
// blocks of 32 (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4). A group is unpacked into 64-byte segments of unsigned
// weights u in [0, 255] (plus the type's offset o: w = s * (u - o) + m per sub-block of 16 or 32
// elements with its own scale s and min m), and each segment meets 64 activation bytes in one
// int8 dot product (AVX-512 VNNI vpdpbusd into 16 int32 lanes; AVX2 maddubs + madd into 2 x 8),
// each lane summing 4 consecutive bytes. The activations are stored in the order the segments
// hold their weights (Layout below: the nibbles of a 64-byte load are two runs of 16 or 32
// elements that are not adjacent in the row), so every segment reads them in one load. Each
// lane's int32 sum is converted and accumulated by one FMA with its sub-block's s * d_x; the min
// and the offset of every sub-block add (m - o * s) * (d_x * sum of q_x) once per group.
// Q8_0 on AVX2 is the exception: its bytes w ^ 0x80 reach 255, which maddubs would saturate, so
// it keeps the signed bytes and multiplies |w| by x with w's sign (the sign trick; no offset).
// Gemma 3 270M's decode (its output head is Q8_0) ran 1.22x as fast with it as with the in-place
// tiles of int8_gemm.h, whose 64-row items the threads took in turn (docs/performance.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gguf/ggml_type.h"
#include "tensor/int8_gemm.h"

namespace kvec::int8::decode {

// Most activation rows per call (more rows: the prefill kernels).
constexpr int64_t kMaxRows = 16;
// Most rows the dispatch gives them on CPUs with AVX-512 VNNI: from 5 rows on, the VNNI prefill
// kernel on panels packed from the blocks in registers (panel_packer, Q8_0 included) is faster
// (2 threads, quiet Zen 5, TinyLlama-shaped, batched decode `kvec bench --parallel 5,6`: Q4_K
// 57.6 / 72.5 t/s against 50.6 / 54.1 with these kernels; Q8_0 x5 57.5 against 35.2; x4 the
// other way: Q8_0 37.0 against 25.9).
constexpr int64_t kMaxVnniRows = 4;

// How a type's group is laid out: `group` elements in runs of `run`; the kernel consumes run i of
// a group from the row's natural run order[i]. One weight scale per `sub` elements. A row whose
// length is not a multiple of the group (Q4_0..Q8_0 rows of 32 * odd elements) ends in blocks
// in natural order (the tail, at most 3 blocks of 32).
struct Layout {
    int group;             // elements per group: 128 or 256
    int sub;               // elements per weight scale: 16 or 32
    int run;               // elements moved together: 16 or 32
    const uint8_t* order;  // [group / run] natural run of each run in the kernel's order
};

// One group of activations from natural order (src [group]) into the kernel's (dst [group]).
inline void to_kernel_order(const Layout& L, const int8_t* src, int8_t* dst) {
    for (int i = 0; i < L.group / L.run; ++i) std::memcpy(dst + i * L.run, src + L.order[i] * L.run, L.run);
}

// The layouts (the kernels derive which sub-block each lane of a segment belongs to from them).
// Q4_0, Q4_1, Q5_0, Q5_1: a 64-byte load holds the 16 quant bytes of 4 blocks; its low nibbles are
// elements 0..15 of each block, its high nibbles 16..31.
inline constexpr uint8_t kLegacyOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
inline constexpr Layout kLegacyLayout{128, 32, 16, kLegacyOrder};
// Q8_0: two blocks per segment, in order.
inline constexpr uint8_t kInOrder[8] = {0, 1, 2, 3, 4, 5, 6, 7};
inline constexpr Layout kQ8_0Layout{128, 32, 32, kInOrder};
// Q2_K, Q3_K: bits 2j..2j+1 of the 64 quant bytes are elements 32j.. and 128 + 32j..
inline constexpr uint8_t kQ2KOrder[8] = {0, 4, 1, 5, 2, 6, 3, 7};
inline constexpr Layout kQ2KLayout{256, 16, 32, kQ2KOrder};
// Q4_K, Q5_K: the low nibbles of quant bytes 0..63 are sub-blocks 0 and 2, the high ones 1 and 3.
inline constexpr uint8_t kQ4KOrder[8] = {0, 2, 1, 3, 4, 6, 5, 7};
inline constexpr Layout kQ4KLayout{256, 32, 32, kQ4KOrder};
// Q6_K: the low nibbles of ql[0..64) (with their qh bits) are elements 0..63, in order.
inline constexpr Layout kQ6KLayout{256, 16, 32, kInOrder};
// IQ4_XS: the low nibbles of quant bytes 16j..16j+15 are elements 32j..32j+15, the high ones
// 32j+16..; IQ4_NL and MXFP4 (blocks of 32) take the legacy layout. Their 4-bit indices become
// weights through a 16-byte table (a byte shuffle): u = level + 128 for the IQ4 grid (any byte,
// so AVX-512 VNNI only), u = value + 12 for MXFP4 (at most 24, both instruction sets).
inline constexpr uint8_t kIq4XsOrder[16] = {0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15};
inline constexpr Layout kIq4XsLayout{256, 32, 16, kIq4XsOrder};

// The layout of a type that has decode kernels (throws kvec::Error for any other type).
const Layout& layout(GgmlType type);

// Activations prepared for one weight type: n rows of k elements.
struct Rows {
    const int8_t* q = nullptr;  // [n, k] quantised values, each group in the Layout's order
    const float* dx = nullptr;  // [n, k / sub] the activation block scale d of each sub-block
    const float* xs = nullptr;  // [n, k / sub] d * sum of q over each sub-block
    int64_t k = 0;
};

// Rows of quantised activations (natural order; x.qsum must be set) rearranged for the type:
// q [n, k], dx and xs [n, k / sub].
void prepare_rows(GgmlType type, const QuantRows& x, int64_t n, int8_t* q, float* dx, float* xs);

// y[i * ldy + j] = dot(activation row i, weight row j) for i < nx <= kMaxRows, j < nw; the weight
// rows start at w, row_bytes apart.
using Kernel = void (*)(const Rows& x, int64_t nx, const uint8_t* w, size_t row_bytes, int64_t nw, float* y,
                        int64_t ldy);

// The kernel for n activation rows with the active CPU kernels (AVX-512 VNNI where enabled, else
// AVX2), or null: more than kMaxVnniRows rows with VNNI, kMaxRows without; types without a kernel;
// CPUs without AVX2; IQ4_NL and IQ4_XS without AVX-512 VNNI (their weights use all 8 bits, which
// AVX2's maddubs would saturate; they go through the int8 panel form).
Kernel kernel_for(GgmlType type, int64_t n);
// The same for a weight whose rows may be repacked (decode_rows): the kernel, and whether it reads
// the repacked rows (AVX2 without VNNI) or the blocks as they are in `data`.
struct Choice {
    Kernel kernel = nullptr;
    bool repacked = false;
};
Choice kernel_for(const WeightView& w, int64_t n);

// The kernels of one instruction set (tests compare both with the reference): null where the
// build or the CPU lacks it.
Kernel kernel_avx2(GgmlType type);
Kernel kernel_avx512(GgmlType type);

// Rows of Q4_0, Q4_1, Q5_0 and Q5_1 repacked at load for the AVX2 kernels (WeightView::decode_rows),
// where the CPU has no AVX-512 VNNI: the same bytes per row, each group of four blocks rearranged
// so that the kernel reads it in three or four loads instead of gathering its fields from four
// blocks (22 bytes apart for Q5_0). Per group, at byte
//   0:  the four blocks' 16 quant bytes one after the other (the segments' order, kLegacyLayout);
//   64: (Q5_0, Q5_1) 16 bytes of fifth bits: byte i holds bit i of block b's qh (element i) at bit
//       4 + b and bit 16 + i (element 16 + i) at bit b, so that one 16-byte broadcast, and one
//       4-bit shift of it, put every weight byte's fifth bit at bit 4 of a byte of its own lane;
//   then the four blocks' fp16 d, and (Q4_1, Q5_1) their four fp16 m.
// A row's last k % 128 elements (1 to 3 blocks) stay blocks as they were.
//
// repack_rows: n_rows rows of k elements (row_bytes apart) into out [n_rows * row_bytes] in that
// layout. Scalar code; runs on any CPU.
void repack_rows(GgmlType type, const uint8_t* w, size_t row_bytes, int64_t n_rows, int64_t k, uint8_t* out);
// One repacked row of k elements back into its blocks (natural [row_bytes]): the inverse.
void restore_row(GgmlType type, const uint8_t* repacked, int64_t k, uint8_t* natural);
// The AVX2 kernel reading such rows (null for other types or without AVX2); the same operations on
// the same values as kernel_avx2 on the rows as they were, so the same results bit for bit.
Kernel kernel_avx2_repacked(GgmlType type);

// The same unpacking for the AVX-512 VNNI panels (int8::PanelPacker, int8_gemm.h): per group,
// each of up to 16 rows unpacked in registers, its segments transposed 4 bytes per row and lane,
// its sub-block scales and mins likewise. Null where the CPU lacks AVX-512 VNNI (or VL), and for
// Q8_0, whose blocks the VNNI kernel reads in place.
PanelPacker panel_packer(GgmlType type);

}  // namespace kvec::int8::decode
