// Chat templates: the Jinja source (tokenizer.chat_template) is recognised, not interpreted; each
// supported family is rendered by code that reproduces what its Jinja produces for plain
// system / user / assistant messages. The leading BOS that most templates print is left out,
// because encode(..., add_special = true) adds it (as llama.cpp does).
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer_impl.h"
#include "util/error.h"

namespace kvec::tok {

namespace {

bool contains(std::string_view s, std::string_view what) {
    return s.find(what) != std::string_view::npos;
}

// Python's str.strip() / .strip(chars) family.
std::string strip_chars(std::string_view s, std::string_view chars, bool left, bool right) {
    size_t b = 0, e = s.size();
    if (left) {
        while (b < e && chars.find(s[b]) != std::string_view::npos) ++b;
    }
    if (right) {
        while (e > b && chars.find(s[e - 1]) != std::string_view::npos) --e;
    }
    return std::string(s.substr(b, e - b));
}
constexpr std::string_view kWhitespace = " \t\n\r\v\f";
std::string trim(std::string_view s) { return strip_chars(s, kWhitespace, true, true); }

// Decodes the escapes of a Jinja string literal body (\n, \t, \', \", \\).
std::string unescape_literal(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 1 < s.size()) {
            const char c = s[++i];
            switch (c) {
                case 'n':
                    out += '\n';
                    break;
                case 't':
                    out += '\t';
                    break;
                case 'r':
                    out += '\r';
                    break;
                default:
                    out += c;
                    break;
            }
        } else {
            out += s[i];
        }
    }
    return out;
}

// A default system prompt written as one literal: '<|im_start|>system\n' TEXT '<|im_end|>' with
// no quote in between (Qwen2 / Qwen2.5 / SmolLM2 print it when the first message is not a system
// message). Returns "" if the template has none.
std::string chatml_default_system(const std::string& tmpl) {
    const std::string head = "<|im_start|>system";
    size_t pos = 0;
    while ((pos = tmpl.find(head, pos)) != std::string::npos) {
        pos += head.size();
        size_t body = pos;
        if (tmpl.compare(body, 2, "\\n") == 0) {
            body += 2;
        } else if (body < tmpl.size() && tmpl[body] == '\n') {
            body += 1;
        } else {
            continue;
        }
        const size_t end = tmpl.find("<|im_end|>", body);
        if (end == std::string::npos) break;
        const std::string_view text(tmpl.data() + body, end - body);
        if (text.empty() || contains(text, "'") || contains(text, "\"") || contains(text, "{"))
            continue;
        return unescape_literal(text);
    }
    return "";
}

// The literal of `set date_string = "..."` (Llama 3.1+), or the template's own default.
std::string llama3_date(const std::string& tmpl) {
    const std::string key = "date_string = \"";
    const size_t p = tmpl.find(key);
    if (p != std::string::npos) {
        const size_t e = tmpl.find('"', p + key.size());
        if (e != std::string::npos) return tmpl.substr(p + key.size(), e - p - key.size());
    }
    return "26 Jul 2024";
}

std::string render_chatml(const std::string& tmpl, const std::vector<ChatMessage>& msgs,
                          bool add_gen) {
    std::string out;
    const std::string def_system = chatml_default_system(tmpl);
    if (!def_system.empty() && (msgs.empty() || msgs[0].role != "system")) {
        out += "<|im_start|>system\n" + def_system + "<|im_end|>\n";
    }
    // Qwen3: reasoning blocks (<think>...</think>) in assistant messages before the last user
    // query are dropped; those after it keep them, and the final one always shows the block.
    const bool qwen3 = contains(tmpl, "<think>") && contains(tmpl, "last_query_index");
    if (!qwen3) {
        for (const auto& m : msgs)
            out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
        if (add_gen) out += "<|im_start|>assistant\n";
        return out;
    }
    const int n = static_cast<int>(msgs.size());
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; --i) {
        const std::string& c = msgs[i].content;
        const bool tool_resp = c.rfind("<tool_response>", 0) == 0 && c.size() >= 16 &&
                               c.compare(c.size() - 16, 16, "</tool_response>") == 0;
        if (msgs[i].role == "user" && !tool_resp) {
            last_query = i;
            break;
        }
    }
    for (int i = 0; i < n; ++i) {
        const ChatMessage& m = msgs[i];
        if (m.role == "user" || m.role == "system") {
            out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
        } else if (m.role == "assistant") {
            std::string content = m.content, reasoning;
            const size_t close = content.find("</think>");
            if (close != std::string::npos) {
                std::string before =
                    strip_chars(std::string_view(content).substr(0, close), "\n", false, true);
                const size_t open = before.rfind("<think>");
                if (open != std::string::npos) before = before.substr(open + 7);
                reasoning = strip_chars(before, "\n", true, false);
                const size_t last_close = content.rfind("</think>");
                content = strip_chars(std::string_view(content).substr(last_close + 8), "\n", true,
                                      false);
            }
            if (i > last_query && (i == n - 1 || !reasoning.empty())) {
                out += "<|im_start|>assistant\n<think>\n" +
                       strip_chars(reasoning, "\n", true, true) + "\n</think>\n\n" +
                       strip_chars(content, "\n", true, false);
            } else {
                out += "<|im_start|>assistant\n" + content;
            }
            out += "<|im_end|>\n";
        } else if (m.role == "tool") {
            if (i == 0 || msgs[i - 1].role != "tool") out += "<|im_start|>user";
            out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
            if (i == n - 1 || msgs[i + 1].role != "tool") out += "<|im_end|>\n";
        } else {
            fail("chat template (Qwen3): unsupported role '{}'", m.role);
        }
    }
    if (add_gen) out += "<|im_start|>assistant\n";
    return out;
}

std::string render_llama3(const std::string& tmpl, const std::vector<ChatMessage>& msgs,
                          bool add_gen) {
    std::string out;
    auto turn = [&](const std::string& role, const std::string& content) {
        out +=
            "<|start_header_id|>" + role + "<|end_header_id|>\n\n" + trim(content) + "<|eot_id|>";
    };
    size_t first = 0;
    if (contains(tmpl, "Cutting Knowledge Date:")) {
        // Llama 3.1 / 3.2: a system turn with the knowledge cut-off and date always comes first.
        std::string system;
        if (!msgs.empty() && msgs[0].role == "system") {
            system = trim(msgs[0].content);
            first = 1;
        }
        out +=
            "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
            "Today Date: " +
            llama3_date(tmpl) + "\n\n" + system + "<|eot_id|>";
    }
    for (size_t i = first; i < msgs.size(); ++i) turn(msgs[i].role, msgs[i].content);
    // The original Llama 3 template always ends with the assistant header.
    if (add_gen || !contains(tmpl, "add_generation_prompt")) {
        out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    }
    return out;
}

// [INST] families. Jinja raises for roles out of order; we render what we are given.
std::string render_inst(const std::string& tmpl, const std::vector<ChatMessage>& msgs,
                        const std::string& bos, const std::string& eos) {
    std::string system;
    bool has_system = false;
    size_t first = 0;
    if (!msgs.empty() && msgs[0].role == "system") {
        system = msgs[0].content;
        has_system = true;
        first = 1;
    }
    auto check_role = [](const ChatMessage& m) {
        if (m.role != "user" && m.role != "assistant") {
            fail(
                "chat template ([INST]): unsupported role '{}' (only a first system message, then "
                "user and assistant)",
                m.role);
        }
    };
    std::string out;
    if (contains(tmpl, "<<SYS>>")) {
        // Llama 2: '<<SYS>>\n' + system + '\n<</SYS>>\n\n' opens the first user message; every user
        // turn is bos + '[INST] ' + strip(content) + ' [/INST]', every answer ' ' + strip + ' ' +
        // eos.
        const bool strip =
            contains(tmpl, ".strip()") || contains(tmpl, "|trim") || contains(tmpl, "| trim");
        const bool bos_each =
            contains(tmpl, "bos_token + '[INST]") || contains(tmpl, "bos_token + \"[INST]");
        auto s = [&](const std::string& c) { return strip ? trim(c) : c; };
        for (size_t i = first; i < msgs.size(); ++i) {
            const ChatMessage& m = msgs[i];
            check_role(m);
            std::string content = m.content;
            if (i == first && has_system)
                content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content;
            if (m.role == "user") {
                if (bos_each && i != first) out += bos;
                out += "[INST] " + s(content) + " [/INST]";
            } else {
                out += " " + s(content) + " " + eos;
            }
        }
        return out;
    }
    if (contains(tmpl, "[AVAILABLE_TOOLS]") || contains(tmpl, "\"[INST] \" + system_message")) {
        // Mistral v0.3 (v3): "[INST] " + content + "[/INST]"; the system message goes into the
        // last message when it is a user message; answers " " + trim(content) + eos.
        for (size_t i = first; i < msgs.size(); ++i) {
            const ChatMessage& m = msgs[i];
            check_role(m);
            if (m.role == "user") {
                if (i + 1 == msgs.size() && has_system) {
                    out += "[INST] " + system + "\n\n" + m.content + "[/INST]";
                } else {
                    out += "[INST] " + m.content + "[/INST]";
                }
            } else {
                out += " " + trim(m.content) + eos;
            }
        }
        return out;
    }
    if (contains(tmpl, "' [INST] '")) {
        // Mistral v0.1 / v0.2 with system support ("v1"): ' [INST] ' + [system + '\n\n'] + content
        // + ' [/INST]' (system in the first user message); answers ' ' + content + eos.
        for (size_t i = first; i < msgs.size(); ++i) {
            const ChatMessage& m = msgs[i];
            check_role(m);
            if (m.role == "user") {
                out += " [INST] ";
                if (i == first && has_system) out += system + "\n\n";
                out += m.content + " [/INST]";
            } else {
                out += " " + m.content + eos;
            }
        }
        return out;
    }
    // Mistral v0.1 (no system support in its Jinja, which raises): '[INST] ' + content + '
    // [/INST]', answers content + eos. A system message is put before the first user message,
    // separated by a blank line, instead of failing.
    for (size_t i = first; i < msgs.size(); ++i) {
        const ChatMessage& m = msgs[i];
        check_role(m);
        if (m.role == "user") {
            out += "[INST] ";
            if (i == first && has_system) out += system + "\n\n";
            out += m.content + " [/INST]";
        } else {
            out += m.content + eos;
        }
    }
    return out;
}

// Gemma (<start_of_turn>), Phi-3 / Phi-4-mini (<|user|> ... <|end|>), Phi-4 (<|im_sep|>) and
// gpt-oss (harmony: <|start|> ... <|channel|>) are rendered as llama.cpp's built-in templates
// render them (llama_chat_apply_template, src/llama-chat.cpp; llama-server without --jinja):
// plain system / user / assistant turns.
std::string render_gemma(const std::vector<ChatMessage>& msgs, bool add_generation_prompt) {
    std::string out, system;  // Gemma has no system turn: its text opens the next user turn
    for (const ChatMessage& m : msgs) {
        if (m.role == "system") {
            system += trim(m.content);
            continue;
        }
        const std::string role = m.role == "assistant" ? "model" : m.role;
        out += "<start_of_turn>" + role + "\n";
        if (!system.empty() && role != "model") {
            out += system + "\n\n";
            system.clear();
        }
        out += trim(m.content) + "<end_of_turn>\n";
    }
    if (add_generation_prompt) out += "<start_of_turn>model\n";
    return out;
}

std::string render_phi3(const std::vector<ChatMessage>& msgs, bool add_generation_prompt) {
    std::string out;
    for (const ChatMessage& m : msgs) out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
    if (add_generation_prompt) out += "<|assistant|>\n";
    return out;
}

std::string render_phi4(const std::vector<ChatMessage>& msgs, bool add_generation_prompt) {
    std::string out;
    for (const ChatMessage& m : msgs) out += "<|im_start|>" + m.role + "<|im_sep|>" + m.content + "<|im_end|>";
    if (add_generation_prompt) out += "<|im_start|>assistant<|im_sep|>";
    return out;
}

std::string render_harmony(const std::vector<ChatMessage>& msgs, bool add_generation_prompt) {
    std::string out;
    for (const ChatMessage& m : msgs) {
        out += "<|start|>" + m.role + "<|message|>" + m.content + (m.role == "assistant" ? "<|return|>" : "<|end|>");
    }
    if (add_generation_prompt) out += "<|start|>assistant";
    return out;
}

}  // namespace

std::string render_chat_template(const std::string& tmpl, const std::vector<ChatMessage>& messages,
                                 bool add_generation_prompt, const std::string& bos_text,
                                 const std::string& eos_text) {
    constexpr const char* kSupported =
        "supported families: Llama 3 (<|start_header_id|>), Llama 2 / Mistral ([INST]), "
        "ChatML (<|im_start|>, Qwen, SmolLM), Phi-4 (<|im_sep|>), Phi-3 (<|assistant|>, <|end|>), "
        "Gemma (<start_of_turn>), gpt-oss (<|start|>, <|channel|>)";
    if (tmpl.empty()) fail("tokenizer: the vocabulary has no chat template ({})", kSupported);
    if (contains(tmpl, "<|im_start|>")) {
        if (contains(tmpl, "<|im_sep|>")) return render_phi4(messages, add_generation_prompt);
        return render_chatml(tmpl, messages, add_generation_prompt);
    }
    if (contains(tmpl, "<|start_header_id|>") && contains(tmpl, "<|end_header_id|>")) {
        return render_llama3(tmpl, messages, add_generation_prompt);
    }
    if (contains(tmpl, "[INST]")) {
        if (contains(tmpl, "[SYSTEM_PROMPT]")) {
            fail("tokenizer: unsupported chat template (Mistral v7 [SYSTEM_PROMPT]); {}",
                 kSupported);
        }
        return render_inst(tmpl, messages, bos_text, eos_text.empty() ? "</s>" : eos_text);
    }
    if (contains(tmpl, "<|assistant|>") && contains(tmpl, "<|end|>")) return render_phi3(messages, add_generation_prompt);
    if (contains(tmpl, "<start_of_turn>")) return render_gemma(messages, add_generation_prompt);
    if (contains(tmpl, "<|start|>") && contains(tmpl, "<|channel|>")) {
        return render_harmony(messages, add_generation_prompt);
    }
    std::string head = tmpl.substr(0, 80);
    for (char& c : head) {
        if (c == '\n') c = ' ';
    }
    fail("tokenizer: unknown chat template '{}{}' ({})", head, tmpl.size() > 80 ? "..." : "",
         kSupported);
}

}  // namespace kvec::tok
