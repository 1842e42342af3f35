#include <gtest/gtest.h>

#include "engine/stop_strings.h"

namespace kvec {
namespace {

TEST(StopStrings, ReleasesTextThatCannotStartAStop) {
    StopStrings s({"STOP"});
    EXPECT_EQ(s.push("hello "), "hello ");
    EXPECT_EQ(s.push("wor"), "wor");
    EXPECT_EQ(s.push("ld ST"), "ld ");  // "ST" may begin "STOP"
    EXPECT_EQ(s.push("AR"), "STAR");    // it did not
    EXPECT_FALSE(s.stopped());
    EXPECT_EQ(s.push("S"), "");
    EXPECT_EQ(s.flush(), "S");
}

TEST(StopStrings, CutsBeforeTheEarliestStopAcrossPieces) {
    StopStrings s({"###", "\n\n"});
    EXPECT_EQ(s.push("answer: 4"), "answer: 4");
    EXPECT_EQ(s.push("2#"), "2");
    EXPECT_EQ(s.push("#"), "");
    EXPECT_EQ(s.push("# more"), "");
    EXPECT_TRUE(s.stopped());
    EXPECT_EQ(s.matched(), "###");
    EXPECT_EQ(s.push("ignored"), "");
    EXPECT_EQ(s.flush(), "");

    StopStrings t({"b\n\n", "\n\n"});
    EXPECT_EQ(t.push("a\n\nb\n\n"), "a");
    EXPECT_EQ(t.matched(), "\n\n");
}

TEST(StopStrings, NoStopsPassEverything) {
    StopStrings s({});
    EXPECT_EQ(s.push("abc"), "abc");
    StopStrings e({""});
    EXPECT_EQ(e.push("abc"), "abc");
    EXPECT_FALSE(e.stopped());
}

}  // namespace
}  // namespace kvec
