// Saved conversations (engine/session_file.h) and generation that continues a kept session
// (GenerateOptions::reuse): a restored session continues exactly as the live one, every damaged
// or mismatched file is refused by name, and a continued prompt gives what a fresh one gives.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "engine/generator.h"
#include "engine/session_file.h"
#include "model/model.h"
#include "policy/registry.h"
#include "test_helpers.h"
#include "util/error.h"
#include "error_of.h"

namespace kvec {
namespace {

using namespace testing_helpers;

const Model& model() {
    static const std::unique_ptr<Model> m = Model::load(write_model(tiny_spec(), "session-file-tiny.gguf"));
    return *m;
}

std::vector<int32_t> some_tokens(int n, int32_t salt) {
    std::vector<int32_t> t(static_cast<size_t>(n));  // [n] ordinary ids of the 512-token vocabulary
    for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = 3 + (i * 37 + salt * 11) % 500;
    return t;
}

std::string read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

using testing_support::error_of;

struct Case {
    std::string spec;  // "" = full cache
    KvType k, v;
};

class SessionFileRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(SessionFileRoundTrip, RestoredSessionContinuesExactlyAsTheLiveOne) {
    const Case& c = GetParam();
    SessionOptions o;
    o.kv_type_k = c.k;
    o.kv_type_v = c.v;
    std::unique_ptr<Evictor> live_policy = c.spec.empty() ? nullptr : policy::make_policy(c.spec);
    Session live(model(), o);
    live.set_evictor(live_policy.get());
    live.prefill(some_tokens(60, 1));
    for (const int32_t t : {17, 230, 41}) live.decode(t);
    const std::string path = temp_path("round-trip.slot");
    save_session(live, path, std::string(64, 'a'), c.spec);

    const SessionFile file = SessionFile::read(path);
    EXPECT_EQ(file.model_sha256(), std::string(64, 'a'));
    EXPECT_EQ(file.policy(), c.spec);
    EXPECT_EQ(file.n_past(), 63);
    EXPECT_EQ(file.entries(), live.kv_cache().total_entries());
    std::unique_ptr<Evictor> restored_policy = c.spec.empty() ? nullptr : policy::make_policy(c.spec);
    Session restored(model(), o);
    restored.set_evictor(restored_policy.get());
    file.restore(restored);
    EXPECT_EQ(restored.n_past(), live.n_past());
    EXPECT_EQ(restored.tokens(), live.tokens());
    EXPECT_EQ(restored.kv_cache().used_bytes(), live.kv_cache().used_bytes());
    if (!c.spec.empty()) EXPECT_LT(live.kv_cache().total_entries(), 2 * 2 * 2 * 63);  // the policy evicted

    // The same continuation, logit for logit: a prefill chunk (the policy runs again) and decodes.
    const std::vector<int32_t> more = some_tokens(20, 2);
    const std::span<const float> a = live.prefill(more);
    const std::vector<float> live_logits(a.begin(), a.end());
    const std::span<const float> b = restored.prefill(more);
    ASSERT_EQ(std::memcmp(live_logits.data(), b.data(), live_logits.size() * sizeof(float)), 0);
    for (const int32_t t : {5, 99}) {
        const std::span<const float> x = live.decode(t);
        const std::vector<float> lx(x.begin(), x.end());
        const std::span<const float> y = restored.decode(t);
        ASSERT_EQ(std::memcmp(lx.data(), y.data(), lx.size() * sizeof(float)), 0) << "token " << t;
    }
    EXPECT_EQ(restored.kv_cache().total_entries(), live.kv_cache().total_entries());
}

INSTANTIATE_TEST_SUITE_P(Policies, SessionFileRoundTrip,
                         ::testing::Values(Case{"", KvType::F16, KvType::F16},
                                           Case{"kvec:budget=24,window=8", KvType::F16, KvType::F16},
                                           Case{"snapkv:budget=24,window=8", KvType::Q8_0, KvType::Q4_0},
                                           Case{"h2o:budget=24,window=8", KvType::F16, KvType::F16},
                                           Case{"streaming:budget=24", KvType::F32, KvType::BF16}));

TEST(SessionFile, DamagedOrMismatchedFilesAreRefusedByName) {
    std::unique_ptr<Evictor> policy = policy::make_policy("h2o:budget=24,window=8");
    Session s(model());
    s.set_evictor(policy.get());
    s.prefill(some_tokens(40, 3));
    const std::string path = temp_path("damaged.slot");
    save_session(s, path, std::string(64, 'b'), "h2o:budget=24,window=8");
    const std::string bytes = read_bytes(path);

    const std::string bad = temp_path("bad.slot");
    std::string flipped = bytes;
    flipped[bytes.size() / 2] ^= 0x10;
    write_bytes(bad, flipped);
    EXPECT_NE(error_of([&] { SessionFile::read(bad); }).find("checksum does not match"), std::string::npos);
    write_bytes(bad, bytes.substr(0, bytes.size() - 100));
    EXPECT_NE(error_of([&] { SessionFile::read(bad); }).find("corrupt or truncated"), std::string::npos);
    write_bytes(bad, "GGUF and more bytes than a header");
    EXPECT_NE(error_of([&] { SessionFile::read(bad); }).find("not a kvec slot file"), std::string::npos);
    EXPECT_NE(error_of([&] { SessionFile::read(temp_path("absent.slot")); }).find("cannot open"), std::string::npos);
    // Not read at all: larger than the caller allows (checked before reading), a link, a directory.
    const std::string size_error = error_of([&] { SessionFile::read(path, bytes.size() - 1); });
    EXPECT_NE(size_error.find(fmt::format("holds {} bytes, more than the {}", bytes.size(), bytes.size() - 1)),
              std::string::npos) << size_error;
    EXPECT_EQ(SessionFile::read(path, bytes.size()).n_past(), 40);
    const std::string link = temp_path("link.slot");
    std::filesystem::remove(link);
    std::filesystem::create_symlink(path, link);
    EXPECT_NE(error_of([&] { SessionFile::read(link); }).find("a symbolic link, not followed"), std::string::npos);
    EXPECT_NE(error_of([&] { SessionFile::read(std::filesystem::temp_directory_path().string()); }).find("not a regular file"),
              std::string::npos);

    const SessionFile file = SessionFile::read(path);
    // Another element type.
    SessionOptions q8;
    q8.kv_type_k = KvType::Q8_0;
    Session other_type(model(), q8);
    std::unique_ptr<Evictor> p2 = policy::make_policy("h2o:budget=24,window=8");
    other_type.set_evictor(p2.get());
    EXPECT_NE(error_of([&] { file.restore(other_type); }).find("holds f16 keys and f16 values; this session stores q8_0 keys"),
              std::string::npos);
    // No policy: the file's per-entry scores have nowhere to go.
    Session no_policy(model());
    EXPECT_NE(error_of([&] { file.restore(no_policy); }).find("scores per entry"), std::string::npos);
    EXPECT_EQ(no_policy.kv_cache().total_entries(), 0);
    // Another shape of model.
    RandomModelSpec spec = tiny_spec();
    spec.n_layer = 3;
    const std::unique_ptr<Model> deeper = Model::load(write_model(spec, "session-file-3-layers.gguf"));
    Session other_shape(*deeper);
    std::unique_ptr<Evictor> p3 = policy::make_policy("h2o:budget=24,window=8");
    other_shape.set_evictor(p3.get());
    EXPECT_NE(error_of([&] { file.restore(other_shape); }).find("2 layers x 2 KV heads x head dim 32; this model's is 3 x"),
              std::string::npos);
    // A context too short for the saved sequence.
    SessionOptions short_ctx;
    short_ctx.n_ctx = 16;
    Session small(model(), short_ctx);
    std::unique_ptr<Evictor> p4 = policy::make_policy("h2o:budget=24,window=8");
    small.set_evictor(p4.get());
    EXPECT_NE(error_of([&] { file.restore(small); }).find("outside this session's context of 16"), std::string::npos);
    EXPECT_EQ(small.kv_cache().total_entries(), 0);  // nothing half-restored
}

TEST(GeneratorReuse, ContinuingAKeptSessionGivesWhatAFreshPrefillGives) {
    const Tokenizer tokenizer = Tokenizer::from_gguf(model().file());
    GenerateOptions g;
    g.n_predict = 6;
    g.sampling.temperature = 0.0f;
    const std::vector<int32_t> first = some_tokens(50, 4);

    Session kept(model());
    Generator on_kept(kept, tokenizer);
    const GenerationResult r1 = on_kept.generate_from_tokens(first, g);
    std::vector<int32_t> second = first;  // the first turn, its answer, a new turn
    second.insert(second.end(), r1.tokens.begin(), r1.tokens.end());
    for (const int32_t t : some_tokens(12, 5)) second.push_back(t);

    GenerateOptions cont = g;
    cont.reuse = static_cast<int32_t>(first.size() + r1.tokens.size()) - 1;  // the answer's last token was not fed
    const GenerationResult continued = on_kept.generate_from_tokens(second, cont);
    EXPECT_EQ(continued.stats.n_reused, cont.reuse);
    Session fresh(model());
    const GenerationResult whole = Generator(fresh, tokenizer).generate_from_tokens(second, g);
    EXPECT_EQ(continued.tokens, whole.tokens);
    EXPECT_EQ(kept.tokens(), fresh.tokens());

    GenerateOptions wrong = g;
    wrong.reuse = 10;
    std::vector<int32_t> other = some_tokens(30, 6);  // does not start with the session's tokens
    EXPECT_NE(error_of([&] { on_kept.generate_from_tokens(other, wrong); }).find("cannot reuse 10 tokens"), std::string::npos);
    wrong.reuse = static_cast<int32_t>(second.size());  // nothing left to prefill
    EXPECT_NE(error_of([&] { on_kept.generate_from_tokens(second, wrong); }).find("cannot reuse"), std::string::npos);
}

}  // namespace
}  // namespace kvec
