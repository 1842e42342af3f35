// kvec._core: the engine as a Python extension module (pybind11). The Python package
// (python/kvec/__init__.py) wraps it into the public API; this file only translates: arguments
// into the engine's options, results into dicts and NumPy arrays, kvec::Error into kvec.Error.
//
// Every call that computes releases the GIL. It comes back for a moment before each forward step
// (and after each record of a sweep) to run Python's signal handlers, so that Ctrl-C stops a
// long call there, and to ask the caller's `cancel` callable (a stream that is closed early).
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/generator.h"
#include "engine/kv_report.h"
#include "eval/eval_items.h"
#include "eval/report.h"
#include "eval/sweep.h"
#include "eval/text_source.h"
#include "kvcache/kv_cache.h"
#include "model/model.h"
#include "model/session.h"
#include "policy/coverage_probe.h"
#include "policy/registry.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/threads.h"

namespace py = pybind11;

namespace kvec::python {

namespace {

// Thrown through a sweep when a signal handler raised; the binding raises that exception
// (KeyboardInterrupt) once the engine has unwound.
struct Stopped {};

// Between the engine's steps: Python's signal handlers and the caller's cancel callable, with the
// GIL held for that moment only. A handler that raises (Ctrl-C) is kept and raised at the end.
class Interrupts {
public:
    explicit Interrupts(py::object cancel = py::none()) : cancel_(std::move(cancel)) {}

    // true: go on.
    bool check() {
        py::gil_scoped_acquire gil;
        if (PyErr_CheckSignals() != 0) {
            error_ = std::make_unique<py::error_already_set>();
            return false;
        }
        if (!cancel_.is_none() && cancel_().cast<bool>()) {
            cancelled_ = true;
            return false;
        }
        return true;
    }
    // With the GIL held, after the engine returned: raise what a signal handler raised.
    void raise_pending() {
        if (error_) {
            py::error_already_set e = std::move(*error_);
            error_.reset();
            throw e;
        }
    }
    bool cancelled() const { return cancelled_; }

private:
    py::object cancel_;
    std::unique_ptr<py::error_already_set> error_;
    bool cancelled_ = false;
};

template <typename T>
py::array_t<T> to_array(const std::vector<T>& v, std::vector<py::ssize_t> shape) {
    py::array_t<T> a(shape);
    std::copy(v.begin(), v.end(), a.mutable_data());
    return a;
}

py::dict coverage_dict(const policy::CoverageReport& r) {
    const size_t n = r.positions.size();
    std::vector<double> c_head(n), c_head_tokens(n), redundancy(n);
    for (size_t l = 0; l < n; ++l) {
        c_head[l] = r.positions[l].c_head;
        c_head_tokens[l] = r.tokens[l].c_head;
        redundancy[l] = r.positions[l].redundancy;
    }
    const auto L = static_cast<py::ssize_t>(n);
    py::dict d;
    d["window"] = r.window;
    d["prefix_positions"] = r.universe_positions;
    d["prefix_tokens"] = r.universe_tokens;
    d["c_head"] = to_array(c_head, {L});
    d["c_head_tokens"] = to_array(c_head_tokens, {L});
    d["redundancy"] = to_array(redundancy, {L});
    d["c_layer"] = r.c_layer_positions;
    d["c_layer_tokens"] = r.c_layer_tokens;
    d["kept_tenths"] = to_array(r.kept_tenth_shares(), {10});
    return d;
}

// One loaded model, its tokenizer and a session (re-made when a call needs another prefill chunk).
class PyModel {
public:
    PyModel(const std::string& path, int threads, const std::string& kv_type, std::optional<std::string> kv_type_k,
            std::optional<std::string> kv_type_v, int n_ctx, int n_batch, std::optional<bool> mmap)
        : path_(path), threads_(threads) {
        if (threads < 0) fail("threads must be >= 0 (0: all hardware threads), got {}", threads);
        if (n_ctx < 0) fail("n_ctx must be >= 0 (0: the model's training context), got {}", n_ctx);
        if (n_batch <= 0) fail("n_batch must be positive, got {}", n_batch);
        kv_k_ = parse_kv_type(kv_type_k.value_or(kv_type), kv_type_k ? "kv_type_k" : "kv_type");
        kv_v_ = parse_kv_type(kv_type_v.value_or(kv_type), kv_type_v ? "kv_type_v" : "kv_type");
        const LoadMode load = !mmap ? LoadMode::Auto : *mmap ? LoadMode::Map : LoadMode::Copy;
        py::gil_scoped_release nogil;
        set_num_threads(threads_);
        model_ = Model::load(path, load);
        tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_gguf(model_->file()));
        check_tokenizer_fits(*tokenizer_, model_->config().n_vocab);
        n_ctx_ = n_ctx;
        n_batch_ = n_batch;
        session_ = make_session(n_batch);
    }

    py::dict info() const {
        const ModelConfig& c = model_->config();
        py::dict d;
        d["path"] = path_;
        d["architecture"] = c.arch_name;
        d["name"] = c.name;
        d["summary"] = model_->summary();
        d["n_layer"] = c.n_layer;
        d["n_head"] = c.n_head;
        d["n_head_kv"] = c.n_head_kv;
        d["n_embd"] = c.n_embd;
        d["n_vocab"] = c.n_vocab;
        d["n_ctx_train"] = c.n_ctx_train;
        d["n_ctx"] = session_->n_ctx();
        d["n_batch"] = session_->options().n_batch;
        d["threads"] = threads_;
        d["kv_type_k"] = kv_type_name(kv_k_);
        d["kv_type_v"] = kv_type_name(kv_v_);
        d["has_chat_template"] = eval::has_chat_template(*tokenizer_);
        return d;
    }

    std::vector<int32_t> tokenize(const std::string& text, bool add_special, bool parse_special) const {
        return tokenizer_->encode(text, add_special, parse_special);
    }
    std::string detokenize(const std::vector<int32_t>& ids, bool skip_special) const {
        for (int32_t id : ids) {
            if (id < 0 || id >= tokenizer_->n_vocab()) fail("token {} is outside the vocabulary (0..{})", id, tokenizer_->n_vocab() - 1);
        }
        return tokenizer_->decode(ids, skip_special);
    }

    py::dict generate(const std::string& prompt, std::optional<std::string> policy, std::optional<int64_t> budget,
                      std::optional<double> ratio, int decode_evict, std::optional<int> chunk, int max_new_tokens,
                      bool chat, const std::string& system, float temperature, int top_k, float top_p, float min_p,
                      float repeat_penalty, int repeat_last_n, std::optional<uint64_t> seed,
                      const std::vector<std::string>& stop, py::object on_text, py::object cancel,
                      int coverage_window) {
        if (prompt.empty()) fail("the prompt is empty");
        if (max_new_tokens < -1) fail("max_new_tokens must be >= 0, or -1 for no limit, got {}", max_new_tokens);
        if (chunk && *chunk <= 0) fail("chunk must be positive, got {}", *chunk);
        if (coverage_window < 0) fail("coverage_window must be >= 0, got {}", coverage_window);
        if (!on_text.is_none() && !PyCallable_Check(on_text.ptr())) fail("on_text must be callable");
        if (!cancel.is_none() && !PyCallable_Check(cancel.ptr())) fail("cancel must be callable");
        auto [spec, evictor] = resolve_policy(policy, budget, ratio, decode_evict, chunk.has_value());

        GenerateOptions g;
        g.prompt = prompt;
        g.chat = chat;
        g.system_prompt = system;
        g.n_predict = max_new_tokens;
        g.stop = stop;
        g.sampling.temperature = temperature;
        g.sampling.top_k = top_k;
        g.sampling.top_p = top_p;
        g.sampling.min_p = min_p;
        g.sampling.repeat_penalty = repeat_penalty;
        g.sampling.repeat_last_n = repeat_last_n;
        g.sampling.seed = seed ? *seed : std::random_device{}();
        validate(g.sampling);

        Interrupts interrupts(cancel);
        g.keep_going = [&] { return interrupts.check(); };
        g.stop_prefill = [&] { return !interrupts.check(); };
        std::function<void(std::string_view)> text_sink;
        if (!on_text.is_none()) {
            text_sink = [&](std::string_view piece) {
                py::gil_scoped_acquire gil;
                on_text(py::bytes(piece.data(), piece.size()).attr("decode")("utf-8", "replace"));
            };
        }

        GenerationResult r;
        KvReport k;
        std::vector<int64_t> entries;  // [n_layer * n_head_kv] at the end
        std::optional<policy::CoverageReport> coverage;
        {
            py::gil_scoped_release nogil;
            std::lock_guard lock(mutex_);
            set_num_threads(threads_);
            Session& s = session(chunk.value_or(n_batch_));
            std::unique_ptr<policy::CoverageProbe> probe;
            if (evictor) probe = std::make_unique<policy::CoverageProbe>(*evictor, coverage_window);
            s.reset();
            s.set_evictor(probe.get());
            const eval::SessionGuard guard(s);  // empties and detaches before the probe goes
            Generator generator(s, *tokenizer_);
            r = generator.generate(g, text_sink);
            k = kv_report(s, evictor.get(), r.stats);
            const ModelConfig& c = model_->config();
            for (int l = 0; l < c.n_layer; ++l) {
                for (int h = 0; h < c.n_head_kv; ++h) entries.push_back(s.kv_cache().size(l, h));
            }
            if (probe && static_cast<int>(probe->report().positions.size()) == c.n_layer) coverage = probe->report();
        }
        interrupts.raise_pending();

        const GenerationStats& st = r.stats;
        py::dict stats;
        stats["n_prompt"] = st.n_prompt;
        stats["prompt_seconds"] = st.prompt_seconds;
        stats["n_generated"] = st.n_generated;
        stats["n_decoded"] = st.n_decoded;
        stats["decode_seconds"] = st.decode_seconds;
        stats["sample_seconds"] = st.sample_seconds;
        stats["prompt_tokens_per_second"] = st.prompt_tokens_per_second();
        stats["decode_tokens_per_second"] = st.decode_tokens_per_second();
        py::dict cache;
        const ModelConfig& c = model_->config();
        cache["entries"] = to_array(entries, {c.n_layer, c.n_head_kv});
        cache["entry_bytes"] = k.entry_bytes;
        cache["full_entries"] = k.full_entries;
        cache["full_bytes"] = k.full_bytes;
        cache["prompt_entries"] = k.prompt_entries;
        cache["prompt_bytes"] = k.prompt_bytes;
        cache["end_entries"] = k.end_entries;
        cache["end_bytes"] = k.end_bytes;
        cache["peak_bytes"] = k.peak_bytes;
        cache["prompt_peak_bytes"] = k.prompt_peak_bytes;
        cache["budget"] = k.budget >= 0 ? py::object(py::int_(k.budget)) : py::object(py::none());
        cache["coverage"] = coverage ? py::object(coverage_dict(*coverage)) : py::object(py::none());
        py::dict d;
        d["text"] = py::bytes(r.text).attr("decode")("utf-8", "replace");
        d["tokens"] = r.tokens;
        d["prompt_tokens"] = r.prompt_tokens;
        d["stop_reason"] = interrupts.cancelled() ? "cancelled" : stop_reason_name(st.stop_reason);
        d["policy"] = spec;
        d["seed"] = g.sampling.seed;
        d["stats"] = stats;
        d["cache"] = cache;
        return d;
    }

    // kvpress's pipeline shape on run_sweep: one item per question, the context compressed once
    // (query-agnostic) or with each question (query-aware). Records as JSON text.
    py::dict answer(const std::string& context, const std::vector<std::string>& questions,
                    std::optional<std::string> policy, std::optional<int64_t> budget,
                    std::optional<double> compression_ratio, bool query_aware, int max_new_tokens,
                    std::optional<bool> chat, const std::vector<std::vector<std::string>>& references) {
        if (questions.empty()) fail("questions is empty: give at least one question");
        if (!references.empty() && references.size() != questions.size()) {
            fail("references: {} lists for {} questions (give one list per question)", references.size(), questions.size());
        }
        const std::vector<eval::PolicyChoice> choices = eval::parse_policy_list(policy.value_or("full"));
        if (choices.size() != 1) fail("policy: give one policy, got {}", choices.size());
        std::vector<int64_t> budgets;
        if (budget && compression_ratio) fail("give either budget or compression_ratio, not both");
        if (!choices[0].budgeted) {
            if (budget || compression_ratio) fail("policy '{}' keeps every entry: budget and compression_ratio do not apply", choices[0].label);
        } else {
            if (!budget && !compression_ratio) fail("policy '{}' needs a budget or a compression_ratio", choices[0].label);
            if (budget && *budget <= 0) fail("budget must be positive, got {}", *budget);
            budgets.push_back(budget ? *budget : eval::compression_code(*compression_ratio));
        }
        const std::vector<eval::Combo> combos = choices[0].budgeted ? eval::make_combos(choices, budgets)
                                                                    : std::vector<eval::Combo>{{0, 0, choices[0].spec}};
        const bool use_chat = chat.value_or(eval::has_chat_template(*tokenizer_));

        const SweepOutput out = sweep(
            [&](const Generator& generator, int32_t n_ctx) {
                std::vector<eval::EvalItem> items;
                for (size_t q = 0; q < questions.size(); ++q) {
                    items.push_back(eval::question_item(*tokenizer_, generator, fmt::format("q{}", q), context,
                                                        questions[q], use_chat, max_new_tokens, n_ctx));
                    if (!references.empty()) items.back().references = references[q];
                }
                return items;
            },
            choices, combos, query_aware ? eval::Protocol::QueryAware : eval::Protocol::QueryAgnostic, py::none());
        py::dict d;
        d["records"] = record_texts(out.records);
        d["stats"] = sweep_stats(out.stats);
        d["spec"] = combos.front().spec;
        d["chat"] = use_chat;
        return d;
    }

    // One `kvec eval` sweep on a synthetic suite or LongBench files; metrics.json's object and the
    // records, as JSON text.
    py::dict evaluate(const std::string& suite, const std::vector<std::string>& data_files, int64_t max_length,
                      const std::string& policies, const std::vector<int64_t>& budgets,
                      const std::vector<double>& ratios, const std::string& protocol, int samples,
                      const std::vector<std::string>& tasks, std::optional<uint64_t> seed, const std::string& split,
                      std::optional<bool> chat, int max_new_tokens, const std::string& text_dir, py::object on_progress) {
        const std::vector<eval::PolicyChoice> choices = eval::parse_policy_list(policies);
        std::vector<int64_t> columns;
        for (int64_t b : budgets) {
            if (b <= 0) fail("budgets: {} is not a positive integer", b);
            columns.push_back(b);
        }
        for (double c : ratios) columns.push_back(eval::compression_code(c));
        if (columns.empty()) fail("give at least one budget or compression ratio");
        if (std::set<int64_t>(columns.begin(), columns.end()).size() != columns.size()) fail("budgets: a column is listed twice");
        if (samples < 0) fail("samples must be >= 0 (0: the suite's default), got {}", samples);
        if (max_new_tokens < 0) fail("max_new_tokens must be >= 0 (0: each task's own), got {}", max_new_tokens);
        const std::vector<eval::Combo> combos = eval::make_combos(choices, columns);
        if (suite.empty() == data_files.empty()) fail("give a synthetic suite or LongBench data files, not both");
        if (max_length < 0) fail("max_length must be >= 0 (0: the context's), got {}", max_length);
        eval::ItemOptions io;
        io.suite = suite;
        io.data_files = data_files;
        io.max_length = max_length;
        io.samples = samples;
        io.tasks = tasks;
        io.split = eval::parse_heldout_split(split);
        io.seed = seed.value_or(eval::default_seed(io.split));
        io.chat = !chat ? eval::ChatMode::Auto : *chat ? eval::ChatMode::On : eval::ChatMode::Off;
        io.max_new_tokens = max_new_tokens;
        io.text_dir = text_dir;
        const eval::Protocol proto = eval::parse_protocol(protocol);
        if (!on_progress.is_none() && !PyCallable_Check(on_progress.ptr())) fail("on_progress must be callable");

        const SweepOutput out = sweep(
            [&](const Generator& generator, int32_t n_ctx) { return eval::build_items(io, *tokenizer_, generator, n_ctx); },
            choices, combos, proto, on_progress);
        py::dict d;
        d["metrics"] = eval::metrics_json(eval::summarize(out.items, choices, columns, out.records)).dump();
        d["records"] = record_texts(out.records);
        d["stats"] = sweep_stats(out.stats);
        return d;
    }

private:
    struct SweepOutput {
        std::vector<eval::EvalItem> items;
        std::vector<eval::EvalRecord> records;
        eval::SweepStats stats;
    };
    // One eval sweep on this model's session, the GIL released: the items from `make_items`, every
    // combination; a signal handler that raises (Ctrl-C) stops it after the next record and its
    // exception is raised here once the engine has unwound.
    SweepOutput sweep(const std::function<std::vector<eval::EvalItem>(const Generator&, int32_t n_ctx)>& make_items,
                      const std::vector<eval::PolicyChoice>& choices, const std::vector<eval::Combo>& combos,
                      eval::Protocol protocol, py::object on_progress) {
        Interrupts interrupts;
        SweepOutput out;
        {
            py::gil_scoped_release nogil;
            std::lock_guard lock(mutex_);
            set_num_threads(threads_);
            Session& s = session(n_batch_);
            Generator generator(s, *tokenizer_);
            out.items = make_items(generator, s.n_ctx());
            eval::SweepOptions so;
            so.protocol = protocol;
            so.on_record = [&](const eval::EvalRecord& r) { out.records.push_back(r); };
            so.on_progress = [&](int64_t n, int64_t total) {
                if (!interrupts.check()) throw Stopped{};
                if (!on_progress.is_none()) {
                    py::gil_scoped_acquire gil;
                    on_progress(n, total);
                }
            };
            try {
                out.stats = eval::run_sweep(s, *tokenizer_, out.items, choices, combos, {}, so);
            } catch (const Stopped&) {
                // a signal handler raised: raise_pending below raises it
            }
        }
        interrupts.raise_pending();
        return out;
    }

    static std::vector<std::string> record_texts(const std::vector<eval::EvalRecord>& records) {
        std::vector<std::string> out;
        for (const eval::EvalRecord& r : records) out.push_back(eval::to_json(r).dump());
        return out;
    }

    // The policy of one generate call: the spec with budget / ratio / decode interval / chunked
    // as options (each given once, either way), or none.
    static policy::ResolvedPolicy resolve_policy(const std::optional<std::string>& spec, std::optional<int64_t> budget,
                                                 std::optional<double> ratio, int decode_evict, bool chunked) {
        if (decode_evict < 0) fail("decode_evict must be >= 0, got {}", decode_evict);
        if (!spec) {
            if (budget || ratio || decode_evict > 0) fail("budget, ratio and decode_evict need an eviction policy (policy=NAME)");
            return {};
        }
        if (spec->empty()) fail("policy is empty (give a policy name; see kvec.policies())");
        if (budget && ratio) fail("give either budget or ratio, not both");
        std::vector<policy::OptionOverride> overrides;
        if (budget) overrides.push_back({"budget", std::to_string(*budget), "budget="});
        if (ratio) overrides.push_back({"ratio", fmt::format("{}", *ratio), "ratio="});
        if (decode_evict > 0) overrides.push_back({"decode", std::to_string(decode_evict), "decode_evict="});
        if (chunked && policy::has_option(policy::find_policy(policy::parse_policy_spec(*spec).name), "chunked")) {
            overrides.push_back({"chunked", "true", "chunk="});
        }
        return policy::resolve(*spec, overrides, "policy=");
    }

    static py::dict sweep_stats(const eval::SweepStats& s) {
        py::dict d;
        d["wall_seconds"] = s.wall_seconds;
        d["prefill_seconds"] = s.prefill_seconds;
        d["replay_seconds"] = s.replay_seconds;
        d["decode_seconds"] = s.decode_seconds;
        d["prefills"] = s.prefills;
        d["generations"] = s.generations;
        return d;
    }

    std::unique_ptr<Session> make_session(int n_batch) const {
        SessionOptions so;
        so.n_ctx = n_ctx_;
        so.n_batch = n_batch;
        so.kv_type_k = kv_k_;
        so.kv_type_v = kv_v_;
        return std::make_unique<Session>(*model_, so);
    }
    // The session, re-made for another prefill chunk (the mutex held).
    Session& session(int n_batch) {
        if (session_->options().n_batch != n_batch) session_ = make_session(n_batch);
        return *session_;
    }

    std::string path_;
    int threads_ = 0;
    int n_ctx_ = 0;
    int n_batch_ = 512;  // the prefill chunk the model was opened with (a call's `chunk` overrides it)
    KvType kv_k_ = KvType::F16, kv_v_ = KvType::F16;
    std::unique_ptr<Model> model_;
    std::unique_ptr<Tokenizer> tokenizer_;
    std::unique_ptr<Session> session_;
    std::mutex mutex_;  // one call at a time per model (the GIL is released while it computes)
};

py::list policy_list() {
    py::list out;
    for (const policy::PolicyEntry& e : policy::policies()) {
        py::list options;
        for (const policy::OptionSpec& o : e.options) {
            py::dict od;
            od["name"] = o.name;
            od["default"] = o.default_value;
            od["help"] = o.help;
            od["choices"] = o.choices;
            options.append(od);
        }
        py::dict d;
        d["name"] = e.name;
        d["summary"] = e.summary;
        d["options"] = options;
        d["doc"] = policy::format_policy_entry(e);
        out.append(d);
    }
    return out;
}

}  // namespace

}  // namespace kvec::python

PYBIND11_MODULE(_core, m) {
    using kvec::python::PyModel;
    m.doc() = "kvec's engine (the Python API is the kvec package)";
    py::register_exception<kvec::Error>(m, "Error", PyExc_ValueError);
    m.attr("__version__") = KVEC_VERSION;
    m.def("policies", &kvec::python::policy_list);
    py::class_<PyModel>(m, "Model")
        .def(py::init<const std::string&, int, const std::string&, std::optional<std::string>, std::optional<std::string>,
                      int, int, std::optional<bool>>(),
             py::arg("path"), py::arg("threads"), py::arg("kv_type"), py::arg("kv_type_k"), py::arg("kv_type_v"),
             py::arg("n_ctx"), py::arg("n_batch"), py::arg("mmap"))
        .def("info", &PyModel::info)
        .def("tokenize", &PyModel::tokenize, py::arg("text"), py::arg("add_special"), py::arg("parse_special"))
        .def("detokenize", &PyModel::detokenize, py::arg("ids"), py::arg("skip_special"))
        .def("generate", &PyModel::generate, py::arg("prompt"), py::arg("policy"), py::arg("budget"), py::arg("ratio"),
             py::arg("decode_evict"), py::arg("chunk"), py::arg("max_new_tokens"), py::arg("chat"), py::arg("system"),
             py::arg("temperature"), py::arg("top_k"), py::arg("top_p"), py::arg("min_p"), py::arg("repeat_penalty"),
             py::arg("repeat_last_n"), py::arg("seed"), py::arg("stop"), py::arg("on_text"), py::arg("cancel"),
             py::arg("coverage_window"))
        .def("answer", &PyModel::answer, py::arg("context"), py::arg("questions"), py::arg("policy"), py::arg("budget"),
             py::arg("compression_ratio"), py::arg("query_aware"), py::arg("max_new_tokens"), py::arg("chat"),
             py::arg("references"))
        .def("evaluate", &PyModel::evaluate, py::arg("suite"), py::arg("data_files"), py::arg("max_length"),
             py::arg("policies"), py::arg("budgets"),
             py::arg("ratios"), py::arg("protocol"), py::arg("samples"), py::arg("tasks"), py::arg("seed"),
             py::arg("split"), py::arg("chat"), py::arg("max_new_tokens"), py::arg("text_dir"), py::arg("on_progress"));
}
