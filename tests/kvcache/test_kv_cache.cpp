#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kvcache/kv_cache.h"
#include "quant/quant.h"
#include "util/error.h"
#include "util/fp16.h"

namespace kvec {
namespace {

// Rows of a recognisable pattern: key of position p, element i = p + i / 100 (exact in fp16 for
// small p only approximately, so F32 caches are used where exactness matters).
std::vector<float> rows(int n, int d, int first_pos, float sign) {
    std::vector<float> r(static_cast<size_t>(n) * d);  // [n, d]
    for (int t = 0; t < n; ++t)
        for (int i = 0; i < d; ++i) r[static_cast<size_t>(t) * d + i] = sign * ((first_pos + t) + i / 128.0f);
    return r;
}

KvCacheConfig config(KvType type, int n_aux = 0) {
    KvCacheConfig c;
    c.n_layer = 2;
    c.n_head_kv = 3;
    c.head_dim = 8;
    c.key_type = c.value_type = type;
    c.n_aux = n_aux;
    return c;
}

TEST(KvCache, AppendStoresEntriesPerHead) {
    KvCache kv(config(KvType::F32));
    const int d = 8;
    auto k = rows(5, d, 10, 1.0f), v = rows(5, d, 10, -1.0f);
    std::vector<int32_t> pos = {10, 11, 12, 13, 14};
    kv.append(1, 2, 5, k.data(), d, v.data(), d, pos.data());
    EXPECT_EQ(kv.size(1, 2), 5);
    EXPECT_EQ(kv.size(1, 1), 0);
    EXPECT_EQ(kv.size(0, 2), 0);
    std::vector<float> out(5 * d);
    kv.read_keys(1, 2, 0, 5, out.data());
    EXPECT_EQ(out, k);
    kv.read_values(1, 2, 0, 5, out.data());
    EXPECT_EQ(out, v);
    EXPECT_EQ(std::vector<int32_t>(kv.positions(1, 2), kv.positions(1, 2) + 5), pos);
    EXPECT_EQ(kv.total_entries(), 5);
}

TEST(KvCache, AssignRestoresStoredRowsAndRefusesBadInput) {
    const int d = 8;
    KvCache src(config(KvType::F16, 2));
    auto k = rows(4, d, 3, 1.0f), v = rows(4, d, 3, -1.0f);
    const std::vector<int32_t> pos = {3, 5, 8, 9};
    src.append(0, 1, 4, k.data(), d, v.data(), d, pos.data());
    for (int a = 0; a < 2; ++a)
        for (int i = 0; i < 4; ++i) src.aux(0, 1, a)[i] = static_cast<float>(10 * a + i);
    std::vector<float> aux;  // [2][4]
    for (int a = 0; a < 2; ++a) aux.insert(aux.end(), src.aux(0, 1, a), src.aux(0, 1, a) + 4);

    KvCache dst(config(KvType::F16, 2));
    dst.assign(0, 1, 4, src.key_data(0, 1), src.value_data(0, 1), src.positions(0, 1), aux);
    EXPECT_EQ(dst.size(0, 1), 4);
    EXPECT_EQ(dst.used_bytes(), src.used_bytes());
    std::vector<float> a(4 * d), b(4 * d);
    src.read_keys(0, 1, 0, 4, a.data());
    dst.read_keys(0, 1, 0, 4, b.data());
    EXPECT_EQ(a, b);
    src.read_values(0, 1, 0, 4, a.data());
    dst.read_values(0, 1, 0, 4, b.data());
    EXPECT_EQ(a, b);
    EXPECT_EQ(std::vector<int32_t>(dst.positions(0, 1), dst.positions(0, 1) + 4), pos);
    EXPECT_EQ(dst.aux(0, 1, 1)[3], 13.0f);
    // Not empty; positions out of order; aux of the wrong length: refused, nothing changes.
    EXPECT_THROW(dst.assign(0, 1, 4, src.key_data(0, 1), src.value_data(0, 1), pos.data(), aux), Error);
    const std::vector<int32_t> unordered = {3, 5, 5, 9};
    EXPECT_THROW(dst.assign(1, 0, 4, src.key_data(0, 1), src.value_data(0, 1), unordered.data(), aux), Error);
    EXPECT_THROW(dst.assign(1, 0, 4, src.key_data(0, 1), src.value_data(0, 1), pos.data(),
                            std::span<const float>(aux).first(3)), Error);
    EXPECT_EQ(dst.size(1, 0), 0);
    // No aux given: zeros.
    dst.assign(1, 2, 4, src.key_data(0, 1), src.value_data(0, 1), pos.data(), {});
    EXPECT_EQ(dst.aux(1, 2, 0)[2], 0.0f);
}

TEST(KvCache, StridedAppendTakesOneHeadOfABatch) {
    // A batch laid out [n_tokens, n_head_kv * d]: head h of token t starts at t * 3d + h * d.
    KvCache kv(config(KvType::F32));
    const int d = 8, n = 4, hk = 3;
    std::vector<float> batch(static_cast<size_t>(n) * hk * d);
    std::iota(batch.begin(), batch.end(), 0.0f);
    std::vector<int32_t> pos = {0, 1, 2, 3};
    kv.append(0, 1, n, batch.data() + d, hk * d, batch.data() + d, hk * d, pos.data());
    std::vector<float> out(static_cast<size_t>(n) * d);
    kv.read_keys(0, 1, 0, n, out.data());
    for (int t = 0; t < n; ++t)
        for (int i = 0; i < d; ++i) EXPECT_EQ(out[t * d + i], batch[t * hk * d + d + i]);
}

TEST(KvCache, F16StorageRoundsLikeFp16AndHalvesMemory) {
    KvCache kv16(config(KvType::F16)), kv32(config(KvType::F32));
    const int d = 8;
    auto k = rows(3, d, 1000, 0.001f), v = rows(3, d, 7, 3.3f);
    std::vector<int32_t> pos = {0, 1, 2};
    kv16.append(0, 0, 3, k.data(), d, v.data(), d, pos.data());
    kv32.append(0, 0, 3, k.data(), d, v.data(), d, pos.data());
    std::vector<float> out(3 * d);
    kv16.read_keys(0, 0, 0, 3, out.data());
    for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], fp16_to_float(float_to_fp16(k[i])));
    EXPECT_EQ(kv16.entry_bytes(), 2u * 8 * 2 + 4);
    EXPECT_EQ(kv32.entry_bytes(), 2u * 8 * 4 + 4);
    EXPECT_EQ(kv16.bytes(), kv16.capacity(0, 0) * kv16.entry_bytes());
    EXPECT_EQ(kv16.keys_f32(0, 0), nullptr);
    EXPECT_NE(kv32.keys_f32(0, 0), nullptr);
}

TEST(KvCache, CompactKeepsSelectedEntriesAndFreesMemory) {
    KvCache kv(config(KvType::F32, /*n_aux=*/2));
    const int d = 8, n = 100;
    auto k = rows(n, d, 0, 1.0f), v = rows(n, d, 0, -1.0f);
    std::vector<int32_t> pos(n);
    std::iota(pos.begin(), pos.end(), 0);
    for (int l = 0; l < 2; ++l)
        for (int h = 0; h < 3; ++h) kv.append(l, h, n, k.data(), d, v.data(), d, pos.data());
    for (int32_t i = 0; i < n; ++i) {
        kv.aux(0, 1, 0)[i] = static_cast<float>(i);
        kv.aux(0, 1, 1)[i] = -static_cast<float>(i);
    }
    const size_t before = kv.bytes();
    EXPECT_EQ(before, 6u * kv.capacity(0, 1) * kv.entry_bytes());
    EXPECT_GE(kv.capacity(0, 1), n);

    const std::vector<int32_t> keep = {0, 1, 2, 3, 50, 97, 98, 99};
    kv.compact(0, 1, keep);
    EXPECT_EQ(kv.size(0, 1), 8);
    EXPECT_EQ(kv.capacity(0, 1), 8);  // the allocation shrinks to the kept entries
    EXPECT_EQ(kv.size(0, 0), n);      // other heads untouched: heads hold different counts
    EXPECT_EQ(kv.bytes(), before - (kv.capacity(0, 0) - 8) * kv.entry_bytes());
    EXPECT_EQ(kv.peak_bytes(), before);

    std::vector<float> out(8 * d);
    kv.read_keys(0, 1, 0, 8, out.data());
    for (size_t j = 0; j < keep.size(); ++j) {
        EXPECT_EQ(kv.positions(0, 1)[j], keep[j]);
        EXPECT_EQ(out[j * d + 3], k[keep[j] * d + 3]);
        EXPECT_EQ(kv.aux(0, 1, 0)[j], static_cast<float>(keep[j]));  // aux moves with its entry
        EXPECT_EQ(kv.aux(0, 1, 1)[j], -static_cast<float>(keep[j]));
    }
    kv.read_values(0, 1, 0, 8, out.data());
    for (size_t j = 0; j < keep.size(); ++j) EXPECT_EQ(out[j * d], v[keep[j] * d]);

    // Appending after compaction continues after the kept entries, aux of new entries = 0.
    std::vector<int32_t> p2 = {100};
    kv.append(0, 1, 1, k.data(), d, v.data(), d, p2.data());
    EXPECT_EQ(kv.size(0, 1), 9);
    EXPECT_EQ(kv.positions(0, 1)[8], 100);
    EXPECT_EQ(kv.aux(0, 1, 0)[8], 0.0f);

    // Compacting to nothing frees everything of that head.
    kv.compact(0, 1, {});
    EXPECT_EQ(kv.capacity(0, 1), 0);
    kv.clear();
    EXPECT_EQ(kv.bytes(), 0u);
    EXPECT_EQ(kv.total_entries(), 0);
    EXPECT_EQ(kv.peak_bytes(), before);
}

TEST(KvCache, GrowthIsBounded) {
    KvCache kv(config(KvType::F16));
    const int d = 8;
    auto k = rows(1, d, 0, 1.0f);
    int reallocations = 0;
    for (int32_t p = 0; p < 1000; ++p) {
        const int32_t before = kv.capacity(0, 0);
        kv.append(0, 0, 1, k.data(), d, k.data(), d, &p);
        const int32_t cap = kv.capacity(0, 0);
        ASSERT_GE(cap, p + 1);
        ASSERT_LE(cap, std::max(p + 1 + 16, (p + 1) * 9 / 8 + 1));
        reallocations += cap != before;
    }
    EXPECT_LE(reallocations, 30);  // 16 at a time up to 128, then 12.5% at a time
    EXPECT_EQ(kv.used_bytes(), 1000u * kv.entry_bytes());
}

TEST(KvCache, ChunkAppendsAllocateExactly) {
    KvCache kv(config(KvType::F16));
    const int d = 8;
    auto k = rows(40, d, 0, 1.0f);
    std::vector<int32_t> pos(40);
    std::iota(pos.begin(), pos.end(), 0);
    kv.append(0, 0, 30, k.data(), d, k.data(), d, pos.data());
    EXPECT_EQ(kv.capacity(0, 0), 30);
    kv.compact(0, 0, std::vector<int32_t>{0, 1, 29});
    kv.append(0, 0, 10, k.data(), d, k.data(), d, pos.data() + 30);
    EXPECT_EQ(kv.capacity(0, 0), 13);  // budget 3 + chunk 10, no slack
    EXPECT_EQ(kv.peak_bytes(), 30u * kv.entry_bytes());
    int32_t next = 40;
    kv.append(0, 0, 1, k.data(), d, k.data(), d, &next);  // one entry: room for 15 more
    EXPECT_EQ(kv.capacity(0, 0), 13 + 16);
}

TEST(KvCache, RejectsBadKeepLists) {
    KvCache kv(config(KvType::F32));
    const int d = 8;
    auto k = rows(4, d, 0, 1.0f);
    std::vector<int32_t> pos = {0, 1, 2, 3};
    kv.append(0, 0, 4, k.data(), d, k.data(), d, pos.data());
    EXPECT_THROW(kv.compact(0, 0, std::vector<int32_t>{0, 4}), Error);
    EXPECT_THROW(kv.compact(0, 0, std::vector<int32_t>{2, 1}), Error);
    EXPECT_THROW(kv.compact(0, 0, std::vector<int32_t>{1, 1}), Error);
    EXPECT_THROW(kv.compact(0, 0, std::vector<int32_t>{-1}), Error);
    EXPECT_EQ(kv.size(0, 0), 4);  // a rejected list changes nothing
    EXPECT_THROW(KvCache(KvCacheConfig{}), Error);
}

TEST(KvCache, RepositionRewritesKeysAndPositionsInPlace) {
    KvCache kv(config(KvType::F32, 1));
    const int d = 8;
    auto k = rows(5, d, 10, 1.0f), v = rows(5, d, 10, -1.0f);
    std::vector<int32_t> pos = {10, 11, 12, 20, 30};
    kv.append(0, 1, 5, k.data(), d, v.data(), d, pos.data());
    kv.aux(0, 1, 0)[3] = 0.5f;
    const size_t bytes = kv.bytes();
    // Entries [1, 4) move to positions 11, 15, 25 with new keys; the rest is untouched.
    auto nk = rows(3, d, 100, 1.0f);  // [3, d]
    const std::vector<int32_t> np = {11, 15, 25};
    kv.reposition(0, 1, 1, 4, nk.data(), np.data());
    EXPECT_EQ(std::vector<int32_t>(kv.positions(0, 1), kv.positions(0, 1) + 5),
              (std::vector<int32_t>{10, 11, 15, 25, 30}));
    std::vector<float> out(5 * d);
    kv.read_keys(0, 1, 0, 5, out.data());
    for (int t = 0; t < 5; ++t)
        for (int i = 0; i < d; ++i) {
            const float want = t >= 1 && t < 4 ? nk[static_cast<size_t>(t - 1) * d + i] : k[static_cast<size_t>(t) * d + i];
            ASSERT_EQ(out[static_cast<size_t>(t) * d + i], want) << t << " " << i;
        }
    kv.read_values(0, 1, 0, 5, out.data());
    EXPECT_EQ(out, v);                       // values never move
    EXPECT_EQ(kv.aux(0, 1, 0)[3], 0.5f);     // nor the per-entry scores
    EXPECT_EQ(kv.bytes(), bytes);            // no reallocation
}

TEST(KvCache, RepositionRejectsBrokenOrderAndChangesNothing) {
    KvCache kv(config(KvType::F16));
    const int d = 8;
    auto k = rows(4, d, 0, 1.0f);
    std::vector<int32_t> pos = {0, 5, 6, 9};
    kv.append(1, 0, 4, k.data(), d, k.data(), d, pos.data());
    std::vector<float> before(4 * d), after(4 * d);
    kv.read_keys(1, 0, 0, 4, before.data());
    auto nk = rows(2, d, 50, 1.0f);
    auto same = [&] {
        kv.read_keys(1, 0, 0, 4, after.data());
        return after == before && std::vector<int32_t>(kv.positions(1, 0), kv.positions(1, 0) + 4) == pos;
    };
    const std::vector<int32_t> collide = {0, 1};   // entry 1 would land on entry 0's position
    const std::vector<int32_t> decrease = {4, 3};
    const std::vector<int32_t> past_next = {7, 9}; // entry 2 would reach entry 3's position
    const std::vector<int32_t> negative = {-1, 0};
    EXPECT_THROW(kv.reposition(1, 0, 1, 3, nk.data(), collide.data()), Error);
    EXPECT_THROW(kv.reposition(1, 0, 1, 3, nk.data(), decrease.data()), Error);
    EXPECT_THROW(kv.reposition(1, 0, 1, 3, nk.data(), past_next.data()), Error);
    EXPECT_THROW(kv.reposition(1, 0, 0, 2, nk.data(), negative.data()), Error);
    EXPECT_THROW(kv.reposition(1, 0, 3, 5, nk.data(), collide.data()), Error);  // past the end
    EXPECT_TRUE(same());
    const std::vector<int32_t> ok = {1, 8};
    kv.reposition(1, 0, 1, 3, nk.data(), ok.data());
    EXPECT_EQ(kv.positions(1, 0)[1], 1);
    EXPECT_EQ(kv.positions(1, 0)[2], 8);
}

TEST(KvCache, MoveTransfersOwnership) {
    KvCache a(config(KvType::F32));
    const int d = 8;
    auto k = rows(2, d, 0, 1.0f);
    std::vector<int32_t> pos = {0, 1};
    a.append(1, 1, 2, k.data(), d, k.data(), d, pos.data());
    const size_t bytes = a.bytes();
    KvCache b(std::move(a));
    EXPECT_EQ(b.bytes(), bytes);
    EXPECT_EQ(b.size(1, 1), 2);
    KvCache c(config(KvType::F16));
    c = std::move(b);
    EXPECT_EQ(c.bytes(), bytes);
    EXPECT_EQ(c.positions(1, 1)[1], 1);
}

// Quantised caches: one (layer, head) list of head_dim 64 with the given key and value types.
KvCacheConfig quant_config(KvType k, KvType v) {
    KvCacheConfig c;
    c.n_layer = 1;
    c.n_head_kv = 2;
    c.head_dim = 64;
    c.key_type = k;
    c.value_type = v;
    return c;
}

std::vector<float> random_rows(int n, int d, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> r(static_cast<size_t>(n) * d);  // [n, d]
    for (float& x : r) x = dist(rng);
    return r;
}

// Largest |x| of each 32-element block bounds the rounding error of every block type: half a step
// of amax / 127 (q8_0), a step of amax / 8 (q4_0: +amax clamps to 7 steps), half a step of range / 15
// (q4_1), a step of amax / 16 (q5_0), half a step of range / 31 (q5_1), half the widest gap of
// the IQ4_NL grid (24 of 127 levels: 0.095 amax) plus the scale search's clipping (iq4_nl), and a
// relative 2^-8 (bf16) or 2^-11 (f16).
float max_error(KvType type, const float* block) {
    float amax = 0, lo = block[0], hi = block[0];
    for (int i = 0; i < 32; ++i) {
        amax = std::max(amax, std::fabs(block[i]));
        lo = std::min(lo, block[i]);
        hi = std::max(hi, block[i]);
    }
    switch (type) {
        case KvType::F32: return 0.0f;
        case KvType::F16: return amax / 2048.0f;
        case KvType::BF16: return amax / 256.0f;
        case KvType::Q8_0: return 0.6f * amax / 127.0f + 1e-6f;  // + the fp16 scale's rounding
        case KvType::Q4_0: return 1.01f * amax / 8.0f + 1e-6f;
        case KvType::Q4_1: return 0.51f * (hi - lo) / 15.0f + 0.01f;
        case KvType::Q5_0: return 1.01f * amax / 16.0f + 1e-6f;
        case KvType::Q5_1: return 0.51f * (hi - lo) / 31.0f + 0.01f;
        case KvType::IQ4_NL: return 0.15f * amax + 1e-6f;
        default: return 0.0f;
    }
}

TEST(KvCacheQuantised, EveryTypeStoresRowsWithinItsRoundingAndCountsItsBytes) {
    const int d = 64, n = 20;
    for (KvType k : kKvTypes) {
        for (KvType v : {KvType::F16, KvType::Q8_0, KvType::Q4_0}) {
            KvCache kv(quant_config(k, v));
            const auto keys = random_rows(n, d, 1), values = random_rows(n, d, 2);
            std::vector<int32_t> pos(n);
            std::iota(pos.begin(), pos.end(), 0);
            kv.append(0, 1, n, keys.data(), d, values.data(), d, pos.data());
            const std::string what = std::string(kv_type_name(k)) + "/" + kv_type_name(v);
            EXPECT_EQ(kv.entry_bytes(), ggml_row_size(k, d) + ggml_row_size(v, d) + 4) << what;
            EXPECT_EQ(kv.bytes(), n * kv.entry_bytes()) << what;
            // Compared where the rounding happens: rotated as stored (kv.key_rotation()).
            auto stored = [](std::vector<float> x, int rot) {
                if (rot > 0) hadamard_rotate(x.data(), static_cast<int64_t>(x.size()), rot);
                return x;
            };
            const std::vector<float> want_k = stored(keys, kv.key_rotation()), want_v = stored(values, kv.value_rotation());
            std::vector<float> out(keys.size());
            kv.read_keys(0, 1, 0, n, out.data());
            out = stored(out, kv.key_rotation());
            for (size_t i = 0; i < out.size(); ++i) {
                ASSERT_NEAR(out[i], want_k[i], max_error(k, &want_k[i / 32 * 32]) + 1e-5f) << what << " key element " << i;
            }
            kv.read_values(0, 1, 0, n, out.data());
            out = stored(out, kv.value_rotation());
            for (size_t i = 0; i < out.size(); ++i) {
                ASSERT_NEAR(out[i], want_v[i], max_error(v, &want_v[i / 32 * 32]) + 1e-5f) << what << " value element " << i;
            }
        }
    }
    // q8_0 keys and q4_0 values of head dim 64: 2 blocks of 34 and 2 of 18 bytes, and the position.
    EXPECT_EQ(KvCache(quant_config(KvType::Q8_0, KvType::Q4_0)).entry_bytes(), 68u + 36u + 4u);
}

TEST(KvCacheQuantised, CompactionMovesWholeRowsBitForBit) {
    const int d = 64, n = 10;
    KvCache kv(quant_config(KvType::Q4_0, KvType::Q8_0));
    const auto keys = random_rows(n, d, 3), values = random_rows(n, d, 4);
    std::vector<int32_t> pos(n);
    std::iota(pos.begin(), pos.end(), 100);
    kv.append(0, 0, n, keys.data(), d, values.data(), d, pos.data());
    std::vector<float> k_before(keys.size()), v_before(keys.size());
    kv.read_keys(0, 0, 0, n, k_before.data());
    kv.read_values(0, 0, 0, n, v_before.data());
    const std::vector<int32_t> keep = {1, 4, 7, 9};
    kv.compact(0, 0, keep);
    EXPECT_EQ(kv.bytes(), keep.size() * kv.entry_bytes());
    std::vector<float> k_after(keep.size() * d), v_after(keep.size() * d);
    kv.read_keys(0, 0, 0, 4, k_after.data());
    kv.read_values(0, 0, 0, 4, v_after.data());
    for (size_t i = 0; i < keep.size(); ++i) {
        EXPECT_EQ(kv.positions(0, 0)[i], 100 + keep[i]);
        for (int e = 0; e < d; ++e) {
            ASSERT_EQ(k_after[i * d + e], k_before[static_cast<size_t>(keep[i]) * d + e]);
            ASSERT_EQ(v_after[i * d + e], v_before[static_cast<size_t>(keep[i]) * d + e]);
        }
    }
}

TEST(KvCacheQuantised, RepositionRequantisesTheNewKeys) {
    const int d = 64, n = 4;
    KvCache kv(quant_config(KvType::Q8_0, KvType::Q8_0));
    const auto keys = random_rows(n, d, 5), fresh = random_rows(2, d, 6);
    std::vector<int32_t> pos = {0, 5, 6, 9};
    kv.append(0, 0, n, keys.data(), d, keys.data(), d, pos.data());
    std::vector<float> values_before(keys.size()), values_after(keys.size());
    kv.read_values(0, 0, 0, n, values_before.data());
    const std::vector<int32_t> moved = {1, 2};
    kv.reposition(0, 0, 1, 3, fresh.data(), moved.data());
    std::vector<float> out(2 * d);
    kv.read_keys(0, 0, 1, 3, out.data());
    std::vector<float> want = fresh;  // compared as stored: rotated
    hadamard_rotate(want.data(), 2 * d, kv.key_rotation());
    hadamard_rotate(out.data(), 2 * d, kv.key_rotation());
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want[i], max_error(KvType::Q8_0, &want[i / 32 * 32]) + 1e-5f);
    kv.read_values(0, 0, 0, n, values_after.data());
    EXPECT_EQ(values_after, values_before);
    EXPECT_EQ(kv.positions(0, 0)[2], 2);
}

TEST(KvCacheQuantised, RefusesAHeadDimOfPartialBlocksNamingBoth) {
    KvCacheConfig c = quant_config(KvType::F16, KvType::Q4_0);
    c.head_dim = 80;
    try {
        KvCache kv(c);
        FAIL() << "head dim 80 accepted for q4_0 values";
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("q4_0"), std::string::npos) << m;
        EXPECT_NE(m.find("80"), std::string::npos) << m;
    }
    c.value_type = KvType::BF16;
    EXPECT_NO_THROW(KvCache{c});
    c.key_type = KvType::Q8_K;  // a weight type, not a cache type
    c.head_dim = 256;
    EXPECT_THROW(KvCache{c}, Error);
}

TEST(KvCacheQuantised, ParsesTypeNamesAsLlamaCppSpellsThem) {
    EXPECT_EQ(parse_kv_type("q8_0", "-ctk"), KvType::Q8_0);
    EXPECT_EQ(parse_kv_type("Q4_1", "-ctk"), KvType::Q4_1);
    EXPECT_EQ(parse_kv_type("bf16", "-ctv"), KvType::BF16);
    EXPECT_EQ(parse_kv_type("f16", "-ctv"), KvType::F16);
    for (KvType t : kKvTypes) EXPECT_EQ(parse_kv_type(kv_type_name(t), "x"), t);
    try {
        (void)parse_kv_type("q4_k", "--cache-type-k");
        FAIL();
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("--cache-type-k"), std::string::npos) << m;
        EXPECT_NE(m.find("q8_0"), std::string::npos) << m;  // the list of types
    }
}

// hadamard_rotate is Sylvester's orthonormal matrix, built here entry by entry: H[i][j] =
// (-1)^popcount(i & j) / sqrt(n); applying it twice gives the input back.
TEST(KvCacheRotation, HadamardIsSylvestersOrthonormalMatrixAndItsOwnInverse) {
    for (int n : {64, 128, 256}) {
        std::vector<float> x(static_cast<size_t>(2 * n));
        std::mt19937 rng(static_cast<uint32_t>(n));
        std::normal_distribution<float> g(0.0f, 1.0f);
        for (float& v : x) v = g(rng);
        std::vector<float> y = x;
        hadamard_rotate(y.data(), 2 * n, n);  // two rows of n
        for (int r = 0; r < 2; ++r) {
            for (int i = 0; i < n; ++i) {
                double want = 0.0;
                for (int j = 0; j < n; ++j) {
                    want += (__builtin_popcount(static_cast<unsigned>(i & j)) % 2 ? -1.0 : 1.0) * x[static_cast<size_t>(r * n + j)];
                }
                ASSERT_NEAR(y[static_cast<size_t>(r * n + i)], want / std::sqrt(n), 1e-4) << "n " << n << " row " << r;
            }
        }
        hadamard_rotate(y.data(), 2 * n, n);
        for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(y[i], x[i], 1e-5) << "n " << n;
    }
}

// Which rows are stored rotated, as llama.cpp chooses (llama-kv-cache.cpp): quantised types on a
// head dim that is a multiple of 64; keys by the largest power of two dividing it, values by 64.
TEST(KvCacheRotation, QuantisedTypesOnMultiplesOf64AreRotatedAsLlamaCppRotates) {
    struct Case {
        KvType k, v;
        int head_dim, key_rot, value_rot;
    };
    for (const Case& c : {Case{KvType::Q4_0, KvType::Q8_0, 64, 64, 64}, Case{KvType::Q8_0, KvType::Q4_0, 128, 128, 64},
                          Case{KvType::IQ4_NL, KvType::Q5_1, 256, 256, 64}, Case{KvType::Q4_1, KvType::Q5_0, 192, 64, 64},
                          Case{KvType::Q4_0, KvType::Q4_0, 96, 0, 0}, Case{KvType::Q8_0, KvType::Q8_0, 32, 0, 0},
                          Case{KvType::F16, KvType::BF16, 128, 0, 0}, Case{KvType::F32, KvType::Q4_0, 128, 0, 64}}) {
        KvCacheConfig cfg = quant_config(c.k, c.v);
        cfg.head_dim = c.head_dim;
        const KvCache kv(cfg);
        EXPECT_EQ(kv.key_rotation(), c.key_rot) << kv_type_name(c.k) << " head dim " << c.head_dim;
        EXPECT_EQ(kv.value_rotation(), c.value_rot) << kv_type_name(c.v) << " head dim " << c.head_dim;
    }
    // KVEC_KV_ROTATION=0 stores them as they are.
    setenv("KVEC_KV_ROTATION", "0", 1);
    const KvCache plain(quant_config(KvType::Q4_0, KvType::Q4_0));
    unsetenv("KVEC_KV_ROTATION");
    EXPECT_EQ(plain.key_rotation(), 0);
    EXPECT_EQ(plain.value_rotation(), 0);
    EXPECT_EQ(KvCache(quant_config(KvType::Q4_0, KvType::Q4_0)).key_rotation(), 64);
}

// The stored rows are the rotated rows quantised in one pass; read_keys / read_values undo the
// rotation; a query rotated as the keys scores the stored keys as it scores the keys read back;
// an output summed from the stored values and unrotated is the sum of the values read back.
TEST(KvCacheRotation, StoredRowsAreRotatedAndEverythingElseSeesThemUnrotated) {
    const int d = 128, n = 6;
    KvCacheConfig cfg = quant_config(KvType::Q4_0, KvType::Q8_0);
    cfg.head_dim = d;
    KvCache kv(cfg);
    const auto keys = random_rows(n, d, 7), values = random_rows(n, d, 8);
    std::vector<int32_t> pos(n);
    std::iota(pos.begin(), pos.end(), 0);
    kv.append(0, 1, n, keys.data(), d, values.data(), d, pos.data());

    std::vector<float> rotated = keys;
    hadamard_rotate(rotated.data(), n * d, 128);
    std::vector<uint8_t> want(ggml_row_size(KvType::Q4_0, n * d));
    quant::quantize_row_one_pass(KvType::Q4_0, rotated.data(), want.data(), n * d);
    EXPECT_EQ(std::memcmp(kv.key_data(0, 1), want.data(), want.size()), 0);

    std::vector<float> k_read(keys.size()), v_read(values.size());
    kv.read_keys(0, 1, 0, n, k_read.data());
    kv.read_values(0, 1, 0, n, v_read.data());
    std::vector<float> k_stored(keys.size()), v_stored(values.size());
    quant::dequantize_row(KvType::Q4_0, kv.key_data(0, 1), k_stored.data(), n * d);
    quant::dequantize_row(KvType::Q8_0, kv.value_data(0, 1), v_stored.data(), n * d);
    double k_err = 0.0, k_norm = 0.0;
    for (size_t i = 0; i < keys.size(); ++i) {
        k_err += (k_read[i] - keys[i]) * (k_read[i] - keys[i]);
        k_norm += keys[i] * keys[i];
    }
    EXPECT_LT(std::sqrt(k_err / k_norm), 0.15);  // 4-bit rounding, not a rotated row
    for (size_t i = 0; i < values.size(); ++i) ASSERT_NEAR(v_read[i], values[i], 0.02f) << i;

    std::vector<float> q = random_rows(1, d, 9);
    std::vector<float> q_rot = q;
    kv.rotate_queries(q_rot.data(), d);
    std::vector<float> out(d, 0.0f), want_out(d, 0.0f);
    for (int t = 0; t < n; ++t) {
        double stored = 0.0, read = 0.0;
        for (int i = 0; i < d; ++i) {
            stored += q_rot[static_cast<size_t>(i)] * k_stored[static_cast<size_t>(t * d + i)];
            read += q[static_cast<size_t>(i)] * k_read[static_cast<size_t>(t * d + i)];
        }
        EXPECT_NEAR(stored, read, 1e-3 * (1.0 + std::fabs(read))) << "entry " << t;
        const float p = 1.0f / static_cast<float>(t + 1);  // any weights
        for (int i = 0; i < d; ++i) {
            out[static_cast<size_t>(i)] += p * v_stored[static_cast<size_t>(t * d + i)];
            want_out[static_cast<size_t>(i)] += p * v_read[static_cast<size_t>(t * d + i)];
        }
    }
    kv.unrotate_outputs(out.data(), d);
    for (int i = 0; i < d; ++i) ASSERT_NEAR(out[static_cast<size_t>(i)], want_out[static_cast<size_t>(i)], 1e-4) << i;

    // Re-positioning takes unrotated keys and stores them rotated.
    const auto fresh = random_rows(1, d, 10);
    const int32_t moved = 1;
    kv.reposition(0, 1, 1, 2, fresh.data(), &moved);
    std::vector<float> back(d);
    kv.read_keys(0, 1, 1, 2, back.data());
    double err = 0.0, norm = 0.0;
    for (int i = 0; i < d; ++i) {
        err += (back[static_cast<size_t>(i)] - fresh[static_cast<size_t>(i)]) * (back[static_cast<size_t>(i)] - fresh[static_cast<size_t>(i)]);
        norm += fresh[static_cast<size_t>(i)] * fresh[static_cast<size_t>(i)];
    }
    EXPECT_LT(std::sqrt(err / norm), 0.15);
}

}  // namespace
}  // namespace kvec
