// QueryRing: the last `capacity` query rows with their positions (model/query_ring.h).
#include <gtest/gtest.h>

#include <vector>

#include "model/query_ring.h"

namespace kvec {
namespace {

// Rows of width 2 whose values name their position: row t = {10 t, 10 t + 1}.
std::vector<float> rows_for(const std::vector<int32_t>& positions) {
    std::vector<float> r;
    for (int32_t p : positions) {
        r.push_back(10.0f * p);
        r.push_back(10.0f * p + 1);
    }
    return r;
}

// The ring's rows oldest first, as positions (checked against the row values).
std::vector<int32_t> oldest_first(const QueryRing& ring) {
    std::vector<int32_t> out;
    for (int32_t i = 0; i < ring.count(); ++i) {
        const int32_t s = ring.oldest(i);
        EXPECT_EQ(ring.row(s)[0], 10.0f * ring.position(s));
        EXPECT_EQ(ring.row(s)[1], 10.0f * ring.position(s) + 1);
        out.push_back(ring.position(s));
    }
    return out;
}

TEST(QueryRing, KeepsTheLastCapacityRowsOldestFirst) {
    QueryRing ring(3, 2);
    EXPECT_EQ(ring.count(), 0);
    const std::vector<int32_t> a = {0, 1};
    ring.append(rows_for(a).data(), 2, a.data());
    EXPECT_EQ(oldest_first(ring), (std::vector<int32_t>{0, 1}));
    const std::vector<int32_t> b = {2, 3};  // wraps: 0 drops out
    ring.append(rows_for(b).data(), 2, b.data());
    EXPECT_EQ(oldest_first(ring), (std::vector<int32_t>{1, 2, 3}));
    const std::vector<int32_t> c = {4, 5, 6, 7, 8};  // longer than the ring: only its last 3
    ring.append(rows_for(c).data(), 5, c.data());
    EXPECT_EQ(ring.count(), 3);
    EXPECT_EQ(oldest_first(ring), (std::vector<int32_t>{6, 7, 8}));
}

TEST(QueryRing, ClearStartsAfreshAndCapacityZeroHoldsNothing) {
    QueryRing ring(2, 2);
    const std::vector<int32_t> a = {5, 6, 7};
    ring.append(rows_for(a).data(), 3, a.data());
    ring.clear();
    EXPECT_EQ(ring.count(), 0);
    const std::vector<int32_t> b = {9};
    ring.append(rows_for(b).data(), 1, b.data());
    EXPECT_EQ(oldest_first(ring), (std::vector<int32_t>{9}));
    QueryRing none;
    none.append(rows_for(a).data(), 3, a.data());
    EXPECT_EQ(none.count(), 0);
}

}  // namespace
}  // namespace kvec
