// The model against transformers 5.17: each fixture under testdata/ (see
// README.md) is loaded with the HF weight loader and run forward and
// backward on the CPU backend; logits, losses, top-k sets and gradients must
// match what make_fixtures.py recorded.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/hf_weight_loader.h"
#include "checkpoint/safetensors.h"
#include "gtest/gtest.h"
#include "kernels/backend_factory.h"
#include "model/glm_model.h"
#include "model/parameters.h"

namespace glm {
namespace {

// The backend under test: the CPU, or (in a --config=cuda build, on a GPU
// machine) GLM_TEST_DEVICE=cuda:N with GLM_TEST_PRECISION=fp32|bf16.
std::string TestEnv(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}
const std::string kDevice = TestEnv("GLM_TEST_DEVICE", "cpu");
const bool kBf16 = TestEnv("GLM_TEST_PRECISION", "fp32") == "bf16";

// Tolerances of the issue: fp32 (the CPU and CUDA's fp32 mode) as tight as
// the CPU, logits elementwise relative to the largest expected magnitude.
// bf16 rounds every matrix product's inputs, which moves near-tied indexer
// scores and so swaps some queries' selected keys: one such query's logits
// move by as much as the logits' range, so bf16 holds its logits to a
// normalized mean squared error instead, and its losses to 1e-2 relative.
// transformers' own bf16 forward lands at NMSE 9.3e-2 (glm52_sharing) and
// 1.3e-2 (glm5_full) from these fp32 fixtures (bf16_reference.py, results
// in tests/gpu/results/): bf16 is held to the larger, 1e-1.
const double kLogitTolerance = 1e-4;
const double kBf16LogitNmse = 1e-1;
const double kLossTolerance = kBf16 ? 1e-2 : 1e-5;
const double kIndexerLossTolerance = kBf16 ? 5e-2 : 1e-4;
constexpr double kGradientTolerance = 1e-4;

class OracleTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string dir = "tests/oracle/testdata/" + GetParam();
    absl::StatusOr<std::unique_ptr<ModelParameters>> params = LoadHfModel(dir);
    ASSERT_TRUE(params.ok()) << params.status();
    params_ = *std::move(params);
    absl::StatusOr<std::unique_ptr<Backend>> backend =
        MakeBackend(kDevice, kBf16 ? "bf16" : "fp32", /*deterministic=*/true);
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = *std::move(backend);
    if (backend_->allocator() != nullptr) {
      on_device_ = MirrorParameters(*params_, backend_->allocator());
    }
    absl::StatusOr<std::unique_ptr<SafetensorsFile>> expected =
        SafetensorsFile::Open(dir + "/expected.safetensors");
    ASSERT_TRUE(expected.ok()) << expected.status();
    expected_ = *std::move(expected);
    ids_ = expected_->Find("input_ids");
    ASSERT_NE(ids_, nullptr);
  }

  const ModelConfig& config() const { return params_->config(); }
  int64_t rows() const { return ids_->shape[0]; }
  int64_t seq() const { return ids_->shape[1]; }

  // One packed row: the fixture's rows one after another, or its own
  // cu_seqlens for the packed fixture.
  Batch MakeBatch() const {
    std::string_view bytes = *expected_->Bytes("input_ids");
    std::vector<int64_t> ids(ids_->NumElements());
    std::memcpy(ids.data(), bytes.data(), bytes.size());
    std::vector<std::vector<int32_t>> sequences(rows());
    for (int64_t b = 0; b < rows(); ++b) {
      sequences[b].assign(ids.begin() + b * seq(),
                          ids.begin() + (b + 1) * seq());
    }
    Batch batch = Batch::FromSequences(sequences);
    if (const TensorInfo* cu = expected_->Find("cu_seqlens")) {
      std::string_view cu_bytes = *expected_->Bytes("cu_seqlens");
      batch.cu_seqlens.resize(cu->NumElements());
      std::memcpy(batch.cu_seqlens.data(), cu_bytes.data(), cu_bytes.size());
    }
    return batch;
  }

  std::vector<float> Expected(const std::string& name) const {
    absl::StatusOr<std::vector<float>> values = expected_->ReadFloat32(name);
    EXPECT_TRUE(values.ok()) << values.status();
    return values.ok() ? *values : std::vector<float>();
  }

  // fp32: max |actual - expected| <= tolerance * max |expected|; bf16:
  // sum (actual - expected)^2 / sum expected^2 <= kBf16LogitNmse.
  void ExpectLogitsClose(const std::string& what, const float* actual,
                         const std::vector<float>& expected) {
    if (!kBf16) {
      ExpectClose(what, actual, expected, kLogitTolerance);
      return;
    }
    double error = 0, energy = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
      const double diff = double{actual[i]} - expected[i];
      error += diff * diff;
      energy += double{expected[i]} * expected[i];
    }
    const double nmse = error / energy;
    std::cout << GetParam() << " " << what << ": bf16 nmse " << nmse << "\n";
    EXPECT_LE(nmse, kBf16LogitNmse) << GetParam() << " " << what;
  }

  // max |actual - expected| <= tolerance * max |expected|.
  void ExpectClose(const std::string& what, const float* actual,
                   const std::vector<float>& expected, double tolerance) {
    double scale = 0, error = 0;
    int64_t worst = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
      scale = std::max(scale, std::fabs(double{expected[i]}));
      const double diff = std::fabs(double{actual[i]} - expected[i]);
      if (diff > error) {
        error = diff;
        worst = i;
      }
    }
    if (scale > 0 && error / scale > worst_relative_error_) {
      worst_relative_error_ = error / scale;
      worst_what_ = what;
    }
    EXPECT_LE(error, tolerance * scale)
        << GetParam() << " " << what << ": max |diff| " << error
        << " at element " << worst << " (got " << actual[worst]
        << ", transformers " << expected[worst] << "), max |expected| "
        << scale;
  }

  void ExpectLoss(const std::string& what, double actual,
                  double tolerance) const {
    const double expected = Expected(what).at(0);
    EXPECT_NEAR(actual, expected, tolerance * std::fabs(expected))
        << GetParam() << " " << what;
  }

  // The top-k keys of `layer` (1-indexed) per query as sets of packed-row
  // token indices, from the fixture (causal keys of its row, -1 padded).
  std::vector<std::set<int32_t>> ExpectedTopk(int layer) const {
    const std::string name = absl::StrCat("topk.layer.", layer);
    const TensorInfo* info = expected_->Find(name);
    EXPECT_NE(info, nullptr) << name;
    std::string_view bytes = *expected_->Bytes(name);
    const int64_t k = info->shape[2];
    std::vector<int32_t> keys(info->NumElements());
    std::memcpy(keys.data(), bytes.data(), bytes.size());
    std::vector<std::set<int32_t>> sets(rows() * seq());
    for (int64_t token = 0; token < rows() * seq(); ++token) {
      const int32_t row_start = static_cast<int32_t>(token / seq() * seq());
      for (int64_t j = 0; j < k; ++j) {
        const int32_t key = keys[token * k + j];
        if (key >= 0) sets[token].insert(row_start + key);
      }
    }
    return sets;
  }

  // The measured agreement, for the log.
  void TearDown() override {
    if (!worst_what_.empty()) {
      std::cout << GetParam() << ": largest relative error "
                << worst_relative_error_ << " (" << worst_what_ << ")\n";
    }
  }

  std::unique_ptr<ModelParameters> params_;
  std::unique_ptr<SafetensorsFile> expected_;
  double worst_relative_error_ = 0;
  std::string worst_what_;
  const TensorInfo* ids_ = nullptr;
  // The weights the model computes on: params_, or their copy on the device.
  ModelParameters* computed() {
    return on_device_ ? on_device_.get() : params_.get();
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ModelParameters> on_device_;
};

TEST_P(OracleTest, ForwardMatchesTransformers) {
  GlmModel model(computed(), backend_.get());
  absl::StatusOr<ForwardResult> result = model.Forward(MakeBatch());
  ASSERT_TRUE(result.ok()) << result.status();
  const Tensor logits = result->logits.CopyTo(nullptr);
  const Tensor mtp_logits = result->mtp_logits.CopyTo(nullptr);
  ASSERT_EQ(logits.numel(), rows() * seq() * config().vocab_size);
  ExpectLogitsClose("logits", logits.data(), Expected("logits"));
  ASSERT_EQ(mtp_logits.numel(), logits.numel());
  ExpectLogitsClose("mtp_logits", mtp_logits.data(), Expected("mtp_logits"));
  ExpectLoss("loss", result->lm_loss, kLossTolerance);
  ExpectLoss("mtp_loss", result->mtp_loss, kLossTolerance);
  ExpectLoss("indexer_loss", result->indexer_loss, kIndexerLossTolerance);
  ExpectLoss("total_loss", result->total_loss, kLossTolerance);
}

// Computing layers select transformers' keys; skip layers reuse their source
// layer's selection. The MTP layer (entry L + 1) runs its own indexer when
// every layer computes, else it reuses the last main layer's top-k.
TEST_P(OracleTest, TopkSetsMatchTransformers) {
  if (kBf16)
    GTEST_SKIP() << "bf16 scores move near-tied keys; fp32 checks sets";
  GlmModel model(computed(), backend_.get());
  absl::StatusOr<ForwardResult> result = model.Forward(MakeBatch());
  ASSERT_TRUE(result.ok()) << result.status();
  const int layers = config().num_hidden_layers;
  ASSERT_EQ(result->layer_topk.size(), layers + config().num_mtp_layers);
  const IndexSharing& sharing = config().index_sharing;
  for (int layer = 1; layer <= layers + config().num_mtp_layers; ++layer) {
    const int source = layer <= layers          ? sharing.SourceLayer(layer)
                       : sharing.topk_freq == 1 ? layer
                                                : sharing.SourceLayer(layers);
    const std::vector<std::set<int32_t>> expected = ExpectedTopk(source);
    const IndexTensor topk = result->layer_topk[layer - 1].CopyTo(nullptr);
    ASSERT_EQ(topk.dim(0), rows() * seq()) << layer;
    int mismatches = 0;
    for (int64_t token = 0; token < topk.dim(0); ++token) {
      std::set<int32_t> actual;
      for (int64_t j = 0; j < topk.dim(1); ++j) {
        const int32_t key = topk.data()[token * topk.dim(1) + j];
        if (key >= 0) actual.insert(key);
      }
      if (actual != expected[token] && ++mismatches <= 3) {
        ADD_FAILURE() << GetParam() << " layer " << layer << " (source "
                      << source << ") token " << token
                      << ": top-k differs from transformers";
      }
    }
    EXPECT_EQ(mismatches, 0) << GetParam() << " layer " << layer;
  }
}

TEST_P(OracleTest, GradientsMatchTransformers) {
  if (kBf16) GTEST_SKIP() << "bf16 is held to its loss; fp32 checks gradients";
  params_->ZeroGrad();
  computed()->ZeroGrad();
  GlmModel model(computed(), backend_.get());
  ASSERT_TRUE(model.Forward(MakeBatch()).ok());
  ASSERT_TRUE(model.Backward().ok());
  if (on_device_) CopyGradients(*on_device_, *params_);
  std::set<std::string> compared;
  for (const NamedTensor& named : params_->Named()) {
    const std::string key = "grad." + named.name;
    if (named.grad == nullptr || expected_->Find(key) == nullptr) continue;
    ASSERT_EQ(named.grad->numel(), expected_->Find(key)->NumElements()) << key;
    ExpectClose(key, named.grad->data(), Expected(key), kGradientTolerance);
    compared.insert(key);
  }
  // Every recorded gradient belongs to a parameter of the model.
  for (const TensorInfo& info : expected_->tensors()) {
    if (absl::StartsWith(info.name, "grad.")) {
      EXPECT_TRUE(compared.count(info.name)) << GetParam() << " " << info.name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OracleTest,
                         ::testing::Values("glm52_sharing", "glm5_full",
                                           "glm52_packed"));

}  // namespace
}  // namespace glm
