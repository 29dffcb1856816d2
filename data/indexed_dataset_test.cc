#include "data/indexed_dataset.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace glm {
namespace {

std::string TempPrefix(const std::string& name) {
  return ::testing::TempDir() + "/" + name;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

bool Exists(const std::string& path) { return std::ifstream(path).good(); }

template <typename T>
void Put(const T& value, std::string* out) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

void WriteDataset(const std::string& prefix, TokenDtype dtype,
                  const std::vector<std::vector<int32_t>>& documents) {
  auto builder = IndexedDatasetBuilder::Create(prefix, dtype);
  ASSERT_TRUE(builder.ok()) << builder.status();
  for (const auto& document : documents) {
    ASSERT_TRUE((*builder)->AddDocument(document).ok());
  }
  ASSERT_TRUE((*builder)->Finish().ok());
}

TEST(IndexedDatasetTest, RoundTripsDocuments) {
  const std::string prefix = TempPrefix("round_trip");
  const std::vector<std::vector<int32_t>> documents = {
      {1, 2, 3}, {}, {511, 0, 65000, 7}, {42}};
  WriteDataset(prefix, TokenDtype::kUint16, documents);

  auto dataset = IndexedDataset::Open(prefix);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->dtype(), TokenDtype::kUint16);
  EXPECT_EQ((*dataset)->sequence_count(), 4);
  EXPECT_EQ((*dataset)->document_count(), 4);
  EXPECT_EQ((*dataset)->element_count(), 8);
  EXPECT_EQ((*dataset)->document_indices(),
            (std::vector<int64_t>{0, 1, 2, 3, 4}));
  for (size_t i = 0; i < documents.size(); ++i) {
    EXPECT_EQ((*dataset)->Sequence(i), documents[i]) << "sequence " << i;
  }
  int32_t middle[2];
  (*dataset)->Read(2, 1, 2, middle);
  EXPECT_EQ(middle[0], 0);
  EXPECT_EQ(middle[1], 65000);
  EXPECT_EQ(ReadBytes(BinPath(prefix)).size(), 8u * 2);
}

TEST(IndexedDatasetTest, RoundTripsEveryDtype) {
  for (TokenDtype dtype :
       {TokenDtype::kUint8, TokenDtype::kInt8, TokenDtype::kInt16,
        TokenDtype::kInt32, TokenDtype::kInt64, TokenDtype::kFloat64,
        TokenDtype::kFloat32, TokenDtype::kUint16}) {
    const std::string prefix = TempPrefix("dtype_" + DtypeName(dtype));
    const std::vector<int32_t> values = {0, 1, 100, 127};
    WriteDataset(prefix, dtype, {values});
    auto dataset = IndexedDataset::Open(prefix);
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    EXPECT_EQ((*dataset)->dtype(), dtype);
    EXPECT_EQ((*dataset)->Sequence(0), values) << DtypeName(dtype);
    EXPECT_EQ(ReadBytes(BinPath(prefix)).size(), 4u * DtypeSize(dtype));
  }
}

TEST(IndexedDatasetTest, IndexHasMegatronLayoutByteForByte) {
  const std::string prefix = TempPrefix("layout");
  WriteDataset(prefix, TokenDtype::kInt32, {{5, 6}, {7, 8, 9}});
  std::string expected("MMIDIDX\0\0", 9);
  Put<uint64_t>(1, &expected);  // version
  Put<uint8_t>(4, &expected);   // dtype code int32
  Put<uint64_t>(2, &expected);  // sequences
  Put<uint64_t>(3, &expected);  // document indices (documents + 1)
  Put<int32_t>(2, &expected);   // lengths
  Put<int32_t>(3, &expected);
  Put<int64_t>(0, &expected);  // byte pointers
  Put<int64_t>(8, &expected);
  Put<int64_t>(0, &expected);  // document indices
  Put<int64_t>(1, &expected);
  Put<int64_t>(2, &expected);
  EXPECT_EQ(ReadBytes(IdxPath(prefix)), expected);
  std::string bin;
  for (int32_t value : {5, 6, 7, 8, 9}) Put(value, &bin);
  EXPECT_EQ(ReadBytes(BinPath(prefix)), bin);
}

TEST(IndexedDatasetTest, DocumentsOfSeveralSequences) {
  const std::string prefix = TempPrefix("multi");
  auto builder = IndexedDatasetBuilder::Create(prefix, TokenDtype::kUint16);
  ASSERT_TRUE(builder.ok());
  ASSERT_TRUE((*builder)->AddSequence(std::vector<int32_t>{1, 2}).ok());
  ASSERT_TRUE((*builder)->AddSequence(std::vector<int32_t>{3}).ok());
  (*builder)->EndDocument();
  ASSERT_TRUE((*builder)->AddSequence(std::vector<int32_t>{4}).ok());
  ASSERT_TRUE((*builder)->Finish().ok());  // closes the open document
  auto dataset = IndexedDataset::Open(prefix);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->sequence_count(), 3);
  EXPECT_EQ((*dataset)->document_count(), 2);
  EXPECT_EQ((*dataset)->document_indices(), (std::vector<int64_t>{0, 2, 3}));
}

TEST(IndexedDatasetTest, ValueOutsideDtypeIsRejectedAndNothingIsWritten) {
  const std::string prefix = TempPrefix("too_big");
  {
    auto builder = IndexedDatasetBuilder::Create(prefix, TokenDtype::kUint16);
    ASSERT_TRUE(builder.ok());
    absl::Status status =
        (*builder)->AddDocument(std::vector<int32_t>{1, 70000});
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("70000"), std::string::npos) << status;
    EXPECT_NE(status.message().find("uint16"), std::string::npos) << status;
  }
  EXPECT_FALSE(Exists(BinPath(prefix)));
  EXPECT_FALSE(Exists(IdxPath(prefix)));
}

TEST(IndexedDatasetTest, ChoosesDtypeByVocabularyLikeMegatron) {
  EXPECT_EQ(DtypeForVocabSize(512), TokenDtype::kUint16);
  EXPECT_EQ(DtypeForVocabSize(65499), TokenDtype::kUint16);
  EXPECT_EQ(DtypeForVocabSize(65500), TokenDtype::kInt32);
  EXPECT_EQ(DtypeForVocabSize(154880), TokenDtype::kInt32);
}

// Writes a valid two-document dataset, applies `corrupt` to its files and
// expects Open to fail with a message naming the file and containing `what`.
void ExpectCorruptionDetected(
    const std::string& name,
    const std::function<void(const std::string& prefix)>& corrupt,
    const std::string& file_suffix, const std::string& what) {
  const std::string prefix = TempPrefix(name);
  WriteDataset(prefix, TokenDtype::kUint16, {{1, 2, 3}, {4, 5}});
  corrupt(prefix);
  auto dataset = IndexedDataset::Open(prefix);
  ASSERT_FALSE(dataset.ok()) << name;
  const std::string message(dataset.status().message());
  EXPECT_NE(message.find(prefix + file_suffix), std::string::npos) << message;
  EXPECT_NE(message.find(what), std::string::npos) << message;
}

// Overwrites `size` bytes of `path` at `offset` with `bytes`.
void Patch(const std::string& path, size_t offset, const std::string& bytes) {
  std::string contents = ReadBytes(path);
  contents.replace(offset, bytes.size(), bytes);
  WriteBytes(path, contents);
}

TEST(IndexedDatasetTest, DetectsCorruptFiles) {
  ExpectCorruptionDetected(
      "bad_magic", [](const std::string& p) { Patch(IdxPath(p), 0, "XX"); },
      ".idx", "bad magic");
  ExpectCorruptionDetected(
      "bad_version",
      [](const std::string& p) { Patch(IdxPath(p), 9, std::string(1, 2)); },
      ".idx", "version 2");
  ExpectCorruptionDetected(
      "bad_dtype",
      [](const std::string& p) { Patch(IdxPath(p), 17, std::string(1, 9)); },
      ".idx", "unknown dtype code 9");
  ExpectCorruptionDetected(
      "short_header",
      [](const std::string& p) { WriteBytes(IdxPath(p), "MMIDIDX"); }, ".idx",
      "shorter than the 34-byte header");
  ExpectCorruptionDetected(
      "truncated_index",
      [](const std::string& p) {
        std::string idx = ReadBytes(IdxPath(p));
        WriteBytes(IdxPath(p), idx.substr(0, idx.size() - 8));
      },
      ".idx", "header says 2 sequences and 3 document indices");
  ExpectCorruptionDetected(
      "truncated_bin",
      [](const std::string& p) {
        WriteBytes(BinPath(p), ReadBytes(BinPath(p)).substr(0, 8));
      },
      ".idx", "sequence 1 (2 x uint16 at byte 6) runs past the end");
  ExpectCorruptionDetected(
      "negative_length",
      [](const std::string& p) {
        std::string value;
        Put<int32_t>(-1, &value);
        Patch(IdxPath(p), 34, value);
      },
      ".idx", "sequence 0 has length -1");
  ExpectCorruptionDetected(
      "bad_document_index",
      [](const std::string& p) {
        std::string value;
        Put<int64_t>(5, &value);
        Patch(IdxPath(p), 34 + 2 * 4 + 2 * 8 + 2 * 8, value);
      },
      ".idx", "last document index is 5 but there are 2 sequences");
  ExpectCorruptionDetected(
      "missing_bin",
      [](const std::string& p) { std::remove(BinPath(p).c_str()); }, ".bin",
      "cannot open");
}

}  // namespace
}  // namespace glm
