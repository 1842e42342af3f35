#include <gtest/gtest.h>

#include <vector>

#include "kvcache/eviction.h"
#include "util/error.h"

namespace kvec {
namespace {

TEST(Eviction, ReduceOverGroup) {
    // group 2, n 3: rows {1, 5, 3} and {3, 1, 3}
    const float s[6] = {1, 5, 3, 3, 1, 3};
    float out[3];
    reduce_over_group(s, 2, 3, GroupReduction::Mean, out);
    EXPECT_FLOAT_EQ(out[0], 2.0f);
    EXPECT_FLOAT_EQ(out[1], 3.0f);
    EXPECT_FLOAT_EQ(out[2], 3.0f);
    reduce_over_group(s, 2, 3, GroupReduction::Max, out);
    EXPECT_FLOAT_EQ(out[0], 3.0f);
    EXPECT_FLOAT_EQ(out[1], 5.0f);
    EXPECT_FLOAT_EQ(out[2], 3.0f);
}

TEST(Eviction, CheckKeepLists) {
    std::vector<KvHeadView> heads(2);
    heads[0].n_entries = 5;
    heads[1].n_entries = 2;
    LayerView view;
    view.n_head_kv = 2;
    view.heads = heads;
    EXPECT_NO_THROW(check_keep_lists(view, KeepLists{{0, 4}, {}}));
    EXPECT_THROW(check_keep_lists(view, KeepLists{{0, 4}}), Error);        // one list missing
    EXPECT_THROW(check_keep_lists(view, KeepLists{{0, 5}, {}}), Error);    // out of range
    EXPECT_THROW(check_keep_lists(view, KeepLists{{3, 2}, {}}), Error);    // not increasing
    EXPECT_THROW(check_keep_lists(view, KeepLists{{1}, {1, 1}}), Error);   // duplicate
}

TEST(Eviction, CheckRepositioning) {
    std::vector<KvHeadView> heads(2);
    heads[0].n_entries = 5;
    heads[1].n_entries = 2;
    LayerView view;
    view.n_head_kv = 2;
    view.heads = heads;
    const KeepLists keep{{0, 3, 4}, {1}};
    auto r = [](std::vector<std::vector<int32_t>> p, int32_t next) { return Repositioning{std::move(p), next}; };
    EXPECT_NO_THROW(check_repositioning(view, keep, r({{0, 1, 2}, {0}}, 3)));
    EXPECT_NO_THROW(check_repositioning(view, keep, r({{0, 7, 9}, {4}}, 10)));   // gaps are allowed
    EXPECT_THROW(check_repositioning(view, keep, r({{0, 1, 2}}, 3)), Error);      // one list missing
    EXPECT_THROW(check_repositioning(view, keep, r({{0, 1}, {0}}, 3)), Error);    // one per kept entry
    EXPECT_THROW(check_repositioning(view, keep, r({{0, 2, 1}, {0}}, 3)), Error); // not increasing
    EXPECT_THROW(check_repositioning(view, keep, r({{0, 1, 1}, {0}}, 3)), Error); // duplicate
    EXPECT_THROW(check_repositioning(view, keep, r({{-1, 1, 2}, {0}}, 3)), Error); // negative
    EXPECT_THROW(check_repositioning(view, keep, r({{0, 1, 2}, {3}}, 3)), Error);  // not below next
}

}  // namespace
}  // namespace kvec
