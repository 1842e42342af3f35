// Import of a Hugging Face tokenizer.json (+ tokenizer_config.json) into VocabData.
//   - model BPE with a ByteLevel pre-tokenizer -> "gpt2"; `pre` from the Split regex
//     (Llama 3, Qwen2, GPT-2) or from ByteLevel(use_regex) alone (GPT-2) / with Digits (SmolLM);
//   - model BPE with byte_fallback / Metaspace / a "▁" normalizer (Llama 2, Mistral, TinyLlama)
//     -> "llama" (SentencePiece-style), scores from the merge ranks.
//   - added_tokens: special -> CONTROL, others -> USER_DEFINED.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace kvec {

namespace {

using json = nlohmann::json;

json parse_json(const std::string& text, const char* what) {
    try {
        return json::parse(text);
    } catch (const json::exception& e) {
        fail("tokenizer: {} is not valid JSON: {}", what, e.what());
    }
}

// Every object of a pre_tokenizer / normalizer / decoder tree, Sequences flattened.
void flatten(const json& node, const char* list_key, std::vector<const json*>& out) {
    if (!node.is_object()) return;
    const auto type = node.value("type", std::string());
    if (type == "Sequence" && node.contains(list_key) && node[list_key].is_array()) {
        for (const auto& child : node[list_key]) flatten(child, list_key, out);
    } else {
        out.push_back(&node);
    }
}

// A token named in tokenizer_config.json: a string, or {"content": "..."}, or null.
std::string config_token(const json& config, const char* key) {
    if (!config.is_object() || !config.contains(key)) return "";
    const json& v = config[key];
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string())
        return v["content"].get<std::string>();
    return "";
}

// tokenizer.json parsed with model.vocab and model.merges taken out while parsing: the DOM of
// the 100k+ entries they hold would cost most of the load time.
struct Parsed {
    json doc;
    std::vector<std::pair<std::string, int64_t>> vocab;  // [n_vocab_entries] text, id
    std::vector<std::string> merges;                     // [n_merges] "a b"
    bool has_vocab = false, has_merges = false;
    std::string error;  // first malformed vocab / merges entry
};

Parsed parse_tokenizer_json(const std::string& text) {
    Parsed p;
    std::string key1, key2, pending;
    bool in_vocab = false, in_merges = false;
    auto note = [&](std::string msg) {
        if (p.error.empty()) p.error = std::move(msg);
    };
    auto cb = [&](int depth, json::parse_event_t ev, json& parsed) -> bool {
        using E = json::parse_event_t;
        switch (ev) {
            case E::key:
                if (depth == 1)
                    key1 = parsed.get<std::string>();
                else if (depth == 2)
                    key2 = parsed.get<std::string>();
                else if (depth == 3 && in_vocab)
                    pending = parsed.get<std::string>();
                return true;
            case E::object_start:
                if (depth == 2 && key1 == "model" && key2 == "vocab") in_vocab = true;
                return true;
            case E::array_start:
                if (depth == 2 && key1 == "model" && key2 == "merges") in_merges = true;
                return true;
            case E::value:
                if (depth != 3 || !(in_vocab || in_merges)) return true;
                if (in_vocab) {
                    if (parsed.is_number_integer())
                        p.vocab.emplace_back(pending, parsed.get<int64_t>());
                    else
                        note(fmt::format("vocab entry '{}' has the non-integer id {}", pending,
                                         parsed.dump()));
                } else if (parsed.is_string()) {
                    p.merges.push_back(parsed.get<std::string>());
                } else {
                    note(fmt::format("merge {} is neither \"a b\" nor [\"a\", \"b\"]: {}",
                                     p.merges.size(), parsed.dump()));
                }
                return false;
            case E::array_end:
            case E::object_end:
                if (depth == 2 && in_vocab && ev == E::object_end) {
                    in_vocab = false;
                    p.has_vocab = true;
                } else if (depth == 2 && in_merges && ev == E::array_end) {
                    in_merges = false;
                    p.has_merges = true;
                } else if (depth == 3 && in_merges) {
                    if (parsed.is_array() && parsed.size() == 2 && parsed[0].is_string() &&
                        parsed[1].is_string()) {
                        const auto& a = parsed[0].get_ref<const std::string&>();
                        const auto& b = parsed[1].get_ref<const std::string&>();
                        if (a.find(' ') != std::string::npos || b.find(' ') != std::string::npos) {
                            note(
                                fmt::format("merge {} ['{}', '{}'] contains a space, which GGUF "
                                            "merges cannot hold",
                                            p.merges.size(), a, b));
                        }
                        p.merges.push_back(a + " " + b);
                    } else {
                        note(fmt::format("merge {} is neither \"a b\" nor [\"a\", \"b\"]: {}",
                                         p.merges.size(), parsed.dump()));
                    }
                    return false;
                } else if (depth == 3 && in_vocab) {
                    note(fmt::format("vocab entry '{}' has the non-integer id {}", pending,
                                     parsed.dump()));
                    return false;
                }
                return true;
        }
        return true;
    };
    try {
        p.doc = json::parse(text, cb);
    } catch (const json::exception& e) {
        fail("tokenizer: tokenizer.json is not valid JSON: {}", e.what());
    }
    return p;
}

std::string chat_template_of(const json& config) {
    if (!config.is_object() || !config.contains("chat_template")) return "";
    const json& t = config["chat_template"];
    if (t.is_string()) return t.get<std::string>();
    if (t.is_array()) {  // [{"name": "default", "template": "..."}, ...]
        for (const auto& e : t) {
            if (e.is_object() && e.value("name", std::string()) == "default" &&
                e.contains("template") && e["template"].is_string()) {
                return e["template"].get<std::string>();
            }
        }
    }
    return "";
}

}  // namespace

// A function-try-block: a field of an unexpected JSON type anywhere below (json::value or get
// on a number where a string belongs; found by fuzz_hf_import) is one clear error.
Tokenizer Tokenizer::from_hf(const std::string& tokenizer_json,
                             const std::string& tokenizer_config) try {
    Parsed parsed = parse_tokenizer_json(tokenizer_json);
    const json& tj = parsed.doc;
    const json config = tokenizer_config.empty()
                            ? json::object()
                            : parse_json(tokenizer_config, "tokenizer_config.json");
    if (!tj.is_object() || !tj.contains("model") || !tj["model"].is_object()) {
        fail("tokenizer: tokenizer.json has no \"model\" object");
    }
    const json& model = tj["model"];
    const std::string model_type = model.value("type", std::string());
    if (model_type != "BPE") {
        fail(
            "tokenizer: unsupported tokenizer.json model type '{}' (supported: BPE, byte-level "
            "or SentencePiece-style with byte_fallback)",
            model_type.empty() ? "(none)" : model_type);
    }
    if (!parsed.has_vocab) fail("tokenizer: tokenizer.json model has no \"vocab\" object");
    if (!parsed.has_merges) fail("tokenizer: tokenizer.json model has no \"merges\" array");
    if (!parsed.error.empty()) fail("tokenizer: tokenizer.json: {}", parsed.error);

    VocabData d;

    // Vocabulary: model.vocab plus added_tokens (which may extend it).
    struct Added {
        int64_t id;
        std::string content;
        bool special;
    };
    std::vector<Added> added;
    if (tj.contains("added_tokens") && tj["added_tokens"].is_array()) {
        for (const auto& a : tj["added_tokens"]) {
            if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
                !a.contains("content") || !a["content"].is_string()) {
                fail("tokenizer: tokenizer.json has a malformed added_tokens entry: {}", a.dump());
            }
            added.push_back({a["id"].get<int64_t>(), a["content"].get<std::string>(),
                             a.value("special", false)});
        }
    }
    int64_t max_id = -1;
    for (const auto& [text, id] : parsed.vocab) {
        if (id < 0) fail("tokenizer: vocab entry '{}' has negative id {}", text, id);
        max_id = std::max(max_id, id);
    }
    for (const auto& a : added) {
        if (a.id < 0) fail("tokenizer: added token '{}' has negative id {}", a.content, a.id);
        max_id = std::max(max_id, a.id);
    }
    if (max_id < 0) fail("tokenizer: tokenizer.json has an empty vocabulary");
    if (max_id >= (int64_t{1} << 24)) fail("tokenizer: token id {} too large", max_id);
    // Ids missing from the range become "[PADn]" tokens; more holes than tokens (an id far beyond
    // the rest) would size the vocabulary by a number instead of by the file (found by fuzz_hf_import).
    const int64_t defined = static_cast<int64_t>(parsed.vocab.size() + added.size());
    if (max_id + 1 - defined > std::max<int64_t>(defined, 1024)) {
        fail("tokenizer: token ids go up to {} but only {} tokens are defined: too many missing ids", max_id,
             defined);
    }
    const size_t n = static_cast<size_t>(max_id) + 1;
    d.tokens.assign(n, std::string());
    d.types.assign(n, TokenType::UNUSED);
    std::vector<bool> filled(n, false);
    for (auto& [text, id] : parsed.vocab) {
        d.tokens[id] = std::move(text);
        d.types[id] = TokenType::NORMAL;
        filled[id] = true;
    }
    parsed.vocab.clear();
    for (const auto& a : added) {
        d.tokens[a.id] = a.content;
        d.types[a.id] = a.special ? TokenType::CONTROL : TokenType::USER_DEFINED;
        filled[a.id] = true;
    }
    for (size_t i = 0; i < n; ++i) {
        if (!filled[i]) d.tokens[i] = "[PAD" + std::to_string(i) + "]";  // hole in the id range
    }
    d.merges = std::move(parsed.merges);

    // Which algorithm: byte-level (ByteLevel pre-tokenizer) or SentencePiece-style.
    std::vector<const json*> pretoks, norms, decoders;
    if (tj.contains("pre_tokenizer")) flatten(tj["pre_tokenizer"], "pretokenizers", pretoks);
    if (tj.contains("normalizer")) flatten(tj["normalizer"], "normalizers", norms);
    if (tj.contains("decoder")) flatten(tj["decoder"], "decoders", decoders);
    auto has_type = [](const std::vector<const json*>& v, const char* type) -> const json* {
        for (const json* j : v) {
            if (j->value("type", std::string()) == type) return j;
        }
        return nullptr;
    };
    const json* byte_level = has_type(pretoks, "ByteLevel");
    const json* metaspace = has_type(pretoks, "Metaspace");
    const bool byte_fallback = model.value("byte_fallback", false);

    if (byte_level != nullptr) {
        d.model = "gpt2";
        const json* split = has_type(pretoks, "Split");
        if (split != nullptr) {
            std::string pattern;
            if (split->contains("pattern") && (*split)["pattern"].is_object()) {
                const json& p = (*split)["pattern"];
                if (p.contains("Regex") && p["Regex"].is_string())
                    pattern = p["Regex"].get<std::string>();
                else if (p.contains("String") && p["String"].is_string())
                    pattern = p["String"].get<std::string>();
            }
            std::string pre;
            for (const auto& k : tok::known_split_regexes()) {
                if (pattern == k.pattern) pre = k.pre;
            }
            if (pre.empty()) {
                fail(
                    "tokenizer: unknown pre-tokenizer Split regex '{}' (recognised: the Llama 3, "
                    "Qwen2 "
                    "and GPT-2 regexes)",
                    pattern);
            }
            d.pre = pre;
        } else if (byte_level->value("use_regex", true)) {
            const json* digits = has_type(pretoks, "Digits");
            d.pre = (digits != nullptr && digits->value("individual_digits", false)) ? "smollm"
                                                                                     : "gpt-2";
        } else {
            fail(
                "tokenizer: ByteLevel pre-tokenizer without a regex and without a Split is not "
                "supported");
        }
        // llama.cpp's defaults for these pre-tokenizers; tokenizer_config may override below.
        d.add_bos = d.pre == "llama-bpe";
        d.add_space_prefix = false;
    } else if (byte_fallback || metaspace != nullptr ||
               has_type(decoders, "ByteFallback") != nullptr) {
        d.model = "llama";
        d.pre = "default";
        // Space prefix: a Prepend("▁") normalizer, or Metaspace's prepend_scheme /
        // add_prefix_space.
        bool prefix = false;
        if (const json* p = has_type(norms, "Prepend");
            p != nullptr && p->value("prepend", std::string()) == "\xE2\x96\x81") {
            prefix = true;
        }
        if (metaspace != nullptr) {
            const std::string scheme = metaspace->value("prepend_scheme", std::string());
            if (scheme == "always" || scheme == "first") prefix = true;
            if (metaspace->value("add_prefix_space", false)) prefix = true;
        }
        d.add_space_prefix = prefix;
        d.add_bos = true;
        // SentencePiece scores: a token made by merge r gets -r (earlier merges win), so the SPM
        // bigram search picks the same merges as Hugging Face's BPE; other tokens score lower.
        std::unordered_map<std::string, int32_t> rank_of;  // merged text -> first merge rank
        rank_of.reserve(d.merges.size());
        for (size_t r = 0; r < d.merges.size(); ++r) {
            const std::string& m = d.merges[r];
            const size_t sp = m.find(' ', 1);
            if (sp == std::string::npos) continue;
            rank_of.emplace(m.substr(0, sp) + m.substr(sp + 1), static_cast<int32_t>(r));
        }
        d.scores.assign(n, 0.0f);
        const float floor = -static_cast<float>(d.merges.size()) - 1.0f;
        for (size_t i = 0; i < n; ++i) {
            if (d.types[i] != TokenType::NORMAL) continue;
            auto it = rank_of.find(d.tokens[i]);
            d.scores[i] = it != rank_of.end() ? -static_cast<float>(it->second)
                                              : floor - static_cast<float>(i);
            const std::string& t = d.tokens[i];
            if (t.size() == 6 && t.rfind("<0x", 0) == 0 && t.back() == '>')
                d.types[i] = TokenType::BYTE;
        }
        d.merges.clear();  // SPM works from scores
    } else {
        fail(
            "tokenizer: unsupported tokenizer.json: BPE without a ByteLevel pre-tokenizer and "
            "without byte_fallback / Metaspace (supported: byte-level BPE like GPT-2 / Llama 3 / "
            "Qwen2, SentencePiece-style BPE like Llama 2 / Mistral)");
    }

    // Unknown token.
    auto id_of = [&](const std::string& text) -> int32_t {  // a few lookups: a scan is fine
        if (text.empty()) return -1;
        for (const auto& a : added) {
            if (a.content == text) return static_cast<int32_t>(a.id);
        }
        for (size_t i = 0; i < n; ++i) {
            if (filled[i] && d.tokens[i] == text) return static_cast<int32_t>(i);
        }
        return -1;
    };
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
        d.unk_id = id_of(model["unk_token"].get<std::string>());
    }
    if (d.unk_id < 0) d.unk_id = id_of(config_token(config, "unk_token"));
    if (d.unk_id >= 0) d.types[d.unk_id] = TokenType::UNKNOWN;

    // BOS / EOS / PAD from tokenizer_config.json, else from the post-processor template.
    d.bos_id = id_of(config_token(config, "bos_token"));
    d.eos_id = id_of(config_token(config, "eos_token"));
    d.pad_id = id_of(config_token(config, "pad_token"));
    bool bos_from_template = false;
    if (tj.contains("post_processor") && tj["post_processor"].is_object()) {
        std::vector<const json*> posts;
        flatten(tj["post_processor"], "processors", posts);
        for (const json* p : posts) {
            if (p->value("type", std::string()) != "TemplateProcessing" || !p->contains("single"))
                continue;
            const json& single = (*p)["single"];
            if (single.is_array() && !single.empty() && single[0].contains("SpecialToken")) {
                const int32_t id = id_of(single[0]["SpecialToken"].value("id", std::string()));
                if (id >= 0) {
                    if (d.bos_id < 0) d.bos_id = id;
                    bos_from_template = true;
                }
            }
        }
    }
    if (bos_from_template) d.add_bos = true;
    if (config.is_object() && config.contains("add_bos_token") &&
        config["add_bos_token"].is_boolean()) {
        d.add_bos = config["add_bos_token"].get<bool>();
    }
    if (config.is_object() && config.contains("add_eos_token") &&
        config["add_eos_token"].is_boolean()) {
        d.add_eos = config["add_eos_token"].get<bool>();
    }
    if (d.add_bos && d.bos_id < 0) d.add_bos = false;  // nothing to add
    if (d.add_eos && d.eos_id < 0) d.add_eos = false;
    d.chat_template = chat_template_of(config);
    return Tokenizer(std::move(d));
} catch (const json::exception& e) {
    fail("tokenizer: tokenizer.json or tokenizer_config.json has a field of an unexpected type: {}", e.what());
}

}  // namespace kvec
