// HeadKV's head importance, estimated on the model itself (`kvec head-scores`; the headkv policy
// reads the file, policy/head_importance.h). Our reading of HeadKV's retrieval-reasoning score
// (arXiv 2410.19258; the paper's own data and code are not used here):
//   on needle items whose answer is copied from the prompt, the reference answer is fed after the
//   prompt (teacher forcing); at every step that predicts answer token a (the prompt's last
//   position predicts the first), each query head's attention row over the cache is taken, its
//   top_k entries found, and the attention those of them carry on prompt positions holding the
//   token a is the step's copy mass. A KV head's score is the mean over its query heads and over
//   every step of every item.
// Items come from the synthetic suite's development split (the test split stays for reporting).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "eval/eval_items.h"
#include "policy/head_importance.h"

namespace kvec {
class Session;
class Tokenizer;
}  // namespace kvec

namespace kvec::eval {

// The copy mass of one attention row p [n] over entries at `positions` [n]: the sum of p over the
// top_k entries (ranks_before order: larger first, lower index on ties) whose position p_j <
// n_source has tokens[p_j] == target.
double copy_mass(std::span<const float> p, std::span<const int32_t> positions, std::span<const int32_t> tokens,
                 int32_t n_source, int32_t target, int64_t top_k);

struct HeadScoreOptions {
    int64_t top_k = 20;
    int max_answer_tokens = 16;  // the first tokens of the reference answer
};

// Scores of every (layer, KV head) over the items (prompt + references[0] tokenized without BOS).
// The session must be empty and have no evictor attached (one is attached for the run, then
// removed). kvec::Error if no item has an answer.
policy::HeadImportance estimate_head_importance(Session& session, const Tokenizer& tokenizer,
                                                const std::vector<EvalItem>& items, const HeadScoreOptions& options);

}  // namespace kvec::eval
