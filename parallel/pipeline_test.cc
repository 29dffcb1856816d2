// Pipeline stages on two ranks (threads, each with its own copy of the
// weights and its own Gloo contexts), on the 1F1B and the interleaved
// schedules, compute the losses and gradients of the whole model: summed over
// the ranks, they match GlmModel's.
#include <cmath>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/separate_memory_allocator.h"
#include "model/glm_model.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/pipeline_test_util.h"

namespace glm {
namespace {

constexpr int64_t kMicroBatches = 4;

struct Outcome {
  double lm_loss = 0, mtp_loss = 0, indexer_loss = 0;
  std::vector<std::vector<float>> grads;  // in Named() order
};

void AddGrads(ModelParameters& params, Outcome* outcome) {
  const std::vector<NamedTensor> named = params.Named();
  outcome->grads.resize(named.size());
  for (size_t t = 0; t < named.size(); ++t) {
    if (named[t].grad == nullptr) continue;
    std::vector<float>& sum = outcome->grads[t];
    sum.resize(named[t].grad->numel(), 0.f);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += named[t].grad->data()[i];
  }
}

Outcome WholeModel() {
  ModelParameters params = TinyPipelineParameters();
  CpuBackend backend;
  GlmModel model(&params, &backend);
  Outcome outcome;
  for (int64_t m = 0; m < kMicroBatches; ++m) {
    absl::StatusOr<ForwardResult> result = model.Forward(PipelineTestBatch(m));
    EXPECT_TRUE(result.ok()) << result.status();
    EXPECT_TRUE(model.Backward().ok());
    outcome.lm_loss += result->lm_loss;
    outcome.mtp_loss += result->mtp_loss;
    outcome.indexer_loss += result->indexer_loss;
  }
  AddGrads(params, &outcome);
  return outcome;
}

// Runs the model split by `layout` over two pp ranks (threads with their own
// weights and Gloo contexts) and checks the summed losses and gradients. With
// `memory`, each rank computes on a copy of its weights there (as on a GPU:
// activations cross between the ranks through host memory).
void ExpectPipelineMatchesTheWholeModel(const std::string& layout,
                                        Allocator* memory = nullptr) {
  const Outcome expected = WholeModel();
  absl::StatusOr<std::vector<StageSlice>> stages =
      PlanForModel(*PresetConfig("glm5.2-tiny"), layout, 2);
  ASSERT_TRUE(stages.ok()) << stages.status();

  gloo::rendezvous::HashStore store;
  Outcome pipelined;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      ModelParameters params = TinyPipelineParameters();
      std::unique_ptr<ModelParameters> mirror =
          memory == nullptr ? nullptr : MirrorParameters(params, memory);
      absl::StatusOr<PipelineRankRun> run =
          RunPipelineRank(store, *stages, rank, 2, mirror ? *mirror : params,
                          kMicroBatches, PipelineTestBatch, memory);
      ASSERT_TRUE(run.ok()) << run.status();
      if (mirror) CopyGradients(*mirror, params);
      const StageLosses& losses = run->losses;
      std::lock_guard<std::mutex> lock(mu);
      pipelined.lm_loss += losses.lm_loss;
      pipelined.mtp_loss += losses.mtp_loss;
      pipelined.indexer_loss += losses.indexer_loss;
      AddGrads(params, &pipelined);
    });
  }
  for (std::thread& t : threads) t.join();

  EXPECT_NEAR(pipelined.lm_loss, expected.lm_loss, 1e-5 * expected.lm_loss);
  EXPECT_NEAR(pipelined.mtp_loss, expected.mtp_loss, 1e-5 * expected.mtp_loss);
  EXPECT_NEAR(pipelined.indexer_loss, expected.indexer_loss,
              1e-5 * expected.indexer_loss);
  const std::vector<NamedTensor> named = TinyPipelineParameters().Named();
  ASSERT_EQ(pipelined.grads.size(), expected.grads.size());
  for (size_t t = 0; t < expected.grads.size(); ++t) {
    double norm = 0, error = 0;
    for (size_t i = 0; i < expected.grads[t].size(); ++i) {
      const double diff = double{pipelined.grads[t][i]} - expected.grads[t][i];
      norm += double{expected.grads[t][i]} * expected.grads[t][i];
      error += diff * diff;
    }
    EXPECT_LE(std::sqrt(error), 1e-5 * std::sqrt(norm)) << named[t].name;
  }
}

// glm5.2-tiny computes top-k on layers 1, 2, 3 and 7, so stages start there.
TEST(PipelineTest, TwoStagesOneForwardOneBackwardMatchTheWholeModel) {
  ExpectPipelineMatchesTheWholeModel("Etttttt|ttmL");
}

TEST(PipelineTest, SeparateBackendMemoryMatchesTheWholeModel) {
  SeparateMemoryAllocator memory;
  ExpectPipelineMatchesTheWholeModel("Etttttt|ttmL", &memory);
}

TEST(PipelineTest, TwoRanksTwoVirtualStagesInterleavedMatchTheWholeModel) {
  ExpectPipelineMatchesTheWholeModel("Et|t|tttt|ttmL");
}

TEST(PipelineTest, OrdersFollowMegatron) {
  // 1F1B, pp 2, 4 micro batches: rank 0 warms up with one forward.
  const std::vector<PipelineOp> first = *PipelineOrder(2, 0, 1, 4);
  std::string shape;
  for (const PipelineOp& op : first) {
    shape += absl::StrCat(op.forward ? "F" : "B", op.micro_batch, " ");
  }
  EXPECT_EQ(shape, "F0 F1 B0 F2 B1 F3 B2 B3 ");
  // Interleaved, pp 2, 2 chunks, 4 micro batches, rank 1: warm-up
  // (2 - 1 - 1) * 2 + (2 - 1) * 2 = 2 forwards; forwards by groups of two
  // micro batches per chunk, backwards from the last chunk.
  shape.clear();
  const std::vector<PipelineOp> interleaved = *PipelineOrder(2, 1, 2, 4);
  for (const PipelineOp& op : interleaved) {
    shape += absl::StrCat(op.forward ? "F" : "B", op.chunk, ".", op.micro_batch,
                          " ");
  }
  EXPECT_EQ(shape,
            "F0.0 F0.1 F1.0 B1.0 F1.1 B1.1 F0.2 B0.0 F0.3 B0.1 F1.2 B1.2 "
            "F1.3 B1.3 B0.2 B0.3 ");
  EXPECT_EQ(PipelineOrder(2, 0, 2, 3).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace glm
