// How much a compressed cache changes the model's predictions, without any task:
//
// Fidelity (kvec eval --fidelity FILE): the text is cut into segments of P + C tokens. For each
// segment the first P tokens are the prompt (compressed by the policy, one-shot), and the next C
// tokens are fed one decode step at a time (teacher forcing) with the compressed cache and with the
// full cache. After each fed token, the two next-token distributions p (full) and q (compressed)
// are compared: KL(p || q) = sum_v p_v (log p_v - log q_v) (nats) and top-1 agreement
// [argmax p == argmax q]. Reported: means over all C steps of all segments, and the largest KL.
// Also the negative log-likelihood of the continuation itself (nats per token, token i predicted
// from the prompt's last logits for i = 0, from the step before otherwise) with the compressed
// and with the full cache, per segment, so that policies compare as paired per-segment NLL
// differences (perplexity on the same tokens). Fidelity is query-agnostic by nature: the prefix
// is compressed before the continuation is seen.
//
// Perplexity (kvec perplexity): llama.cpp's perplexity tool. The file is tokenized whole (BOS
// first when the vocabulary adds one); it is cut into n_chunk = floor(tokens / n_ctx) chunks of
// n_ctx tokens (at least 2 chunks' worth of tokens is required, as llama.cpp does); each chunk's
// first token is replaced by BOS when the vocabulary adds one; with first = n_ctx / 2, the tokens
// at indices first + 1 .. n_ctx - 1 of each chunk are scored from the logits at first .. n_ctx - 2:
// nll = -log softmax(logits[j])[token j + 1]. PPL = exp(sum nll / count), and its error
// ppl * sqrt((mean nll^2 - mean nll^2) / (count - 1)), as llama.cpp prints them.
// With a policy: per chunk, the first half (indices 0 .. first - 1) is prefilled with the policy
// attached, which compresses it (one-shot policies once at its end: budget B entries per head
// per layer, window included); then the second half is processed as a continuation (one
// prefill call, logits of every token) over the compressed first half. The scored logits are all
// in the second half, so every scored token sees a compressed first half plus the uncompressed
// second half before it. A chunked policy also compresses between the second half's chunks
// (-b); a decode-time policy does nothing more (no decode steps are run).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "eval/stats.h"
#include "eval/sweep.h"
#include "model/session.h"

namespace kvec {
class Tokenizer;
}

namespace kvec::eval {

struct FidelityOptions {
    int32_t prefix = 0;          // P: prompt tokens per segment (0: context - continuation - 1)
    int32_t continuation = 128;  // C
    int segments = 1;            // segments (fewer if the text is short)
    bool share_prefill = true;
    int64_t coverage_window = 32;
    std::function<void(int64_t done, int64_t total)> on_progress;
    // The session of the reference pass (the full cache every row is compared with), or null: the
    // session itself. Another session over the same model and context with other KV types (e.g.
    // the f16 cache as the reference of a quantised one: kvec eval --reference-kv-type).
    Session* reference = nullptr;
};

struct FidelityRow {
    std::string policy;  // label
    int64_t budget = 0;
    double kl_mean = 0;  // nats
    double kl_max = 0;
    double top1 = 0;     // agreement in [0, 1]
    double nll_mean = 0;  // nats per continuation token
    std::vector<double> segment_nll;  // [segments] mean NLL of each segment's continuation
    int64_t steps = 0;   // compared distributions
    double kv_bytes = 0;  // mean over segments, after the prompt
    double c_head = 0;
    std::string mode;    // shared / separate
};

struct FidelityReport {
    int32_t prefix = 0;
    int32_t continuation = 0;
    int segments = 0;
    std::vector<FidelityRow> rows;  // one per combination
    std::vector<double> full_segment_nll;  // [segments] the same with the full cache
    double full_nll_mean = 0;
};

// Paired per-segment NLL differences a - b (nats per token) between two rows of a report with
// segments as items; b = -1 compares row a with the full cache.
Estimate paired_nll(const FidelityReport& report, size_t a, int64_t b);

// tokens: the whole text (BOS first if wanted). kvec::Error if it is too short for one segment.
FidelityReport run_fidelity(Session& session, const std::vector<int32_t>& tokens,
                            const std::vector<PolicyChoice>& policies, const std::vector<Combo>& combos,
                            const FidelityOptions& options);

// KL(p || q) in nats and whether the argmaxes agree, from two logit rows [n_vocab].
struct DistributionDiff {
    double kl = 0;
    bool top1_equal = false;
};
DistributionDiff compare_logits(std::span<const float> full, std::span<const float> compressed);

// log softmax(logits)[token], in double.
double log_prob(std::span<const float> logits, int32_t token);

struct PerplexityOptions {
    int32_t n_ctx = 512;
    int n_chunks = -1;          // < 0: all
    int32_t score_last = 0;     // > 0: score the last score_last tokens of each chunk instead of
                                // llama.cpp's second half (n_ctx - n_ctx / 2 - 1 tokens)
    std::string policy_spec;    // "" = no policy; else a registry spec with its budget
    int64_t coverage_window = 32;
    // Called after every chunk with the chunk number (1-based) and the running perplexity.
    std::function<void(int chunk, double running_ppl)> on_chunk;
};

struct PerplexityResult {
    double ppl = 0;
    double ppl_error = 0;    // NaN if the variance estimate is not positive
    double mean_nll = 0;
    int64_t count = 0;       // scored tokens
    int n_chunks = 0;
    int64_t n_tokens = 0;    // tokens of the file
    bool add_bos = false;
    double kv_bytes = 0;     // mean over chunks, after the first half (policy) or after the chunk
    double c_head = 1;       // mean over chunks (policy only)
};

// `session` must have n_ctx >= options.n_ctx and no policy attached. tokens: the file as tokenized
// by tokenize_for_perplexity.
PerplexityResult perplexity(Session& session, const Tokenizer& tokenizer, const std::vector<int32_t>& tokens,
                            const PerplexityOptions& options);

// fidelity.json, .md, .csv, fidelity_paired.csv and the KL / top-1 plots of a fidelity run in `dir`
// (markdown after `header`); prints the markdown.
void write_fidelity_outputs(const FidelityReport& rep, const std::vector<PolicyChoice>& policies,
                            const std::vector<int64_t>& budgets, const std::string& dir, const std::string& header);

// The whole text with BOS when the vocabulary adds one, special-token text not parsed (llama.cpp).
std::vector<int32_t> tokenize_for_perplexity(const Tokenizer& tokenizer, const std::string& text);

}  // namespace kvec::eval
