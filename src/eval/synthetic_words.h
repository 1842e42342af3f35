// Vocabularies of the synthetic long-context suite (src/eval/synthetic.h) and their split into
// disjoint train / eval halves.
//
// Every word, name and number the generator may use as a key, a value or an answer belongs to
// exactly one split, decided by a fixed hash of its text (split_of): about one item in three is
// "eval", the rest "train". Instances of the eval split draw only eval items, instances of the
// train split only train items, so no eval key or answer can occur in any training instance.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvec::eval {

enum class Split { Train, Eval };

const char* split_name(Split split);    // "train" / "eval"
Split parse_split(std::string_view s);  // throws kvec::Error for anything else

// 64-bit FNV-1a followed by a splitmix64 finaliser: stable across platforms and compilers.
uint64_t stable_hash(std::string_view text);

// The split an item belongs to: Eval when stable_hash(item) % 3 == 0, else Train.
Split split_of(std::string_view item);

// Raw word lists (lower case, ASCII, no duplicates within a list).
const std::vector<std::string>& adjective_words();  // [~150] key halves ("silver")
const std::vector<std::string>& noun_words();       // [~200] key halves ("falcon"), list words
const std::vector<std::string>& first_names();      // [~80] people in QA facts ("Ada")
const std::vector<std::string>& name_heads();       // [~40] first syllables of invented names
const std::vector<std::string>& name_tails();       // [~30] last syllables of invented names

// The lists above restricted to one split (computed once, cached).
struct SplitVocab {
    std::vector<std::string> adjectives;   // key first halves
    std::vector<std::string> nouns;        // key second halves
    std::vector<std::string> list_words;   // cwe words (adjectives and nouns)
    std::vector<std::string> names;        // invented proper names ("Belford"), capitalised
    std::vector<std::string> first_names;  // first names of people ("Ada")
    std::vector<std::string> coded_words;  // fwe coded words ("tumo"): two CV syllables
};
const SplitVocab& split_vocab(Split split);

}  // namespace kvec::eval
