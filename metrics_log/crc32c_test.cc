#include "metrics_log/crc32c.h"

#include <cstring>

#include "gtest/gtest.h"

namespace glm {
namespace {

TEST(Crc32cTest, MatchesTheStandardCheckValues) {
  // RFC 3720 (iSCSI), appendix B.4, and the CRC catalogue's check value.
  EXPECT_EQ(Crc32c("123456789", 9), 0xe3069283u);
  unsigned char zeros[32] = {};
  EXPECT_EQ(Crc32c(zeros, sizeof(zeros)), 0x8a9136aau);
  unsigned char ones[32];
  std::memset(ones, 0xff, sizeof(ones));
  EXPECT_EQ(Crc32c(ones, sizeof(ones)), 0x62a8ab43u);
}

TEST(Crc32cTest, MaskRotatesAndAddsTheDelta) {
  const uint32_t crc = Crc32c("123456789", 9);
  EXPECT_EQ(MaskedCrc32c("123456789", 9),
            ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

}  // namespace
}  // namespace glm
