#include "cli/npy_writer.h"

#include <cstring>

#include "gtest/gtest.h"

namespace glm {
namespace {

TEST(NpyWriterTest, HeaderIsAlignedAndDescribesTheArray) {
  const std::vector<float> values = {1.f, -2.f, 3.5f, 0.f, 7.f, 8.f};
  const std::string npy = EncodeNpyFloat32({1, 2, 3}, values);
  ASSERT_EQ(npy.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header_len = static_cast<unsigned char>(npy[8]) |
                            static_cast<unsigned char>(npy[9]) << 8;
  EXPECT_EQ((10 + header_len) % 64, 0u);
  const std::string header = npy.substr(10, header_len);
  EXPECT_NE(header.find("'descr': '<f4'"), std::string::npos);
  EXPECT_NE(header.find("'shape': (1, 2, 3)"), std::string::npos);
  EXPECT_EQ(header.back(), '\n');
  ASSERT_EQ(npy.size(), 10 + header_len + values.size() * 4);
  float read[6];
  std::memcpy(read, npy.data() + 10 + header_len, sizeof(read));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(read[i], values[i]);
}

TEST(NpyWriterTest, OneDimensionalShapeKeepsItsComma) {
  const std::string npy = EncodeNpyFloat32({3}, {1.f, 2.f, 3.f});
  EXPECT_NE(npy.find("'shape': (3,)"), std::string::npos);
}

}  // namespace
}  // namespace glm
