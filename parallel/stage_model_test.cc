// The stages of a layout, run one after another in one process (hidden states
// handed forward, their gradients handed back), compute the whole model's
// losses, expert loads and gradients: for layouts with an embedding-only
// first stage, an empty middle stage, virtual stages, and an MTP stage without
// decoder layers (when the MTP layer has its own indexer).
#include "parallel/stage_model.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/bf16_activations_backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/glm_model.h"
#include "parallel/pipeline_test_util.h"

namespace glm {
namespace {

// Two packed sequences; the second has its first targets masked out.
Batch TestBatch() {
  std::vector<std::vector<int32_t>> rows(2);
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < 18 + 5 * r; ++i) {
      rows[r].push_back(static_cast<int32_t>((r * 97 + i * i * 7 + 3) % 509));
    }
  }
  Batch batch = Batch::FromSequences(rows);
  batch.loss_mask.assign(batch.input_ids.size(), 1.f);
  for (int i = 18; i < 22; ++i) batch.loss_mask[i] = 0.f;
  return batch;
}

ModelParameters Parameters(const std::string& preset) {
  ModelParameters params(*PresetConfig(preset));
  params.InitRandom(5);
  return params;
}

struct Outcome {
  double lm_loss = 0, mtp_loss = 0, indexer_loss = 0;
  std::vector<std::vector<int64_t>> expert_load;
};

// The stages in stage order on one set of weights.
Outcome RunStages(ModelParameters& params,
                  const std::vector<StageSlice>& slices, bool bf16,
                  const LossOptions& options) {
  const std::unique_ptr<Backend> backend = MakeCpuTestBackend(bf16);
  std::vector<StageModel> stages;
  for (const StageSlice& slice : slices) {
    absl::StatusOr<StageModel> stage =
        StageModel::Create(&params, backend.get(), options, slice);
    EXPECT_TRUE(stage.ok()) << stage.status();
    if (!stage.ok()) return {};
    stages.push_back(*std::move(stage));
  }
  const Batch batch = TestBatch();
  std::vector<StageActivations> acts(stages.size());
  Outcome outcome;
  Tensor hidden;
  for (size_t s = 0; s < stages.size(); ++s) {
    // Forward leaves the stage as it was: it runs on a const stage.
    const StageModel& stage = stages[s];
    absl::StatusOr<StageLosses> losses = stage.Forward(batch, hidden, &acts[s]);
    EXPECT_TRUE(losses.ok()) << losses.status();
    if (!losses.ok()) return {};
    outcome.lm_loss += losses->lm_loss;
    outcome.mtp_loss += losses->mtp_loss;
    outcome.indexer_loss += losses->indexer_loss;
    if (outcome.expert_load.empty()) {
      outcome.expert_load = losses->expert_load;
    } else {
      for (size_t layer = 0; layer < losses->expert_load.size(); ++layer) {
        for (size_t e = 0; e < losses->expert_load[layer].size(); ++e) {
          outcome.expert_load[layer][e] += losses->expert_load[layer][e];
        }
      }
    }
    hidden = StageModel::Output(acts[s]);
  }
  Tensor d_output;
  for (size_t s = stages.size(); s-- > 0;) {
    Tensor d_input;
    const absl::Status status = stages[s].Backward(acts[s], d_output, &d_input);
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_EQ(d_input.numel() == 0, s == 0) << "stage " << s;
    d_output = std::move(d_input);
  }
  return outcome;
}

void ExpectNear(double actual, double expected, const std::string& what) {
  EXPECT_NEAR(actual, expected, 1e-5 * std::abs(expected) + 1e-12) << what;
}

// stage_options: the stages' (the whole model runs with the defaults).
void ExpectStagesMatchModel(const std::string& preset,
                            const std::string& layout, int pp,
                            bool bf16 = false,
                            const LossOptions& stage_options = {}) {
  SCOPED_TRACE(preset + " " + layout);
  ModelParameters whole = Parameters(preset);
  const std::unique_ptr<Backend> backend = MakeCpuTestBackend(bf16);
  GlmModel model(&whole, backend.get());
  const absl::StatusOr<ForwardResult> expected = model.Forward(TestBatch());
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_TRUE(model.Backward().ok());

  ModelParameters staged = Parameters(preset);
  const absl::StatusOr<std::vector<StageSlice>> slices =
      PlanForModel(staged.config(), layout, pp);
  ASSERT_TRUE(slices.ok()) << slices.status();
  const Outcome outcome = RunStages(staged, *slices, bf16, stage_options);
  ExpectNear(outcome.lm_loss, expected->lm_loss, "lm loss");
  ExpectNear(outcome.mtp_loss, expected->mtp_loss, "mtp loss");
  ExpectNear(outcome.indexer_loss, expected->indexer_loss, "indexer loss");
  EXPECT_EQ(outcome.expert_load, expected->expert_load);

  const std::vector<NamedTensor> want = whole.Named(), got = staged.Named();
  ASSERT_EQ(want.size(), got.size());
  for (size_t t = 0; t < want.size(); ++t) {
    if (want[t].grad == nullptr) continue;
    double norm = 0, error = 0;
    for (int64_t i = 0; i < want[t].grad->numel(); ++i) {
      const double diff =
          double{got[t].grad->data()[i]} - want[t].grad->data()[i];
      norm += double{want[t].grad->data()[i]} * want[t].grad->data()[i];
      error += diff * diff;
    }
    EXPECT_LE(std::sqrt(error), 1e-5 * std::sqrt(norm)) << want[t].name;
  }
}

// glm5.2-tiny: 8 layers computing top-k on 1, 2, 3 and 7; the MTP layer
// reuses layer 8's top-k, so it shares the last stage with layers 7-8.
TEST(StageModelTest, TwoStagesMatchTheWholeModel) {
  ExpectStagesMatchModel("glm5.2-tiny", "Ett|ttttttmL", 2);
}

// The same ops on the same values in the bf16 mode's activations too.
TEST(StageModelTest, TwoStagesMatchTheWholeModelInBf16Activations) {
  ExpectStagesMatchModel("glm5.2-tiny", "Ett|ttttttmL", 2, /*bf16=*/true);
}

// Stages whose queries from the sixth on attend in the latent space: the whole
// model's per-head losses and gradients to fp32 rounding.
TEST(StageModelTest, TwoStagesWithLatentQueriesMatchTheWholeModel) {
  LossOptions latent;
  latent.latent_attention_from = 5;
  ExpectStagesMatchModel("glm5.2-tiny", "Ett|ttttttmL", 2, /*bf16=*/false,
                         latent);
}

TEST(StageModelTest, EmbeddingOnlyAndEmptyStagesMatchTheWholeModel) {
  ExpectStagesMatchModel("glm5.2-tiny", "E||tttttt|ttmL", 2);
}

TEST(StageModelTest, FourVirtualStagesOverTwoRanksMatchTheWholeModel) {
  ExpectStagesMatchModel("glm5.2-tiny", "Et|t|tttt|ttmL", 2);
}

// glm5-tiny computes top-k on every layer and gives the MTP layer its own
// indexer, so the MTP layer may have a stage of its own.
TEST(StageModelTest, MtpStageWithoutDecoderLayersMatchesTheWholeModel) {
  ExpectStagesMatchModel("glm5-tiny", "Etttt|tttt|mL", 3);
}

TEST(StageModelTest, MtpApartFromTheLayerWhoseTopkItReusesIsUnimplemented) {
  ModelParameters params = Parameters("glm5.2-tiny");
  const absl::StatusOr<std::vector<StageSlice>> slices =
      PlanForModel(params.config(), "Etttttt|tt|mL", 3);
  ASSERT_TRUE(slices.ok()) << slices.status();
  CpuBackend backend;
  const absl::StatusOr<StageModel> stage =
      StageModel::Create(&params, &backend, {}, (*slices)[2]);
  ASSERT_FALSE(stage.ok());
  EXPECT_EQ(stage.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(stage.status().message().find("stage 2"), std::string::npos)
      << stage.status();
}

// A token id outside the vocabulary would index past the embedding: the
// stage refuses the batch, naming the id, before computing anything.
TEST(StageModelTest, TokenOutsideTheVocabularyIsAClearError) {
  ModelParameters params = Parameters("glm5.2-tiny");
  const absl::StatusOr<std::vector<StageSlice>> slices =
      PlanForModel(params.config(), "", 1);
  ASSERT_TRUE(slices.ok()) << slices.status();
  CpuBackend backend;
  absl::StatusOr<StageModel> stage =
      StageModel::Create(&params, &backend, {}, (*slices)[0]);
  ASSERT_TRUE(stage.ok()) << stage.status();
  Batch batch = TestBatch();
  batch.input_ids[3] = static_cast<int32_t>(params.config().vocab_size);
  StageActivations acts;
  const absl::StatusOr<StageLosses> losses =
      stage->Forward(batch, Tensor(), &acts);
  ASSERT_FALSE(losses.ok());
  EXPECT_EQ(losses.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(losses.status().message().find("input_ids[3]"), std::string::npos)
      << losses.status();
}

}  // namespace
}  // namespace glm
