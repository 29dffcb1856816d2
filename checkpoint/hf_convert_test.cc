#include "checkpoint/hf_convert.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_test_util.h"
#include "checkpoint/synthetic_hf.h"
#include "gtest/gtest.h"
#include "model/config.h"
#include "nlohmann/json.hpp"

namespace glm {
namespace {

namespace fs = std::filesystem;

// Stage 1 starts on layer 7, a computing layer of glm5.2-tiny.
v1::ParallelLayout Pp2Ep2() {
  return PipelineExpertLayout(2, 2, "Etttttt|ttmL");
}

struct Fixture {
  std::string preset = "glm5.2-tiny";
  SyntheticHfOptions options;
};

// A sharded HF folder of random tensors.
std::string MakeHfFolder(const Fixture& fixture) {
  const std::string dir = NewTempDir();
  ModelConfig config = *PresetConfig(fixture.preset);
  config.torch_dtype =
      fixture.options.dtype == DType::kBF16 ? "bfloat16" : "float32";
  absl::Status status =
      WriteSyntheticHfCheckpoint(dir, config, fixture.options);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_TRUE(fs::exists(dir + "/model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir + "/model.safetensors"));
  return dir;
}

// Every tensor of `a` is in `b` with the same dtype, shape and bytes, and
// the key sets agree.
void ExpectSameFolders(const std::string& a_dir, const std::string& b_dir) {
  absl::StatusOr<SafetensorsFolder> a = SafetensorsFolder::Open(a_dir);
  absl::StatusOr<SafetensorsFolder> b = SafetensorsFolder::Open(b_dir);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->TensorNames(), b->TensorNames());
  for (const std::string& name : a->TensorNames()) {
    const TensorInfo& x = *a->Find(name);
    const TensorInfo& y = *b->Find(name);
    EXPECT_EQ(x.dtype, y.dtype) << name;
    EXPECT_EQ(x.shape, y.shape) << name;
    EXPECT_EQ(*a->FileOf(name)->Bytes(name), *b->FileOf(name)->Bytes(name))
        << name;
  }
}

void RoundTrip(const Fixture& fixture) {
  const std::string hf = MakeHfFolder(fixture);
  const std::string native = NewTempDir() + "/native";
  const std::string out = NewTempDir() + "/export";
  absl::StatusOr<VerifySummary> imported =
      ImportHfCheckpoint({hf, native, Pp2Ep2()});
  ASSERT_TRUE(imported.ok()) << imported.status();
  absl::StatusOr<SafetensorsFolder> source = SafetensorsFolder::Open(hf);
  EXPECT_EQ(imported->tensors,
            static_cast<int64_t>(source->TensorNames().size()));
  EXPECT_TRUE(absl::StrContains(imported->Text(), " elements bitwise equal"));

  absl::StatusOr<NativeCheckpoint> checkpoint =
      NativeCheckpoint::Open(IterationDirectory(native, 0));
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ(checkpoint->manifest().shards_size(), 4);
  EXPECT_EQ(checkpoint->manifest().expert_form(),
            std::string(ExpertFormName(fixture.options.form)));
  EXPECT_EQ(*checkpoint->HfConfigJson(), ReadAll(hf + "/config.json"));
  EXPECT_EQ(*ReadLatestIteration(native), 0);
  // The dtype stays the file's.
  EXPECT_EQ(checkpoint->Find("model.embed_tokens.weight")->dtype(),
            std::string(DTypeName(fixture.options.dtype)));

  absl::StatusOr<VerifySummary> exported =
      ExportHfCheckpoint({native, out, 300'000, ""});
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_EQ(exported->tensors, imported->tensors);
  EXPECT_EQ(exported->elements, imported->elements);
  ExpectSameFolders(hf, out);
  EXPECT_EQ(ReadAll(out + "/config.json"), ReadAll(hf + "/config.json"));

  const nlohmann::json index =
      nlohmann::json::parse(ReadAll(out + "/model.safetensors.index.json"));
  EXPECT_EQ(index["weight_map"].size(), source->TensorNames().size());
  uint64_t total = 0;
  for (const std::string& name : source->TensorNames()) {
    total += source->Find(name)->NumBytes();
    const std::string file = index["weight_map"][name];
    EXPECT_TRUE(fs::exists(out + "/" + file)) << file;
    EXPECT_LE(fs::file_size(out + "/" + file), 300'000u + 65'536u);
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  EXPECT_GT(
      index["weight_map"]["lm_head.weight"].get<std::string>(),
      index["weight_map"]["model.embed_tokens.weight"].get<std::string>());
}

TEST(HfConvertTest, RoundTripPerExpertBf16) { RoundTrip({}); }

TEST(HfConvertTest, RoundTripFusedF32) {
  Fixture fixture;
  fixture.options.form = ExpertForm::kFused;
  fixture.options.dtype = DType::kF32;
  RoundTrip(fixture);
}

// The extras include the MTP layer's indexer, which released GLM-5.2
// checkpoints carry although that layer reuses the main top-k.
TEST(HfConvertTest, RoundTripFusedBf16WithMtpExtras) {
  Fixture fixture;
  fixture.options.form = ExpertForm::kFused;
  fixture.options.mtp_extras = true;
  RoundTrip(fixture);
}

TEST(HfConvertTest, RoundTripEveryLayerComputing) {
  Fixture fixture;
  fixture.preset = "glm5-tiny";  // the MTP layer has its own indexer
  RoundTrip(fixture);
}

// The transformers fixtures (float32, HF names as transformers saves them)
// export with the same keys, bytes and config.json, so the export loads in
// transformers as the fixture does.
TEST(HfConvertTest, OracleFixturesRoundTrip) {
  for (const std::string name :
       {"glm52_sharing", "glm5_full", "glm52_packed"}) {
    const std::string hf = "tests/oracle/testdata/" + name;
    const std::string native = NewTempDir() + "/native";
    const std::string out = NewTempDir() + "/export";
    absl::StatusOr<VerifySummary> imported =
        ImportHfCheckpoint({hf, native, v1::ParallelLayout()});
    ASSERT_TRUE(imported.ok()) << name << ": " << imported.status();
    absl::StatusOr<VerifySummary> exported =
        ExportHfCheckpoint({native, out, 50'000, ""});
    ASSERT_TRUE(exported.ok()) << name << ": " << exported.status();
    ExpectSameFolders(hf, out);
    EXPECT_EQ(ReadAll(out + "/config.json"), ReadAll(hf + "/config.json"));
  }
}

// A trainer's checkpoint (float32 tensors, no config.json kept) exports with
// the config given.
TEST(HfConvertTest, TrainerCheckpointExportsWithGivenConfig) {
  ModelConfig config = *PresetConfig("glm5.2-tiny");
  const HfNameMap map =
      *HfNameMap::Create(config, ExpertForm::kFused, v1::ParallelLayout());
  std::vector<std::unique_ptr<Tensor>> storage;
  TrainingState state;
  state.iteration = 3;
  for (const HfTensor& param : map.tensors()) {
    if (!param.required) continue;
    storage.push_back(std::make_unique<Tensor>(param.shape));
    storage.back()->values().assign(storage.back()->numel(), 0.5f);
    state.model.push_back({param.name, storage.back().get()});
  }
  storage.push_back(
      std::make_unique<Tensor>(map.Find("lm_head.weight")->shape));
  state.optimizer.push_back({"exp_avg/lm_head.weight", storage.back().get()});
  const std::string save = NewTempDir();
  absl::Status saved =
      SaveCheckpoint(save, map, v1::ParallelLayout(), state).status();
  ASSERT_TRUE(saved.ok()) << saved;

  const std::string out = NewTempDir();
  absl::StatusOr<VerifySummary> without =
      ExportHfCheckpoint({save, out, kDefaultMaxShardBytes, ""});
  EXPECT_EQ(without.status().code(), absl::StatusCode::kNotFound);
  const std::string config_json = ToHfConfigJson(config);
  absl::StatusOr<VerifySummary> exported =
      ExportHfCheckpoint({save, out, kDefaultMaxShardBytes, config_json});
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_EQ(exported->tensors, static_cast<int64_t>(state.model.size()));
  EXPECT_EQ(ReadAll(out + "/config.json"), config_json);
  absl::StatusOr<SafetensorsFolder> folder = SafetensorsFolder::Open(out);
  ASSERT_TRUE(folder.ok());
  EXPECT_EQ(folder->Find("exp_avg/lm_head.weight"), nullptr);
  EXPECT_EQ(folder->Find("lm_head.weight")->dtype, DType::kF32);
}

// Imports `hf` under PP2 x EP2 and opens the result.
absl::StatusOr<NativeCheckpoint> ImportPp2Ep2(const std::string& hf) {
  const std::string native = NewTempDir();
  absl::StatusOr<VerifySummary> imported =
      ImportHfCheckpoint({hf, native, Pp2Ep2()});
  if (!imported.ok()) return imported.status();
  return NativeCheckpoint::Open(IterationDirectory(native, 0));
}

// Bitwise, so that NaN patterns in random bytes compare equal to themselves.
bool SameBits(const float* actual, const std::vector<float>& expected) {
  return std::memcmp(actual, expected.data(), expected.size() * 4) == 0;
}

// A trainer holding fused experts loads an import of per-expert tensors
// (BF16 read as F32), under another layout than the import's.
TEST(HfConvertTest, TrainerLoadsPerExpertImportIntoFusedExperts) {
  const std::string hf = MakeHfFolder({});
  const std::string native = NewTempDir();
  ASSERT_TRUE(ImportHfCheckpoint({hf, native, Pp2Ep2()}).ok());
  const ModelConfig config = *ReadHfConfigFile(hf + "/config.json");
  const HfNameMap map =
      *HfNameMap::Create(config, ExpertForm::kFused, v1::ParallelLayout());
  std::map<std::string, std::unique_ptr<Tensor>> tensors;
  TrainingState state;
  for (const HfTensor& param : map.tensors()) {
    if (!param.required) continue;
    tensors[param.name] = std::make_unique<Tensor>(param.shape);
    state.model.push_back({param.name, tensors[param.name].get()});
  }
  absl::StatusOr<v1::CheckpointManifest> loaded =
      LoadCheckpoint(native, map, 0, &state);
  ASSERT_TRUE(loaded.ok()) << loaded.status();

  absl::StatusOr<SafetensorsFolder> source = SafetensorsFolder::Open(hf);
  auto read = [&](const std::string& name) {
    return *source->FileOf(name)->ReadFloat32(name);
  };
  EXPECT_TRUE(SameBits(tensors["model.embed_tokens.weight"]->data(),
                       read("model.embed_tokens.weight")));
  const Tensor& gate_up = *tensors["model.layers.2.mlp.experts.gate_up_proj"];
  const Tensor& down = *tensors["model.layers.2.mlp.experts.down_proj"];
  const int64_t slab = 32 * 64;  // one [I, H] matrix
  for (int e : {0, 5, 7}) {
    const std::string prefix =
        absl::StrCat("model.layers.2.mlp.experts.", e, ".");
    const std::vector<float> gate = read(prefix + "gate_proj.weight");
    const std::vector<float> up = read(prefix + "up_proj.weight");
    const std::vector<float> down_e = read(prefix + "down_proj.weight");
    const float* fused = gate_up.data() + e * 2 * slab;
    EXPECT_TRUE(SameBits(fused, gate)) << e;
    EXPECT_TRUE(SameBits(fused + slab, up)) << e;
    EXPECT_TRUE(SameBits(down.data() + e * slab, down_e)) << e;
  }
}

TEST(HfConvertTest, IndexerTensorsOnlyOnComputingLayers) {
  const std::string hf = MakeHfFolder({});
  absl::StatusOr<NativeCheckpoint> checkpoint = ImportPp2Ep2(hf);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  int indexers = 0;
  for (const std::string& name : checkpoint->names()) {
    indexers += absl::StrContains(name, "indexer.wq_b");
  }
  EXPECT_EQ(indexers, 4);  // layers 1, 2, 3 and 7
  EXPECT_NE(checkpoint->Find("model.layers.6.self_attn.indexer.wk.weight"),
            nullptr);
  EXPECT_EQ(checkpoint->Find("model.layers.7.self_attn.indexer.wk.weight"),
            nullptr);
}

TEST(HfConvertTest, UnexpectedAndMissingKeysAreErrors) {
  Fixture fixture;
  fixture.options.extra_keys = {"model.layers.3.self_attn.indexer.wk.weight"};
  fixture.options.dropped_keys = {
      "model.layers.2.mlp.experts.3.up_proj.weight"};
  const std::string hf = MakeHfFolder(fixture);
  const std::string native = NewTempDir() + "/native";
  absl::StatusOr<VerifySummary> imported =
      ImportHfCheckpoint({hf, native, Pp2Ep2()});
  ASSERT_FALSE(imported.ok());
  const std::string message(imported.status().message());
  EXPECT_TRUE(absl::StrContains(message,
                                "1 missing key(s): "
                                "'model.layers.2.mlp.experts.3.up_"
                                "proj.weight'"))
      << message;
  EXPECT_TRUE(absl::StrContains(
      message,
      "1 unexpected key(s): 'model.layers.3.self_attn.indexer.wk.weight'"))
      << message;
  EXPECT_FALSE(fs::exists(native));
}

TEST(HfConvertTest, WrongShapeIsAnError) {
  const std::string hf = MakeHfFolder({});
  std::string config = ReadAll(hf + "/config.json");
  const std::string vocab = "\"vocab_size\": 512";
  config.replace(config.find(vocab), vocab.size(), "\"vocab_size\": 640");
  std::ofstream(hf + "/config.json", std::ios::trunc) << config;
  absl::StatusOr<VerifySummary> imported =
      ImportHfCheckpoint({hf, NewTempDir(), Pp2Ep2()});
  ASSERT_FALSE(imported.ok());
  EXPECT_TRUE(
      absl::StrContains(imported.status().message(),
                        "has shape [512, 64], config.json implies [640, 64]"))
      << imported.status();
}

TEST(HfConvertTest, VerificationFailsOnAnyDifference) {
  const std::string hf = MakeHfFolder({});
  absl::StatusOr<NativeCheckpoint> checkpoint = ImportPp2Ep2(hf);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();

  // Change one byte of one tensor in the HF source.
  absl::StatusOr<SafetensorsFolder> source = SafetensorsFolder::Open(hf);
  const std::string victim = "model.layers.5.mlp.experts.6.down_proj.weight";
  const std::string path = source->FileOf(victim)->path();
  const uint64_t begin = source->Find(victim)->begin;
  std::string bytes = ReadAll(path);
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  bytes[8 + header + begin + 3] ^= 1;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;

  absl::StatusOr<SafetensorsFolder> changed = SafetensorsFolder::Open(hf);
  ASSERT_TRUE(changed.ok());
  absl::StatusOr<VerifySummary> compared = CompareWithHf(*checkpoint, *changed);
  ASSERT_FALSE(compared.ok());
  EXPECT_TRUE(absl::StrContains(compared.status().message(), victim))
      << compared.status();
}

TEST(HfConvertTest, LoraCheckpointsDoNotExport) {
  const std::string dir = NewTempDir();
  Tensor value({4});
  ASSERT_TRUE(SaveLoraCheckpoint(dir, 1, {{"adapter", &value}}).ok());
  absl::StatusOr<VerifySummary> exported =
      ExportHfCheckpoint({dir, NewTempDir(), kDefaultMaxShardBytes, ""});
  ASSERT_FALSE(exported.ok());
  EXPECT_TRUE(absl::StrContains(exported.status().message(), "'lora'"))
      << exported.status();
}

}  // namespace
}  // namespace glm
