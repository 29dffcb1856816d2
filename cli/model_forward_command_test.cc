#include "cli/model_forward_command.h"

#include "gtest/gtest.h"

namespace glm {
namespace {

TEST(ParseTokenLinesTest, EqualLengthRowsSkippingBlankLines) {
  auto rows = ParseTokenLines("1 2 3\n\n4 5 6\n", "t.txt");
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[1], std::vector<int32_t>({4, 5, 6}));
}

TEST(ParseTokenLinesTest, ErrorsNameFileAndLine) {
  EXPECT_EQ(ParseTokenLines("1 2\n3 x\n", "t.txt").status().message(),
            "t.txt:2: 'x' is not a token id");
  EXPECT_EQ(ParseTokenLines("1 2\n3\n", "t.txt").status().message(),
            "t.txt:2: 1 tokens, but the first sequence has 2");
  EXPECT_EQ(ParseTokenLines("\n\n", "t.txt").status().message(),
            "t.txt: no token ids");
  EXPECT_FALSE(ParseTokenLines("-1\n", "t.txt").ok());
}

}  // namespace
}  // namespace glm
