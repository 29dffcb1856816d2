#include "model/weight_copies.h"

#include <algorithm>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "model/test_model_util.h"

namespace glm {
namespace {

std::set<const float*> Starts(const std::vector<ConstFloatSpan>& spans) {
  std::set<const float*> starts;
  for (const ConstFloatSpan& span : spans) starts.insert(span.data);
  return starts;
}

TEST(ProductWeightsTest, EveryMatrixAndExpertStackButAGatheredEmbedding) {
  ModelConfig config = TinyTestConfig();
  config.tie_word_embeddings = false;
  ModelParameters params(config);
  const std::vector<ConstFloatSpan> spans = ProductWeights(params);
  const std::set<const float*> starts = Starts(spans);
  EXPECT_EQ(starts.size(), spans.size());
  size_t matrices = 0;
  for (const NamedTensor& named : params.Named()) {
    const bool product = named.value->shape().size() >= 2 &&
                         named.name != "model.embed_tokens.weight";
    matrices += product;
    EXPECT_EQ(starts.count(named.value->data()), product ? 1u : 0u)
        << named.name;
  }
  EXPECT_EQ(spans.size(), matrices);
  const auto head = std::find_if(
      spans.begin(), spans.end(),
      [&](ConstFloatSpan s) { return s.data == params.lm_head.value.data(); });
  ASSERT_NE(head, spans.end());
  EXPECT_EQ(head->size, params.lm_head.value.numel());
}

TEST(ProductWeightsTest, TiedEmbeddingIsTheOutputHead) {
  ModelConfig config = TinyTestConfig();
  config.tie_word_embeddings = true;
  ModelParameters params(config);
  EXPECT_EQ(
      Starts(ProductWeights(params)).count(params.embed_tokens.value.data()),
      1u);
}

TEST(ProductWeightsTest, TensorsNotHeldAreLeftOut) {
  HeldTensors held;
  held.names = std::set<std::string>{"model.norm.weight",
                                     "model.layers.0.self_attn.o_proj.weight"};
  ModelParameters params(TinyTestConfig(), held);
  const std::vector<ConstFloatSpan> spans = ProductWeights(params);
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].data, params.layers[0].self_attn.o_proj.value.data());
}

TEST(ProductWeightsTest, TheSameTensorsHeldOrNot) {
  ModelConfig config = TinyTestConfig();
  config.tie_word_embeddings = false;
  ModelParameters whole(config);
  HeldTensors nothing;
  nothing.names.emplace();
  ModelParameters shapes(config, nothing);
  EXPECT_TRUE(ProductWeights(shapes).empty());
  std::vector<std::string> held, declared;
  for (const NamedTensor& named : whole.Named()) {
    if (IsProductWeight(whole, named)) held.push_back(named.name);
  }
  for (const NamedTensor& named : shapes.Named()) {
    if (IsProductWeight(shapes, named)) declared.push_back(named.name);
  }
  EXPECT_EQ(held, declared);
  EXPECT_EQ(held.size(), ProductWeights(whole).size());
}

// One allocation, each copy starting on 16 bytes (8 bf16 elements).
TEST(ProductWeightsTest, CopyBytesRoundEachSpanToSixteenBytes) {
  ModelConfig config = TinyTestConfig();
  ModelParameters params(config);
  int64_t bytes = 0;
  for (const ConstFloatSpan& span : ProductWeights(params)) {
    bytes += (span.size + 7) / 8 * 8 * 2;
  }
  EXPECT_GT(bytes, 0);
  EXPECT_EQ(ProductWeightCopyBytes(params), bytes);
  HeldTensors nothing;
  nothing.names.emplace();
  ModelParameters none(config, nothing);
  EXPECT_EQ(ProductWeightCopyBytes(none), 0);
}

}  // namespace
}  // namespace glm
