// kvec tokenize: a model's tokenizer and chat template on text, as llama.cpp's llama-tokenize
// (scripts/real-models-check.sh compares both engines' ids line by line and the rendered template
// with the template's own Jinja).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"

namespace kvec::tools {

namespace {

struct TokenizeOptions {
    std::string model;
    std::string prompt;
    std::string file;
    std::string messages;  // JSON file: [{"role": ..., "content": ...}, ...]
    std::string system;
    bool chat = false;
    bool lines = false;
    std::string split;  // tokenize the pieces between these separators one by one
    bool no_bos = false;
    bool parse_special = false;
    bool render = false;
    bool no_generation_prompt = false;
    bool pieces = false;
};

std::string read_file(const std::string& path, const char* what) {
    check_readable_file(path, what);
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<ChatMessage> read_messages(const std::string& path) {
    const std::string text = read_file(path, "messages file");
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        fail("messages file '{}': not JSON ({})", path, e.what());
    }
    if (!j.is_array() || j.empty()) fail("messages file '{}': expected a non-empty array of messages", path);
    std::vector<ChatMessage> out;
    for (const auto& m : j) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
            !m["content"].is_string()) {
            fail("messages file '{}': each message needs string \"role\" and \"content\"", path);
        }
        out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    }
    return out;
}

std::string format_ids(const Tokenizer& tok, const std::vector<int32_t>& ids, bool pieces) {
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i > 0) out += ' ';
        out += pieces ? nlohmann::json(tok.decode({ids[i]})).dump() : std::to_string(ids[i]);
    }
    return out;
}

int run_tokenize(const TokenizeOptions& o) {
    const int sources = int(!o.prompt.empty()) + int(!o.file.empty()) + int(!o.messages.empty());
    if (sources != 1) fail("give exactly one of -p, -f and --messages");
    if (o.lines && !o.split.empty()) fail("--lines is --split with a newline: give one of them");
    if ((o.lines || !o.split.empty()) && (o.chat || !o.messages.empty())) {
        fail("--lines and --split tokenize text, not a conversation");
    }
    if (!o.system.empty() && !o.chat) fail("--system needs --chat");
    if (o.render && !o.chat && o.messages.empty()) fail("--render prints a chat template: give --chat or --messages");
    check_readable_file(o.model, "model file");
    const Tokenizer tok = Tokenizer::from_gguf(*gguf::File::open(o.model));

    std::string text = o.file.empty() ? o.prompt : read_file(o.file, "prompt file");
    bool parse_special = o.parse_special;
    if (o.chat || !o.messages.empty()) {
        std::vector<ChatMessage> messages;
        if (!o.messages.empty()) {
            if (o.chat) fail("--messages is a conversation already: leave out --chat");
            messages = read_messages(o.messages);
        } else {
            if (!o.system.empty()) messages.push_back({"system", o.system});
            messages.push_back({"user", text});
        }
        text = tok.apply_chat_template(messages, !o.no_generation_prompt);
        parse_special = true;  // as kvec run --chat
        if (o.render) {
            fmt::print("{}", text);
            return 0;
        }
    }
    // One line of ids per piece: the whole text, or the pieces between separators (the separators
    // themselves not tokenized; a text that ends with one has no empty last piece).
    const std::string sep = o.lines ? "\n" : o.split;
    std::vector<std::string> pieces;
    if (sep.empty()) {
        pieces.push_back(text);
    } else {
        size_t b = 0;
        for (size_t e; (e = text.find(sep, b)) != std::string::npos; b = e + sep.size()) pieces.push_back(text.substr(b, e - b));
        if (b < text.size()) pieces.push_back(text.substr(b));
    }
    std::string out;
    for (const std::string& piece : pieces) {
        out += format_ids(tok, tok.encode(piece, !o.no_bos, parse_special), o.pieces);
        out += '\n';
    }
    fmt::print("{}", out);
    return 0;
}

}  // namespace

void add_tokenize_command(CLI::App& app, Action& action) {
    auto o = std::make_shared<TokenizeOptions>();
    CLI::App* cmd = app.add_subcommand("tokenize", "print the token ids of a text (or a chat) with a model's tokenizer");
    cmd->add_option("-m,--model", o->model, "model or vocabulary file (GGUF)")->required();
    cmd->add_option("-p,--prompt", o->prompt, "text to tokenize");
    cmd->add_option("-f,--file", o->file, "read the text from a file");
    cmd->add_option("--messages", o->messages,
                    "a conversation to render with the model's chat template: JSON file [{\"role\", \"content\"}, ...]");
    cmd->add_flag("--chat", o->chat, "wrap the text in the model's chat template as a user turn (as kvec run --chat)");
    cmd->add_option("--system", o->system, "system message with --chat");
    cmd->add_flag("--render", o->render, "print the rendered chat template instead of its ids");
    cmd->add_flag("--no-generation-prompt", o->no_generation_prompt,
                  "render without the assistant header that cues the answer");
    cmd->add_flag("--lines", o->lines, "one line of ids per line of the text (each line tokenized on its own)");
    cmd->add_option("--split", o->split, "one line of ids per piece of the text between these separators");
    cmd->add_flag("--no-bos", o->no_bos, "do not add BOS (EOS) even where the vocabulary asks for it");
    cmd->add_flag("--parse-special", o->parse_special,
                  "special-token text (e.g. <|im_end|>) becomes the special token (always with a chat template)");
    cmd->add_flag("--pieces", o->pieces, "print each token's text (JSON strings) instead of its id");
    cmd->callback([o, &action] { action = [o] { return run_tokenize(*o); }; });
}

}  // namespace kvec::tools
