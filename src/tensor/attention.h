// Attention of the query heads that share one KV head, over that head's cache entries as stored
// (keys and values each F32, F16, BF16 or a block-quantised KV type, kv_cache.h; no float copy of
// the cache):
//
//   p[i, j]  = softmax over j < n_vis of  s_ij = scale * (q_i . k_j)      i < nq query rows
//   out[i]   = sum over j < n_vis of  p[i, j] * v_j
//
// With softcap > 0 (gemma2's attention logit soft-capping) the scores are soft-capped before the
// softmax: s_ij = softcap * tanh(scale * (q_i . k_j) / softcap) (ops::softcap); 0: off, and the
// scaling loop is the only work.
//
// With sinks (gpt-oss's attn_sinks: one learned logit per query head, sinks[i] for query row i;
// null: none) each row's sink logit joins the softmax's denominator only, unscaled and without a
// value: p[i, j] = exp(s_ij - m) / (sum_j' exp(s_ij' - m) + exp(sinks[i] - m)), so a row sums to
// less than 1. A sink is part of attention, not a cache entry: it has no column in p.
//
// The probability rows p are returned to the caller (the engine derives the eviction policies'
// observations from them: column sums, window means, last rows).
//
// The entries are walked in blocks of kEntryBlock, so that a block stays in L1 or L2 while every
// query row passes over it. Scores: the block's keys are transposed to float once
// (kernels::keys_t_*), then the query rows of up to 16 positions yield 8 entries' scores per
// vector (no horizontal sums; kernels::rows_times_panel_avx2, strips of entries outer and tiles
// of rows inner; with AVX-512 16 per vector, kernels::rows_times_panel_avx512); one position (a
// decode step) over F32/F16 keys reads them in place instead, one dot product per entry
// (kernels::attention_scores_direct_avx2 / _avx512), as the transposition would serve only the
// few query rows of one position; that pass prefetches the entries' values into L2
// (kernels::ValuePrefetch), so that the values stream in from memory beside the keys.
// Block-quantised keys (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) are scored with int8 dot products
// instead, the query rows quantised once per call to blocks of 32 int8 with a float scale
// (int8_gemm.h's activations; llama.cpp quantises the query likewise, vec_dot_qX_q8_0) and the keys
// read from their blocks: AVX-512 VNNI where the CPU has it (Q8_0 in place, the other types packed
// 16 keys at a time in registers), else AVX2 (Q8_0 in place, the others unpacked to int8), else the
// scalar int8::gemm_ref. One position over Q8_0 keys reads each key once for up to 4 query rows
// and sums many (row, entry) vectors across lanes at once (int8::scores_q8_0_vnni / _avx2),
// prefetching the values as the F32/F16 pass does. Values: for a block of positions (AVX2,
// AVX-512) each block of values is converted to float rows once (block-quantised ones
// dequantised) and every position's probability rows go through rows_times_panel_avx2 against
// it; for one position they are read in place: F32/F16/Q8_0 16 lanes wide with AVX-512
// (kernels::attention_values_avx512), F16 converted in registers with AVX2, and block-quantised
// values from their blocks (16 elements decoded in registers); the generic kernel converts each
// block of entries into a small buffer first, as for BF16 values everywhere
// (quant::dequantize_row).
// ref::attention (reference.h) is the scalar reference the tests use.
#pragma once

#include <cstdint>

#include "gguf/ggml_type.h"

namespace kvec {

// One KV head's entries as the cache stores them: rows of head_dim elements, one row after the
// other (ggml_row_size(type, head_dim) bytes each).
struct KvHeadData {
    GgmlType key_type = GgmlType::F16;    // F32, F16 or any type quant::dequantize_row decodes
    GgmlType value_type = GgmlType::F16;  // as key_type; head_dim must be whole blocks of both
    const void* keys = nullptr;           // [n] rows of key_type
    const void* values = nullptr;         // [n] rows of value_type (unused by attention_probs)
    int head_dim = 0;

    // The same head from entry `first` on (its rows first, first + 1, ...).
    KvHeadData from(int32_t first) const;
};

// Entries per block of the kernels' walk over the cache (128 x 64 F16 keys = 16 KiB).
constexpr int32_t kEntryBlock = 128;

// Where the rows of a block of query positions lie: row i of position t at base + t * ld_pos +
// i * ld_row (for one position, ld_pos is unused).
struct RowLayout {
    int64_t ld_pos = 0;
    int64_t ld_row = 0;
};

// Causal attention of n_pos consecutive query positions, nq rows each (the query heads of one KV
// head): position t sees n_vis + t entries. The keys of each block of entries are converted once
// for every row of the block of positions, so a prefill chunk passes many positions at a time.
//   q:   rows as laid out by q_at, head_dim each
//   p:   [n_pos * nq, ldp], row t * nq + i = the probabilities of row i of position t (columns
//        < n_vis + t written; ldp >= n_vis + n_pos - 1)
//   out: rows as laid out by out_at, head_dim each (nullptr: probabilities only)
//   window > 0: position t sees only its last `window` entries, [n_vis + t - window, n_vis + t);
//        the probabilities before them are 0 (a sliding-window layer whose entries are
//        consecutive positions: a block of positions in one call although each sees its own range)
//   lse: [n_pos * nq] each row's log-sum-exp, log(sum_j exp(s_ij) + exp(sinks[i])) (nullptr: not
//        wanted): what attention_merge needs of attention over a slice of the entries
void attention_causal(const float* q, RowLayout q_at, int64_t n_pos, int64_t nq,
                      const KvHeadData& kv, int32_t n_vis, float scale, float* p, int64_t ldp,
                      float* out, RowLayout out_at, float softcap = 0.0f,
                      const float* sinks = nullptr, int32_t window = 0, float* lse = nullptr);

// One query position's attention over entries cut into `parts` consecutive slices, each attended
// on its own (attention_causal without sinks, its rows' log-sum-exps lse_k): the attention over
// all of them (flash-decoding's reduction; a KV head's entries spread over threads):
//   out[i] = sum_k exp(lse_k[i] - L_i) out_k[i],   L_i = log(sum_k exp(lse_k[i]) + exp(sinks[i]))
//   lse:  [parts, nq]        outs: [parts, nq, head_dim]        out: [nq] rows ldo apart
void attention_merge(int parts, int64_t nq, int64_t head_dim, const float* lse, const float* outs,
                     const float* sinks, float* out, int64_t ldo);

// One query position: p [nq, ldp] (columns < n_vis written) = the probability rows above for the
// query rows q [nq, head_dim] (rows ldq apart); n_vis >= 1 entries of kv are visible to every row.
void attention_probs(const float* q, int64_t nq, int64_t ldq, const KvHeadData& kv, int32_t n_vis,
                     float scale, float* p, int64_t ldp, float softcap = 0.0f,
                     const float* sinks = nullptr);

// attention_probs, then out [nq, head_dim] (rows ldo apart) = the weighted sums of the values.
void attention(const float* q, int64_t nq, int64_t ldq, const KvHeadData& kv, int32_t n_vis,
               float scale, float* p, int64_t ldp, float* out, int64_t ldo, float softcap = 0.0f,
               const float* sinks = nullptr);

}  // namespace kvec
