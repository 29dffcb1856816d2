#include "parallel/layout_parser.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace glm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Parse(const std::string& layout) {
  absl::StatusOr<std::vector<std::string>> stages = ParseLayout(layout);
  EXPECT_TRUE(stages.ok()) << stages.status();
  return stages.value_or(std::vector<std::string>{});
}

std::string ParseError(const std::string& layout) {
  absl::StatusOr<std::vector<std::string>> stages = ParseLayout(layout);
  EXPECT_FALSE(stages.ok()) << layout;
  return std::string(stages.status().message());
}

TEST(LayoutParserTest, PlainSymbolsAndSeparators) {
  EXPECT_THAT(Parse("Ettt|tt|mL"), ElementsAre("Ettt", "tt", "mL"));
}

TEST(LayoutParserTest, CommasAndWhitespaceAreCosmetic) {
  EXPECT_THAT(Parse(" E, t t |\tt,t | m L "), ElementsAre("Ett", "tt", "mL"));
}

TEST(LayoutParserTest, EmptyStagesAreKept) {
  EXPECT_THAT(Parse("Et||tL"), ElementsAre("Et", "", "tL"));
  EXPECT_THAT(Parse("|Et"), ElementsAre("", "Et"));
  EXPECT_THAT(Parse(""), ElementsAre(""));
}

TEST(LayoutParserTest, SymbolRepeat) {
  EXPECT_THAT(Parse("Et*3|t*2L"), ElementsAre("Ettt", "ttL"));
  EXPECT_THAT(Parse("Et|*2tL"), ElementsAre("Et", "", "tL"));
  EXPECT_THAT(Parse("Et*0|L"), ElementsAre("E", "L"));
}

TEST(LayoutParserTest, MegatronDeepSeekExample) {
  // Megatron's documented PP16 VPP2 layout for DeepSeek-V3.
  std::vector<std::string> stages = Parse("Et*3|(tt|)*29,m|L");
  ASSERT_EQ(stages.size(), 32u);
  EXPECT_EQ(stages[0], "Ettt");
  for (int i = 1; i <= 29; ++i) EXPECT_EQ(stages[i], "tt") << i;
  EXPECT_EQ(stages[30], "m");
  EXPECT_EQ(stages[31], "L");
}

TEST(LayoutParserTest, GroupRepeatsFromMegatronDocstring) {
  EXPECT_THAT(Parse("E(tt|tt|tt)*2L"),
              ElementsAre("Ett", "tt", "tttt", "tt", "ttL"));
  EXPECT_THAT(Parse("(|t)*2,tL"), ElementsAre("", "t", "ttL"));
}

TEST(LayoutParserTest, NestedGroups) {
  EXPECT_THAT(Parse("E((t*2|)*2t)*2L"),
              ElementsAre("Ett", "tt", "ttt", "tt", "tL"));
  EXPECT_THAT(Parse("((t))*3"), ElementsAre("ttt"));
}

TEST(LayoutParserTest, UnknownCharacterNamesPosition) {
  std::string error = ParseError("Ettx|L");
  EXPECT_THAT(error, HasSubstr("position 4"));
  EXPECT_THAT(error, HasSubstr("(found \"x\")"));
}

TEST(LayoutParserTest, UnclosedGroupPointsAtOpeningParenthesis) {
  std::string error = ParseError("Et(tt|");
  EXPECT_THAT(error, HasSubstr("unclosed '('"));
  EXPECT_THAT(error, HasSubstr("position 3"));
}

TEST(LayoutParserTest, UnmatchedCloseParenthesis) {
  std::string error = ParseError("Ett)L");
  EXPECT_THAT(error, HasSubstr("unmatched ')'"));
  EXPECT_THAT(error, HasSubstr("position 4"));
}

TEST(LayoutParserTest, MissingRepeatCount) {
  EXPECT_THAT(ParseError("Et*|L"),
              HasSubstr("repeat count after '*' at position 4"));
  EXPECT_THAT(ParseError("Et*"), HasSubstr("end of string"));
  EXPECT_THAT(ParseError("*3"), HasSubstr("position 1"));
}

TEST(LayoutParserTest, HugeExpansionIsRefused) {
  EXPECT_THAT(ParseError("t*99999999999"), HasSubstr("expands to more than"));
  EXPECT_THAT(ParseError("((t*1000)*1000)*1000"),
              HasSubstr("expands to more than"));
}

TEST(LayoutParserTest, DeepNestingIsRefusedWithoutRecursingFurther) {
  const std::string nested = std::string(kMaxLayoutNesting, '(') + "t" +
                             std::string(kMaxLayoutNesting, ')');
  EXPECT_THAT(Parse(nested), ElementsAre("t"));
  const std::string deeper = "(" + nested + ")";
  EXPECT_THAT(ParseError(deeper), HasSubstr("nest more than 32 deep"));
  // A stack-overflow attempt: tens of thousands of open groups, within the
  // byte limit only in part; either bound refuses it.
  EXPECT_THAT(ParseError(std::string(kMaxLayoutBytes, '(')),
              HasSubstr("nest more than"));
  EXPECT_THAT(ParseError(std::string(50000, '(')),
              HasSubstr("longer than the 8192"));
}

TEST(LayoutParserTest, LongStringIsRefusedAndQuotedBounded) {
  const std::string error = ParseError(std::string(kMaxLayoutBytes + 1, 't'));
  EXPECT_THAT(error, HasSubstr("8193 bytes"));
  EXPECT_LT(error.size(), 300u);
}

TEST(LayoutParserTest, ZeroRepeatsStillCountTowardTheWork) {
  std::string layout;
  for (int i = 0; i < 20; ++i) layout += "(t*1000000)*0";
  EXPECT_THAT(ParseError(layout), HasSubstr("in all"));
}

TEST(LayoutParserTest, ControlCharactersAreEscapedInErrors) {
  const std::string error = ParseError("Et\x1b[2J|L");
  EXPECT_THAT(error, HasSubstr("\\x1b"));
  EXPECT_EQ(error.find('\x1b'), std::string::npos);
}

TEST(LayoutParserTest, FormatRoundTrips) {
  std::vector<std::string> stages = {"Ett", "", "tmL"};
  EXPECT_EQ(FormatLayout(stages), "Ett||tmL");
  EXPECT_EQ(Parse(FormatLayout(stages)), stages);
}

}  // namespace
}  // namespace glm
