// JSONL reader: line numbers in errors, blank lines, CRLF, BOM, typed field access.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "eval/jsonl.h"
#include "util/error.h"
#include "error_of.h"

namespace kvec::eval {
namespace {

using testing_support::error_of;

TEST(Jsonl, ParsesLinesWithNumbers) {
    // Line 2 is blank and skipped, line 3 ends in CRLF; numbering counts every physical line.
    const auto recs = parse_jsonl("{\"a\": 1}\n\n{\"a\": 2}\r\n  \t\n[3]\n", "mem.jsonl");
    ASSERT_EQ(recs.size(), 3u);
    EXPECT_EQ(recs[0].line, 1u);
    EXPECT_EQ(recs[0].value["a"], 1);
    EXPECT_EQ(recs[1].line, 3u);
    EXPECT_EQ(recs[1].value["a"], 2);
    EXPECT_EQ(recs[2].line, 5u);
    EXPECT_TRUE(recs[2].value.is_array());
}

TEST(Jsonl, SkipsByteOrderMarkAndHandlesNoFinalNewline) {
    const auto recs = parse_jsonl("\xEF\xBB\xBF{\"k\": \"v\"}\n{\"k\": \"w\"}", "bom.jsonl");
    ASSERT_EQ(recs.size(), 2u);
    EXPECT_EQ(recs[1].value["k"], "w");
    EXPECT_TRUE(parse_jsonl("", "empty.jsonl").empty());
}

TEST(Jsonl, MalformedLineNamesFileAndLine) {
    const std::string msg = error_of([] { parse_jsonl("{\"a\": 1}\n{\"a\": }\n", "bad.jsonl"); });
    EXPECT_NE(msg.find("bad.jsonl:2: invalid JSON"), std::string::npos) << msg;
    // Two values on one line are not one JSON value.
    const std::string msg2 = error_of([] { parse_jsonl("{} {}\n", "two.jsonl"); });
    EXPECT_NE(msg2.find("two.jsonl:1:"), std::string::npos) << msg2;
    // Invalid UTF-8 inside a string.
    const std::string msg3 = error_of([] { parse_jsonl("\n\n{\"a\": \"\xff\"}\n", "utf.jsonl"); });
    EXPECT_NE(msg3.find("utf.jsonl:3:"), std::string::npos) << msg3;
    // A number too large for a double (found by fuzz_longbench; nlohmann throws out_of_range).
    const std::string msg4 = error_of([] { parse_jsonl("{\"x\": 1.5e333333333}\n", "big.jsonl"); });
    EXPECT_NE(msg4.find("big.jsonl:1: invalid JSON"), std::string::npos) << msg4;
}

TEST(Jsonl, ReadsFilesAndStreams) {
    const std::filesystem::path dir =
        std::filesystem::path(::testing::TempDir()) / "kvec_jsonl_test";
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "x.jsonl").string();
    {
        std::ofstream out(path, std::ios::binary);
        out << "{\"n\": 1}\n\n{\"n\": 2}\nnot json\n";
    }
    JsonlReader reader(path);
    nlohmann::json v;
    ASSERT_TRUE(reader.next(v));
    EXPECT_EQ(v["n"], 1);
    ASSERT_TRUE(reader.next(v));
    EXPECT_EQ(v["n"], 2);
    EXPECT_EQ(reader.line(), 3u);
    const std::string msg = error_of([&] { reader.next(v); });
    EXPECT_NE(msg.find(path + ":4: invalid JSON"), std::string::npos) << msg;

    const std::string missing = (dir / "missing.jsonl").string();
    const std::string msg2 = error_of([&] { read_jsonl(missing); });
    EXPECT_NE(msg2.find(missing), std::string::npos) << msg2;
    std::filesystem::remove_all(dir);
}

TEST(Jsonl, TypedFields) {
    const auto obj = nlohmann::json::parse(
        R"({"s": "x", "n": 3, "f": 3.0, "h": 3.5, "z": null, "l": ["a", 13], "bad": [true]})");
    EXPECT_EQ(json_required_string(obj, "s", "f:1"), "x");
    EXPECT_FALSE(json_optional_string(obj, "z", "f:1"));  // null counts as missing
    EXPECT_FALSE(json_optional_string(obj, "absent", "f:1"));
    EXPECT_EQ(json_optional_int(obj, "n", "f:1"), 3);
    EXPECT_EQ(json_optional_int(obj, "f", "f:1"), 3);
    EXPECT_EQ(json_optional_string_list(obj, "l", "f:1"), (std::vector<std::string>{"a", "13"}));

    EXPECT_NE(error_of([&] { json_required_string(obj, "absent", "f:7"); }).find("f:7: missing"),
              std::string::npos);
    EXPECT_NE(
        error_of([&] { json_optional_string(obj, "n", "f:7"); }).find("field 'n' must be a string"),
        std::string::npos);
    EXPECT_NE(error_of([&] { json_optional_int(obj, "h", "f:7"); }).find("must be an integer"),
              std::string::npos);
    // Far outside int64 (found by fuzz_longbench: the cast came before the range check).
    const auto huge = nlohmann::json::parse(R"({"big": 4.9e80, "neg": -1e19})");
    EXPECT_NE(error_of([&] { json_optional_int(huge, "big", "f:8"); }).find("must be an integer"),
              std::string::npos);
    EXPECT_NE(error_of([&] { json_optional_int(huge, "neg", "f:8"); }).find("must be an integer"),
              std::string::npos);
    EXPECT_NE(error_of([&] { json_optional_string_list(obj, "s", "f:7"); }).find("list of strings"),
              std::string::npos);
    EXPECT_NE(error_of([&] { json_optional_string_list(obj, "bad", "f:7"); }).find("item 0"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                  json_optional_string(nlohmann::json::array(), "s", "f:9");
              }).find("f:9: expected a JSON object"),
              std::string::npos);
}

}  // namespace
}  // namespace kvec::eval
