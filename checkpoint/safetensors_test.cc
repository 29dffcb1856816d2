#include "checkpoint/safetensors.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "gtest/gtest.h"

namespace glm {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

template <typename T>
std::string_view AsBytes(const std::vector<T>& values) {
  return std::string_view(reinterpret_cast<const char*>(values.data()),
                          values.size() * sizeof(T));
}

// A file with the given header text and data section, for corrupt cases.
std::string RawFile(const std::string& name, const std::string& header,
                    const std::string& data) {
  std::string bytes;
  for (int i = 0; i < 8; ++i) {
    bytes.push_back(static_cast<char>(uint64_t{header.size()} >> (8 * i)));
  }
  const std::string path = TempPath(name);
  WriteAll(path, bytes + header + data);
  return path;
}

// The error Open gives, which must name the file.
std::string OpenError(const std::string& path) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::Open(path);
  EXPECT_FALSE(file.ok()) << path;
  if (file.ok()) return "";
  EXPECT_NE(file.status().message().find(path), std::string::npos)
      << file.status();
  return std::string(file.status().message());
}

TEST(SafetensorsTest, RoundTripsEveryDtypeBitwise) {
  const std::vector<float> f32 = {1.5f, -2.25f, 0.f, 3e-8f, 7.f, -0.f};
  const std::vector<uint16_t> bf16 = {0x3f80, 0xc000, 0x7fc0, 0x0001};
  const std::vector<uint16_t> f16 = {0x3c00, 0x0001, 0x7c00};
  const std::vector<int32_t> i32 = {1, -2, 3};
  const std::vector<int64_t> i64 = {int64_t{1} << 40, -5};
  const std::vector<uint8_t> u8 = {0, 255, 7};
  const std::vector<int8_t> i8 = {-128, 127};
  const std::vector<float> scalar = {42.f};
  const std::vector<uint8_t> flags = {1, 0, 1};
  const std::vector<TensorBytes> tensors = {
      {"w.f32", DType::kF32, {2, 3}, AsBytes(f32)},
      {"w.bf16", DType::kBF16, {4}, AsBytes(bf16)},
      {"w.f16", DType::kF16, {3, 1}, AsBytes(f16)},
      {"ids", DType::kI32, {3}, AsBytes(i32)},
      {"big", DType::kI64, {2}, AsBytes(i64)},
      {"bytes", DType::kU8, {3}, AsBytes(u8)},
      {"small", DType::kI8, {2}, AsBytes(i8)},
      {"mask", DType::kBool, {3}, AsBytes(flags)},
      {"empty", DType::kF32, {0, 4}, std::string_view()},
      {"scalar", DType::kF32, {}, AsBytes(scalar)},
  };
  const std::string path = TempPath("round_trip.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors, {{"format", "pt"}}).ok());

  const std::string bytes = ReadAll(path);
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  EXPECT_EQ((8 + header_size) % 8, 0u) << "header padded to 8 bytes";

  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  ASSERT_EQ((*file)->tensors().size(), tensors.size());
  for (const TensorBytes& tensor : tensors) {
    const TensorInfo* info = (*file)->Find(tensor.name);
    ASSERT_NE(info, nullptr) << tensor.name;
    EXPECT_EQ(info->dtype, tensor.dtype);
    EXPECT_EQ(info->shape, tensor.shape);
    EXPECT_EQ(*(*file)->Bytes(tensor.name), tensor.bytes) << tensor.name;
  }
  EXPECT_EQ(*(*file)->ReadFloat32("w.f32"), f32);
  EXPECT_EQ((*file)->Find("absent"), nullptr);
  EXPECT_FALSE((*file)->Bytes("absent").ok());
}

TEST(SafetensorsTest, ConvertsHalfPrecisionToFloat32) {
  const std::vector<uint16_t> bf16 = {0x3f80, 0xc000, 0x4049};
  const std::vector<uint16_t> f16 = {0x3c00, 0xc000, 0x0001,
                                     0x7c00, 0x8000, 0x3555};
  const std::string path = TempPath("half.safetensors");
  ASSERT_TRUE(
      WriteSafetensors(
          path, {{"b", DType::kBF16, {3}, AsBytes(bf16)},
                 {"h", DType::kF16, {6}, AsBytes(f16)},
                 {"i", DType::kI32, {1}, AsBytes(std::vector<int32_t>{1})}})
          .ok());
  auto file = *SafetensorsFile::Open(path);
  EXPECT_EQ(*file->ReadFloat32("b"),
            (std::vector<float>{1.f, -2.f, 3.140625f}));
  std::vector<float> h = *file->ReadFloat32("h");
  EXPECT_EQ(h[0], 1.f);
  EXPECT_EQ(h[1], -2.f);
  EXPECT_EQ(h[2], std::ldexp(1.f, -24));  // smallest subnormal
  EXPECT_EQ(h[3], std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::signbit(h[4]));
  EXPECT_FLOAT_EQ(h[5], 0.333251953125f);
  absl::StatusOr<std::vector<float>> ints = file->ReadFloat32("i");
  ASSERT_FALSE(ints.ok());
  EXPECT_NE(ints.status().message().find("tensor 'i'"), std::string::npos);
}

TEST(SafetensorsTest, WriterRejectsBadTensors) {
  const std::vector<float> four(4);
  EXPECT_FALSE(WriteSafetensors(TempPath("bad.safetensors"),
                                {{"a", DType::kF32, {3}, AsBytes(four)}})
                   .ok());
  absl::Status twice = WriteSafetensors(
      TempPath("bad.safetensors"), {{"a", DType::kF32, {4}, AsBytes(four)},
                                    {"a", DType::kF32, {4}, AsBytes(four)}});
  EXPECT_NE(twice.message().find("'a' used twice"), std::string::npos);
  struct stat st;
  EXPECT_NE(stat(TempPath("bad.safetensors").c_str(), &st), 0)
      << "nothing written";
}

TEST(SafetensorsTest, TruncatedFiles) {
  const std::string tiny = TempPath("tiny.safetensors");
  WriteAll(tiny, "abc");
  EXPECT_NE(OpenError(tiny).find("truncated: 3 bytes"), std::string::npos);

  const std::vector<float> values(4, 1.f);
  const std::string path = TempPath("cut.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"a", DType::kF32, {4}, AsBytes(values)},
                                      {"b", DType::kF32, {4}, AsBytes(values)}})
                  .ok());
  const std::string bytes = ReadAll(path);
  WriteAll(path, bytes.substr(0, bytes.size() - 4));
  EXPECT_NE(OpenError(path).find("tensor \"b\": data_offsets [16, 32] out of "
                                 "range of the 28-byte data section"),
            std::string::npos);
  WriteAll(path, bytes.substr(0, 20));
  EXPECT_NE(OpenError(path).find("goes beyond the end of the file"),
            std::string::npos);
}

TEST(SafetensorsTest, HeaderErrorsNameTheTensor) {
  const std::string data(16, '\0');
  struct Case {
    std::string header;
    std::string data;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"{\"a\": ", data, "header is not valid JSON"},
      {"[1, 2]", "", "header is not a JSON object"},
      {R"({"a":{"dtype":"Q4","shape":[4],"data_offsets":[0,16]}})", data,
       "tensor \"a\": unknown dtype 'Q4'"},
      {R"({"a":{"shape":[4],"data_offsets":[0,16]}})", data,
       "tensor \"a\": missing string field 'dtype'"},
      {R"({"a":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", data,
       "tensor \"a\": shape [-4] has a non-integer or negative dimension"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0]}})", data,
       "tensor \"a\": 'data_offsets' must be [begin, end]"},
      {R"({"a":{"dtype":"BF16","shape":[4],"data_offsets":[0,16]}})", data,
       "tensor \"a\": shape [4] of BF16 needs 8 bytes but data_offsets span "
       "16"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", data,
       "tensor \"a\": data_offsets [8, 24] out of range"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}})", data,
       "tensor \"a\": data_offsets [16, 0] out of range"},
      {R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
       data, "tensor \"b\": data_offsets [8, 16] overlap tensor \"a\""},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
       data,
       "tensor \"b\": data_offsets begin at 12 leaving a gap after byte 8"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data,
       "tensors cover 8 of the 16 bytes"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
       data, "tensor \"a\" appears twice"},
      {R"({"__metadata__":{"format":1}})", "",
       "__metadata__ value for \"format\" is not a string"},
      // Shapes whose element count overflows 64 bits, and deep nesting.
      {R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],)"
       R"("data_offsets":[0,16]}})",
       data, "has more than 1152921504606846976 elements"},
      {R"({"a":{"dtype":"F32","shape":[18446744073709551615,0],)"
       R"("data_offsets":[0,0]}})",
       "", "has more than"},
      {"{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}",
       "", "nests more than 8 levels"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path =
        RawFile("case" + std::to_string(i) + ".safetensors", cases[i].header,
                cases[i].data);
    EXPECT_NE(OpenError(path).find(cases[i].expected), std::string::npos)
        << "expected: " << cases[i].expected << "\ngot: " << OpenError(path);
  }
}

TEST(SafetensorsTest, AcceptsHeaderPaddingAndEmptyFiles) {
  const std::string path =
      RawFile("padded.safetensors",
              R"({"a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})"
              "      ",
              std::string("\x07\0\0\0", 4));
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->tensors().at(0).shape, std::vector<int64_t>{1});
  ASSERT_TRUE(
      SafetensorsFile::Open(RawFile("empty.safetensors", "{}", "")).ok());
}

class SafetensorsFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempPath(
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    mkdir(dir_.c_str(), 0755);
    for (int i = 0; i < 5; ++i) {
      values_.push_back(std::vector<float>(4, static_cast<float>(i)));
      tensors_.push_back({"t" + std::to_string(i),
                          DType::kF32,
                          {2, 2},
                          AsBytes(values_.back())});
    }
  }
  std::string dir_;
  std::vector<std::vector<float>> values_;
  std::vector<TensorBytes> tensors_;
};

TEST_F(SafetensorsFolderTest, ShardedRoundTrip) {
  ASSERT_TRUE(WriteSafetensorsFolder(dir_, tensors_, 40).ok());
  absl::StatusOr<SafetensorsFolder> folder = SafetensorsFolder::Open(dir_);
  ASSERT_TRUE(folder.ok()) << folder.status();
  EXPECT_TRUE(folder->sharded());
  EXPECT_EQ(folder->files().size(), 3u);  // 2 + 2 + 1 tensors of 16 bytes
  EXPECT_EQ(folder->TensorNames(),
            (std::vector<std::string>{"t0", "t1", "t2", "t3", "t4"}));
  for (int i = 0; i < 5; ++i) {
    const std::string name = "t" + std::to_string(i);
    EXPECT_EQ(*folder->FileOf(name)->ReadFloat32(name), values_[i]);
  }
  EXPECT_NE(folder->FileOf("t4")->path().find("model-00003-of-00003"),
            std::string::npos);
  EXPECT_NE(ReadAll(dir_ + "/model.safetensors.index.json")
                .find("\"total_size\": 80"),
            std::string::npos);
}

TEST_F(SafetensorsFolderTest, SingleFile) {
  ASSERT_TRUE(WriteSafetensorsFolder(dir_, tensors_, 1 << 20).ok());
  absl::StatusOr<SafetensorsFolder> folder = SafetensorsFolder::Open(dir_);
  ASSERT_TRUE(folder.ok()) << folder.status();
  EXPECT_FALSE(folder->sharded());
  EXPECT_EQ(folder->TensorNames().size(), 5u);
  EXPECT_EQ(folder->Find("t3")->shape, (std::vector<int64_t>{2, 2}));
}

TEST_F(SafetensorsFolderTest, IndexAndShardsMustAgree) {
  ASSERT_TRUE(WriteSafetensorsFolder(dir_, tensors_, 40).ok());
  const std::string shard1 = "model-00001-of-00003.safetensors";
  std::map<std::string, std::string> map = {
      {"t0", shard1},
      {"t1", shard1},
      {"t2", "model-00002-of-00003.safetensors"},
      {"t3", "model-00002-of-00003.safetensors"},
      {"t4", "model-00003-of-00003.safetensors"}};
  auto with = [&](const std::map<std::string, std::string>& changed) {
    EXPECT_TRUE(WriteSafetensorsIndex(dir_, changed, 80).ok());
    absl::StatusOr<SafetensorsFolder> folder = SafetensorsFolder::Open(dir_);
    EXPECT_FALSE(folder.ok());
    return folder.ok() ? std::string() : std::string(folder.status().message());
  };
  auto missing = map;
  missing["t9"] = shard1;
  EXPECT_NE(with(missing).find("tensor 't9' is mapped to " + shard1 +
                               ", which does not hold it"),
            std::string::npos);
  auto unmapped = map;
  unmapped.erase("t1");
  EXPECT_NE(with(unmapped).find("tensor 't1' is not mapped to " + shard1),
            std::string::npos);
  auto absent = map;
  absent["t4"] = "model-00009-of-00009.safetensors";
  EXPECT_NE(with(absent).find("cannot open"), std::string::npos);
  WriteAll(dir_ + "/model.safetensors.index.json", "{\"weight_map\": 3}");
  EXPECT_NE(SafetensorsFolder::Open(dir_).status().message().find(
                "missing object 'weight_map'"),
            std::string::npos);
}

}  // namespace
}  // namespace glm
