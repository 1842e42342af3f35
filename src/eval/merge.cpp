#include "eval/merge.h"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "eval/jsonl.h"
#include "eval/out_dir.h"
#include "eval/provenance.h"
#include "util/error.h"
#include "util/sha256.h"

namespace kvec::eval {

namespace {

namespace fs = std::filesystem;

nlohmann::json read_json_file(const std::string& path, const std::string& missing) {
    std::error_code ec;
    if (!fs::exists(path, ec)) fail("{}", missing);
    if (!fs::is_regular_file(path, ec)) fail("'{}' is not a regular file", path);
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    if (!in || !(text << in.rdbuf())) fail("cannot read '{}'", path);
    try {
        return nlohmann::json::parse(text.str());
    } catch (const nlohmann::json::exception& e) {
        fail("'{}' is not valid JSON ({})", path, e.what());
    }
}

// Typed fields of a shard's files: a missing field or one of another type or out of range is a
// kvec::Error naming the file and the field (never a nlohmann exception, never an unchecked cast).
const nlohmann::json& field(const nlohmann::json& j, const std::string& key, const std::string& where) {
    if (!j.is_object()) fail("{}: expected an object holding '{}', got {}", where, key, j.type_name());
    const auto it = j.find(key);
    if (it == j.end()) fail("{}: '{}' is missing", where, key);
    return *it;
}

int64_t int_field(const nlohmann::json& j, const std::string& key, int64_t lo, int64_t hi, const std::string& where) {
    const nlohmann::json& v = field(j, key, where);
    const bool fits = v.is_number_integer() && (v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(hi)
                                                                      : v.get<int64_t>() <= hi);
    if (!fits || v.get<int64_t>() < lo) {
        fail("{}: '{}' must be a whole number in [{}, {}], got {}", where, key, lo, hi, v.dump().substr(0, 40));
    }
    return v.get<int64_t>();
}

// (Not json_optional_string_list: that one also takes numbers for strings, as LongBench files
// need; a shard's lists are written by kvec and hold strings only.)
std::vector<std::string> strings_field(const nlohmann::json& j, const std::string& key, const std::string& where) {
    const nlohmann::json& v = field(j, key, where);
    if (!v.is_array() || !std::all_of(v.begin(), v.end(), [](const nlohmann::json& e) { return e.is_string(); })) {
        fail("{}: '{}' must be a list of strings", where, key);
    }
    return v.get<std::vector<std::string>>();
}

// The fields of `j` that are present must have these types ("string", "number", "bool", "object").
void optional_types(const nlohmann::json& j, std::initializer_list<std::pair<const char*, const char*>> fields,
                    const std::string& where) {
    if (j.is_null()) return;
    if (!j.is_object()) fail("{}: expected an object, got {}", where, j.type_name());
    for (const auto& [key, type] : fields) {
        const auto it = j.find(key);
        if (it == j.end()) continue;
        const std::string_view t = type;
        const bool ok = (t == "string" && it->is_string()) || (t == "number" && it->is_number()) ||
                        (t == "bool" && it->is_boolean()) || (t == "object" && it->is_object()) ||
                        (t == "unsigned" && it->is_number_unsigned());
        if (!ok) fail("{}: '{}' must be a {}, got {}", where, key, t, it->type_name());
    }
}

// "a, b, c and 7 more"
std::string some(const std::vector<std::string>& names, size_t shown = 5) {
    std::string out;
    for (size_t i = 0; i < names.size() && i < shown; ++i) out += (i == 0 ? "" : ", ") + names[i];
    if (names.size() > shown) out += fmt::format(" and {} more", names.size() - shown);
    return out;
}

// The first key path where a and b differ ("budgets", "policies/1/spec"), "" when equal.
std::string first_difference(const nlohmann::json& a, const nlohmann::json& b, const std::string& path = "") {
    if (a == b) return "";
    if (a.is_object() && b.is_object()) {
        std::set<std::string> keys;
        for (const auto& [k, v] : a.items()) keys.insert(k);
        for (const auto& [k, v] : b.items()) keys.insert(k);
        for (const std::string& k : keys) {
            const std::string sub = path.empty() ? k : path + "/" + k;
            if (!a.contains(k) || !b.contains(k)) return sub;
            const std::string d = first_difference(a[k], b[k], sub);
            if (!d.empty()) return d;
        }
    }
    return path.empty() ? "(the whole value)" : path;
}

std::string value_at(const nlohmann::json& j, const std::string& path) {
    try {
        const nlohmann::json& v = j.at(nlohmann::json::json_pointer("/" + path));
        const std::string s = v.dump();
        return s.size() > 80 ? s.substr(0, 77) + "..." : s;
    } catch (const nlohmann::json::exception&) {
        return "absent";
    }
}

EvalItem item_from_manifest(const nlohmann::json& j, const std::string& where) {
    EvalItem item;
    item.id = json_required_string(j, "id", where);
    item.task = json_required_string(j, "task", where);
    const nlohmann::json& lb = field(j, "longbench", where);
    if (!lb.is_boolean()) fail("{}: 'longbench' must be true or false", where);
    item.longbench = lb.get<bool>();
    item.metric = json_required_string(j, "metric", where);
    item.references = strings_field(j, "references", where);
    item.all_classes = strings_field(j, "all_classes", where);
    item.length = int_field(j, "length", -1, int64_t{1} << 40, where);  // -1: not a LongBench item
    return item;
}

// What scoring reads of an item, as shard.json lists it.
nlohmann::ordered_json scoring_fields(size_t index, const EvalItem& it) {
    return {{"index", index},
            {"id", it.id},
            {"task", it.task},
            {"longbench", it.longbench},
            {"metric", it.metric},
            {"references", it.references},
            {"all_classes", it.all_classes},
            {"length", it.length}};
}

// The digest of a shard's own items (shard.json "items_sha256"): a shard.json whose items were
// edited or damaged after the run wrote it does not match.
std::string items_digest(const nlohmann::json& own_items) {
    return sha256_hex(own_items.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

// Every record of a shard's predictions.jsonl; kvec::Error for a line that is not one (the
// shard's own command repairs its file when run again).
std::vector<EvalRecord> read_records(const std::string& dir) {
    const std::string path = dir + "/predictions.jsonl";
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("'{}' has no predictions.jsonl: the shard has not run", dir);
    std::vector<EvalRecord> out;
    std::string line;
    size_t n = 0;
    while (std::getline(in, line)) {
        ++n;
        if (line.empty()) continue;
        const std::string where = fmt::format("{}:{}", path, n);
        try {
            const auto j = parse_jsonl_line(line, where);
            if (j) out.push_back(record_from_json(*j, where));
        } catch (const Error& e) {
            fail("{} (run the shard's command again: it repairs the file and finishes the shard)", e.what());
        }
    }
    return out;
}

struct ShardDir {
    std::string dir;
    nlohmann::json config;
    nlohmann::json manifest;
    Shard shard;
};

ShardDir read_shard_dir(const std::string& dir) {
    ShardDir s;
    s.dir = dir;
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) fail("'{}' is not a directory", dir);
    const std::string config_path = dir + "/config.json", manifest_path = dir + "/shard.json";
    s.config = read_json_file(config_path, fmt::format("'{}' has no config.json: not an output directory of kvec eval", dir));
    if (!s.config.is_object() || !s.config.contains("run") || !s.config["run"].is_object() ||
        !s.config["run"].contains("shard")) {
        fail("'{}' is not a shard: it was not made with --shard", dir);
    }
    s.manifest = read_json_file(manifest_path, fmt::format("'{}' has no shard.json: the shard did not get as far as its items", dir));
    const nlohmann::json& sh = field(s.manifest, "shard", manifest_path);
    s.shard.count = int_field(sh, "count", 1, int64_t{1} << 31, manifest_path);
    s.shard.index = int_field(sh, "index", 0, s.shard.count - 1, manifest_path);
    s.shard.source = sh.contains("source") ? json_required_string(sh, "source", manifest_path) : "explicit";
    const std::vector<std::string> ids = strings_field(s.manifest, "item_ids", manifest_path);
    if (int_field(s.manifest, "items_total", 0, INT64_MAX, manifest_path) != static_cast<int64_t>(ids.size())) {
        fail("{}: 'items_total' is not the number of 'item_ids' ({})", manifest_path, ids.size());
    }
    const nlohmann::json& own = field(s.manifest, "items", manifest_path);
    if (!own.is_array()) fail("{}: 'items' must be a list", manifest_path);
    if (json_required_string(s.manifest, "items_sha256", manifest_path) != items_digest(own)) {
        fail("{}: its items do not match their digest 'items_sha256' (the file was edited or damaged after the "
             "shard wrote it; run the shard again)", manifest_path);
    }
    if (s.manifest.contains("format")) json_required_string(s.manifest, "format", manifest_path);
    const nlohmann::json& rs = s.config["run"]["shard"];
    const std::string run_shard = config_path + " run/shard";
    if (int_field(rs, "index", 0, INT64_MAX, run_shard) != s.shard.index ||
        int_field(rs, "count", 1, INT64_MAX, run_shard) != s.shard.count) {
        fail("'{}': config.json and shard.json name different shards", dir);
    }
    return s;
}

std::string shard_label(const ShardDir& s) { return fmt::format("'{}' (shard {})", s.dir, shard_name(s.shard)); }

// Same command (apart from --shard and --out), model and kvec as the first shard.
void check_same_run(const ShardDir& ref, const ShardDir& s) {
    nlohmann::json a = ref.config["run"], b = s.config["run"];
    a.erase("shard");
    b.erase("shard");
    if (a.value("model_sha256", std::string()) != b.value("model_sha256", std::string())) {
        fail("{} was made with another model than {}: sha256 {} against {}", shard_label(s), shard_label(ref),
             b.value("model_sha256", std::string("?")), a.value("model_sha256", std::string("?")));
    }
    const std::string d = first_difference(a, b);
    if (!d.empty()) {
        fail("{} was made by another command than {}: '{}' is {} against {}", shard_label(s), shard_label(ref), d,
             value_at(b, d), value_at(a, d));
    }
    const nlohmann::json ka = ref.config.value("kvec", nlohmann::json::object());
    const nlohmann::json kb = s.config.value("kvec", nlohmann::json::object());
    if (ka != kb) {
        fail("{} was made by kvec {} ({}), {} by kvec {} ({}): merge shards of one kvec build", shard_label(s),
             kb.value("version", std::string("?")), kb.value("git_commit", std::string("?")), shard_label(ref),
             ka.value("version", std::string("?")), ka.value("git_commit", std::string("?")));
    }
    if (s.shard.count != ref.shard.count) {
        fail("{} and {} are shards of different counts ({} and {})", shard_label(s), shard_label(ref),
             s.shard.count, ref.shard.count);
    }
    if (s.manifest["item_ids"] != ref.manifest["item_ids"]) {
        fail("{} lists other items than {} (the same command built different items)", shard_label(s),
             shard_label(ref));
    }
}

}  // namespace

nlohmann::ordered_json shard_manifest(const std::vector<EvalItem>& items, const std::vector<size_t>& mine,
                                      const Shard& s, const std::string& format) {
    nlohmann::ordered_json j;
    j["shard"] = {{"index", s.index}, {"count", s.count}, {"source", s.source}};
    j["format"] = format;
    j["items_total"] = items.size();
    nlohmann::ordered_json ids = nlohmann::ordered_json::array();
    for (const EvalItem& it : items) ids.push_back(it.id);
    j["item_ids"] = ids;
    nlohmann::ordered_json own = nlohmann::ordered_json::array();
    for (size_t i : mine) own.push_back(scoring_fields(i, items[i]));
    j["items"] = own;
    // Of the items as the merge reads them back (keys in sorted order).
    j["items_sha256"] = items_digest(nlohmann::json::parse(own.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
    return j;
}

MergedRun read_shards(const std::vector<std::string>& dirs) {
    if (dirs.empty()) fail("give the output directories of the shards to merge");
    std::vector<ShardDir> shards;
    for (const std::string& d : dirs) shards.push_back(read_shard_dir(d));
    std::stable_sort(shards.begin(), shards.end(),
                     [](const ShardDir& a, const ShardDir& b) { return a.shard.index < b.shard.index; });
    for (size_t i = 1; i < shards.size(); ++i) check_same_run(shards[0], shards[i]);

    // Every item in exactly one shard.
    const std::vector<std::string> ids = shards[0].manifest["item_ids"].get<std::vector<std::string>>();
    const int64_t count = shards[0].shard.count;
    std::vector<std::vector<size_t>> owners(ids.size());  // [items] shards holding the item
    std::vector<EvalItem> items(ids.size());
    for (size_t s = 0; s < shards.size(); ++s) {
        const std::string file = shards[s].dir + "/shard.json";
        size_t n = 0;
        for (const auto& entry : shards[s].manifest["items"]) {
            const std::string where = fmt::format("{} items/{}", file, n++);
            const int64_t i = int_field(entry, "index", 0, static_cast<int64_t>(ids.size()) - 1, where);
            EvalItem item = item_from_manifest(entry, where);
            if (item.id != ids[static_cast<size_t>(i)]) fail("{}: item {} is '{}', not '{}'", file, i, item.id, ids[static_cast<size_t>(i)]);
            items[static_cast<size_t>(i)] = std::move(item);
            owners[static_cast<size_t>(i)].push_back(s);
        }
    }
    std::vector<std::string> missing, repeated;
    for (size_t i = 0; i < ids.size(); ++i) {
        if (owners[i].empty()) missing.push_back(ids[i]);
        if (owners[i].size() > 1) {
            std::vector<std::string> where;
            for (size_t s : owners[i]) where.push_back("'" + shards[s].dir + "'");
            repeated.push_back(fmt::format("{} (in {})", ids[i], fmt::join(where, " and ")));
        }
    }
    std::map<int64_t, std::vector<std::string>> given;  // shard index -> directories
    for (const ShardDir& s : shards) given[s.shard.index].push_back("'" + s.dir + "'");
    std::vector<std::string> absent_shards, twice;
    for (int64_t k = 0; k < count; ++k) {
        const auto it = given.find(k);
        if (it == given.end()) absent_shards.push_back(fmt::format("{}/{}", k, count));
        else if (it->second.size() > 1) twice.push_back(fmt::format("{}/{} ({})", k, count, fmt::join(it->second, ", ")));
    }
    if (!missing.empty() || !repeated.empty() || !absent_shards.empty() || !twice.empty()) {
        std::vector<std::string> parts;
        if (!absent_shards.empty()) parts.push_back(fmt::format("shard(s) {} not given", fmt::join(absent_shards, ", ")));
        if (!twice.empty()) parts.push_back(fmt::format("shard(s) given twice: {}", fmt::join(twice, "; ")));
        if (!missing.empty()) parts.push_back(fmt::format("{} item(s) in no shard: {}", missing.size(), some(missing)));
        if (!repeated.empty()) parts.push_back(fmt::format("{} item(s) in more than one shard: {}", repeated.size(), some(repeated, 3)));
        fail("the shards do not cover every item exactly once: {}", fmt::join(parts, "; "));
    }

    MergedRun m;
    m.config = shards[0].config;
    m.config["run"].erase("shard");
    const nlohmann::json& run = m.config["run"];
    const std::string config_path = shards[0].dir + "/config.json";
    const nlohmann::json& policies = field(run, "policies", config_path + " run");
    if (!policies.is_array() || policies.empty()) fail("{}: 'run/policies' must be a non-empty list", config_path);
    for (const auto& p : policies) {
        const std::string label = json_required_string(p, "label", config_path + " run/policies");
        const std::vector<PolicyChoice> one = parse_policy_list(label);
        if (one.size() != 1) fail("{}: the policy '{}' does not parse as one", config_path, label);
        m.policies.push_back(one[0]);
    }
    const nlohmann::json& budgets = field(run, "budgets", config_path + " run");
    if (!budgets.is_array() || budgets.empty() ||
        !std::all_of(budgets.begin(), budgets.end(), [](const nlohmann::json& b) { return b.is_number_integer(); })) {
        fail("{}: 'run/budgets' must be a non-empty list of whole numbers", config_path);
    }
    m.budgets = budgets.get<std::vector<int64_t>>();
    // The fields the summary's title reads.
    optional_types(run, {{"suite", "string"}, {"protocol", "string"}, {"split", "string"}, {"seed", "unsigned"},
                         {"model_sha256", "string"}},
                   config_path + " run");
    for (const char* section : {"model", "options", "kvec"}) {
        if (!m.config.contains(section)) m.config[section] = nlohmann::ordered_json::object();
    }
    optional_types(m.config["model"], {{"path", "string"}}, config_path + " model");
    optional_types(m.config["options"], {{"task_floor", "number"}, {"share_prefill", "bool"}}, config_path + " options");
    optional_types(m.config["kvec"], {{"version", "string"}, {"git_commit", "string"}}, config_path + " kvec");
    const std::vector<Combo> combos = make_combos(m.policies, m.budgets);
    m.format = shards[0].manifest.value("format", std::string("?"));

    // Every shard finished: its items x combinations, nothing else.
    std::map<std::string, size_t> index_of;
    for (size_t i = 0; i < ids.size(); ++i) index_of[ids[i]] = i;
    std::vector<std::pair<size_t, EvalRecord>> all;  // (item index, record)
    for (size_t s = 0; s < shards.size(); ++s) {
        std::map<RecordKey, std::string> have;  // -> the record as read
        const std::string predictions = shards[s].dir + "/predictions.jsonl";
        for (EvalRecord& r : read_records(shards[s].dir)) {
            const auto it = index_of.find(r.id);
            if (it == index_of.end() || owners[it->second][0] != s) {
                fail("{} holds a prediction of item '{}', which is not one of its items", shard_label(shards[s]), r.id);
            }
            const bool in_grid =
                std::any_of(combos.begin(), combos.end(), [&](const Combo& c) {
                    return m.policies[c.policy].label == r.policy && c.budget == r.budget;
                });
            if (!in_grid) {
                fail("{}: a prediction of '{}' by policy '{}' at budget {}, which is not in the run's policies x budgets "
                     "(config.json run/policies and run/budgets)", predictions, r.id, r.policy, r.budget);
            }
            if (r.references != items[it->second].references) {
                fail("{}: the references of the prediction of '{}' differ from the item's in shard.json", predictions, r.id);
            }
            const std::string text = to_json(r).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
            const auto [at, fresh] = have.emplace(RecordKey{r.id, r.policy, r.budget}, text);
            if (!fresh) {
                // A resume may write a record twice; two different ones for one key cannot be vouched for.
                if (at->second != text) {
                    fail("{}: two different predictions of '{}' by '{}' at budget {}; remove the wrong one or run the "
                         "shard again", predictions, r.id, r.policy, budget_label(r.budget));
                }
                continue;
            }
            all.emplace_back(it->second, std::move(r));
        }
        std::vector<std::string> lacking;
        int64_t expected = 0;
        for (const auto& entry : shards[s].manifest["items"]) {
            const std::string id = entry["id"].get<std::string>();
            for (const Combo& c : combos) {
                ++expected;
                if (have.count(RecordKey{id, m.policies[c.policy].label, c.budget}) == 0) {
                    lacking.push_back(fmt::format("{} {} {}", id, m.policies[c.policy].label, budget_label(c.budget)));
                }
            }
        }
        if (!lacking.empty()) {
            fail("{} is not finished: {} of its {} predictions are missing ({}); run its command again (it resumes)",
                 shard_label(shards[s]), lacking.size(), expected, some(lacking, 3));
        }
        nlohmann::json metrics;
        const std::string metrics_path = shards[s].dir + "/metrics.json";
        if (fs::exists(metrics_path)) {
            metrics = read_json_file(metrics_path, "");
            // The cost fields the merge adds up.
            optional_types(metrics, {{"total", "object"}, {"mode", "object"}}, metrics_path);
            for (const char* section : {"total", "mode"}) {
                optional_types(metrics.value(section, nlohmann::json()),
                               {{"wall_seconds", "number"}, {"prefill_seconds", "number"}, {"replay_seconds", "number"},
                                {"decode_seconds", "number"}, {"prefills", "number"}, {"generations", "number"},
                                {"invocations", "number"}, {"shared_generations", "number"}},
                               metrics_path + " " + section);
            }
        }
        m.metrics.push_back(metrics);
        m.dirs.push_back(shards[s].dir);
        m.shards.push_back(shards[s].shard);
    }
    std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [i, r] : all) m.records.push_back(std::move(r));
    m.items = std::move(items);
    return m;
}

std::string merge_shards(const std::string& out, const std::vector<std::string>& dirs) {
    // A shard still running holds its directory's lock: refused, naming it (pid, host, start).
    std::error_code ec;
    std::vector<std::unique_ptr<DirLock>> locks;
    std::set<std::string> locked;
    for (const std::string& d : dirs) {
        if (fs::is_directory(d) && locked.insert(fs::canonical(d, ec).string()).second) {
            locks.push_back(std::make_unique<DirLock>(d));
        }
    }
    const MergedRun m = read_shards(dirs);
    for (const std::string& d : m.dirs) {
        if (fs::equivalent(out, d, ec)) fail("'{}' is a shard's directory: merge into another one", out);
    }
    fs::create_directories(out, ec);
    if (ec) fail("cannot create output directory '{}': {}", out, ec.message());
    const DirLock lock(out);
    const std::string config_path = out + "/config.json";
    if (fs::exists(config_path)) {
        nlohmann::json old;
        try {
            std::ifstream in(config_path);
            old = nlohmann::json::parse(in);
        } catch (const nlohmann::json::exception&) {
        }
        if (!old.contains("merged_from")) {
            fail("'{}' holds another run (its config.json is not a merge's): merge into a new directory", out);
        }
    }

    // Costs: every shard's invocations added up; the wall time of the longest shard.
    auto sum = [&](const char* section, const char* key) {
        double v = 0;
        for (const nlohmann::json& j : m.metrics) {
            if (j.is_object() && j.contains(section) && j[section].contains(key) && j[section][key].is_number()) {
                v += j[section][key].get<double>();
            }
        }
        return v;
    };
    double longest = 0;
    for (const nlohmann::json& j : m.metrics) {
        if (j.is_object() && j.contains("total") && j["total"].contains("wall_seconds")) {
            longest = std::max(longest, j["total"]["wall_seconds"].get<double>());
        }
    }
    nlohmann::ordered_json config = m.config;
    nlohmann::ordered_json from = nlohmann::ordered_json::array();
    for (size_t s = 0; s < m.dirs.size(); ++s) {
        from.push_back({{"dir", fs::absolute(m.dirs[s]).string()}, {"shard", shard_name(m.shards[s])},
                        {"source", m.shards[s].source}});
    }
    config["merged_from"] = from;
    config["options"]["out"] = out;
    {
        const std::time_t t = std::time(nullptr);
        char buf[32];
        std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
        config["created"] = buf;
    }
    write_text_file(config_path, config.dump(2) + "\n");
    std::string pred;
    for (const EvalRecord& r : m.records) {
        pred += to_json(r).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    }
    write_text_file(out + "/predictions.jsonl", pred);

    const SweepSummary summary = summarize(m.items, m.policies, m.budgets, m.records,
                                           m.config["options"].value("task_floor", 0.0));
    const nlohmann::json& run = m.config["run"];
    SweepTitle title;
    title.what = run.contains("suite") ? run["suite"].get<std::string>() : std::string("LongBench");
    title.model_file = fs::path(m.config["model"].value("path", std::string("?"))).filename().string();
    title.model_sha256 = run.value("model_sha256", std::string("?"));
    title.samples = static_cast<int64_t>(m.items.size());
    title.format = m.format;
    title.protocol = run.value("protocol", std::string("query-aware"));
    if (run.contains("suite")) {
        title.split = run.value("split", std::string("all"));
        title.seed = run.value("seed", uint64_t{0});
    }
    title.version = m.config["kvec"].value("version", std::string("?"));
    title.commit = m.config["kvec"].value("git_commit", std::string("?"));
    const bool share = m.config["options"].value("share_prefill", true);
    const std::string header = sweep_title(title) +
        fmt::format("\nMerged from {} shards (`kvec eval merge`). Sweep wall time {:.1f} s summed over the shards, "
                    "{:.1f} s the longest shard ({:.0f} prefills for {:.0f} generations over {:.0f} invocation(s)).\n",
                    m.dirs.size(), sum("total", "wall_seconds"), longest, sum("total", "prefills"),
                    sum("total", "generations"), sum("total", "invocations"));
    nlohmann::ordered_json extra;
    extra["mode"] = {{"share_prefill", share},
                     {"prefills", sum("mode", "prefills")},
                     {"generations", sum("mode", "generations")},
                     {"shared_generations", sum("mode", "shared_generations")}};
    extra["total"] = {{"wall_seconds", sum("total", "wall_seconds")},
                      {"longest_shard_wall_seconds", longest},
                      {"prefill_seconds", sum("total", "prefill_seconds")},
                      {"replay_seconds", sum("total", "replay_seconds")},
                      {"decode_seconds", sum("total", "decode_seconds")},
                      {"prefills", sum("total", "prefills")},
                      {"generations", sum("total", "generations")},
                      {"invocations", sum("total", "invocations")}};
    extra["shards"] = from;
    return write_sweep_outputs(summary, out, header, extra, title.what);
}

}  // namespace kvec::eval
