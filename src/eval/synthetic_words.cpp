#include "eval/synthetic_words.h"

#include <algorithm>
#include <mutex>
#include <set>

#include "util/error.h"

namespace kvec::eval {

const char* split_name(Split split) { return split == Split::Eval ? "eval" : "train"; }

Split parse_split(std::string_view s) {
    if (s == "eval") return Split::Eval;
    if (s == "train") return Split::Train;
    fail("unknown split '{}' (expected 'train' or 'eval')", s);
}

uint64_t stable_hash(std::string_view text) {
    uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a offset basis
    for (unsigned char c : text) {
        h ^= c;
        h *= 0x100000001b3ULL;  // FNV prime
    }
    // splitmix64 finaliser: spreads the low bits used by split_of.
    h += 0x9e3779b97f4a7c15ULL;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
    return h ^ (h >> 31);
}

Split split_of(std::string_view item) {
    return stable_hash(item) % 3 == 0 ? Split::Eval : Split::Train;
}

const std::vector<std::string>& adjective_words() {
    static const std::vector<std::string> words = {
        "amber",    "ancient",  "autumn", "bitter",  "black",   "blue",    "bold",     "brave",
        "bright",   "brisk",    "broad",  "brown",   "calm",    "careful", "cheerful", "clever",
        "cold",     "cool",     "copper", "crimson", "curious", "dark",    "deep",     "distant",
        "dry",      "dusty",    "eager",  "early",   "easy",    "empty",   "fair",     "faithful",
        "famous",   "fancy",    "fast",   "fierce",  "fine",    "firm",    "flat",     "fresh",
        "friendly", "frozen",   "gentle", "giant",   "glad",    "golden",  "good",     "grand",
        "gray",     "great",    "green",  "happy",   "hardy",   "heavy",   "hidden",   "hollow",
        "honest",   "humble",   "hungry", "icy",     "idle",    "jolly",   "keen",     "kind",
        "large",    "late",     "lazy",   "light",   "little",  "lively",  "lonely",   "long",
        "loud",     "lucky",    "marble", "merry",   "mighty",  "misty",   "modern",   "narrow",
        "neat",     "new",      "noble",  "odd",     "old",     "orange",  "pale",     "patient",
        "plain",    "pleasant", "polite", "proud",   "purple",  "quick",   "quiet",    "rapid",
        "rare",     "red",      "rich",   "rough",   "round",   "royal",   "rusty",    "sad",
        "safe",     "salty",    "sandy",  "scarlet", "secret",  "sharp",   "shiny",    "short",
        "shy",      "silent",   "silver", "simple",  "sleepy",  "slow",    "small",    "smooth",
        "soft",     "solid",    "sour",   "spare",   "steady",  "steep",   "still",    "stormy",
        "strange",  "strong",   "sturdy", "sudden",  "sunny",   "swift",   "tall",     "tame",
        "tender",   "thick",    "thin",   "tidy",    "tiny",    "tough",   "upper",    "vast",
        "velvet",   "violet",   "warm",   "wary",    "weary",   "wet",     "white",    "wide",
        "wild",     "windy",    "wise",   "wooden",  "yellow",  "young",
    };
    return words;
}

const std::vector<std::string>& noun_words() {
    static const std::vector<std::string> words = {
        "acorn",    "anchor",   "apple",   "arrow",   "badger",  "bakery",  "balloon", "banana",
        "barn",     "basket",   "beach",   "bear",    "beaver",  "bell",    "berry",   "bicycle",
        "bird",     "blanket",  "boat",    "bottle",  "bridge",  "brook",   "bucket",  "butter",
        "button",   "cabin",    "cactus",  "camel",   "candle",  "canyon",  "carpet",  "castle",
        "cedar",    "chair",    "cherry",  "chimney", "circle",  "cliff",   "clock",   "cloud",
        "coast",    "comet",    "compass", "cookie",  "corner",  "cotton",  "cradle",  "crane",
        "crystal",  "daisy",    "desert",  "diamond", "dolphin", "donkey",  "dragon",  "drum",
        "eagle",    "engine",   "falcon",  "feather", "fence",   "fern",    "field",   "finch",
        "forest",   "fountain", "fox",     "garden",  "garnet",  "glacier", "goat",    "goose",
        "grape",    "hammer",   "harbor",  "harp",    "hawk",    "helmet",  "heron",   "hill",
        "honey",    "horse",    "island",  "jacket",  "jar",     "kettle",  "kitten",  "ladder",
        "lake",     "lamp",     "lantern", "lemon",   "lily",    "lion",    "lizard",  "lobster",
        "maple",    "meadow",   "melon",   "mirror",  "mitten",  "monkey",  "moon",    "moose",
        "mountain", "mouse",    "needle",  "nest",    "ocean",   "orchard", "otter",   "owl",
        "oyster",   "paddle",   "palace",  "panther", "parrot",  "peach",   "pebble",  "pelican",
        "pencil",   "pepper",   "piano",   "pigeon",  "pillow",  "pine",    "planet",  "plum",
        "pond",     "poppy",    "pumpkin", "puppy",   "rabbit",  "raccoon", "raven",   "ribbon",
        "river",    "robin",    "rocket",  "saddle",  "salmon",  "sparrow", "spider",  "spoon",
        "squirrel", "star",     "statue",  "stone",   "storm",   "stream",  "sunset",  "swan",
        "table",    "teapot",   "temple",  "thistle", "thunder", "tiger",   "timber",  "tomato",
        "torch",    "tower",    "trumpet", "tulip",   "turtle",  "valley",  "violin",  "wagon",
        "walnut",   "walrus",   "whale",   "wheel",   "willow",  "window",  "winter",  "wolf",
        "yarn",     "zebra",
    };
    return words;
}

const std::vector<std::string>& first_names() {
    static const std::vector<std::string> names = {
        "Ada",    "Alice", "Amos",   "Anna",  "Arthur", "Bella",  "Boris", "Carl",  "Clara",
        "Daniel", "Dora",  "Edgar",  "Edith", "Elena",  "Emil",   "Emma",  "Felix", "Flora",
        "Frank",  "Greta", "Hana",   "Hans",  "Helen",  "Hugo",   "Ida",   "Igor",  "Irene",
        "Ivan",   "Jack",  "Jane",   "Jonas", "Julia",  "Karl",   "Kate",  "Laura", "Leo",
        "Lena",   "Lucas", "Lucy",   "Marco", "Maria",  "Martha", "Max",   "Mia",   "Nadia",
        "Nina",   "Noah",  "Olga",   "Oscar", "Otto",   "Paul",   "Paula", "Peter", "Rosa",
        "Ruth",   "Sam",   "Sara",   "Simon", "Sofia",  "Tara",   "Theo",  "Tom",   "Vera",
        "Victor", "Viola", "Walter", "Wanda", "Yuri",   "Zoe",
    };
    return names;
}

const std::vector<std::string>& name_heads() {
    static const std::vector<std::string> heads = {
        "Al",   "Bar", "Bel", "Bran", "Cal", "Cor", "Cren", "Dal", "Dor", "Drav",
        "El",   "Fal", "Fen", "Gar",  "Gil", "Hal", "Hol",  "Ith", "Jor", "Kal",
        "Ker",  "Lan", "Lor", "Mar",  "Mor", "Nev", "Nor",  "Or",  "Pel", "Per",
        "Quin", "Ren", "Ros", "Sal",  "Tam", "Ul",  "Val",  "Wen", "Yar", "Zel",
    };
    return heads;
}

const std::vector<std::string>& name_tails() {
    static const std::vector<std::string> tails = {
        "avon", "bury",  "combe", "dale",   "don",  "dor",    "field", "ford", "gate", "haven",
        "holm", "hurst", "ick",   "ington", "ley",  "mere",   "mont",  "more", "ness", "quay",
        "rick", "shaw",  "stead", "ston",   "thal", "thorpe", "ton",   "vale", "wick", "wyn",
    };
    return tails;
}

namespace {

SplitVocab build_vocab(Split split) {
    SplitVocab v;
    auto keep = [split](const std::string& item) { return split_of(item) == split; };
    for (const auto& w : adjective_words()) {
        if (keep(w)) v.adjectives.push_back(w);
    }
    for (const auto& w : noun_words()) {
        if (keep(w)) v.nouns.push_back(w);
    }
    v.list_words = v.adjectives;
    v.list_words.insert(v.list_words.end(), v.nouns.begin(), v.nouns.end());
    std::sort(v.list_words.begin(), v.list_words.end());
    for (const auto& w : first_names()) {
        if (keep(w)) v.first_names.push_back(w);
    }
    std::set<std::string> seen;
    for (const auto& h : name_heads()) {
        for (const auto& t : name_tails()) {
            std::string name = h + t;
            if (keep(name) && seen.insert(name).second) v.names.push_back(name);
        }
    }
    static const char kConsonants[] = "bdfgklmnprstvz";  // 14
    static const char kVowels[] = "aeiou";               // 5
    for (char c1 : std::string_view(kConsonants)) {
        for (char v1 : std::string_view(kVowels)) {
            for (char c2 : std::string_view(kConsonants)) {
                for (char v2 : std::string_view(kVowels)) {
                    std::string w{c1, v1, c2, v2};
                    if (keep(w)) v.coded_words.push_back(w);
                }
            }
        }
    }
    return v;
}

}  // namespace

const SplitVocab& split_vocab(Split split) {
    static const SplitVocab train = build_vocab(Split::Train);
    static const SplitVocab eval = build_vocab(Split::Eval);
    return split == Split::Eval ? eval : train;
}

}  // namespace kvec::eval
