#include "data/tokenizer.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace glm {
namespace {

TEST(ByteTokenizerTest, RoundTripsUtf8Text) {
  ByteTokenizer tokenizer;
  const std::string text = "Héllo, wörld!\n\t42";
  const std::vector<int32_t> ids = tokenizer.Encode(text);
  EXPECT_EQ(ids.size(), text.size());  // one id per UTF-8 byte
  EXPECT_EQ(ids[1], 0xC3);
  EXPECT_EQ(tokenizer.Decode(ids), text);
}

TEST(ByteTokenizerTest, SpecialTokensFitTheTinyVocabulary) {
  ByteTokenizer tokenizer;
  EXPECT_EQ(tokenizer.vocab_size(), 262);
  EXPECT_LE(tokenizer.vocab_size(), 512);  // glm5.2-tiny
  EXPECT_EQ(tokenizer.eod_id(), 256);
  EXPECT_EQ(tokenizer.pad_id(), 257);
  const ChatMarkers& markers = tokenizer.chat_markers();
  EXPECT_EQ(
      tokenizer.Decode({markers.system, markers.user, markers.assistant,
                        markers.end, tokenizer.eod_id(), tokenizer.pad_id()}),
      "<|system|><|user|><|assistant|><|end|><|endoftext|><|pad|>");
}

TEST(ByteTokenizerTest, MarkerNamesInTextStayPlainBytes) {
  ByteTokenizer tokenizer;
  const std::string text = "<|assistant|>";
  const std::vector<int32_t> expected(text.begin(), text.end());
  EXPECT_EQ(tokenizer.Encode(text), expected);
}

TEST(ByteTokenizerTest, DecodesOutOfRangeIdsVisibly) {
  ByteTokenizer tokenizer;
  EXPECT_EQ(tokenizer.Decode({'a', 999}), "a<|invalid:999|>");
}

const char kCorpusModel[] = "data/corpus/tokenizer_sp512.model";

TEST(SentencePieceTokenizerTest, LoadsTheShippedModel) {
  if (!SentencePieceModel::Loadable()) {
    GTEST_SKIP() << "AddressSanitizer build: libsentencepiece cannot load";
  }
  auto tokenizer = LoadTokenizer(kCorpusModel);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->vocab_size(), 512);  // glm5.2-tiny's vocabulary
  EXPECT_EQ((*tokenizer)->name(), std::string("sentencepiece:") + kCorpusModel);
  const ChatMarkers& markers = (*tokenizer)->chat_markers();
  const std::vector<int32_t> specials = {
      (*tokenizer)->eod_id(), (*tokenizer)->pad_id(), markers.system,
      markers.user,           markers.assistant,      markers.end};
  EXPECT_EQ((*tokenizer)->Decode(specials),
            "<|endoftext|><|pad|><|system|><|user|><|assistant|><|end|>");
  for (int32_t id : specials) EXPECT_GT(id, 0);
}

TEST(SentencePieceTokenizerTest, RoundTripsTextAndCompressesIt) {
  if (!SentencePieceModel::Loadable()) {
    GTEST_SKIP() << "AddressSanitizer build: libsentencepiece cannot load";
  }
  auto tokenizer = LoadTokenizer(kCorpusModel);
  ASSERT_TRUE(tokenizer.ok());
  const std::string text =
      "The moon has no light of its own. What we see at night is sunlight "
      "reflected from its grey, dusty surface.\nWhat is 17 + 25?";
  const std::vector<int32_t> ids = (*tokenizer)->Encode(text);
  EXPECT_EQ((*tokenizer)->Decode(ids), text);
  EXPECT_LT(ids.size() * 2, text.size());  // well under one id per byte
  EXPECT_EQ((*tokenizer)->Encode("\n").size(), 1u);  // the newline piece
}

TEST(LoadTokenizerTest, MissingSentencePieceModelIsAnError) {
  auto tokenizer = LoadTokenizer("/nonexistent/tokenizer.model");
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_NE(tokenizer.status().message().find("/nonexistent/tokenizer.model"),
            std::string::npos)
      << tokenizer.status();
}

TEST(LoadTokenizerTest, ByteByName) {
  auto tokenizer = LoadTokenizer("byte");
  ASSERT_TRUE(tokenizer.ok());
  EXPECT_EQ((*tokenizer)->name(), "byte");
}

}  // namespace
}  // namespace glm
