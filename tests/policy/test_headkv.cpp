// HeadKV: the head importance file (round trip, refusals) and the per-head budgets, hand-worked.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include "policy/head_importance.h"
#include "policy/registry.h"
#include "util/error.h"

namespace kvec::policy {
namespace {

std::string temp_file(const std::string& name, const std::string& text) {
    const auto path = std::filesystem::path(::testing::TempDir()) / name;
    std::ofstream(path) << text;
    return path.string();
}

void expect_error(const std::string& path, const std::string& part) {
    try {
        read_head_importance(path);
        ADD_FAILURE() << path << " was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
}

TEST(HeadKv, ImportanceFileRoundTripAndRefusals) {
    HeadImportance h;
    h.model = "m.gguf";
    h.sha256 = "ab";
    h.method = "test";
    h.items = 3;
    h.scores = {{0.5, 0.0}, {0.25, 1.0}, {0.0, 0.125}};
    const auto path = (std::filesystem::path(::testing::TempDir()) / "importance.json").string();
    write_head_importance(h, path);
    const HeadImportance back = read_head_importance(path);
    EXPECT_EQ(back.scores, h.scores);
    EXPECT_EQ(back.model, "m.gguf");
    EXPECT_EQ(back.items, 3);
    EXPECT_EQ(back.n_layer(), 3);
    EXPECT_EQ(back.n_head_kv(), 2);

    expect_error("/nonexistent/importance.json", "cannot be read");
    expect_error("/dev/zero", "not a regular file");
    expect_error(::testing::TempDir(), "not a regular file");
    expect_error(temp_file("big.json", std::string(17u << 20, ' ')), "larger than");
    expect_error(temp_file("a.json", "{"), "not JSON");
    expect_error(temp_file("b.json", R"({"scores": [[1]]})"), "kvec head-scores");
    const std::string head = R"({"format": "kvec-head-importance", )";
    expect_error(temp_file("c.json", head + R"("scores": []})"), "non-empty");
    expect_error(temp_file("d.json", head + R"("scores": [[1, 2], [3]]})"), "rows of 2 and 1");
    expect_error(temp_file("e.json", head + R"("scores": [[1, -2]]})"), ">= 0");
    expect_error(temp_file("f.json", head + R"("scores": [[1, "x"]]})"), "not a number");
    expect_error(temp_file("g.json", head + R"("n_layer": 2, "scores": [[1, 2]]})"), "n_layer 2");
}

TEST(HeadKv, BudgetsHandWorked) {
    // L x H = 4 heads, b = 10, beta = 0.5: base 5 each, pool 20 by scores 1 : 0 : 3 : 0
    // -> 5 + 5, 5 + 0, 5 + 15, 5 + 0.
    const std::vector<std::vector<double>> s = {{1, 0}, {3, 0}};
    EXPECT_EQ(headkv_budgets(s, 10, 0.5), (std::vector<std::vector<int64_t>>{{10, 5}, {20, 5}}));
    // beta = 0: every head b; beta = 1: all by score.
    EXPECT_EQ(headkv_budgets(s, 10, 0.0), (std::vector<std::vector<int64_t>>{{10, 10}, {10, 10}}));
    EXPECT_EQ(headkv_budgets(s, 10, 1.0), (std::vector<std::vector<int64_t>>{{10, 0}, {30, 0}}));
    // Remainders: scores 1 : 1 : 1, b = 2, beta = 1: pool 6 -> 2 each; b = 1, pool 3 -> 1 each;
    // scores 1 : 2 : 0, b = 1, pool 3: 1, 2, 0.
    EXPECT_EQ(headkv_budgets({{1, 1, 1}}, 1, 1.0), (std::vector<std::vector<int64_t>>{{1, 1, 1}}));
    // 2 : 1 : 1 with pool 5 (b = 5/3 is not whole: take b = 2, beta = 0.5, base 1, pool 3):
    // shares 1.5, 0.75, 0.75 -> 1, 0, 0 plus remainders (0.75, 0.75, 0.5): heads 1 and 2.
    EXPECT_EQ(headkv_budgets({{2, 1, 1}}, 2, 0.5), (std::vector<std::vector<int64_t>>{{2, 2, 2}}));
    // All scores 0: equal shares.
    EXPECT_EQ(headkv_budgets({{0, 0}}, 4, 1.0), (std::vector<std::vector<int64_t>>{{4, 4}}));
    // The total is exact on awkward numbers.
    const std::vector<std::vector<double>> odd = {{0.3, 0.1, 0.7}, {0.01, 0.0, 2.2}, {1e-9, 5, 0.2}};
    for (int64_t b : {0, 1, 7, 33, 100}) {
        for (double beta : {0.0, 0.2, 0.5, 0.9, 1.0}) {
            int64_t sum = 0;
            for (const auto& row : headkv_budgets(odd, b, beta)) sum = std::accumulate(row.begin(), row.end(), sum);
            EXPECT_EQ(sum, 9 * b) << b << " " << beta;
        }
    }
    EXPECT_THROW(headkv_budgets(s, 10, 1.5), Error);
    EXPECT_THROW(headkv_budgets(s, -1, 0.5), Error);
}

TEST(HeadKv, NeedsItsScoresFile) {
    try {
        make_policy("headkv");
        ADD_FAILURE() << "headkv without scores was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("kvec head-scores"), std::string::npos) << e.what();
    }
    EXPECT_THROW(make_policy("headkv:scores=/nonexistent.json"), Error);
}

}  // namespace
}  // namespace kvec::policy
