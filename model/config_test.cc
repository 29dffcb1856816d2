#include "model/config.h"

#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace glm {
namespace {

using nlohmann::json;

ModelConfig Preset(const std::string& name) {
  absl::StatusOr<ModelConfig> config = PresetConfig(name);
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

json TinyJson() { return json::parse(ToHfConfigJson(Preset("glm5.2-tiny"))); }

absl::StatusOr<ModelConfig> Parse(const json& j) {
  return ParseHfConfigJson(j.dump());
}

std::string ReadTestdata(const std::string& name) {
  std::ifstream in("model/testdata/" + name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(ModelConfigTest, PresetsAreValidAndRoundTripThroughJson) {
  for (const std::string& name : PresetNames()) {
    ModelConfig config = Preset(name);
    EXPECT_TRUE(ValidateModelConfig(config).ok()) << name;
    absl::StatusOr<ModelConfig> parsed =
        ParseHfConfigJson(ToHfConfigJson(config));
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status();
    EXPECT_EQ(ToHfConfigJson(*parsed), ToHfConfigJson(config)) << name;
  }
  EXPECT_FALSE(PresetConfig("glm6").ok());
}

TEST(ModelConfigTest, TinyPresetsShowComputingAndSkipLayers) {
  ModelConfig tiny = Preset("glm5.2-tiny");
  EXPECT_GE(tiny.num_hidden_layers, 8);
  EXPECT_EQ(tiny.num_mtp_layers, 1);
  EXPECT_LT(tiny.index_topk, 32);
  EXPECT_FALSE(tiny.index_sharing.IsComputingLayer(4));
  EXPECT_TRUE(tiny.index_sharing.IsComputingLayer(7));
  EXPECT_FALSE(tiny.IsMoeLayer(1));
  EXPECT_TRUE(tiny.IsMoeLayer(2));
  // A few MB in float32.
  EXPECT_LT(CountParameters(tiny).total * 4, 4 << 20);
  ModelConfig glm5 = Preset("glm5-tiny");
  for (int layer = 1; layer <= glm5.num_hidden_layers; ++layer) {
    EXPECT_TRUE(glm5.index_sharing.IsComputingLayer(layer));
  }
}

// transformers 5.17 builds the same counts from `glmctl model config`'s
// output (tests/oracle/count_parameters.py on the GPU machine, meta device):
// glm5.2-tiny 622,784; glm5-tiny 636,224; glm5.2-mini 2,690,985,216;
// glm5.2 743,377,000,704.
TEST(ModelConfigTest, TinyPresetCountsEqualTransformers) {
  EXPECT_EQ(CountParameters(Preset("glm5.2-tiny")).total, 622784);
  EXPECT_EQ(CountParameters(Preset("glm5-tiny")).total, 636224);
}

TEST(ModelConfigTest, MiniPresetHas2_69BParametersWithoutMtp) {
  ModelConfig mini = Preset("glm5.2-mini");
  ParameterCount count = CountParameters(mini);
  EXPECT_EQ(count.total, 2690985216);
  EXPECT_EQ(count.active, 1445276928);
  EXPECT_EQ(count.mtp, 186855424);
  std::vector<int> computing;
  for (int layer = 1; layer <= mini.num_hidden_layers; ++layer) {
    if (mini.index_sharing.IsComputingLayer(layer)) computing.push_back(layer);
  }
  EXPECT_EQ(computing, (std::vector<int>{1, 2, 3, 7, 11}));
}

TEST(ModelConfigTest, Glm52CountEqualsTransformersCount) {
  ParameterCount count = CountParameters(Preset("glm5.2"));
  // transformers reloads GLM-5.2 as GlmMoeDsaForCausalLM with 743,377,000,704
  // parameters: exactly our count without MTP (router correction biases are
  // buffers, not parameters; HF ignores the MTP layer).
  EXPECT_EQ(count.total, 743377000704);
  EXPECT_EQ(count.active, 41250511104);  // "A40B"
  EXPECT_EQ(count.mtp, 9943548416);
  // The released checkpoint holds 753,329,940,480 elements: the above, the 76
  // router correction biases (75 MoE layers + MTP) and 9,371,904 elements of
  // an indexer in the MTP layer (model.layers.78.self_attn.indexer.*), which
  // the model does not run (the MTP layer reuses the main model's top-k).
  const int64_t biases = 76 * 256;
  const int64_t mtp_indexer =
      2048 * 32 * 128 + 6144 * 128 + 2 * 128 + 6144 * 32;
  EXPECT_EQ(count.total + count.mtp + biases + mtp_indexer, 753329940480);
}

TEST(ModelConfigTest, ParsesConfigAsTransformersSavesIt) {
  absl::StatusOr<ModelConfig> config =
      ParseHfConfigJson(ReadTestdata("glm5.2_hf_config.json"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(ToHfConfigJson(*config), ToHfConfigJson(Preset("glm5.2")));
}

TEST(ModelConfigTest, AppliesTransformersDefaults) {
  json j = TinyJson();
  for (const char* field :
       {"index_topk_freq", "index_skip_topk_offset", "n_group", "topk_group",
        "norm_topk_prob", "rms_norm_eps", "routed_scaling_factor",
        "num_nextn_predict_layers", "rope_parameters", "dtype",
        "max_position_embeddings", "first_k_dense_replace"}) {
    j.erase(field);
  }
  absl::StatusOr<ModelConfig> config = Parse(j);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->index_sharing.topk_freq, 1);
  EXPECT_EQ(config->index_sharing.skip_topk_offset, 2);  // HF's default
  EXPECT_EQ(config->n_group, 1);
  EXPECT_TRUE(config->norm_topk_prob);
  EXPECT_DOUBLE_EQ(config->rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(config->routed_scaling_factor, 2.5);
  EXPECT_EQ(config->num_mtp_layers, 0);
  EXPECT_DOUBLE_EQ(config->rope_theta, 10000.0);
  EXPECT_EQ(config->torch_dtype, "bfloat16");
  EXPECT_EQ(config->max_position_embeddings, 202752);
  EXPECT_EQ(config->first_k_dense_replace, 3);
}

TEST(ModelConfigTest, ReadsRopeThetaFromEitherPlace) {
  json j = TinyJson();
  j.erase("rope_parameters");
  j["rope_theta"] = 5e5;
  EXPECT_DOUBLE_EQ(Parse(j)->rope_theta, 5e5);
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 8e6}};
  EXPECT_DOUBLE_EQ(Parse(j)->rope_theta, 8e6);
  j["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_TRUE(Parse(j).ok());
}

TEST(ModelConfigTest, IndexPatternsOverrideFreqAndOffset) {
  json j = TinyJson();
  j["index_topk_freq"] = 1;
  j["index_topk_pattern"] = "FFFSSSFS";
  absl::StatusOr<ModelConfig> config = Parse(j);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->index_sharing.topk_freq, 4);
  EXPECT_EQ(config->index_sharing.skip_topk_offset, 3);

  j["index_topk_pattern"] = {"full",   "full", "shared", "full",
                             "shared", "full", "shared", "full"};
  config = Parse(j);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->index_sharing.topk_freq, 2);
  EXPECT_EQ(config->index_sharing.skip_topk_offset, 2);

  j["indexer_types"] = std::vector<std::string>(8, "full");
  EXPECT_EQ(Parse(j)->index_sharing.topk_freq, 1);
}

TEST(ModelConfigTest, MlpLayerTypesSetOrCheckFirstKDense) {
  json j = TinyJson();
  j.erase("first_k_dense_replace");
  j["mlp_layer_types"] = {"dense",  "dense",  "sparse", "sparse",
                          "sparse", "sparse", "sparse", "sparse"};
  EXPECT_EQ(Parse(j)->first_k_dense_replace, 2);
}

struct BadField {
  std::string field;  // expected in the error
  std::function<void(json&)> mutate;
};

TEST(ModelConfigTest, EachBadFieldIsNamed) {
  const std::vector<BadField> cases = {
      {"'vocab_size': missing", [](json& j) { j.erase("vocab_size"); }},
      {"'hidden_size': expected an integer",
       [](json& j) { j["hidden_size"] = "64"; }},
      {"'hidden_size': must be positive",
       [](json& j) { j["hidden_size"] = 0; }},
      {"'num_hidden_layers': missing",
       [](json& j) { j.erase("num_hidden_layers"); }},
      {"'num_attention_heads'",
       [](json& j) { j["num_attention_heads"] = 2.5; }},
      {"'q_lora_rank': missing or null",
       [](json& j) { j["q_lora_rank"] = nullptr; }},
      {"'kv_lora_rank'", [](json& j) { j["kv_lora_rank"] = -1; }},
      {"'qk_nope_head_dim'", [](json& j) { j.erase("qk_nope_head_dim"); }},
      {"'qk_rope_head_dim'", [](json& j) { j["qk_rope_head_dim"] = 7; }},
      {"'v_head_dim'", [](json& j) { j["v_head_dim"] = true; }},
      {"'intermediate_size'", [](json& j) { j["intermediate_size"] = 0; }},
      {"'moe_intermediate_size'",
       [](json& j) { j["moe_intermediate_size"] = 0; }},
      {"'n_routed_experts'", [](json& j) { j.erase("n_routed_experts"); }},
      {"'num_experts_per_tok'", [](json& j) { j["num_experts_per_tok"] = 9; }},
      {"'n_shared_experts'", [](json& j) { j["n_shared_experts"] = -1; }},
      {"'n_group'", [](json& j) { j["n_group"] = 3; }},
      {"'topk_group'", [](json& j) { j["topk_group"] = 2; }},
      {"'norm_topk_prob'", [](json& j) { j["norm_topk_prob"] = 1; }},
      {"'routed_scaling_factor'",
       [](json& j) { j["routed_scaling_factor"] = "2.5"; }},
      {"'rms_norm_eps'", [](json& j) { j["rms_norm_eps"] = 0; }},
      {"'first_k_dense_replace'",
       [](json& j) { j["first_k_dense_replace"] = 9; }},
      {"'mlp_layer_types'",
       [](json& j) {
         j["mlp_layer_types"] = {"sparse", "dense"};
       }},
      {"'mlp_layer_types'",
       [](json& j) {
         j["mlp_layer_types"] = std::vector<std::string>(8, "sparse");
       }},
      {"'index_n_heads'", [](json& j) { j["index_n_heads"] = 0; }},
      {"'index_head_dim'", [](json& j) { j["index_head_dim"] = 4; }},
      {"'index_topk'", [](json& j) { j["index_topk"] = 0; }},
      {"'index_topk_freq'", [](json& j) { j["index_topk_freq"] = 0; }},
      {"'index_skip_topk_offset'",
       [](json& j) { j["index_skip_topk_offset"] = 0; }},
      {"'index_topk_pattern'",
       [](json& j) { j["index_topk_pattern"] = "FSF"; }},
      {"'index_topk_pattern'",
       [](json& j) { j["index_topk_pattern"] = "FSFFSSSF"; }},
      {"'indexer_types'",
       [](json& j) {
         j["indexer_types"] = std::vector<std::string>(8, "sparse");
       }},
      {"'num_nextn_predict_layers'",
       [](json& j) { j["num_nextn_predict_layers"] = 2; }},
      {"'rope_parameters.rope_type'",
       [](json& j) { j["rope_parameters"]["rope_type"] = "yarn"; }},
      {"'rope_parameters.rope_theta'",
       [](json& j) { j["rope_parameters"]["rope_theta"] = "big"; }},
      {"'rope_theta'",
       [](json& j) {
         j.erase("rope_parameters");
         j["rope_theta"] = -1;
       }},
      {"'rope_scaling.type': \"yarn\" is not supported",
       [](json& j) {
         j["rope_scaling"] = {{"type", "yarn"}};
       }},
      {"'rope_parameters': expected an object",
       [](json& j) { j["rope_parameters"] = 8e6; }},
      {"'max_position_embeddings'",
       [](json& j) { j["max_position_embeddings"] = 0; }},
      {"'hidden_act'", [](json& j) { j["hidden_act"] = "gelu"; }},
      {"'rope_interleave'", [](json& j) { j["rope_interleave"] = "yes"; }},
      {"'attention_bias'", [](json& j) { j["attention_bias"] = true; }},
      {"'num_key_value_heads'", [](json& j) { j["num_key_value_heads"] = 1; }},
      {"'tie_word_embeddings'",
       [](json& j) { j["tie_word_embeddings"] = "no"; }},
      {"'dtype'", [](json& j) { j["dtype"] = 16; }},
      // Sizes past the bounds under which parameter counts stay in 64 bits.
      {"'num_hidden_layers': 4294967304 is out of range",
       [](json& j) { j["num_hidden_layers"] = (int64_t{1} << 32) + 8; }},
      {"'vocab_size': 18446744073709551615 is out of range",
       [](json& j) { j["vocab_size"] = ~uint64_t{0}; }},
      {"'num_hidden_layers': must be at most 1024",
       [](json& j) { j["num_hidden_layers"] = 100000; }},
      {"'vocab_size': must be at most",
       [](json& j) { j["vocab_size"] = int64_t{1} << 40; }},
      {"'hidden_size': it, q_lora_rank",
       [](json& j) { j["q_lora_rank"] = int64_t{1} << 40; }},
      {"'qk_nope_head_dim': it,",
       [](json& j) { j["v_head_dim"] = int64_t{1} << 30; }},
      {"'num_attention_heads': it and index_n_heads",
       [](json& j) { j["index_n_heads"] = 1 << 20; }},
      {"'n_routed_experts': must be at most",
       [](json& j) { j["n_routed_experts"] = 1 << 20; }},
      {"'max_position_embeddings': it and index_topk",
       [](json& j) { j["max_position_embeddings"] = int64_t{1} << 40; }},
      {"'index_skip_topk_offset'",
       [](json& j) { j["index_skip_topk_offset"] = -2147483647 - 1; }},
      {"parameters, more than the",
       [](json& j) {
         j["vocab_size"] = 1 << 24;
         j["hidden_size"] = 1 << 17;
         j["n_routed_experts"] = 4096;
         j["moe_intermediate_size"] = 1 << 17;
         j["num_hidden_layers"] = 1024;
         j.erase("index_topk_freq");
       }},
  };
  for (const BadField& bad : cases) {
    json j = TinyJson();
    bad.mutate(j);
    absl::StatusOr<ModelConfig> config = Parse(j);
    ASSERT_FALSE(config.ok()) << bad.field;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(config.status().message().find(bad.field), std::string::npos)
        << "expected " << bad.field << " in: " << config.status();
  }
}

TEST(ModelConfigTest, RejectsTextThatIsNotAJsonObject) {
  EXPECT_NE(ParseHfConfigJson("{\"vocab_size\": ")
                .status()
                .message()
                .find("not valid JSON"),
            std::string::npos);
  EXPECT_NE(
      ParseHfConfigJson("[1, 2]").status().message().find("not a JSON object"),
      std::string::npos);
}

TEST(ModelConfigTest, InfiniteNumbersAreRefused) {
  std::string text = ToHfConfigJson(Preset("glm5.2-tiny"));
  text.insert(1, "\"routed_scaling_factor\": 1e999, ");
  absl::StatusOr<ModelConfig> config = ParseHfConfigJson(text);
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("number overflow parsing"),
            std::string::npos)
      << config.status();
}

TEST(ModelConfigTest, SyntaxErrorsQuoteBoundedInput) {
  const std::string text = "{\"a\": \"" + std::string(100000, 'x') + "\x01";
  EXPECT_LT(ParseHfConfigJson(text).status().message().size(), 300u);
}

TEST(ModelConfigTest, OversizedTextIsRefusedBeforeParsing) {
  const std::string text = "{\"pad\": \"" + std::string(2 << 20, 'x') + "\"}";
  EXPECT_NE(ParseHfConfigJson(text).status().message().find(
                "bytes, more than the 1048576"),
            std::string::npos);
}

TEST(ModelConfigTest, DeepNestingIsRefusedWithoutBuildingIt) {
  const std::string text = "{\"vocab_size\": " + std::string(100000, '[') +
                           std::string(100000, ']') + "}";
  EXPECT_NE(ParseHfConfigJson(text).status().message().find(
                "nests more than 16 levels"),
            std::string::npos);
}

TEST(ModelConfigTest, OffendingValuesAreQuotedBounded) {
  json j = TinyJson();
  j["hidden_act"] = std::string(100000, 'g') + "\x1b[2J";
  absl::StatusOr<ModelConfig> config = Parse(j);
  ASSERT_FALSE(config.ok());
  EXPECT_LT(config.status().message().size(), 300u) << config.status();
  EXPECT_EQ(config.status().message().find('\x1b'), std::string::npos);
}

TEST(ModelConfigTest, LongIndexPatternIsFoundQuickly) {
  json j = TinyJson();
  j["num_hidden_layers"] = 1024;
  j["first_k_dense_replace"] = 1;
  // All layers compute but the last: freq 1024, offset 1022 is the only rule.
  j["index_topk_pattern"] = std::string(1022, 'F') + "SF";
  absl::StatusOr<ModelConfig> config = Parse(j);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->index_sharing.skip_topk_offset, 1022);
}

}  // namespace
}  // namespace glm
