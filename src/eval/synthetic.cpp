#include "eval/synthetic.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <numbers>
#include <numeric>
#include <ostream>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/rng.h"

namespace kvec::eval {

namespace {

std::string lower_ascii(std::string_view s) {
    std::string out(s);
    for (char& c : out) {
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return out;
}

// Items drawn for one instance; a new item may not contain, or be contained in, any earlier one
// (case-insensitively), so that a prediction naming a distractor never matches an answer.
class DistinctItems {
  public:
    bool try_add(const std::string& item) {
        const std::string low = lower_ascii(item);
        for (const auto& e : lowered_) {
            if (e.find(low) != std::string::npos || low.find(e) != std::string::npos) return false;
        }
        lowered_.push_back(low);
        return true;
    }
    // Draws with `make` until an item is accepted; a bounded loop (the vocabularies are large).
    std::string draw(const std::function<std::string()>& make) {
        for (int attempt = 0; attempt < 10000; ++attempt) {
            std::string item = make();
            if (try_add(item)) return item;
        }
        fail("internal error: could not draw a distinct synthetic item");
    }

  private:
    std::vector<std::string> lowered_;
};

std::string join(const std::vector<std::string>& items, std::string_view sep) {
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += sep;
        out += items[i];
    }
    return out;
}

// "a", "a and b", "a, b, and c" (RULER joins queried keys this way).
std::string join_and(const std::vector<std::string>& items) {
    if (items.size() == 1) return items[0];
    if (items.size() == 2) return items[0] + " and " + items[1];
    std::vector<std::string> head(items.begin(), items.end() - 1);
    return join(head, ", ") + ", and " + items.back();
}

// A number of `digits` digits belonging to `split`.
std::string draw_number(Rng& rng, int digits, Split split) {
    int64_t lo = 1;
    for (int i = 1; i < digits; ++i) lo *= 10;
    for (;;) {
        std::string s = std::to_string(rng.range(lo, lo * 10 - 1));
        if (split_of(s) == split) return s;
    }
}

// RULER's needle depths: round(linspace(0, 100, 40)).
std::vector<int> depth_grid() {
    std::vector<int> g(40);
    for (int i = 0; i < 40; ++i) g[i] = static_cast<int>(std::lround(i * 100.0 / 39.0));
    return g;
}

// k distinct depths of the grid, in draw order.
std::vector<int> draw_depths(Rng& rng, size_t k) {
    std::vector<int> grid = depth_grid();
    KVEC_CHECK(k <= grid.size());
    for (size_t i = 0; i < k; ++i) std::swap(grid[i], grid[i + rng.below(grid.size() - i)]);
    grid.resize(k);
    return grid;
}

// ---------------------------------------------------------------------------------------------
// What a task produces before the haystack is fitted around it.

struct Needle {
    std::string text;
    int depth_percent = 0;
    bool answer = false;  // carries (part of) the answer
};

// A further question about the same context (niah_askmany).
struct Ask {
    std::string question;
    std::string cue;
    std::string answer_text;
    std::vector<std::string> answers;
    std::vector<std::string> keys;
};

struct Spec {
    std::string instruction;           // before the context
    std::string question;              // after the context (the LongBench `input`)
    std::string cue;                   // answer prefix
    std::string answer_text;           // what follows the cue
    std::vector<std::string> answers;  // references
    std::vector<std::string> keys;
    std::vector<Needle> needles;  // haystack tasks
    std::string list_context;     // list tasks (cwe, fwe): the whole context
    std::vector<Ask> asks;        // niah_askmany: one question per key (the first = question)
};

struct Prompt {
    std::string context;
    std::string prompt;
    size_t context_end = 0;              // bytes of prompt before the question
    std::vector<size_t> needle_offsets;  // [needles] start of each needle in context
};

// The prompt: instruction, context, question (and the answer cue in the completion format).
std::string prompt_text(const std::string& instruction, const std::string& context,
                        const std::string& question, const std::string& cue,
                        PromptFormat format) {
    std::string p = instruction + "\n\n" + context + "\n\n" + question;
    if (format == PromptFormat::Completion) p += "\n" + cue;
    return p;
}

Prompt assemble(const Spec& spec, std::string context, PromptFormat format) {
    Prompt p;
    p.context = std::move(context);
    p.prompt = prompt_text(spec.instruction, p.context, spec.question, spec.cue, format);
    p.context_end = spec.instruction.size() + 2 + p.context.size();
    return p;
}

// Context of a haystack task: the selected sentences (corpus indices, in order) joined by spaces,
// needle i placed at the sentence boundary nearest to depth_i percent of the haystack's length
// (cost[s] = length of selected sentence s in the meter's raw unit). RULER places needles by
// sentence count instead; by length, the recorded depth is also where the needle is in tokens.
Prompt render_haystack(const Spec& spec, const TextSource& hs, const std::vector<size_t>& sel,
                       const std::vector<int64_t>& cost, PromptFormat format) {
    const size_t n = sel.size();
    KVEC_CHECK(cost.size() == n);
    std::vector<int64_t> cum(n + 1, 0);  // [n + 1] length before boundary s
    for (size_t s = 0; s < n; ++s) cum[s + 1] = cum[s] + cost[s];
    std::vector<size_t> slots(spec.needles.size());  // [needles] boundary index 0..n
    for (size_t i = 0; i < spec.needles.size(); ++i) {
        const double want = static_cast<double>(cum[n]) * spec.needles[i].depth_percent / 100.0;
        size_t b =
            static_cast<size_t>(std::lower_bound(cum.begin(), cum.end(), want) - cum.begin());
        if (b > n) b = n;
        if (b > 0 && want - static_cast<double>(cum[b - 1]) < static_cast<double>(cum[b]) - want)
            --b;
        slots[i] = b;
    }
    std::vector<size_t> order(spec.needles.size());  // needles by (slot, depth, draw order)
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        if (slots[a] != slots[b]) return slots[a] < slots[b];
        return spec.needles[a].depth_percent < spec.needles[b].depth_percent;
    });
    std::string ctx;
    std::vector<size_t> offsets(spec.needles.size(), 0);  // [needles]
    size_t next = 0;
    for (size_t s = 0; s <= n; ++s) {
        while (next < order.size() && slots[order[next]] == s) {
            if (!ctx.empty()) ctx.push_back(' ');
            offsets[order[next]] = ctx.size();
            ctx += spec.needles[order[next]].text;
            ++next;
        }
        if (s < n) {
            if (!ctx.empty()) ctx.push_back(' ');
            ctx.append(hs.sentence(sel[s]));
        }
    }
    Prompt p = assemble(spec, std::move(ctx), format);
    p.needle_offsets = std::move(offsets);
    return p;
}

// ---------------------------------------------------------------------------------------------
// Tasks.

constexpr int kNiahMany = 4;    // needles of multikey / multiquery, values of multivalue
constexpr int kNiahDigits = 6;  // needle values: 6-digit numbers
constexpr int kVtChains = 3;    // 1 asked + 2 distractor chains
constexpr int kVtHops = 4;      // 5 variables per chain
constexpr int kVtDigits = 5;
constexpr int kCweCommon = 5;
constexpr int kFweTop = 3;
constexpr int kQaFacts = 8;         // 1 answering + 7 distractors
constexpr int64_t kFastMargin = 4;  // tokens kept free when lengths are not verified

std::string niah_key(Rng& rng, const SplitVocab& v, DistinctItems& items) {
    return items.draw([&] { return rng.pick(v.adjectives) + "-" + rng.pick(v.nouns); });
}

std::string niah_needle(const std::string& key, const std::string& value) {
    return "One of the special magic numbers for " + key + " is: " + value + ".";
}

Spec make_niah(std::string_view task, Rng& rng, Split split) {
    const SplitVocab& v = split_vocab(split);
    DistinctItems items;
    Spec s;
    int n_keys = 1, n_values = 1, n_queries = 1;
    if (task == "niah_multikey") n_keys = kNiahMany;
    if (task == "niah_multivalue") n_values = kNiahMany;
    if (task == "niah_multiquery" || task == "niah_askmany") n_keys = n_queries = kNiahMany;

    std::vector<std::string> keys;
    std::vector<std::vector<std::string>> values;  // [n_keys][n_values]
    for (int k = 0; k < n_keys; ++k) {
        keys.push_back(niah_key(rng, v, items));
        values.emplace_back();
        for (int j = 0; j < n_values; ++j) {
            values.back().push_back(
                items.draw([&] { return draw_number(rng, kNiahDigits, split); }));
        }
    }
    // The queried keys: one at random (multikey), or all of them (others).
    std::vector<int> queried;
    if (n_queries == n_keys) {
        queried.resize(n_keys);
        std::iota(queried.begin(), queried.end(), 0);
    } else {
        queried.push_back(static_cast<int>(rng.below(n_keys)));
    }
    const size_t n_needles = static_cast<size_t>(n_keys) * n_values;
    std::vector<int> depths = draw_depths(rng, n_needles);
    size_t d = 0;
    for (int k = 0; k < n_keys; ++k) {
        const bool asked = std::find(queried.begin(), queried.end(), k) != queried.end();
        for (int j = 0; j < n_values; ++j) {
            s.needles.push_back({niah_needle(keys[k], values[k][j]), depths[d++], asked});
        }
    }
    for (int k : queried) {
        s.keys.push_back(keys[k]);
        for (const auto& val : values[k]) s.answers.push_back(val);
    }
    const std::string query = join_and(s.keys);
    auto single_question = [](const std::string& key) {
        return "What is the special magic number for " + key + " mentioned in the provided text?";
    };
    auto single_cue = [](const std::string& key) { return "The special magic number for " + key + " is:"; };
    if (task == "niah_askmany") {
        // One question per key, asked one at a time over the same context.
        for (size_t k = 0; k < s.keys.size(); ++k) {
            s.asks.push_back({single_question(s.keys[k]), single_cue(s.keys[k]), s.answers[k],
                              {s.answers[k]}, {s.keys[k]}});
        }
        s.instruction =
            "Some special magic numbers are hidden within the following text. Make sure "
            "to memorize them. I will quiz you about the numbers afterwards.";
        s.question = s.asks[0].question;
        s.cue = s.asks[0].cue;
        s.answer_text = s.asks[0].answer_text;
        s.answers = s.asks[0].answers;
        s.keys = s.asks[0].keys;
        return s;
    }
    if (s.answers.size() == 1) {
        s.instruction =
            "A special magic number is hidden within the following text. Make sure to "
            "memorize it. I will quiz you about the number afterwards.";
        s.question = single_question(query);
        s.cue = single_cue(query);
    } else {
        s.instruction =
            "Some special magic numbers are hidden within the following text. Make sure "
            "to memorize them. I will quiz you about the numbers afterwards.";
        s.question = "What are all the special magic numbers for " + query +
                     " mentioned in the provided text?";
        s.cue = "The special magic numbers for " + query + " are:";
    }
    s.answer_text = join(s.answers, ", ");
    return s;
}

Spec make_vt(Rng& rng, Split split) {
    DistinctItems items;
    // Variable names: 5 upper-case consonants (no vowels, so no name is inside an English word).
    static const std::string kLetters = "BCDFGHJKLMNPQRSTVWXZ";
    auto var_name = [&] {
        for (;;) {
            std::string name;
            for (int i = 0; i < 5; ++i) name.push_back(kLetters[rng.below(kLetters.size())]);
            if (split_of(name) == split) return name;
        }
    };
    std::vector<std::vector<std::string>> chains(kVtChains);  // [chain][hop] variable names
    std::vector<std::string> values;                          // [chain]
    for (int c = 0; c < kVtChains; ++c) {
        values.push_back(items.draw([&] { return draw_number(rng, kVtDigits, split); }));
        for (int h = 0; h <= kVtHops; ++h) chains[c].push_back(items.draw(var_name));
    }
    Spec s;
    std::vector<int> depths = draw_depths(rng, static_cast<size_t>(kVtChains) * (kVtHops + 1));
    for (int c = 0; c < kVtChains; ++c) {
        // Each chain's statements go in order: its depths sorted ascending.
        std::vector<int> dc(depths.begin() + c * (kVtHops + 1),
                            depths.begin() + (c + 1) * (kVtHops + 1));
        std::sort(dc.begin(), dc.end());
        for (int h = 0; h <= kVtHops; ++h) {
            std::string text = h == 0 ? "VAR " + chains[c][0] + " = " + values[c] + "."
                                      : "VAR " + chains[c][h] + " = VAR " + chains[c][h - 1] + ".";
            s.needles.push_back({std::move(text), dc[h], c == 0});
        }
    }
    s.answers = chains[0];
    s.keys = {values[0]};
    s.instruction =
        "Memorize and track the chains of variable assignments hidden in the following text.";
    s.question = "Question: Find all variables that are assigned the value " + values[0] +
                 " in the text above.";
    s.cue = "Answer: According to the chains of variable assignments in the text above, " +
            std::to_string(kVtHops + 1) + " variables are assigned the value " + values[0] +
            ", they are:";
    s.answer_text = join(s.answers, ", ");
    return s;
}

// A relation of the qa task: "{E}" is the entity asked about, "{V}" the answer.
struct Relation {
    const char* statement;
    const char* question;
    const char* cue;
    const char* answer;  // the text after the cue
    bool person;         // entity is a person ("Ada Belford"), else a name ("Belford")
};

const std::array<Relation, 5>& relations() {
    static const std::array<Relation, 5> r = {{
        {"The ship {E} was built in the town of {V}.", "In which town was the ship {E} built?",
         "The ship {E} was built in the town of", "{V}", false},
        {"The painter {E} was born in the city of {V}.", "In which city was the painter {E} born?",
         "The painter {E} was born in the city of", "{V}", true},
        {"The river {E} flows into Lake {V}.", "Into which lake does the river {E} flow?",
         "The river {E} flows into Lake", "{V}", false},
        {"The inventor {E} had a dog named {V}.",
         "What was the name of the dog of the inventor {E}?", "The inventor {E} had a dog named",
         "{V}", true},
        {"The singer {E} lives on {V} Street.", "On which street does the singer {E} live?",
         "The singer {E} lives on", "{V} Street", true},
    }};
    return r;
}

std::string fill(std::string_view pattern, const std::string& e, const std::string& v) {
    std::string out;
    for (size_t i = 0; i < pattern.size(); ++i) {
        if (pattern.substr(i, 3) == "{E}") {
            out += e;
            i += 2;
        } else if (pattern.substr(i, 3) == "{V}") {
            out += v;
            i += 2;
        } else {
            out.push_back(pattern[i]);
        }
    }
    return out;
}

Spec make_qa(Rng& rng, Split split) {
    const SplitVocab& v = split_vocab(split);
    DistinctItems items;
    std::vector<int> depths = draw_depths(rng, kQaFacts);
    Spec s;
    for (int f = 0; f < kQaFacts; ++f) {
        const Relation& rel = relations()[rng.below(relations().size())];
        std::string entity = items.draw([&] {
            return rel.person ? rng.pick(v.first_names) + " " + rng.pick(v.names)
                              : rng.pick(v.names);
        });
        std::string value = items.draw([&] { return rng.pick(v.names); });
        s.needles.push_back({fill(rel.statement, entity, value), depths[f], f == 0});
        if (f == 0) {
            s.keys = {entity};
            s.answers = {value};
            s.question = "Question: " + fill(rel.question, entity, value);
            s.cue = "Answer: " + fill(rel.cue, entity, value);
            s.answer_text = fill(rel.answer, entity, value);
        }
    }
    s.instruction =
        "Answer the question based on the given text. Only give the answer and do not "
        "output any other words.";
    return s;
}

// List tasks (cwe, fwe) are built in two steps: the instance's words are drawn once (ListWords),
// then a list of a given size is counted (how often each word appears) and, once the size is
// chosen, rendered. Counting without rendering keeps the length search cheap.

struct ListWords {
    std::vector<const std::string*> words;  // [vocabulary] ranked; into split_vocab (static)
    uint64_t shuffle_seed = 0;              // seed of the list order
};

struct ListCounts {
    std::vector<int64_t> counts;  // [words] occurrences of words[k]
    int64_t n_entries = 0;        // sum of counts
};

// For each list word of a split, the indices of the list words it contains or is contained in
// (case-insensitively), computed once.
const std::vector<std::vector<size_t>>& list_word_conflicts(Split split) {
    auto build = [](Split sp) {
        const auto& words = split_vocab(sp).list_words;
        std::vector<std::vector<size_t>> conflicts(words.size());  // [words] -> word indices
        for (size_t i = 0; i < words.size(); ++i) {
            const std::string a = lower_ascii(words[i]);
            for (size_t j = i + 1; j < words.size(); ++j) {
                const std::string b = lower_ascii(words[j]);
                if (a.find(b) != std::string::npos || b.find(a) != std::string::npos) {
                    conflicts[i].push_back(j);
                    conflicts[j].push_back(i);
                }
            }
        }
        return conflicts;
    };
    static const auto train = build(Split::Train);
    static const auto eval = build(Split::Eval);
    return split == Split::Eval ? eval : train;
}

// cwe words: the split's list words shuffled, dropping any word inside (or containing) a word
// kept before it.
ListWords cwe_words(uint64_t list_seed, Split split) {
    Rng rng(list_seed);
    const auto& vocab = split_vocab(split).list_words;
    const auto& conflicts = list_word_conflicts(split);
    std::vector<size_t> order(vocab.size());  // [vocabulary] indices into vocab
    std::iota(order.begin(), order.end(), 0);
    rng.shuffle(order);
    std::vector<bool> kept(vocab.size(), false);  // [vocabulary]
    ListWords lw;
    for (size_t i : order) {
        const bool clash = std::any_of(conflicts[i].begin(), conflicts[i].end(),
                                       [&](size_t j) { return kept[j]; });
        if (clash) continue;
        kept[i] = true;
        lw.words.push_back(&vocab[i]);
    }
    KVEC_CHECK(lw.words.size() > static_cast<size_t>(kCweCommon) + 8);
    lw.shuffle_seed = rng.next();
    return lw;
}

// cwe with n entries: d uncommon words (ranks kCweCommon..), each u times, and the kCweCommon
// common words sharing the rest, each c or c + 1 times, where u = ceil(n / (2 m)) for the m
// uncommon words available, d = min(m, n / (2u)), c = floor((n - d u) / kCweCommon) >= u + 2.
// Needs n >= 30.
constexpr int64_t kCweMinEntries = 2 * kCweCommon * 3;

ListCounts cwe_counts(const ListWords& lw, int64_t n) {
    const int64_t m = static_cast<int64_t>(lw.words.size()) - kCweCommon;
    const int64_t u = std::max<int64_t>(1, (n + 2 * m - 1) / (2 * m));
    const int64_t d = std::max<int64_t>(1, std::min(m, n / (2 * u)));
    const int64_t c = (n - d * u) / kCweCommon;
    const int64_t extra = n - d * u - c * kCweCommon;  // the first `extra` common words get c + 1
    KVEC_CHECK(c >= u + 2);
    ListCounts lc;
    lc.counts.assign(lw.words.size(), 0);
    for (int k = 0; k < kCweCommon; ++k) lc.counts[k] = c + (k < extra ? 1 : 0);
    for (int64_t k = 0; k < d; ++k) lc.counts[kCweCommon + k] = u;
    lc.n_entries = n;
    return lc;
}

// fwe words: the split's coded words shuffled; the first `vocab` are ranked 1..vocab.
ListWords fwe_words(uint64_t list_seed, Split split, int length) {
    Rng rng(list_seed);
    ListWords lw;
    std::vector<const std::string*> pool;  // [vocabulary] into split_vocab
    for (const auto& w : split_vocab(split).coded_words) pool.push_back(&w);
    rng.shuffle(pool);
    const size_t vocab = std::min(pool.size(), static_cast<size_t>(std::max(10, length / 50)));
    lw.words.assign(pool.begin(), pool.begin() + static_cast<std::ptrdiff_t>(vocab));
    lw.shuffle_seed = rng.next();
    return lw;
}

// fwe with scale n: the k-th ranked word appears floor(n k^-2 / zeta(2)) times (RULER's Zipf
// law, alpha = 2). Needs n >= 60 so that ranks 3 and 4 differ by at least one occurrence.
constexpr int64_t kFweMinScale = 60;

ListCounts fwe_counts(const ListWords& lw, int64_t n) {
    const double zeta2 = std::numbers::pi * std::numbers::pi / 6.0;
    ListCounts lc;
    lc.counts.resize(lw.words.size());
    for (size_t k = 1; k <= lw.words.size(); ++k) {
        lc.counts[k - 1] = static_cast<int64_t>(
            std::floor(static_cast<double>(n) / (static_cast<double>(k * k) * zeta2)));
        lc.n_entries += lc.counts[k - 1];
    }
    return lc;
}

// The whole spec of a list task with the given counts; cwe numbers its entries ("1. apple").
Spec render_list(std::string_view task, const ListWords& lw, const ListCounts& lc) {
    const bool cwe = task == "cwe";
    std::vector<const std::string*> list;  // [n_entries]
    list.reserve(static_cast<size_t>(lc.n_entries));
    for (size_t k = 0; k < lw.words.size(); ++k) {
        for (int64_t i = 0; i < lc.counts[k]; ++i) list.push_back(lw.words[k]);
    }
    Rng rng(lw.shuffle_seed);
    rng.shuffle(list);
    Spec s;
    std::string ctx;
    for (size_t i = 0; i < list.size(); ++i) {
        if (i > 0) ctx.push_back(' ');
        if (cwe) ctx += std::to_string(i + 1) + ". ";
        ctx += *list[i];
    }
    s.list_context = std::move(ctx);
    const int top = cwe ? kCweCommon : kFweTop;
    for (int k = 0; k < top; ++k) s.answers.push_back(*lw.words[k]);
    s.answer_text = join(s.answers, ", ");
    if (cwe) {
        const std::string k = std::to_string(kCweCommon);
        s.instruction =
            "Below is a numbered list of words. In these words, some appear more often "
            "than others. Memorize the ones that appear most often.";
        s.question = "Question: What are the " + k + " most common words in the above list?";
        s.cue = "Answer: The top " + k + " words that appear most often in the list are:";
    } else {
        s.instruction =
            "Read the following coded text and track the frequency of each coded word. "
            "Find the three most frequently appearing coded words.";
        s.question =
            "Question: What are the three most frequently appearing coded words in the "
            "above text?";
        s.cue =
            "Answer: According to the coded text above, the three most frequently appearing "
            "words are:";
    }
    return s;
}

bool is_list_task(std::string_view task) { return task == "cwe" || task == "fwe"; }

uint64_t instance_seed(std::string_view task, Split split, uint64_t seed, int64_t index,
                       int length) {
    return stable_hash(
        fmt::format("kvec-synth|{}|{}|{}|{}|{}", task, split_name(split), seed, index, length));
}

}  // namespace

// ---------------------------------------------------------------------------------------------

const char* format_name(PromptFormat format) {
    return format == PromptFormat::Chat ? "chat" : "completion";
}

PromptFormat parse_format(std::string_view s) {
    if (s == "completion") return PromptFormat::Completion;
    if (s == "chat") return PromptFormat::Chat;
    fail("unknown prompt format '{}' (expected 'completion' or 'chat')", s);
}

int length_tolerance(int length) { return std::max(8, length / 100); }

const std::vector<TaskInfo>& synth_tasks() {
    static const std::vector<TaskInfo> tasks = {
        {"niah_single", "string_match_all", 16, "one key-value needle; asked for its value"},
        {"niah_multikey", "string_match_all", 16, "4 needles with different keys; one asked"},
        {"niah_multivalue", "string_match_all", 48, "one key with 4 values; all asked"},
        {"niah_multiquery", "string_match_all", 48, "4 keys; all asked at once"},
        {"niah_askmany", "string_match_all", 16,
         "the context of niah_multiquery; one question per key, each scored on its own"},
        {"vt", "string_match_all", 32,
         "variable tracking: 3 chains of 5 variables; one chain asked"},
        {"cwe", "string_match_all", 40, "common word extraction: the 5 most common listed words"},
        {"fwe", "string_match_all", 24,
         "frequent word extraction: the 3 most frequent coded words"},
        {"qa", "string_match_part", 16, "one question over 8 synthetic facts"},
    };
    return tasks;
}

const TaskInfo& find_task(std::string_view name) {
    for (const auto& t : synth_tasks()) {
        if (t.name == name) return t;
    }
    std::vector<std::string> names;
    for (const auto& t : synth_tasks()) names.push_back(t.name);
    fail("unknown synthetic task '{}' (known: {})", name, join(names, ", "));
}

int SuiteSpec::n_instances() const {
    int n = 0;
    for (const auto& t : tasks) n += t.second;
    return n;
}

const std::vector<SuiteSpec>& synth_suites() {
    static const std::vector<SuiteSpec> suites = [] {
        std::vector<SuiteSpec> out;
        const std::array<std::pair<const char*, int>, 6> sizes = {{
            {"synthetic-1k", 1024},
            {"synthetic-2k", 2048},
            {"synthetic-4k", 4096},
            {"synthetic-8k", 8192},
            {"synthetic-16k", 16384},
            {"synthetic-32k", 32768},
        }};
        for (const auto& [name, length] : sizes) {
            SuiteSpec s;
            s.name = name;
            s.length = length;
            // 8 samples per task, 64 per suite: a sweep of 7 policies x 4 budgets is 1792
            // generations, under 30 minutes at 2k if one takes under 1 s (docs/synthetic-suite.md).
            const int n = 8;
            for (const auto& t : synth_tasks()) s.tasks.emplace_back(t.name, n);
            out.push_back(std::move(s));
        }
        return out;
    }();
    return suites;
}

const SuiteSpec& find_suite(std::string_view name) {
    for (const auto& s : synth_suites()) {
        if (s.name == name) return s;
    }
    std::vector<std::string> names;
    for (const auto& s : synth_suites()) names.push_back(s.name);
    fail("unknown synthetic suite '{}' (known: {})", name, join(names, ", "));
}

// ---------------------------------------------------------------------------------------------

LengthMeter::LengthMeter(const Tokenizer* tokenizer) : tokenizer_(tokenizer) {
    if (tokenizer_ == nullptr) return;
    const VocabData& d = tokenizer_->data();
    spm_space_prefix_ = d.model == "llama" && d.add_space_prefix;
    if (!d.chat_template.empty()) {
        try {
            (void)tokenizer_->apply_chat_template({{"user", "x"}}, true);
            has_chat_template_ = true;
        } catch (const Error&) {
            has_chat_template_ =
                false;  // a template the tokenizer cannot render: count the message
        }
    }
}

int64_t LengthMeter::raw_count(std::string_view text) const {
    if (tokenizer_ == nullptr) return static_cast<int64_t>(text.size());
    const VocabData& d = tokenizer_->data();
    const int64_t bos = d.add_bos && d.bos_id >= 0 ? 1 : 0;
    return static_cast<int64_t>(tokenizer_->encode(text, /*add_special=*/false).size()) + bos;
}

int64_t LengthMeter::raw_piece(std::string_view sentence) const {
    if (tokenizer_ == nullptr) return static_cast<int64_t>(sentence.size()) + 1;  // + the space
    if (spm_space_prefix_) {
        // SentencePiece marks the text start with "▁" itself, as a preceding space would be.
        return static_cast<int64_t>(tokenizer_->encode(sentence, false).size());
    }
    std::string spaced;
    spaced.reserve(sentence.size() + 1);
    spaced.push_back(' ');
    spaced.append(sentence);
    return static_cast<int64_t>(tokenizer_->encode(spaced, false).size());
}

int64_t LengthMeter::raw_chat(const std::string& user_message) const {
    if (!has_chat_template_) return raw_count(user_message);
    const std::string rendered = tokenizer_->apply_chat_template({{"user", user_message}}, true);
    std::vector<int32_t> ids = tokenizer_->encode(rendered, false, /*parse_special=*/true);
    const VocabData& d = tokenizer_->data();
    const bool needs_bos = d.add_bos && d.bos_id >= 0 && (ids.empty() || ids[0] != d.bos_id);
    return static_cast<int64_t>(ids.size()) + (needs_bos ? 1 : 0);
}

// ---------------------------------------------------------------------------------------------

SynthGenerator::SynthGenerator(const TextSource& haystack, const Tokenizer* tokenizer,
                               SynthConfig config)
    : haystack_(haystack),
      meter_(tokenizer),
      config_(config),
      sentence_cost_(haystack.n_sentences(), -1) {
    if (config_.split == Split::Eval && !haystack_.is_heldout()) {
        fail(
            "the eval split takes its haystack from the held-out text of data/text/ only "
            "(--haystack is for --split train)");
    }
    if (config_.split == Split::Train && haystack_.is_heldout()) {
        fail(
            "the train split cannot use the held-out text of data/text/ as haystack; pass "
            "training text with --haystack FILE...");
    }
    if (haystack_.n_sentences() == 0) fail("haystack text '{}' is empty", haystack_.name());
}

int64_t SynthGenerator::piece_cost(const std::string& piece) {
    auto it = piece_cost_.find(piece);
    if (it == piece_cost_.end()) it = piece_cost_.emplace(piece, meter_.raw_piece(piece)).first;
    return it->second;
}

int64_t SynthGenerator::number_cost(int64_t n) {
    while (static_cast<int64_t>(number_cost_.size()) <= n) {
        const int64_t i = static_cast<int64_t>(number_cost_.size());  // entries "1." .. "i."
        number_cost_.push_back(
            i == 0 ? 0 : number_cost_.back() + meter_.raw_piece(std::to_string(i) + "."));
    }
    return number_cost_[static_cast<size_t>(n)];
}

int64_t SynthGenerator::sentence_cost(size_t i) {
    int32_t& c = sentence_cost_[i];
    if (c < 0) c = static_cast<int32_t>(meter_.raw_piece(haystack_.sentence(i)));
    return c;
}

SynthInstance SynthGenerator::generate(std::string_view task_name, uint64_t seed, int64_t index,
                                       int length) {
    const TaskInfo& task = find_task(task_name);
    if (length < kMinSynthLength || length > kMaxSynthLength) {
        fail("length {} is out of range: synthetic instances are {} to {} tokens long", length,
             kMinSynthLength, kMaxSynthLength);
    }
    if (index < 0) fail("instance index {} is negative", index);
    const PromptFormat format = config_.format;
    const int max_new = task.max_new_tokens + (format == PromptFormat::Chat ? 32 : 0);
    const int64_t scale = meter_.scale();
    const int64_t target = static_cast<int64_t>(length - max_new) * scale;  // raw units
    const int64_t tol = static_cast<int64_t>(length_tolerance(length)) * scale;
    const uint64_t iseed = instance_seed(task.name, config_.split, seed, index, length);
    Rng rng(iseed);
    // Without verification, lengths are sums of piece lengths, which can miss the true count by
    // a token or two where pieces join (SentencePiece): keep a margin so the prompt never exceeds.
    const bool verify = !meter_.exact() || config_.verify_length;
    const int64_t fit_target = verify ? target : target - kFastMargin;
    // ...and aim at [fit_target - fit_tol, fit_target]: with estimates off by at most 3 tokens,
    // the prompt lands in [target - tol - 4, target].
    const int64_t fit_tol = verify ? tol : std::max<int64_t>(4, tol - 3);
    auto measure = [&](const std::string& prompt) {
        return format == PromptFormat::Chat ? meter_.raw_chat(prompt) : meter_.raw_count(prompt);
    };
    auto too_small = [&](int64_t fixed, const char* what) -> void {
        fail(
            "length {} is too small for task '{}': {} take {} of the {} {} ({} more are kept for "
            "the answer)",
            length, task.name, what, meter_.to_units(fixed), length, meter_.unit(), max_new);
    };

    Spec spec;
    Prompt out;
    int64_t actual = 0;
    if (!is_list_task(task.name)) {
        if (task.name == "vt") {
            spec = make_vt(rng, config_.split);
        } else if (task.name == "qa") {
            spec = make_qa(rng, config_.split);
        } else {
            spec = make_niah(task.name, rng, config_.split);
        }
        const size_t n_sent = haystack_.n_sentences();
        const size_t start = rng.below(n_sent);
        auto render = [&](const std::vector<size_t>& sel) {
            std::vector<int64_t> cost(sel.size());  // [sel] raw length of each sentence
            for (size_t s = 0; s < sel.size(); ++s) cost[s] = sentence_cost(sel[s]);
            return render_haystack(spec, haystack_, sel, cost, format);
        };
        const int64_t fixed = measure(render({}).prompt);
        // At least a quarter of the window is natural text, or the task is not long-context.
        if (target - fixed < static_cast<int64_t>(length) * scale / 4) {
            too_small(fixed, "the instructions, needles and question");
        }
        const int64_t budget = fit_target - fixed;
        std::vector<size_t> sel;  // corpus sentence indices, in corpus order from `start`
        int64_t sum = 0;
        size_t pos = start, scanned = 0;
        // Adds sentences from `pos` on while they fit in `room`; skips (at most 1024 in a row)
        // those that do not, until the room left is at most `slack`.
        auto fill = [&](int64_t room, int64_t slack) {
            int64_t added = 0;
            int skips = 0;
            while (scanned < n_sent && room - added > slack && skips < 1024) {
                const int64_t c = sentence_cost(pos);
                if (added + c <= room) {
                    sel.push_back(pos);
                    added += c;
                    skips = 0;
                } else {
                    ++skips;
                }
                pos = pos + 1 == n_sent ? 0 : pos + 1;
                ++scanned;
            }
            return added;
        };
        sum = fill(budget, fit_tol / 2);
        if (budget - sum > fit_tol && scanned >= n_sent) {
            fail("haystack text '{}' is too short for length {} (it has {} sentences)",
                 haystack_.name(), length, n_sent);
        }
        if (verify) {
            for (int iter = 0; iter < 12; ++iter) {
                actual = measure(render(sel).prompt);
                if (actual > target) {
                    int64_t over = actual - target;
                    while (over > 0 && !sel.empty()) {
                        over -= sentence_cost(sel.back());
                        sel.pop_back();
                    }
                } else if (actual < target - tol) {
                    if (fill(target - actual - tol / 4, 0) == 0) break;
                } else {
                    break;
                }
            }
            while (actual > target && !sel.empty()) {  // hard limit: never longer than the target
                sel.pop_back();
                actual = measure(render(sel).prompt);
            }
        } else {
            actual = fixed + sum;
        }
        out = render(sel);
    } else {
        // List tasks: find the number of entries n whose prompt fits, by secant steps on the
        // measured length with bisection bounds.
        const uint64_t list_seed = stable_hash(fmt::format("{}|list", iseed));
        const int64_t min_n = task.name == "cwe" ? kCweMinEntries : kFweMinScale;
        const bool cwe = task.name == "cwe";
        const ListWords words =
            cwe ? cwe_words(list_seed, config_.split) : fwe_words(list_seed, config_.split, length);
        auto counts = [&](int64_t n) { return cwe ? cwe_counts(words, n) : fwe_counts(words, n); };
        const int64_t list_fixed =
            measure(assemble(render_list(task.name, words, counts(min_n)), "", format).prompt);
        // Byte counts add up exactly (the sum is one byte high: the first entry has no space), so
        // without a tokenizer the sum is used too and the final prompt measured once.
        auto cost = [&](int64_t n) {
            const ListCounts lc = counts(n);
            if (verify && meter_.exact()) {
                Spec s = render_list(task.name, words, lc);
                return measure(assemble(s, s.list_context, format).prompt);
            }
            // Sum of entry pieces, each after a space: "<i>." (cwe) and the word.
            int64_t c = list_fixed;
            for (size_t k = 0; k < words.words.size(); ++k) {
                if (lc.counts[k] > 0) c += lc.counts[k] * piece_cost(*words.words[k]);
            }
            if (cwe) c += number_cost(lc.n_entries);
            return c;
        };
        const int64_t c_min = cost(min_n);
        if (c_min > fit_target) too_small(c_min, "the instructions and the shortest list");
        int64_t lo = min_n, c_lo = c_min;  // largest n known to fit, and its length
        int64_t hi = -1;                   // smallest n known not to fit (-1: none yet)
        const int64_t probe = min_n * 2;
        const int64_t c_probe = cost(probe);
        double rate = std::max(
            0.25, static_cast<double>(c_probe - c_min) / static_cast<double>(probe - min_n));
        if (c_probe <= fit_target) {
            lo = probe;
            c_lo = c_probe;
        } else {
            hi = probe;
        }
        for (int iter = 0; iter < 24 && c_lo < fit_target - fit_tol && (hi < 0 || hi - lo > 1);
             ++iter) {
            int64_t n = lo + static_cast<int64_t>(
                                 static_cast<double>(fit_target - fit_tol / 2 - c_lo) / rate);
            n = std::max(n, lo + 1);
            if (hi >= 0) n = std::min(n, hi - 1);
            const int64_t c = cost(n);
            if (n != lo)
                rate = std::max(0.25, static_cast<double>(c - c_lo) / static_cast<double>(n - lo));
            if (c <= fit_target) {
                lo = n;
                c_lo = c;
            } else {
                hi = n;
            }
        }
        spec = render_list(task.name, words, counts(lo));
        out = assemble(spec, spec.list_context, format);
        actual = meter_.exact() ? c_lo : measure(out.prompt);
    }

    SynthInstance inst;
    inst.task = task.name;
    inst.dataset = task.name;
    inst.split = config_.split;
    inst.seed = seed;
    inst.index = index;
    inst.target_length = length;
    inst.id =
        fmt::format("{}/{}/s{}/L{}/{}", task.name, split_name(config_.split), seed, length, index);
    inst.input = spec.question;
    inst.context = std::move(out.context);
    inst.answers = spec.answers;
    inst.length = meter_.to_units(actual);
    inst.length_unit = meter_.unit();
    inst.format = format;
    inst.prompt = std::move(out.prompt);
    inst.context_end = out.context_end;
    inst.answer_prefix = spec.cue;
    auto target_of = [format](const std::string& cue, const std::string& answer_text) {
        return format == PromptFormat::Completion ? " " + answer_text + "." : cue + " " + answer_text + ".";
    };
    inst.target = target_of(spec.cue, spec.answer_text);
    for (const Ask& a : spec.asks) {
        inst.asks.push_back({a.question, prompt_text(spec.instruction, inst.context, a.question, a.cue, format),
                             a.cue, target_of(a.cue, a.answer_text), a.answers, a.keys});
    }
    inst.max_new_tokens = max_new;
    inst.metric = task.metric;
    inst.keys = spec.keys;
    inst.n_needles = static_cast<int>(spec.needles.size());
    for (size_t i = 0; i < spec.needles.size(); ++i) {
        if (!spec.needles[i].answer) continue;
        inst.depth_percents.push_back(spec.needles[i].depth_percent);
        inst.depths.push_back(inst.context.empty() ? 0.0
                                                   : static_cast<double>(out.needle_offsets[i]) /
                                                         static_cast<double>(inst.context.size()));
    }
    return inst;
}

std::vector<SynthInstance> SynthGenerator::generate_suite(std::string_view suite_name,
                                                          uint64_t seed) {
    const SuiteSpec& suite = find_suite(suite_name);
    std::vector<SynthInstance> out;
    out.reserve(static_cast<size_t>(suite.n_instances()));
    for (const auto& [task, n] : suite.tasks) {
        for (int i = 0; i < n; ++i) {
            out.push_back(generate(task, seed, i, suite.length));
            out.back().suite = suite.name;
        }
    }
    return out;
}

// ---------------------------------------------------------------------------------------------

nlohmann::ordered_json to_json(const SynthInstance& inst) {
    nlohmann::ordered_json j;
    j["input"] = inst.input;
    j["context"] = inst.context;
    j["answers"] = inst.answers;
    j["length"] = inst.length;
    j["dataset"] = inst.dataset;
    j["language"] = "en";
    j["all_classes"] = nullptr;
    j["_id"] = inst.id;
    j["task"] = inst.task;
    j["split"] = split_name(inst.split);
    j["seed"] = inst.seed;
    j["index"] = inst.index;
    j["target_length"] = inst.target_length;
    j["length_unit"] = inst.length_unit;
    j["suite"] = inst.suite;
    j["format"] = format_name(inst.format);
    j["prompt"] = inst.prompt;
    if (inst.format == PromptFormat::Chat) {
        j["messages"] =
            nlohmann::ordered_json::array({{{"role", "user"}, {"content", inst.prompt}}});
    }
    j["answer_prefix"] = inst.answer_prefix;
    j["target"] = inst.target;
    j["max_new_tokens"] = inst.max_new_tokens;
    j["metric"] = inst.metric;
    j["keys"] = inst.keys;
    j["depths"] = inst.depths;
    j["depth_percents"] = inst.depth_percents;
    j["n_needles"] = inst.n_needles;
    if (!inst.asks.empty()) {
        nlohmann::ordered_json asks = nlohmann::ordered_json::array();
        for (const SynthAsk& a : inst.asks) {
            asks.push_back({{"input", a.input},
                            {"prompt", a.prompt},
                            {"answer_prefix", a.answer_prefix},
                            {"target", a.target},
                            {"answers", a.answers},
                            {"keys", a.keys}});
        }
        j["asks"] = asks;
    }
    return j;
}

std::string to_jsonl_line(const SynthInstance& inst) {
    return to_json(inst).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) +
           "\n";
}

// ---------------------------------------------------------------------------------------------

SynthSummary write_synth_jsonl(const SynthRequest& req, std::ostream& out) {
    const bool suite_mode = !req.suite.empty();
    if (suite_mode == !req.task.empty())
        fail("give either a suite (--suite) or a task (--task), not both");
    if (suite_mode) {
        if (req.n != 0 || req.length != 0)
            fail("--n and --length go with --task; a suite fixes both");
        (void)find_suite(req.suite);  // validate before loading anything
    } else {
        (void)find_task(req.task);
        if (req.n <= 0) fail("--n must be a positive number of instances (got {})", req.n);
        if (req.length == 0) fail("--length is required with --task");
    }
    if (req.split == Split::Eval && !req.haystack_files.empty()) {
        fail(
            "--haystack is for --split train; the eval split always uses the held-out text of "
            "data/text/");
    }
    if (req.split == Split::Train && req.haystack_files.empty()) {
        fail(
            "--split train needs training text: --haystack FILE... (text that excludes the "
            "held-out addresses of data/text/heldout.json)");
    }
    std::unique_ptr<Tokenizer> tokenizer;
    if (!req.tokenizer_path.empty()) {
        auto file = gguf::File::open(req.tokenizer_path);
        tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_gguf(*file));
    }
    const std::string dir = req.text_dir.empty() ? default_text_dir() : req.text_dir;
    const TextSource heldout = TextSource::heldout(dir);
    TextSource train;
    if (req.split == Split::Train) train = TextSource::from_files(req.haystack_files, &heldout);
    SynthGenerator gen(
        req.split == Split::Eval ? heldout : train, tokenizer.get(),
        {req.split, req.format, req.verify_length.value_or(req.split == Split::Eval)});
    SynthSummary summary;
    summary.length_unit = gen.meter().unit();
    auto emit = [&](const SynthInstance& inst) {
        out << to_jsonl_line(inst);
        if (!out) fail("cannot write the output (disk full?)");
        ++summary.n_instances;
    };
    if (suite_mode) {
        const SuiteSpec& suite = find_suite(req.suite);
        for (const auto& [task, n] : suite.tasks) {
            for (int i = 0; i < n; ++i) {
                SynthInstance inst = gen.generate(task, req.seed, i, suite.length);
                inst.suite = suite.name;
                emit(inst);
            }
        }
    } else {
        for (int i = 0; i < req.n; ++i) emit(gen.generate(req.task, req.seed, i, req.length));
    }
    out.flush();
    return summary;
}

// ---------------------------------------------------------------------------------------------

std::string ruler_postprocess(std::string_view prediction) {
    auto strip = [](std::string_view s) {
        auto ws = [](char c) {
            return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
        };
        while (!s.empty() && ws(s.front())) s.remove_prefix(1);
        while (!s.empty() && ws(s.back())) s.remove_suffix(1);
        return s;
    };
    std::string out(strip(prediction));
    for (char& c : out) {
        if (static_cast<unsigned char>(c) < 0x20) c = '\n';
    }
    return std::string(strip(out));
}

namespace {
std::vector<bool> contained(std::string_view prediction, const std::vector<std::string>& refs) {
    const std::string p = lower_ascii(ruler_postprocess(prediction));
    std::vector<bool> hit;
    hit.reserve(refs.size());
    for (const auto& r : refs) hit.push_back(p.find(lower_ascii(r)) != std::string::npos);
    return hit;
}
}  // namespace

double string_match_all(std::string_view prediction, const std::vector<std::string>& references) {
    if (references.empty()) return 0.0;
    const std::vector<bool> hit = contained(prediction, references);
    return static_cast<double>(std::count(hit.begin(), hit.end(), true)) /
           static_cast<double>(references.size());
}

double string_match_part(std::string_view prediction, const std::vector<std::string>& references) {
    const std::vector<bool> hit = contained(prediction, references);
    return std::find(hit.begin(), hit.end(), true) != hit.end() ? 1.0 : 0.0;
}

double score_synthetic(std::string_view metric, std::string_view prediction,
                       const std::vector<std::string>& references) {
    if (metric == "string_match_all") return string_match_all(prediction, references);
    if (metric == "string_match_part") return string_match_part(prediction, references);
    fail("unknown synthetic metric '{}' (expected string_match_all or string_match_part)", metric);
}

}  // namespace kvec::eval
