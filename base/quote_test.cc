#include "base/quote.h"

#include <string>

#include "gtest/gtest.h"

namespace glm {
namespace {

TEST(QuoteTest, ShortTextIsQuotedWhole) {
  EXPECT_EQ(Quote("Ettt|tL"), "\"Ettt|tL\"");
}

TEST(QuoteTest, ControlBytesAndNonAsciiAreEscaped) {
  EXPECT_EQ(Quote("a\x1b[2Jb\n\"\xff"), "\"a\\x1b[2Jb\\n\\\"\\xff\"");
}

TEST(QuoteTest, LongTextIsCutAndItsLengthGiven) {
  EXPECT_EQ(Quote(std::string(40000, 't'), 4), "\"tttt...\" (40000 bytes)");
}

TEST(QuoteTest, ExcerptKeepsShortPrintableTextAsItIs) {
  EXPECT_EQ(Excerpt("[4, -1]"), "[4, -1]");
  EXPECT_EQ(Excerpt("a\tb"), "\"a\\tb\"");
  EXPECT_EQ(Excerpt(std::string(100, '1')).substr(0, 4), "\"111");
}

}  // namespace
}  // namespace glm
