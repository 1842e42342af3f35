// Sharded sweeps (eval/shard.h, eval/merge.h): --shard parsing (K/N, slurm, k8s/N and their
// errors), the partition (deterministic, disjoint, covering, compression groups kept whole), and
// `kvec eval merge` on shard directories written here: a complete set merges into the same
// summary as the unsharded records, and mismatched, missing, repeated or unfinished shards are
// refused with errors naming them.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <unistd.h>

#include "eval/merge.h"
#include "eval/report.h"
#include "eval/shard.h"
#include "util/error.h"
#include "util/sha256.h"
#include "error_of.h"

namespace kvec::eval {
namespace {

namespace fs = std::filesystem;

EnvLookup env_of(std::map<std::string, std::string> vars) {
    return [vars](const char* name) -> std::optional<std::string> {
        const auto it = vars.find(name);
        if (it == vars.end()) return std::nullopt;
        return it->second;
    };
}

using testing_support::error_of;

TEST(Shard, ParsesExplicitShards) {
    const Shard s = parse_shard("2/4", env_of({}));
    EXPECT_EQ(s.index, 2);
    EXPECT_EQ(s.count, 4);
    EXPECT_EQ(shard_name(s), "2/4");
    EXPECT_EQ(parse_shard("0/1", env_of({})).count, 1);
}

TEST(Shard, RefusesBadExplicitShards) {
    const auto none = env_of({});
    EXPECT_NE(error_of([&] { parse_shard("4/4", none); }).find("does not exist among 4 shards"), std::string::npos);
    EXPECT_NE(error_of([&] { parse_shard("0/0", none); }).find("at least 1"), std::string::npos);
    EXPECT_NE(error_of([&] { parse_shard("x", none); }).find("expected K/N"), std::string::npos);
    EXPECT_NE(error_of([&] { parse_shard("-1/4", none); }).find("not a whole number"), std::string::npos);
    EXPECT_NE(error_of([&] { parse_shard("1/2/3", none); }).find("not a whole number"), std::string::npos);
    EXPECT_NE(error_of([&] { parse_shard("1/", none); }).find("not a whole number"), std::string::npos);
    EXPECT_NE(error_of([&] { parse_shard("", none); }).find("expected K/N"), std::string::npos);
}

TEST(Shard, ReadsSlurmArrays) {
    // --array=1-4: task ids 1..4 are shards 0..3.
    const Shard s = parse_shard("slurm", env_of({{"SLURM_ARRAY_TASK_ID", "4"}, {"SLURM_ARRAY_TASK_MIN", "1"},
                                                 {"SLURM_ARRAY_TASK_MAX", "4"}, {"SLURM_ARRAY_TASK_COUNT", "4"}}));
    EXPECT_EQ(s.index, 3);
    EXPECT_EQ(s.count, 4);
    EXPECT_EQ(s.source, "slurm");
    const Shard z = parse_shard("slurm", env_of({{"SLURM_ARRAY_TASK_ID", "0"}, {"SLURM_ARRAY_TASK_MIN", "0"},
                                                 {"SLURM_ARRAY_TASK_COUNT", "2"}}));
    EXPECT_EQ(z.index, 0);
    EXPECT_EQ(z.count, 2);
    EXPECT_NE(error_of([] { parse_shard("slurm", env_of({{"SLURM_ARRAY_TASK_COUNT", "4"}, {"SLURM_ARRAY_TASK_MIN", "0"}})); })
                  .find("SLURM_ARRAY_TASK_ID is not set"),
              std::string::npos);
    EXPECT_NE(error_of([] {
                  parse_shard("slurm", env_of({{"SLURM_ARRAY_TASK_ID", "x1"}, {"SLURM_ARRAY_TASK_MIN", "0"},
                                               {"SLURM_ARRAY_TASK_COUNT", "4"}}));
              }).find("SLURM_ARRAY_TASK_ID='x1' is not a whole number"),
              std::string::npos);
    // --array=0-6:2 has 4 tasks but indices up to 6: refused.
    EXPECT_NE(error_of([] {
                  parse_shard("slurm", env_of({{"SLURM_ARRAY_TASK_ID", "2"}, {"SLURM_ARRAY_TASK_MIN", "0"},
                                               {"SLURM_ARRAY_TASK_MAX", "6"}, {"SLURM_ARRAY_TASK_COUNT", "4"}}));
              }).find("contiguous"),
              std::string::npos);
}

TEST(Shard, ReadsKubernetesIndexedJobs) {
    const Shard s = parse_shard("k8s/3", env_of({{"JOB_COMPLETION_INDEX", "2"}}));
    EXPECT_EQ(s.index, 2);
    EXPECT_EQ(s.count, 3);
    EXPECT_EQ(s.source, "k8s");
    EXPECT_NE(error_of([] { parse_shard("k8s/3", env_of({})); }).find("JOB_COMPLETION_INDEX is not set"),
              std::string::npos);
    EXPECT_NE(error_of([] { parse_shard("k8s/3", env_of({{"JOB_COMPLETION_INDEX", "3"}})); }).find("does not exist"),
              std::string::npos);
    EXPECT_NE(error_of([] { parse_shard("k8s/x", env_of({{"JOB_COMPLETION_INDEX", "0"}})); }).find("shard count"),
              std::string::npos);
}

std::vector<EvalItem> make_items(size_t n) {
    std::vector<EvalItem> items(n);
    for (size_t i = 0; i < n; ++i) {
        items[i].id = "task" + std::to_string(i % 3) + "/s1/" + std::to_string(i);
        items[i].task = "task" + std::to_string(i % 3);
        items[i].metric = "string_match_all";
        items[i].references = {"answer" + std::to_string(i % 2)};
        items[i].prompt = {1, static_cast<int32_t>(i + 2), 7, 8};
        items[i].n_context = 2;
    }
    return items;
}

TEST(Shard, PartitionIsDeterministicDisjointAndCovering) {
    // Pinned: the partition must not change between versions or machines. Expected values from
    // Python: int(hashlib.sha256(id.encode()).hexdigest()[:16], 16) % n.
    EXPECT_EQ(shard_of("niah_single/all/s1/L2048/0", 4), 0);
    EXPECT_EQ(shard_of("niah_single/all/s1/L2048/0", 7), 5);
    EXPECT_EQ(shard_of("kvec-fixture-qasper-0", 2), 1);
    EXPECT_EQ(shard_of("abc", 1000), 74);
    const std::vector<EvalItem> items = make_items(600);
    for (int64_t n = 1; n <= 7; ++n) {
        std::vector<int> seen(items.size(), 0);
        for (int64_t k = 0; k < n; ++k) {
            const std::vector<size_t> mine = shard_items(items, Protocol::QueryAware, {k, n, "explicit"});
            EXPECT_GT(mine.size(), items.size() / static_cast<size_t>(n) / 2) << k << "/" << n;  // roughly balanced
            EXPECT_TRUE(std::is_sorted(mine.begin(), mine.end()));
            for (size_t i : mine) {
                ++seen[i];
                EXPECT_EQ(shard_of(items[i].id, n), k);
            }
            EXPECT_EQ(mine, shard_items(items, Protocol::QueryAware, {k, n, "explicit"}));  // deterministic
        }
        for (size_t i = 0; i < items.size(); ++i) EXPECT_EQ(seen[i], 1) << items[i].id << " with " << n << " shards";
    }
}

TEST(Shard, PartitionDoesNotDependOnOrderOrCount) {
    std::vector<EvalItem> items = make_items(50);
    std::vector<EvalItem> reversed(items.rbegin(), items.rend());
    std::set<std::string> a, b;
    for (size_t i : shard_items(items, Protocol::QueryAware, {1, 3, "explicit"})) a.insert(items[i].id);
    for (size_t i : shard_items(reversed, Protocol::QueryAware, {1, 3, "explicit"})) b.insert(reversed[i].id);
    EXPECT_EQ(a, b);
    std::vector<EvalItem> fewer(items.begin(), items.begin() + 20);
    for (size_t i : shard_items(fewer, Protocol::QueryAware, {1, 3, "explicit"})) EXPECT_EQ(a.count(fewer[i].id), 1u);
}

TEST(Shard, QueryAgnosticGroupsStayTogether) {
    // Items 0-3 share one context (ask many), 4-5 another: each group goes whole to its first
    // item's shard.
    std::vector<EvalItem> items = make_items(6);
    for (size_t i = 0; i < 6; ++i) items[i].prompt = {1, i < 4 ? 5 : 6, 9, static_cast<int32_t>(i + 10)};
    for (int64_t n = 2; n <= 5; ++n) {
        for (int64_t k = 0; k < n; ++k) {
            const std::vector<size_t> mine = shard_items(items, Protocol::QueryAgnostic, {k, n, "explicit"});
            std::vector<size_t> want;
            if (shard_of(items[0].id, n) == k) want.insert(want.end(), {0, 1, 2, 3});
            if (shard_of(items[4].id, n) == k) want.insert(want.end(), {4, 5});
            EXPECT_EQ(mine, want);
        }
    }
}

// ---- kvec eval merge on shard directories written here ------------------------------------------

const std::vector<PolicyChoice>& test_policies() {
    static const std::vector<PolicyChoice> p = parse_policy_list("full,snapkv");
    return p;
}
const std::vector<int64_t> kBudgets = {64, 128};

nlohmann::ordered_json run_config(const Shard& s, const std::string& sha = "ab12", int64_t samples = 0) {
    nlohmann::ordered_json policies = nlohmann::ordered_json::array();
    for (const PolicyChoice& p : test_policies()) policies.push_back({{"label", p.label}, {"spec", p.spec}});
    nlohmann::ordered_json run;
    run["model_sha256"] = sha;
    run["policies"] = policies;
    run["budgets"] = kBudgets;
    run["samples"] = samples;
    run["suite"] = "synthetic-2k";
    run["shard"] = {{"index", s.index}, {"count", s.count}};
    nlohmann::ordered_json c;
    c["kvec"] = {{"version", "0.1.0"}, {"git_commit", "abc"}};
    c["model"] = {{"path", "/m/model.gguf"}, {"sha256", sha}};
    c["run"] = run;
    c["options"] = {{"share_prefill", true}};
    return c;
}

// Every (item, combination) record, predictions that get some items right.
std::vector<EvalRecord> all_records(const std::vector<EvalItem>& items) {
    std::vector<EvalRecord> out;
    for (size_t i = 0; i < items.size(); ++i) {
        for (const Combo& c : make_combos(test_policies(), kBudgets)) {
            EvalRecord r;
            r.id = items[i].id;
            r.task = items[i].task;
            r.policy = test_policies()[c.policy].label;
            r.budget = c.budget;
            const size_t n = std::stoul(items[i].id.substr(items[i].id.rfind('/') + 1));  // by identity
            r.prediction = (n + static_cast<size_t>(c.budget)) % 3 == 0 ? "answer0 answer1" : "no";
            r.references = items[i].references;
            r.score = score_item(items[i], r.prediction);
            r.kv_bytes = 100 * (c.budget + 1);
            out.push_back(r);
        }
    }
    return out;
}

// Writes shard `s` of `items` into `dir` as `kvec eval --shard` does; `drop` records left out.
void write_shard(const std::string& dir, const std::vector<EvalItem>& items, const Shard& s,
                 const nlohmann::ordered_json& config, size_t drop = 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::vector<size_t> mine = shard_items(items, Protocol::QueryAware, s);
    std::ofstream(dir + "/config.json") << config.dump(2);
    std::ofstream(dir + "/shard.json") << shard_manifest(items, mine, s, "completion").dump(1);
    std::vector<EvalItem> own;
    for (size_t i : mine) own.push_back(items[i]);
    std::vector<EvalRecord> recs = all_records(own);
    recs.resize(recs.size() - std::min(drop, recs.size()));
    std::ofstream pred(dir + "/predictions.jsonl");
    for (const EvalRecord& r : recs) pred << to_json(r).dump() << "\n";
}

struct MergeFixture : ::testing::Test {
    std::string root;
    std::vector<EvalItem> items = make_items(24);
    void SetUp() override {
        root = (fs::temp_directory_path() / ("kvec-merge-test-" + std::to_string(::getpid()) + "-" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                   .string();
        fs::remove_all(root);
        for (int64_t k = 0; k < 3; ++k) write_shard(dir(k), items, {k, 3, "explicit"}, run_config({k, 3}));
    }
    void TearDown() override { fs::remove_all(root); }
    std::string dir(int64_t k) const { return root + "/shard" + std::to_string(k); }
    std::vector<std::string> dirs() const { return {dir(0), dir(1), dir(2)}; }
};

TEST_F(MergeFixture, MergedEqualsUnsharded) {
    for (int64_t k = 0; k < 3; ++k) ASSERT_FALSE(shard_items(items, Protocol::QueryAware, {k, 3, ""}).empty());
    const std::string md = merge_shards(root + "/merged", {dir(2), dir(0), dir(1)});  // any order
    const SweepSummary whole = summarize(items, test_policies(), kBudgets, all_records(items));
    std::ifstream in(root + "/merged/summary.csv");
    std::stringstream csv;
    csv << in.rdbuf();
    EXPECT_EQ(csv.str(), summary_csv(whole));
    std::ifstream pin(root + "/merged/paired.csv");
    std::stringstream paired;
    paired << pin.rdbuf();
    EXPECT_EQ(paired.str(), paired_csv(whole));
    EXPECT_NE(md.find("Merged from 3 shards"), std::string::npos);
    // The merged config is an unsharded run's, with where it came from.
    std::ifstream cin(root + "/merged/config.json");
    const nlohmann::json config = nlohmann::json::parse(cin);
    EXPECT_FALSE(config["run"].contains("shard"));
    EXPECT_EQ(config["merged_from"].size(), 3u);
    // Merging again into the same directory replaces the merge.
    EXPECT_NO_THROW(merge_shards(root + "/merged", dirs()));
    // But never into a shard's directory.
    EXPECT_NE(error_of([&] { merge_shards(dir(0), dirs()); }).find("is a shard's directory"), std::string::npos);
}

TEST_F(MergeFixture, RefusesAMissingShard) {
    const std::string e = error_of([&] { read_shards({dir(0), dir(2)}); });
    EXPECT_NE(e.find("shard(s) 1/3 not given"), std::string::npos) << e;
    EXPECT_NE(e.find("item(s) in no shard: "), std::string::npos) << e;
    const std::vector<size_t> lost = shard_items(items, Protocol::QueryAware, {1, 3, ""});
    EXPECT_NE(e.find(items[lost[0]].id), std::string::npos) << e;  // named
}

TEST_F(MergeFixture, RefusesARepeatedShard) {
    fs::copy(dir(1), root + "/copy", fs::copy_options::recursive);
    const std::string e = error_of([&] { read_shards({dir(0), dir(1), dir(2), root + "/copy"}); });
    EXPECT_NE(e.find("shard(s) given twice: 1/3"), std::string::npos) << e;
    EXPECT_NE(e.find("in more than one shard"), std::string::npos) << e;
}

TEST_F(MergeFixture, RefusesAnotherCommand) {
    nlohmann::ordered_json c = run_config({1, 3});
    c["run"]["budgets"] = std::vector<int64_t>{64, 256};
    write_shard(dir(1), items, {1, 3, ""}, c);
    const std::string e = error_of([&] { read_shards(dirs()); });
    EXPECT_NE(e.find("another command"), std::string::npos) << e;
    EXPECT_NE(e.find("'budgets' is [64,256] against [64,128]"), std::string::npos) << e;
}

TEST_F(MergeFixture, RefusesAnotherModel) {
    write_shard(dir(2), items, {2, 3, ""}, run_config({2, 3}, "ff99"));
    const std::string e = error_of([&] { read_shards(dirs()); });
    EXPECT_NE(e.find("another model"), std::string::npos) << e;
    EXPECT_NE(e.find("ff99"), std::string::npos) << e;
}

TEST_F(MergeFixture, RefusesAnotherKvecBuild) {
    nlohmann::ordered_json c = run_config({2, 3});
    c["kvec"]["git_commit"] = "def";
    write_shard(dir(2), items, {2, 3, ""}, c);
    const std::string e = error_of([&] { read_shards(dirs()); });
    EXPECT_NE(e.find("was made by kvec 0.1.0 (def)"), std::string::npos) << e;
}

TEST_F(MergeFixture, RefusesShardsOfAnotherCount) {
    write_shard(dir(2), items, {2, 4, ""}, run_config({2, 4}));
    EXPECT_NE(error_of([&] { read_shards(dirs()); }).find("different counts (4 and 3)"), std::string::npos);
}

TEST_F(MergeFixture, RefusesAnUnfinishedShard) {
    write_shard(dir(1), items, {1, 3, ""}, run_config({1, 3}), 2);
    const std::string e = error_of([&] { read_shards(dirs()); });
    EXPECT_NE(e.find("(shard 1/3) is not finished: 2 of its"), std::string::npos) << e;
    EXPECT_NE(e.find("run its command again"), std::string::npos) << e;
}

TEST_F(MergeFixture, RefusesAnUnshardedRun) {
    nlohmann::ordered_json c = run_config({1, 3});
    c["run"].erase("shard");
    std::ofstream(dir(1) + "/config.json") << c.dump(2);
    EXPECT_NE(error_of([&] { read_shards(dirs()); }).find("not made with --shard"), std::string::npos);
    EXPECT_NE(error_of([&] { read_shards({root + "/absent"}); }).find("is not a directory"), std::string::npos);
}


// ---- kvec eval merge on damaged shards (issue 44, item 9): a clear error naming the file and the
// field, never an abort, never a summary it cannot vouch for ------------------------------------

nlohmann::json read_json(const std::string& path) {
    std::ifstream in(path);
    return nlohmann::json::parse(in);
}

void write_json(const std::string& path, const nlohmann::json& j) { std::ofstream(path) << j.dump(1); }

// shard.json with its items changed by `edit` and, with `restamp`, a digest that matches them (an
// edit made by someone who knew the format), to reach the checks behind the digest.
void edit_manifest(const std::string& dir, const std::function<void(nlohmann::json&)>& edit, bool restamp) {
    nlohmann::json m = read_json(dir + "/shard.json");
    edit(m);
    if (restamp) m["items_sha256"] = sha256_hex(m["items"].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    write_json(dir + "/shard.json", m);
}

TEST_F(MergeFixture, RefusesDamagedShardJsonNamingTheField) {
    auto merge_error = [&] { return error_of([&] { merge_shards(root + "/merged", dirs()); }); };
    edit_manifest(dir(1), [](nlohmann::json& m) { m["items"] = {1, 2}; }, true);
    EXPECT_NE(merge_error().find("shard1/shard.json items/0: expected an object holding 'index', got number"), std::string::npos)
        << merge_error();
    write_shard(dir(1), items, {1, 3, ""}, run_config({1, 3}));
    edit_manifest(dir(1), [](nlohmann::json& m) { m["items"][0]["length"] = 1e300; }, true);
    EXPECT_NE(merge_error().find("'length' must be a whole number in [-1, 1099511627776], got 1e+300"), std::string::npos)
        << merge_error();
    write_shard(dir(1), items, {1, 3, ""}, run_config({1, 3}));
    edit_manifest(dir(1), [](nlohmann::json& m) { m["shard"]["index"] = 5; }, false);
    EXPECT_NE(merge_error().find("'index' must be a whole number in [0, 2], got 5"), std::string::npos) << merge_error();
    // A directory where shard.json should be.
    write_shard(dir(1), items, {1, 3, ""}, run_config({1, 3}));
    fs::remove(dir(2) + "/shard.json");
    fs::create_directory(dir(2) + "/shard.json");
    EXPECT_NE(merge_error().find("shard.json' is not a regular file"), std::string::npos) << merge_error();
    EXPECT_FALSE(fs::exists(root + "/merged/summary.md"));
}

TEST_F(MergeFixture, RefusesEditedReferences) {
    // Edited in shard.json only: its digest no longer matches.
    edit_manifest(dir(0), [](nlohmann::json& m) { m["items"][0]["references"] = {"something else"}; }, false);
    std::string e = error_of([&] { read_shards(dirs()); });
    EXPECT_NE(e.find("shard0/shard.json: its items do not match their digest"), std::string::npos) << e;
    // With the digest redone: the predictions still carry the run's references.
    edit_manifest(dir(0), [](nlohmann::json&) {}, true);
    e = error_of([&] { read_shards(dirs()); });
    EXPECT_NE(e.find("shard0/predictions.jsonl: the references of the prediction of"), std::string::npos) << e;
}

TEST_F(MergeFixture, RefusesPredictionsOutsideTheGridAndConflictingRepeats) {
    const std::string pred = dir(0) + "/predictions.jsonl";
    std::ifstream in(pred);
    std::string first;
    std::getline(in, first);
    in.close();
    nlohmann::json r = nlohmann::json::parse(first);
    {  // budget 999, then policy 'bogus!'
        nlohmann::json odd = r;
        odd["budget"] = 999;
        std::ofstream(pred, std::ios::app) << odd.dump() << "\n";
        const std::string e = error_of([&] { read_shards(dirs()); });
        EXPECT_NE(e.find("at budget 999, which is not in the run's policies x budgets"), std::string::npos) << e;
    }
    write_shard(dir(0), items, {0, 3, ""}, run_config({0, 3}));
    {
        nlohmann::json odd = r;
        odd["policy"] = "bogus!";
        std::ofstream(pred, std::ios::app) << odd.dump() << "\n";
        EXPECT_NE(error_of([&] { read_shards(dirs()); }).find("by policy 'bogus!'"), std::string::npos);
    }
    // A budget dropped from every shard's config: the predictions of that budget are outside it.
    for (int64_t k = 0; k < 3; ++k) {
        nlohmann::ordered_json c = run_config({k, 3});
        c["run"]["budgets"] = std::vector<int64_t>{64};
        write_shard(dir(k), items, {k, 3, ""}, c);
    }
    EXPECT_NE(error_of([&] { read_shards(dirs()); }).find("at budget 128, which is not in the run's"), std::string::npos);
    // No policies at all.
    for (int64_t k = 0; k < 3; ++k) {
        nlohmann::ordered_json c = run_config({k, 3});
        c["run"]["policies"] = nlohmann::ordered_json::array();
        write_shard(dir(k), items, {k, 3, ""}, c);
    }
    EXPECT_NE(error_of([&] { read_shards(dirs()); }).find("'run/policies' must be a non-empty list"), std::string::npos);
    // A tampered copy of a record placed before it: two different predictions of one key.
    for (int64_t k = 0; k < 3; ++k) write_shard(dir(k), items, {k, 3, ""}, run_config({k, 3}));
    nlohmann::json tampered = r;
    tampered["prediction"] = "tampered";
    std::stringstream rest;
    rest << std::ifstream(pred).rdbuf();
    std::ofstream(pred) << tampered.dump() << "\n" << rest.str();
    EXPECT_NE(error_of([&] { read_shards(dirs()); }).find("two different predictions of"), std::string::npos);
    // An identical repeat (what a resume may leave) is one record.
    std::ofstream(pred) << rest.str() << first << "\n";
    EXPECT_NO_THROW(read_shards(dirs()));
}

TEST_F(MergeFixture, RefusesDamagedCosts) {
    write_json(dir(1) + "/metrics.json", {{"total", {{"wall_seconds", "12 s"}}}});
    const std::string e = error_of([&] { merge_shards(root + "/merged", dirs()); });
    EXPECT_NE(e.find("shard1/metrics.json total: 'wall_seconds' must be a number, got string"), std::string::npos) << e;
    write_json(dir(1) + "/metrics.json", {{"total", {{"wall_seconds", 12.5}, {"prefills", 3}}}});
    EXPECT_NO_THROW(merge_shards(root + "/merged", dirs()));
}

}  // namespace
}  // namespace kvec::eval
