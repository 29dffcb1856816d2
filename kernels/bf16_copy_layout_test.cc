#include "kernels/bf16_copy_layout.h"

#include "gtest/gtest.h"

namespace glm {
namespace {

TEST(Bf16CopyLayoutTest, CopiesStartOnSixteenBytes) {
  EXPECT_EQ(Bf16CopyStride(0), 0);
  EXPECT_EQ(Bf16CopyStride(1), 8);
  EXPECT_EQ(Bf16CopyStride(8), 8);
  EXPECT_EQ(Bf16CopyStride(9), 16);
  const Bf16CopyLayout layout = LayOutBf16Copies({3, 0, 16, 17, 1});
  EXPECT_EQ(layout.offsets, (std::vector<int64_t>{0, 8, 8, 24, 48}));
  EXPECT_EQ(layout.bytes, 2 * (8 + 16 + 24 + 8));
  for (int64_t offset : layout.offsets) {
    EXPECT_EQ(offset * kBf16CopyElementBytes % kBf16CopyAlignBytes, 0);
  }
}

TEST(Bf16CopyLayoutTest, NoSpansNoAllocation) {
  EXPECT_EQ(LayOutBf16Copies({}).bytes, 0);
  EXPECT_EQ(LayOutBf16Copies({0, 0}).bytes, 0);
}

}  // namespace
}  // namespace glm
