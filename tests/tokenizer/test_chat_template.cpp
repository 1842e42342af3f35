// Chat templates: each supported family, recognised from its real Jinja source, must render what
// the Jinja itself renders (chat_expected.inc, produced by a Jinja engine), without the leading
// BOS.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_common.h"
#include "util/error.h"

namespace kvec {
namespace {

#include "chat_expected.inc"

// A minimal vocabulary that only carries the template and the BOS / EOS texts it prints.
Tokenizer make_tokenizer(const std::string& tmpl, const std::string& bos, const std::string& eos) {
    VocabData d;
    d.model = "gpt2";
    d.pre = "gpt-2";
    d.tokens = {"a", "b"};
    if (!bos.empty()) {
        d.bos_id = static_cast<int32_t>(d.tokens.size());
        d.tokens.push_back(bos);
    }
    d.eos_id = static_cast<int32_t>(d.tokens.size());
    d.tokens.push_back(eos);
    d.types.assign(d.tokens.size(), TokenType::CONTROL);
    d.types[0] = d.types[1] = TokenType::NORMAL;
    d.chat_template = tmpl;
    return Tokenizer(std::move(d));
}

std::string npm_template(const std::string& name) {
    return nlohmann::json::parse(test::npm_config(name))["chat_template"].get<std::string>();
}

std::vector<ChatMessage> conversation(const std::string& which) {
    std::vector<ChatMessage> sys = {{"system", "You are a helpful assistant"},
                                    {"user", "Hello"},
                                    {"assistant", "  Hi there  "},
                                    {"user", "Who are you"}};
    if (which == "sys") return sys;
    if (which == "nosys") return {sys.begin() + 1, sys.end()};
    if (which == "think") {
        return {{"user", "2+2?"},
                {"assistant", "<think>\nadd\n</think>\n\n4"},
                {"user", "3+3?"},
                {"assistant", "<think>\nadd again\n</think>\n\n6"}};
    }
    throw std::runtime_error("unknown conversation " + which);
}

Tokenizer family_tokenizer(const std::string& family) {
    if (family == "llama3")
        return make_tokenizer(npm_template("llama-bpe"), "<|begin_of_text|>", "<|end_of_text|>");
    if (family == "qwen3") return make_tokenizer(npm_template("qwen2"), "", "<|im_end|>");
    if (family == "llama2") return make_tokenizer(kLlama2Template, "<s>", "</s>");
    if (family == "mistral_v1") return make_tokenizer(kMistralV1Template, "<s>", "</s>");
    if (family == "mistral01") return make_tokenizer(kMistralV01Template, "<s>", "</s>");
    throw std::runtime_error("unknown family " + family);
}

TEST(ChatTemplate, MatchesJinjaRenderings) {
    for (const Rendering& r : kRenderings) {
        const Tokenizer tok = family_tokenizer(r.family);
        auto msgs = conversation(r.conversation);
        // The "think" case without a generation prompt ends with the answer; with one, the
        // conversation stops after the second question.
        if (std::string(r.conversation) == "think" && r.add_generation_prompt) msgs.pop_back();
        EXPECT_EQ(tok.apply_chat_template(msgs, r.add_generation_prompt), r.expected)
            << r.family << " / " << r.conversation << " / gen=" << r.add_generation_prompt;
    }
}

TEST(ChatTemplate, ChatMLDefaultSystemPrompt) {
    // Qwen2-Instruct's template prints a default system message when none is given.
    const std::string qwen2 =
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
        "'<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif "
        "%}{{'<|im_start|>' + "
        "message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if "
        "add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
    const Tokenizer tok = make_tokenizer(qwen2, "", "<|im_end|>");
    EXPECT_EQ(
        tok.apply_chat_template(conversation("nosys"), true),
        "<|im_start|>system\nYou are a helpful "
        "assistant.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
        "<|im_start|>assistant\n  Hi there  <|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n"
        "<|im_start|>assistant\n");
    EXPECT_EQ(
        tok.apply_chat_template(conversation("sys"), false),
        "<|im_start|>system\nYou are a helpful "
        "assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
        "<|im_start|>assistant\n  Hi there  <|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n");
}

TEST(ChatTemplate, MistralV01FoldsSystemIntoFirstUserMessage) {
    // Its Jinja raises on a system message; kvec puts it before the first question instead.
    const Tokenizer tok = make_tokenizer(kMistralV01Template, "<s>", "</s>");
    EXPECT_EQ(tok.apply_chat_template(conversation("sys"), true),
              "[INST] You are a helpful assistant\n\nHello [/INST]  Hi there  </s>[INST] Who are "
              "you [/INST]");
}

TEST(ChatTemplate, Llama2BosBeforeEveryLaterTurn) {
    // Llama 2 prints BOS before every [INST]; the first one is left to encode(add_special).
    const Tokenizer tok = make_tokenizer(kLlama2Template, "<s>", "</s>");
    const std::string prompt =
        tok.apply_chat_template({{"user", "a"}, {"assistant", "b"}, {"user", "a"}}, true);
    EXPECT_EQ(prompt, "[INST] a [/INST] b </s><s>[INST] a [/INST]");
}

// Gemma, Phi-3, Phi-4 and gpt-oss templates (recognised by the markers llama.cpp looks for) render
// as llama.cpp's built-in templates render them (src/llama-chat.cpp).
TEST(ChatTemplate, GemmaPhiAndGptOssAsLlamaCpp) {
    const auto render = [](const std::string& tmpl, const std::string& which) {
        return make_tokenizer(tmpl, "<bos>", "<eos>").apply_chat_template(conversation(which), true);
    };
    const std::string gemma = "{{ bos_token }}{% for message in messages %}<start_of_turn>...<end_of_turn>{% endfor %}";
    EXPECT_EQ(render(gemma, "sys"),
              "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n"
              "<start_of_turn>model\nHi there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n"
              "<start_of_turn>model\n");
    const std::string phi3 = "{% for message in messages %}{{'<|' + message['role'] + '|>' + '\n' + "
                             "message['content'] + '<|end|>\n'}}{% endfor %}{{ '<|assistant|>\n' }}";
    EXPECT_EQ(render(phi3, "sys"),
              "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n"
              "<|assistant|>\n  Hi there  <|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n");
    const std::string phi4 = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '<|im_sep|>' + "
                             "message['content'] + '<|im_end|>'}}{% endfor %}";
    EXPECT_EQ(render(phi4, "nosys"),
              "<|im_start|>user<|im_sep|>Hello<|im_end|><|im_start|>assistant<|im_sep|>  Hi there  <|im_end|>"
              "<|im_start|>user<|im_sep|>Who are you<|im_end|><|im_start|>assistant<|im_sep|>");
    const std::string harmony = "<|start|>system<|message|>...<|end|>{% for m in messages %}<|channel|>final{% endfor %}";
    EXPECT_EQ(render(harmony, "sys"),
              "<|start|>system<|message|>You are a helpful assistant<|end|><|start|>user<|message|>Hello<|end|>"
              "<|start|>assistant<|message|>  Hi there  <|return|><|start|>user<|message|>Who are you<|end|>"
              "<|start|>assistant");
}

// End-of-generation tokens as llama.cpp sets them: Phi-3's <|end|> ends the answer; in a harmony
// vocabulary (gpt-oss) <|return|> and <|call|> do and <|end|> (the end of any message) does not.
TEST(ChatTemplate, HarmonyAnswersEndAtReturnOrCall) {
    VocabData phi;
    phi.model = "gpt2";
    phi.pre = "gpt-2";
    phi.tokens = {"a", "<|end|>", "<|assistant|>"};
    phi.types = {TokenType::NORMAL, TokenType::CONTROL, TokenType::CONTROL};
    const Tokenizer p(phi);
    EXPECT_TRUE(p.is_end_of_generation(1));
    EXPECT_FALSE(p.is_end_of_generation(2));
    VocabData harmony = phi;
    harmony.tokens = {"a", "<|end|>", "<|return|>", "<|call|>", "<|start|>"};
    harmony.types.assign(5, TokenType::CONTROL);
    harmony.types[0] = TokenType::NORMAL;
    const Tokenizer h(harmony);
    EXPECT_FALSE(h.is_end_of_generation(1));
    EXPECT_TRUE(h.is_end_of_generation(2));
    EXPECT_TRUE(h.is_end_of_generation(3));
    EXPECT_FALSE(h.is_end_of_generation(4));
}

TEST(ChatTemplate, UnknownOrMissingTemplateIsAnError) {
    const Tokenizer zephyr = make_tokenizer(
        "{% for message in messages %}{{ '<|' + message['role'] + '|>\\n' + message['content'] + "
        "eos_token }}"
        "{% endfor %}",
        "<s>", "</s>");
    try {
        zephyr.apply_chat_template({{"user", "hi"}}, true);
        FAIL() << "expected kvec::Error";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("unknown chat template"), std::string::npos) << msg;
        EXPECT_NE(msg.find("Llama 3"), std::string::npos) << msg;
        EXPECT_NE(msg.find("[INST]"), std::string::npos) << msg;
        EXPECT_NE(msg.find("ChatML"), std::string::npos) << msg;
    }
    const Tokenizer none = make_tokenizer("", "<s>", "</s>");
    try {
        none.apply_chat_template({{"user", "hi"}}, true);
        FAIL() << "expected kvec::Error";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("no chat template"), std::string::npos) << msg;
        EXPECT_NE(msg.find("ChatML"), std::string::npos) << msg;
    }
    // Roles outside system / user / assistant are refused by the [INST] families.
    const Tokenizer llama2 = make_tokenizer(kLlama2Template, "<s>", "</s>");
    EXPECT_THROW(llama2.apply_chat_template({{"tool", "x"}}, true), Error);
}

}  // namespace
}  // namespace kvec
