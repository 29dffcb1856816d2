#include "checkpoint/hf_weight_loader.h"

#include <sys/stat.h>

#include <cstdlib>
#include <map>

#include "absl/strings/str_cat.h"
#include "base/bf16.h"
#include "checkpoint/hf_name_map.h"
#include "gtest/gtest.h"

namespace glm {
namespace {

std::string TempDir(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(root ? root : "/tmp") + "/" + name;
  mkdir(dir.c_str(), 0755);
  return dir;
}

// One decoder layer with 2 experts (I = 2, H = 3) and an MTP layer at
// model.layers.1.
ModelConfig SmallConfig(int mtp_layers = 1) {
  ModelConfig config;
  config.num_hidden_layers = 1;
  config.num_mtp_layers = mtp_layers;
  return config;
}

// Tensors a test writes: name -> (dtype, shape, bytes).
class Checkpoint {
 public:
  void AddF32(const std::string& name, std::vector<int64_t> shape,
              std::vector<float> values) {
    Add(name, DType::kF32, std::move(shape),
        std::string(reinterpret_cast<const char*>(values.data()),
                    values.size() * 4));
  }
  void AddBf16(const std::string& name, std::vector<int64_t> shape,
               const std::vector<float>& values) {
    std::string bytes;
    for (float value : values) {
      const uint16_t bits = Float32ToBfloat16(value);
      bytes.append(reinterpret_cast<const char*>(&bits), 2);
    }
    Add(name, DType::kBF16, std::move(shape), bytes);
  }
  void Add(const std::string& name, DType dtype, std::vector<int64_t> shape,
           std::string bytes) {
    tensors_[name] = {dtype, std::move(shape), std::move(bytes)};
  }
  void Remove(const std::string& name) { tensors_.erase(name); }

  SafetensorsFolder Write(const std::string& test,
                          uint64_t max_shard_bytes = 1 << 20) const {
    std::vector<TensorBytes> list;
    for (const auto& [name, tensor] : tensors_) {
      list.push_back({name, tensor.dtype, tensor.shape, tensor.bytes});
    }
    const std::string dir = TempDir(test);
    EXPECT_TRUE(WriteSafetensorsFolder(dir, list, max_shard_bytes).ok());
    absl::StatusOr<SafetensorsFolder> folder = SafetensorsFolder::Open(dir);
    EXPECT_TRUE(folder.ok()) << folder.status();
    return *std::move(folder);
  }

 private:
  struct Stored {
    DType dtype;
    std::vector<int64_t> shape;
    std::string bytes;
  };
  std::map<std::string, Stored> tensors_;
};

std::vector<float> Range(int count, float start) {
  std::vector<float> values(count);
  for (int i = 0; i < count; ++i) values[i] = start + i;
  return values;
}

// Model-side buffers of SmallConfig's weights.
struct Weights {
  std::vector<float> embed = std::vector<float>(12);
  std::vector<float> gate_up = std::vector<float>(2 * 4 * 3);
  std::vector<float> down = std::vector<float>(2 * 3 * 2);
  std::vector<float> enorm = std::vector<float>(3);

  std::vector<WeightTarget> Targets() {
    return {
        {"model.embed_tokens.weight", {4, 3}, embed.data()},
        {"model.layers.0.mlp.experts.gate_up_proj", {2, 4, 3}, gate_up.data()},
        {"model.layers.0.mlp.experts.down_proj", {2, 3, 2}, down.data()},
        {"model.layers.1.enorm.weight", {3}, enorm.data()}};
  }
};

Checkpoint PerExpertCheckpoint() {
  Checkpoint checkpoint;
  checkpoint.AddF32("model.embed_tokens.weight", {4, 3}, Range(12, 0));
  for (int e = 0; e < 2; ++e) {
    const std::string prefix = absl::StrCat("model.layers.0.mlp.experts.", e);
    checkpoint.AddBf16(prefix + ".gate_proj.weight", {2, 3},
                       Range(6, 100 * e + 10));
    checkpoint.AddBf16(prefix + ".up_proj.weight", {2, 3},
                       Range(6, 100 * e + 20));
    checkpoint.AddBf16(prefix + ".down_proj.weight", {3, 2},
                       Range(6, 100 * e + 30));
  }
  checkpoint.AddF32("model.layers.1.enorm.weight", {3}, {1, 2, 3});
  return checkpoint;
}

TEST(HfWeightLoaderTest, JoinsPerExpertKeysGateRowsFirst) {
  Weights weights;
  absl::StatusOr<WeightLoadSummary> summary =
      LoadHfWeights(PerExpertCheckpoint().Write("per_expert"), SmallConfig(),
                    weights.Targets());
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->tensors_read, 8);
  EXPECT_EQ(summary->per_expert_layers, 1);
  EXPECT_EQ(weights.embed, Range(12, 0));
  std::vector<float> gate_up;
  for (int e = 0; e < 2; ++e) {
    for (float v : Range(6, 100 * e + 10)) gate_up.push_back(v);
    for (float v : Range(6, 100 * e + 20)) gate_up.push_back(v);
  }
  EXPECT_EQ(weights.gate_up, gate_up);
  std::vector<float> down = Range(6, 30);
  for (float v : Range(6, 130)) down.push_back(v);
  EXPECT_EQ(weights.down, down);
  EXPECT_EQ(weights.enorm, (std::vector<float>{1, 2, 3}));
}

TEST(HfWeightLoaderTest, ReadsFusedExpertsFromShards) {
  Checkpoint checkpoint;
  checkpoint.AddF32("model.embed_tokens.weight", {4, 3}, Range(12, 0));
  checkpoint.AddF32("model.layers.0.mlp.experts.gate_up_proj", {2, 4, 3},
                    Range(24, 50));
  checkpoint.AddF32("model.layers.0.mlp.experts.down_proj", {2, 3, 2},
                    Range(12, 80));
  checkpoint.AddF32("model.layers.1.enorm.weight", {3}, {1, 2, 3});
  Weights weights;
  absl::StatusOr<WeightLoadSummary> summary = LoadHfWeights(
      checkpoint.Write("fused", 64), SmallConfig(), weights.Targets());
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->per_expert_layers, 0);
  EXPECT_EQ(weights.gate_up, Range(24, 50));
  EXPECT_EQ(weights.down, Range(12, 80));
}

TEST(HfWeightLoaderTest, IgnoresWhatTheModelDoesNotRun) {
  Checkpoint checkpoint = PerExpertCheckpoint();
  for (const char* name : {"model.layers.1.embed_tokens.weight",
                           "model.layers.1.shared_head.head.weight",
                           "model.layers.1.self_attn.indexer.wk.weight"}) {
    checkpoint.AddF32(name, {1}, {0});
  }
  Weights weights;
  absl::StatusOr<WeightLoadSummary> summary = LoadHfWeights(
      checkpoint.Write("ignorable"), SmallConfig(), weights.Targets());
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->ignored.size(), 3u);

  // A model with an MTP indexer needs it; a stray indexer key is unexpected.
  std::vector<float> wk(1);
  std::vector<WeightTarget> targets = weights.Targets();
  targets.push_back(
      {"model.layers.1.self_attn.indexer.wk.weight", {1}, wk.data()});
  checkpoint.AddF32("model.layers.1.self_attn.indexer.extra", {1}, {0});
  summary =
      LoadHfWeights(checkpoint.Write("mtp_indexer"), SmallConfig(), targets);
  ASSERT_FALSE(summary.ok());
  EXPECT_NE(
      summary.status().message().find("1 unexpected key(s) in the checkpoint"),
      std::string::npos)
      << summary.status();
  EXPECT_NE(
      summary.status().message().find("model.layers.1.self_attn.indexer.extra"),
      std::string::npos);
}

TEST(HfWeightLoaderTest, ModelWithoutMtpIgnoresTheMtpLayer) {
  Checkpoint checkpoint = PerExpertCheckpoint();
  Weights weights;
  std::vector<WeightTarget> targets = weights.Targets();
  targets.pop_back();  // no MTP enorm
  absl::StatusOr<WeightLoadSummary> summary = LoadHfWeights(
      checkpoint.Write("no_mtp"), SmallConfig(/*mtp_layers=*/0), targets);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->ignored,
            std::vector<std::string>{"model.layers.1.enorm.weight"});
}

std::string LoadError(const Checkpoint& checkpoint, const std::string& test) {
  Weights weights;
  absl::StatusOr<WeightLoadSummary> summary =
      LoadHfWeights(checkpoint.Write(test), SmallConfig(), weights.Targets());
  EXPECT_FALSE(summary.ok()) << test;
  return summary.ok() ? "" : std::string(summary.status().message());
}

TEST(HfWeightLoaderTest, ErrorsNameTheKey) {
  Checkpoint missing = PerExpertCheckpoint();
  missing.Remove("model.embed_tokens.weight");
  missing.Remove("model.layers.0.mlp.experts.1.up_proj.weight");
  EXPECT_NE(LoadError(missing, "missing")
                .find("2 weight(s) missing from the checkpoint: "
                      "model.embed_tokens.weight, "
                      "model.layers.0.mlp.experts.1.up_proj.weight"),
            std::string::npos);

  Checkpoint unexpected = PerExpertCheckpoint();
  unexpected.AddF32("model.layers.0.mlp.extra.weight", {1}, {0});
  EXPECT_NE(LoadError(unexpected, "unexpected")
                .find("unexpected key(s) in the checkpoint (" +
                      TempDir("unexpected") +
                      "/model.safetensors): model.layers.0.mlp.extra.weight"),
            std::string::npos);

  Checkpoint shape = PerExpertCheckpoint();
  shape.AddF32("model.embed_tokens.weight", {3, 4}, Range(12, 0));
  EXPECT_NE(
      LoadError(shape, "shape")
          .find("tensor 'model.embed_tokens.weight' has shape [3, 4], the "
                "model needs [4, 3]"),
      std::string::npos);

  Checkpoint expert_shape = PerExpertCheckpoint();
  expert_shape.AddBf16("model.layers.0.mlp.experts.1.down_proj.weight", {2, 3},
                       Range(6, 0));
  EXPECT_NE(LoadError(expert_shape, "expert_shape")
                .find("'model.layers.0.mlp.experts.1.down_proj.weight' has "
                      "shape [2, 3], the model needs [3, 2]"),
            std::string::npos);

  Checkpoint dtype = PerExpertCheckpoint();
  dtype.Add("model.layers.1.enorm.weight", DType::kI32, {3},
            std::string(12, '\0'));
  EXPECT_NE(
      LoadError(dtype, "dtype")
          .find("tensor 'model.layers.1.enorm.weight': dtype I32 is not a "
                "floating-point type"),
      std::string::npos);

  Checkpoint both = PerExpertCheckpoint();
  both.AddF32("model.layers.0.mlp.experts.gate_up_proj", {2, 4, 3},
              Range(24, 0));
  EXPECT_NE(
      LoadError(both, "both")
          .find("4 unexpected key(s) in the checkpoint (" + TempDir("both") +
                "/model.safetensors): "
                "model.layers.0.mlp.experts.0.gate_proj.weight"),
      std::string::npos);
}

// The oracle fixtures (written by transformers) load into exactly the
// tensors HfNameMap lists for their config, per expert or fused.
TEST(HfWeightLoaderTest, LoadsOracleFixtures) {
  for (const std::string name :
       {"glm52_sharing", "glm5_full", "glm52_packed"}) {
    const std::string dir = "tests/oracle/testdata/" + name;
    absl::StatusOr<ModelConfig> config = ReadHfConfigFile(dir + "/config.json");
    ASSERT_TRUE(config.ok()) << config.status();
    v1::ParallelLayout layout;
    layout.set_pp(1);
    layout.set_ep(1);
    absl::StatusOr<HfNameMap> map =
        HfNameMap::Create(*config, ExpertForm::kFused, layout);
    ASSERT_TRUE(map.ok()) << map.status();
    std::vector<std::vector<float>> storage;
    std::vector<WeightTarget> targets;
    for (const HfTensor& tensor : map->tensors()) {
      if (!tensor.required) continue;
      int64_t count = 1;
      for (int64_t dim : tensor.shape) count *= dim;
      storage.emplace_back(count);
      targets.push_back({tensor.name, tensor.shape, nullptr});
    }
    for (size_t i = 0; i < targets.size(); ++i) {
      targets[i].data = storage[i].data();
    }
    absl::StatusOr<SafetensorsFolder> folder = SafetensorsFolder::Open(dir);
    ASSERT_TRUE(folder.ok()) << folder.status();
    absl::StatusOr<WeightLoadSummary> summary =
        LoadHfWeights(*folder, *config, targets);
    ASSERT_TRUE(summary.ok()) << name << ": " << summary.status();
    EXPECT_TRUE(summary->ignored.empty()) << name;
    const int moe_layers = config->num_hidden_layers -
                           config->first_k_dense_replace +
                           config->num_mtp_layers;
    EXPECT_EQ(summary->per_expert_layers,
              name == "glm52_sharing" ? moe_layers : 0)
        << name;
    // The parameter count agrees with the fixture (buffers aside).
    const ParameterCount count = CountParameters(*config);
    int64_t biases = 0;
    for (const std::string& key : folder->TensorNames()) {
      if (key.find("e_score_correction_bias") != std::string::npos) {
        biases += folder->Find(key)->NumElements();
      }
    }
    EXPECT_EQ(count.total + count.mtp + biases, summary->elements) << name;
  }
}

TEST(HfWeightLoaderTest, LoadsAModelFolder) {
  const std::string dir = "tests/oracle/testdata/glm52_sharing";
  absl::StatusOr<std::unique_ptr<ModelParameters>> params = LoadHfModel(dir);
  ASSERT_TRUE(params.ok()) << params.status();
  EXPECT_EQ((*params)->config().index_sharing.topk_freq, 4);
  absl::StatusOr<SafetensorsFolder> folder = SafetensorsFolder::Open(dir);
  ASSERT_TRUE(folder.ok());
  EXPECT_EQ((*params)->lm_head.value.HostValues(),
            *folder->FileOf("lm_head.weight")->ReadFloat32("lm_head.weight"));

  const std::string empty = TempDir("empty_model");
  EXPECT_NE(LoadHfModel(empty).status().message().find("cannot open " + empty +
                                                       "/config.json"),
            std::string::npos);
}

TEST(HfWeightLoaderTest, ReadsARangeOfExpertsAndChecksWhatIsNotHeld) {
  Weights weights;
  std::vector<WeightTarget> targets = weights.Targets();
  targets[0].data = nullptr;  // embed_tokens: not held
  std::vector<float> gate_up(4 * 3), down(3 * 2);
  targets[1].data = gate_up.data();
  targets[1].part = TensorPart{0, 1, 1};
  targets[2].data = down.data();
  targets[2].part = TensorPart{0, 1, 1};
  absl::StatusOr<WeightLoadSummary> summary = LoadHfWeights(
      PerExpertCheckpoint().Write("expert_range"), SmallConfig(), targets);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->tensors_read, 4);  // expert 1's three keys and enorm
  std::vector<float> expert1 = Range(6, 110);
  for (float v : Range(6, 120)) expert1.push_back(v);
  EXPECT_EQ(gate_up, expert1);
  EXPECT_EQ(down, Range(6, 130));
  EXPECT_EQ(weights.embed, std::vector<float>(12));

  // A weight not held must still be in the checkpoint.
  Checkpoint checkpoint = PerExpertCheckpoint();
  checkpoint.Remove("model.embed_tokens.weight");
  EXPECT_EQ(LoadHfWeights(checkpoint.Write("not_held_missing"), SmallConfig(),
                          targets)
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

// Every other tensor of layer 1 on, each 2-D one by rows or columns and the
// routed experts by a range: what is read equals the same part of a whole
// load, per expert (glm52_sharing) or fused (glm52_packed).
TEST(HfWeightLoaderTest, LoadsTheHeldPartsOfAModelFolder) {
  for (const std::string name : {"glm52_sharing", "glm52_packed"}) {
    const std::string dir = "tests/oracle/testdata/" + name;
    absl::StatusOr<std::unique_ptr<ModelParameters>> whole = LoadHfModel(dir);
    ASSERT_TRUE(whole.ok()) << whole.status();
    HeldTensors held;
    held.names.emplace();
    int index = 0;
    for (const NamedTensor& named : (*whole)->Named()) {
      if (++index % 2 == 0 ||
          named.name.find("layers.0.") != std::string::npos) {
        continue;
      }
      held.names->insert(named.name);
      const std::vector<int64_t>& shape = named.value->shape();
      if (shape.size() == 3) {
        held.parts[named.name] = {0, 1, shape[0] - 1};
      } else if (shape.size() == 2) {
        const int dim = index % 4 == 1 ? 0 : 1;
        held.parts[named.name] = {dim, 1, shape[dim] / 2};
      }
    }
    absl::StatusOr<std::unique_ptr<ModelParameters>> part =
        LoadHfModel(dir, held);
    ASSERT_TRUE(part.ok()) << name << ": " << part.status();
    ASSERT_TRUE((*whole)->KeepHeld(held).ok());
    std::vector<NamedTensor> expected = (*whole)->Named();
    std::vector<NamedTensor> loaded = (*part)->Named();
    ASSERT_EQ(expected.size(), loaded.size());
    int64_t held_elements = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(loaded[i].value->shape(), expected[i].value->shape())
          << expected[i].name;
      EXPECT_EQ(loaded[i].value->HostValues(), expected[i].value->HostValues())
          << expected[i].name;
      held_elements += loaded[i].value->numel();
    }
    EXPECT_GT(held_elements, 0) << name;
  }
}

}  // namespace
}  // namespace glm
