// Registry and option parsing: names, defaults, canonical strings, and the errors users see.
#include <gtest/gtest.h>

#include <string>

#include "policy/registry.h"
#include "util/error.h"

namespace kvec::policy {
namespace {

// Runs f, expects kvec::Error whose message contains every fragment.
template <typename F>
void expect_error(F&& f, std::initializer_list<std::string> fragments) {
    try {
        f();
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        const std::string msg = e.what();
        for (const auto& frag : fragments) {
            EXPECT_NE(msg.find(frag), std::string::npos) << "'" << frag << "' not in: " << msg;
        }
    }
}

TEST(PolicySpec, Parses) {
    PolicySpec s = parse_policy_spec("snapkv");
    EXPECT_EQ(s.name, "snapkv");
    EXPECT_TRUE(s.options.empty());
    s = parse_policy_spec(" kvec : budget=256 , gamma = 0.5,unit=token ");
    EXPECT_EQ(s.name, "kvec");
    EXPECT_EQ(s.options.size(), 3u);
    EXPECT_EQ(s.options["budget"], "256");
    EXPECT_EQ(s.options["gamma"], "0.5");
    EXPECT_EQ(s.options["unit"], "token");
}

TEST(PolicySpec, Errors) {
    expect_error([] { parse_policy_spec(""); }, {"missing policy name"});
    expect_error([] { parse_policy_spec(":budget=3"); }, {"missing policy name"});
    expect_error([] { parse_policy_spec("snapkv:budget"); }, {"budget", "key=value"});
    expect_error([] { parse_policy_spec("snapkv:=3"); }, {"empty name"});
    expect_error([] { parse_policy_spec("snapkv:budget=3,budget=4"); }, {"budget", "twice"});
    // A ':' with nothing after it is a mistake, not the defaults (issue 23).
    expect_error([] { parse_policy_spec("kvec:"); }, {"'kvec:'", "no options after ':'"});
    expect_error([] { parse_policy_spec("h2o: "); }, {"no options after ':'"});
    expect_error([] { parse_policy_spec("   "); }, {"missing policy name"});
}

// Integer options never pass through a double: 2^53 + 1 and 2^63 - 1 keep their values, one
// more than the maximum is refused, and the listing prints the exact range (issue 23).
TEST(PolicySpec, IntegerOptionsAreExact) {
    const std::map<std::string, std::string> big = {{"seed", "9007199254740993"}};
    const OptionValues v("random", find_policy("random").options, big);
    EXPECT_EQ(v.get_int("seed"), 9007199254740993LL);
    EXPECT_NE(v.canonical().find("seed=9007199254740993"), std::string::npos) << v.canonical();
    const OptionValues m("random", find_policy("random").options, {{"seed", "9223372036854775807"}});
    EXPECT_EQ(m.get_int("seed"), INT64_MAX);
    expect_error([] { make_policy("random:seed=9223372036854775808"); }, {"seed", "9223372036854775807"});
    expect_error([] { make_policy("random:seed=-1"); }, {"seed", "'-1'"});
    const std::string listing = format_policy_list();
    EXPECT_NE(listing.find("integer 0..9223372036854775807"), std::string::npos);
    EXPECT_EQ(listing.find("..-9223372036854775808"), std::string::npos);
}

TEST(Registry, EveryPolicyIsListedAndBuildsWithDefaults) {
    const std::vector<std::string> expected = {"full",    "random", "streaming", "h2o",
                                               "tova",    "snapkv", "pyramidkv", "ada-snapkv", "ada-pyramidkv",
                                               "keydiff", "kvec",   "knorm",     "lagkv",
                                               "expected-attention", "kvzip", "headkv", "gemfilter"};
    ASSERT_EQ(policies().size(), expected.size());
    const std::string listing = format_policy_list();
    for (size_t i = 0; i < expected.size(); ++i) {
        EXPECT_EQ(policies()[i].name, expected[i]);
        if (expected[i] == "headkv") continue;  // needs its scores file (test_headkv.cpp)
        EXPECT_NE(make_policy(expected[i]), nullptr) << expected[i];
        EXPECT_NE(listing.find(expected[i]), std::string::npos);
    }
    EXPECT_NE(listing.find("budget=128"), std::string::npos);
    EXPECT_NE(listing.find("layers=global"), std::string::npos);
}

TEST(Registry, RequestsTheObservationsEachPolicyNeeds) {
    EXPECT_EQ(make_policy("full")->request().window, 0);
    EXPECT_EQ(make_policy("snapkv")->request().window, 32);
    EXPECT_EQ(make_policy("snapkv:window=8")->request().window, 8);
    EXPECT_EQ(make_policy("kvec")->request().window, 32);
    EXPECT_TRUE(make_policy("h2o")->request().column_sums);
    EXPECT_FALSE(make_policy("snapkv")->request().column_sums);
    EXPECT_TRUE(make_policy("tova")->request().last_row);
    EXPECT_EQ(make_policy("keydiff")->request().window, 0);
    EXPECT_EQ(make_policy("streaming")->request().window, 0);
    EXPECT_EQ(make_policy("h2o")->request().decode_interval, 0);
    EXPECT_EQ(make_policy("h2o:decode=1")->request().decode_interval, 1);
    // One-shot: the window is the prompt's last w queries; chunked: each chunk's own.
    EXPECT_EQ(make_policy("snapkv")->request().window_scope, WindowScope::Prompt);
    EXPECT_EQ(make_policy("snapkv:chunked=true")->request().window_scope, WindowScope::Chunk);
    EXPECT_NE(make_policy("streaming:rerotate=true"), nullptr);
}

TEST(Registry, CanonicalOptions) {
    EXPECT_EQ(policy_options("streaming:budget=64").canonical(),
              "streaming:budget=64,ratio=0,chunked=false,decode=0,sinks=4,rerotate=false");
    const OptionValues v = policy_options("kvec:gamma=0.5,unit=token,chunked=yes");
    EXPECT_EQ(v.get_float("gamma"), 0.5);
    EXPECT_EQ(v.get_choice("unit"), "token");
    EXPECT_TRUE(v.get_bool("chunked"));
    EXPECT_TRUE(v.is_given("gamma"));
    EXPECT_FALSE(v.is_given("mu"));
    EXPECT_EQ(v.get_float("mu"), 0.0);
    EXPECT_EQ(v.get_choice("layers"), "global");
    EXPECT_FALSE(v.get_bool("normalize"));
    EXPECT_EQ(v.get_float("alpha"), 0.2);
    EXPECT_EQ(v.get_int("window"), 32);
    EXPECT_EQ(v.get_int("kernel"), 15);
    EXPECT_EQ(v.get_choice("pooling"), "max");
    EXPECT_EQ(v.get_choice("gqa"), "mean");
}

TEST(Registry, ResolveFoldsFlagsIntoTheSpecOnce) {
    const ResolvedPolicy r = resolve("snapkv:window=8", {{"budget", "40", "--budget"}});
    EXPECT_EQ(r.spec, policy_options("snapkv:budget=40,window=8").canonical());
    ASSERT_NE(r.policy, nullptr);
    EXPECT_EQ(r.policy->request().window, 8);
    EXPECT_EQ(r.policy->budget_plan(1000)->budget, 40);
    EXPECT_EQ(resolve("kvec").spec, policy_options("kvec").canonical());
    const ResolvedPolicy ratio = resolve(" kvec : gamma=0.5", {{"ratio", "0.25", "kv.ratio"}});
    EXPECT_EQ(ratio.spec, policy_options("kvec:gamma=0.5,ratio=0.25").canonical());
    EXPECT_EQ(ratio.policy->budget_plan(1000)->budget, 250);
    EXPECT_FALSE(resolve("full").policy->budget_plan(1000).has_value());
    EXPECT_EQ(format_policy_spec(parse_policy_spec(" kvec : unit=token, gamma=0.5")), "kvec:gamma=0.5,unit=token");
    EXPECT_TRUE(has_option(find_policy("snapkv"), "window"));
    EXPECT_FALSE(has_option(find_policy("full"), "budget"));
    expect_error([] { resolve("full", {{"budget", "64", "kv.budget"}}); },
                 {"kv.budget does not apply to policy full", "no option 'budget'"});
    expect_error([] { resolve("kvec:budget=64", {{"budget", "32", "--budget"}}); },
                 {"budget given twice", "in --policy (budget=64)", "as --budget"});
    expect_error([] { resolve("kvec:budget=64", {{"budget", "32", "kv.budget"}}, "kv.policy"); },
                 {"in kv.policy (budget=64)"});
    expect_error([] { resolve("nosuch", {}); }, {"unknown eviction policy 'nosuch'"});
    expect_error([] { resolve("snapkv", {{"budget", "0", "--budget"}}); }, {"budget"});
}

TEST(Registry, ClearErrors) {
    expect_error([] { make_policy("snapkvv"); },
                 {"unknown eviction policy 'snapkvv'", "snapkv", "ada-snapkv"});
    expect_error([] { make_policy("snapkv:gamma=1"); }, {"snapkv", "no option 'gamma'", "kernel"});
    expect_error([] { make_policy("full:budget=3"); }, {"full", "takes no options"});
    expect_error([] { make_policy("snapkv:budget=abc"); }, {"budget", "integer", "'abc'"});
    expect_error([] { make_policy("snapkv:budget=0"); }, {"budget", "'0'"});
    expect_error([] { make_policy("snapkv:budget=12x"); }, {"budget", "'12x'"});
    expect_error([] { make_policy("snapkv:pooling=sum"); }, {"pooling", "max, avg", "'sum'"});
    expect_error([] { make_policy("snapkv:kernel=4"); }, {"kernel", "odd"});
    expect_error([] { make_policy("snapkv:window=0"); }, {"window must be >= 1"});
    expect_error([] { make_policy("snapkv:budget=16"); }, {"budget 16", "window 32"});
    expect_error([] { make_policy("ada-snapkv:alpha=2"); }, {"alpha", "'2'"});
    expect_error([] { make_policy("kvec:gamma=-1"); }, {"gamma", "'-1'"});
    expect_error([] { make_policy("kvec:mu=nan"); }, {"mu", "'nan'"});
    expect_error([] { make_policy("kvec:unit=word"); }, {"unit", "position, token"});
    expect_error([] { make_policy("kvec:chunked=maybe"); }, {"chunked", "true or false"});
    expect_error([] { make_policy("streaming:budget=3"); }, {"budget 3"});
    expect_error([] { make_policy("streaming:rerotate=perhaps"); }, {"rerotate", "true or false"});
    expect_error([] { make_policy("random:ratio=1.5"); }, {"ratio", "'1.5'"});
    // Small budgets that respect the window are fine.
    EXPECT_NE(make_policy("snapkv:budget=8,window=8"), nullptr);
    EXPECT_NE(make_policy("tova:budget=1"), nullptr);
    EXPECT_NE(make_policy("keydiff:budget=1,window=0"), nullptr);
}

}  // namespace
}  // namespace kvec::policy
