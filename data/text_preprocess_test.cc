#include "data/text_preprocess.h"

#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace glm {
namespace {

const char kTwoDocuments[] = "data/testdata/two_documents.jsonl";

std::string WriteInput(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(PreprocessJsonlTest, WritesOneDocumentPerLine) {
  ByteTokenizer tokenizer;
  const std::string prefix = ::testing::TempDir() + "/two";
  auto result = PreprocessJsonl(
      {kTwoDocuments, "text", prefix, /*append_eod=*/true}, tokenizer);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->documents, 2);
  EXPECT_EQ(result->tokens, 13 + 12);  // texts plus one eod each
  EXPECT_EQ(result->dtype, TokenDtype::kUint16);
  auto dataset = IndexedDataset::Open(prefix);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  ASSERT_EQ((*dataset)->document_count(), 2);
  EXPECT_EQ(tokenizer.Decode((*dataset)->Sequence(0)),
            "Hello world.<|endoftext|>");
  EXPECT_EQ(tokenizer.Decode((*dataset)->Sequence(1)),
            "Second doc\n<|endoftext|>");
}

TEST(PreprocessJsonlTest, WithoutEodKeepsTextOnly) {
  ByteTokenizer tokenizer;
  const std::string prefix = ::testing::TempDir() + "/no_eod";
  auto result = PreprocessJsonl({kTwoDocuments, "text", prefix}, tokenizer);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->tokens, 12 + 11);
}

TEST(PreprocessJsonlTest, BadLineIsNamedAndNothingIsWritten) {
  ByteTokenizer tokenizer;
  const std::string input =
      WriteInput("bad.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"x\"}\n");
  const std::string prefix = ::testing::TempDir() + "/bad";
  auto result = PreprocessJsonl({input, "text", prefix}, tokenizer);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().message(),
            input + ":2: field \"text\" missing or not a string");
  EXPECT_FALSE(std::ifstream(BinPath(prefix)).good());
  EXPECT_FALSE(std::ifstream(IdxPath(prefix)).good());

  const std::string not_json = WriteInput("not_json.jsonl", "{oops\n");
  result = PreprocessJsonl({not_json, "text", prefix}, tokenizer);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().message(), not_json + ":1: not JSON");
}

TEST(PreprocessJsonlTest, OtherKey) {
  ByteTokenizer tokenizer;
  const std::string input = WriteInput("body.jsonl", "{\"body\": \"abc\"}\n");
  auto result = PreprocessJsonl({input, "body", ::testing::TempDir() + "/body"},
                                tokenizer);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->tokens, 3);
}

}  // namespace
}  // namespace glm
