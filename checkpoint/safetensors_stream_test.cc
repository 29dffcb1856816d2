#include "checkpoint/safetensors_stream.h"

#include <fstream>

#include "checkpoint/checkpoint_test_util.h"
#include "gtest/gtest.h"

namespace glm {
namespace {

// A file in this test's own temporary directory.
std::string Path(const std::string& name) {
  static const std::string dir = NewTempDir();
  return dir + "/" + name;
}

const std::vector<TensorHeader> kHeaders = {{"a", DType::kBF16, {2, 3}},
                                            {"b", DType::kF32, {5}},
                                            {"c", DType::kI64, {}}};

std::vector<std::string> Values() {
  return {std::string(12, 'a'), std::string(20, 'b'), std::string(8, 'c')};
}

TEST(SafetensorsStreamTest, SameBytesAsTheInMemoryWriter) {
  const std::vector<std::string> values = Values();
  std::vector<TensorBytes> in_memory;
  for (size_t i = 0; i < kHeaders.size(); ++i) {
    in_memory.push_back(
        {kHeaders[i].name, kHeaders[i].dtype, kHeaders[i].shape, values[i]});
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  ASSERT_TRUE(
      WriteSafetensors(Path("memory.safetensors"), in_memory, metadata).ok());
  int fetched = 0, written = 0;
  absl::Status status = WriteSafetensorsStreamed(
      Path("stream.safetensors"), kHeaders, metadata,
      [&](size_t i, std::string* scratch) -> absl::StatusOr<std::string_view> {
        ++fetched;
        if (i != 1) return std::string_view(values[i]);
        *scratch = values[i];  // an assembled tensor
        return std::string_view(*scratch);
      },
      [&](size_t i, std::string_view bytes) {
        EXPECT_EQ(bytes, values[i]);
        ++written;
      });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(fetched, 3);
  EXPECT_EQ(written, 3);
  EXPECT_EQ(ReadAll(Path("stream.safetensors")),
            ReadAll(Path("memory.safetensors")));
}

TEST(SafetensorsStreamTest, WrongSizeOrRepeatedNameLeavesNoFile) {
  const std::vector<std::string> values = Values();
  const std::string path = Path("bad.safetensors");
  absl::Status status = WriteSafetensorsStreamed(
      path, kHeaders, {},
      [&](size_t i, std::string*) -> absl::StatusOr<std::string_view> {
        return std::string_view(values[i]).substr(0, i == 2 ? 4 : 100);
      });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("tensor 'c' [] of I64 needs 8 bytes, got 4"),
            std::string::npos)
      << status;
  EXPECT_FALSE(std::ifstream(path).good());

  std::vector<TensorHeader> twice = {kHeaders[0], kHeaders[0]};
  status = WriteSafetensorsStreamed(
      path, twice, {},
      [&](size_t, std::string*) -> absl::StatusOr<std::string_view> {
        return std::string_view(values[0]);
      });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::ifstream(path).good());
}

TEST(SafetensorsStreamTest, ReleasedPagesReadTheFileAgain) {
  const std::string path = Path("pages.safetensors");
  std::string big(1 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  ASSERT_TRUE(WriteSafetensors(path, {{"x", DType::kU8, {1 << 20}, big}}).ok());
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok());
  const std::string_view bytes = *(*file)->Bytes("x");
  EXPECT_EQ(bytes, big);
  ReleasePages(bytes);
  EXPECT_EQ(bytes, big);
}

}  // namespace
}  // namespace glm
