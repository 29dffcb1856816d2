// The SentencePiece tokenizer in a binary that also uses the system
// protobuf, as glmctl and the worker do (see sentencepiece_model.cc for why
// that needs care).
#include <string>

#include "data/tokenizer.h"
#include "gtest/gtest.h"
#include "proto/job_spec.pb.h"

namespace glm {
namespace {

TEST(SentencePieceWithProtobufTest, BothWorkInOneProcess) {
  if (!SentencePieceModel::Loadable()) {
    GTEST_SKIP() << "AddressSanitizer build: libsentencepiece cannot load";
  }
  v1::ModelSpec spec;
  spec.set_preset("glm5.2-tiny");
  v1::ModelSpec parsed;
  ASSERT_TRUE(parsed.ParseFromString(spec.SerializeAsString()));
  EXPECT_EQ(parsed.preset(), "glm5.2-tiny");

  auto tokenizer = LoadTokenizer("data/corpus/tokenizer_sp512.model");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::string text = "What is 17 + 25?";
  EXPECT_EQ((*tokenizer)->Decode((*tokenizer)->Encode(text)), text);
}

}  // namespace
}  // namespace glm
