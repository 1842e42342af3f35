#include "server/request.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <functional>
#include <random>

#include "policy/registry.h"
#include "server/api_error.h"
#include "util/error.h"

namespace kvec::server {

using nlohmann::json;

namespace {

const char* json_type(const json& v) {
    switch (v.type()) {
        case json::value_t::null: return "null";
        case json::value_t::boolean: return "a boolean";
        case json::value_t::string: return "a string";
        case json::value_t::array: return "an array";
        case json::value_t::object: return "an object";
        case json::value_t::number_float: return "a number with a fraction";
        default: return "a number";
    }
}

[[noreturn]] void wrong_type(const std::string& field, const char* want, const json& v) {
    bad_request("invalid_type", "'{}' must be {}, got {}", field, want, json_type(v));
}

// The field's value if present and not null; nullptr otherwise.
const json* field(const json& obj, const char* name) {
    auto it = obj.find(name);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
}

bool get_bool(const json& v, const std::string& name) {
    if (!v.is_boolean()) wrong_type(name, "a boolean", v);
    return v.get<bool>();
}

double get_number(const json& v, const std::string& name, double lo, double hi) {
    if (!v.is_number()) wrong_type(name, "a number", v);
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < lo || x > hi) bad_request("invalid_value", "'{}' must be in [{}, {}], got {}", name, lo, hi, x);
    return x;
}

int64_t get_int(const json& v, const std::string& name, int64_t lo, int64_t hi) {
    if (!v.is_number_integer()) wrong_type(name, "an integer", v);
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
        bad_request("invalid_value", "'{}' must be in [{}, {}], got {}", name, lo, hi, v.get<uint64_t>());
    }
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) bad_request("invalid_value", "'{}' must be in [{}, {}], got {}", name, lo, hi, x);
    return x;
}

std::string get_string(const json& v, const std::string& name) {
    if (!v.is_string()) wrong_type(name, "a string", v);
    return v.get<std::string>();
}

// A message's content: a string, or an array of {"type": "text", "text": ...} parts (joined).
std::string message_content(const json& v, const std::string& name) {
    if (v.is_string()) return v.get<std::string>();
    if (!v.is_array()) wrong_type(name, "a string or an array of text parts", v);
    std::string text;
    for (size_t i = 0; i < v.size(); ++i) {
        const std::string part = fmt::format("{}[{}]", name, i);
        const json& p = v[i];
        if (!p.is_object()) wrong_type(part, "an object", p);
        const json* type = field(p, "type");
        if (type == nullptr || !type->is_string() || type->get<std::string>() != "text") {
            bad_request("unsupported_content", "'{}.type' must be \"text\" (this server reads text only)", part);
        }
        const json* t = field(p, "text");
        if (t == nullptr) bad_request("missing_field", "'{}.text' is required", part);
        text += get_string(*t, part + ".text");
    }
    return text;
}

std::vector<ChatMessage> parse_messages(const json& body) {
    const json* m = field(body, "messages");
    if (m == nullptr) bad_request("missing_field", "'messages' is required");
    if (!m->is_array()) wrong_type("messages", "an array", *m);
    if (m->empty()) bad_request("empty_messages", "'messages' is empty: give at least one message");
    std::vector<ChatMessage> out;
    for (size_t i = 0; i < m->size(); ++i) {
        const std::string name = fmt::format("messages[{}]", i);
        const json& msg = (*m)[i];
        if (!msg.is_object()) wrong_type(name, "an object", msg);
        const json* role = field(msg, "role");
        if (role == nullptr) bad_request("missing_field", "'{}.role' is required", name);
        std::string r = get_string(*role, name + ".role");
        if (r == "developer") r = "system";  // OpenAI's newer name for the system role
        if (r != "system" && r != "user" && r != "assistant") {
            bad_request("invalid_role", "'{}.role' is '{}': roles are system, developer, user and assistant", name, r);
        }
        const json* content = field(msg, "content");
        if (content == nullptr) bad_request("missing_field", "'{}.content' is required", name);
        out.push_back({r, message_content(*content, name + ".content")});
    }
    return out;
}

std::string parse_prompt(const json& body) {
    const json* p = field(body, "prompt");
    if (p == nullptr) bad_request("missing_field", "'prompt' is required");
    std::string prompt;
    if (p->is_array()) {
        if (p->size() != 1 || !(*p)[0].is_string()) {
            bad_request("unsupported_prompt", "'prompt' must be a string or an array of one string (one prompt per request)");
        }
        prompt = (*p)[0].get<std::string>();
    } else {
        prompt = get_string(*p, "prompt");
    }
    if (prompt.empty()) bad_request("empty_prompt", "'prompt' is empty");
    return prompt;
}

std::vector<std::string> parse_stop(const json& v) {
    std::vector<std::string> stop;
    if (v.is_string()) {
        stop.push_back(v.get<std::string>());
    } else if (v.is_array()) {
        if (v.size() > 4) bad_request("invalid_value", "'stop' holds at most 4 strings, got {}", v.size());
        for (size_t i = 0; i < v.size(); ++i) stop.push_back(get_string(v[i], fmt::format("stop[{}]", i)));
    } else {
        wrong_type("stop", "a string or an array of strings", v);
    }
    for (const std::string& s : stop) {
        if (s.empty()) bad_request("invalid_value", "'stop' strings must not be empty");
    }
    return stop;
}

}  // namespace

KvChoice resolve_kv(const json* kv, const RequestDefaults& d) {
    std::string policy = d.policy;
    bool from_request = false;  // the policy string is the client's (not --policy)
    std::optional<int64_t> budget;
    std::optional<double> ratio;
    bool reuse = d.reuse;
    bool map = false;
    if (kv != nullptr) {
        if (!kv->is_object()) wrong_type("kv", "an object", *kv);
        for (const auto& [key, value] : kv->items()) {
            if (key != "policy" && key != "budget" && key != "ratio" && key != "reuse" && key != "map") {
                bad_request("invalid_kv", "unknown field 'kv.{}' (kv takes policy, budget, ratio, reuse, map)", key);
            }
        }
        if (const json* r = field(*kv, "reuse")) reuse = get_bool(*r, "kv.reuse");
        if (const json* m = field(*kv, "map")) map = get_bool(*m, "kv.map");
        if (const json* p = field(*kv, "policy")) {
            policy = get_string(*p, "kv.policy");
            from_request = true;
            if (policy.empty()) bad_request("invalid_kv", "'kv.policy' is empty (give a policy name, or \"none\")");
        }
        if (const json* b = field(*kv, "budget")) budget = get_int(*b, "kv.budget", 1, INT32_MAX);
        if (const json* r = field(*kv, "ratio")) {
            ratio = get_number(*r, "kv.ratio", 0.0, 1.0);
            if (*ratio == 0) bad_request("invalid_kv", "'kv.ratio' must be in (0, 1] (the share of the prompt kept), got 0");
        }
        if (budget && ratio) bad_request("invalid_kv", "give either 'kv.budget' or 'kv.ratio', not both");
    }
    if (policy.empty() || policy == "none") {
        if (budget || ratio) bad_request("invalid_kv", "'kv.budget' and 'kv.ratio' need an eviction policy ('kv.policy')");
        KvChoice full;
        full.reuse = reuse;
        full.map = map;
        return full;
    }
    try {
        std::vector<policy::OptionOverride> overrides;
        if (budget) overrides.push_back({"budget", std::to_string(*budget), "kv.budget"});
        if (ratio) overrides.push_back({"ratio", fmt::format("{}", *ratio), "kv.ratio"});
        const policy::PolicySpec spec = policy::parse_policy_spec(policy);
        const policy::PolicyEntry& entry = policy::find_policy(spec.name);
        // Options that name files (headkv's scores) are the operator's (--policy): a client must not
        // make the server read a path of its choosing.
        for (const policy::OptionSpec& o : entry.options) {
            if (from_request && o.type == policy::OptionType::String && spec.options.count(o.name) != 0) {
                bad_request("invalid_kv", "'kv.policy' cannot set option '{}' (it names a file on the server; the "
                            "operator sets it with --policy)", o.name);
            }
        }
        const bool string_sizes = spec.options.count("budget") != 0 || spec.options.count("ratio") != 0;
        if (!budget && !ratio && !string_sizes) {
            // The server's --budget / --ratio, where the policy takes them.
            if (d.budget && policy::has_option(entry, "budget")) overrides.push_back({"budget", std::to_string(*d.budget), "--budget"});
            if (d.ratio && policy::has_option(entry, "ratio")) overrides.push_back({"ratio", fmt::format("{}", *d.ratio), "--ratio"});
        }
        policy::ResolvedPolicy resolved = policy::resolve(policy, overrides, "kv.policy");
        KvChoice c;
        c.spec = std::move(resolved.spec);
        c.policy = std::move(resolved.policy);
        c.reuse = reuse;
        c.map = map;
        return c;
    } catch (const Error& e) {
        bad_request("invalid_kv", "kv: {}", e.what());
    }
}

namespace {

// Fields of the OpenAI API that would change the answer and that this server does not do: a 400
// unless absent, null or holding their no-op value (so a client sending the defaults is served).
void refuse_unsupported(const json& body) {
    auto is_zero = [](const json& v) { return v.is_number() && v.get<double>() == 0; };
    auto is_false = [](const json& v) { return v.is_boolean() && !v.get<bool>(); };
    const std::pair<const char*, std::function<bool(const json&)>> fields[] = {
        {"logprobs", is_false},
        {"top_logprobs", is_zero},
        {"echo", is_false},
        {"logit_bias", [](const json& v) { return v.is_object() && v.empty(); }},
        {"frequency_penalty", is_zero},
        {"presence_penalty", is_zero},
        {"best_of", [](const json& v) { return v.is_number_integer() && v.get<int64_t>() == 1; }},
        {"suffix", [](const json& v) { return v.is_string() && v.get<std::string>().empty(); }},
        {"response_format", [](const json& v) { return v == json{{"type", "text"}}; }},
        {"tools", [](const json& v) { return v.is_array() && v.empty(); }},
        {"functions", [](const json& v) { return v.is_array() && v.empty(); }},
    };
    for (const auto& [name, noop] : fields) {
        const json* v = field(body, name);
        if (v == nullptr || noop(*v)) continue;
        std::string shown = v->dump();
        if (shown.size() > 40) shown = json_type(*v);  // no long echo of the request
        bad_request("unsupported_value", "'{}' is not supported by this server (got {}; leave it out)", name, shown);
    }
}

}  // namespace

json parse_json_body(std::string_view text, std::string_view hint) {
    try {
        return json::parse(text);
    } catch (const json::parse_error& e) {
        bad_request("invalid_json", "the request body is not valid JSON: it stops being JSON at byte {} of {}{}", e.byte,
                    text.size(), hint);
    } catch (const json::out_of_range&) {
        bad_request("invalid_json", "the request body is not valid JSON: it holds a number beyond the range of a double{}",
                    hint);
    } catch (const json::exception&) {
        bad_request("invalid_json", "the request body is not valid JSON{}", hint);
    }
}

CompletionRequest parse_request(std::string_view text, Endpoint endpoint, const RequestDefaults& d) {
    const json body = parse_json_body(text);
    if (!body.is_object()) wrong_type("the request body", "a JSON object", body);

    CompletionRequest r;
    r.endpoint = endpoint;
    if (const json* m = field(body, "model")) r.model = get_string(*m, "model");
    if (endpoint == Endpoint::Chat) {
        r.messages = parse_messages(body);
    } else {
        r.prompt = parse_prompt(body);
    }
    // OpenAI's legacy completions stop after 16 tokens unless told; chat runs to the end.
    r.max_tokens = endpoint == Endpoint::Completion ? 16 : -1;
    for (const char* name : {"max_tokens", "max_completion_tokens", "n_predict"}) {
        if (const json* v = field(body, name)) {
            r.max_tokens = static_cast<int32_t>(get_int(*v, name, 1, d.n_ctx));
        }
    }
    if (const json* v = field(body, "temperature")) r.sampling.temperature = static_cast<float>(get_number(*v, "temperature", 0.0, 2.0));
    if (const json* v = field(body, "top_p")) r.sampling.top_p = static_cast<float>(get_number(*v, "top_p", 0.0, 1.0));
    if (const json* v = field(body, "top_k")) r.sampling.top_k = static_cast<int>(get_int(*v, "top_k", 0, INT32_MAX));
    if (const json* v = field(body, "min_p")) r.sampling.min_p = static_cast<float>(get_number(*v, "min_p", 0.0, 1.0));
    if (const json* v = field(body, "repeat_penalty")) r.sampling.repeat_penalty = static_cast<float>(get_number(*v, "repeat_penalty", 0.0, 10.0));
    if (const json* v = field(body, "seed")) {
        r.sampling.seed = static_cast<uint64_t>(get_int(*v, "seed", INT64_MIN, INT64_MAX));
    } else {
        r.sampling.seed = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
    }
    try {
        validate(r.sampling);
    } catch (const Error& e) {
        bad_request("invalid_value", "{}", e.what());
    }
    if (const json* v = field(body, "stop")) r.stop = parse_stop(*v);
    if (const json* v = field(body, "stream")) r.stream = get_bool(*v, "stream");
    if (const json* v = field(body, "id_slot")) r.id_slot = static_cast<int32_t>(get_int(*v, "id_slot", -1, INT32_MAX));
    if (const json* v = field(body, "stream_options")) {
        if (!v->is_object()) wrong_type("stream_options", "an object", *v);
        if (const json* u = field(*v, "include_usage")) r.include_usage = get_bool(*u, "stream_options.include_usage");
    }
    if (const json* v = field(body, "n")) {
        if (get_int(*v, "n", 1, 1) != 1) bad_request("unsupported_value", "'n' must be 1");
    }
    refuse_unsupported(body);
    auto kv = body.find("kv");
    r.kv = resolve_kv(kv == body.end() || kv->is_null() ? nullptr : &*kv, d);
    return r;
}

}  // namespace kvec::server
