// Two to four pp ranks (threads with their own weights and Gloo contexts) run
// their stages on the pipeline schedule, then sum only the shared gradients of
// the tensors they use, as the trainer does: each rank's gradients of those,
// and the pipeline's global norm, equal the whole model's.
#include "training/pipeline_gradients.h"

#include <cmath>
#include <map>
#include <mutex>
#include <thread>

#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/glm_model.h"
#include "parallel/pipeline_test_util.h"
#include "training/grad_clip.h"
#include "training/gradient_sync.h"

namespace glm {
namespace {

constexpr int64_t kMicroBatches = 4;

std::vector<TrainableTensor> TrainableOf(ModelParameters& params) {
  std::vector<TrainableTensor> trainable;
  for (const NamedTensor& named : params.Named()) {
    if (named.grad != nullptr) {
      trainable.push_back({named.name, named.value, named.grad});
    }
  }
  return trainable;
}

struct Gradients {
  std::map<std::string, std::vector<float>> by_name;
  double squared_norm = 0;
};

Gradients WholeModel() {
  ModelParameters params = TinyPipelineParameters();
  CpuBackend backend;
  GlmModel model(&params, &backend);
  for (int64_t m = 0; m < kMicroBatches; ++m) {
    EXPECT_TRUE(model.Forward(PipelineTestBatch(m)).ok());
    EXPECT_TRUE(model.Backward().ok());
  }
  Gradients gradients;
  const std::vector<TrainableTensor> trainable = TrainableOf(params);
  for (const TrainableTensor& t : trainable) {
    gradients.by_name[t.name].assign(t.grad->data(),
                                     t.grad->data() + t.grad->numel());
  }
  gradients.squared_norm = GradSquaredSum(backend, trainable);
  return gradients;
}

void ExpectRanksMatchTheWholeModel(const std::string& layout, int pp = 2) {
  SCOPED_TRACE(layout);
  const Gradients expected = WholeModel();
  const absl::StatusOr<std::vector<StageSlice>> plan =
      PlanForModel(*PresetConfig("glm5.2-tiny"), layout, pp);
  ASSERT_TRUE(plan.ok()) << plan.status();

  gloo::rendezvous::HashStore store;
  std::mutex mu;
  std::vector<double> squared_norms;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < pp; ++rank) {
    threads.emplace_back([&, rank] {
      ModelParameters params = TinyPipelineParameters();
      absl::StatusOr<PipelineRankRun> run = RunPipelineRank(
          store, *plan, rank, pp, params, kMicroBatches, PipelineTestBatch);
      ASSERT_TRUE(run.ok()) << run.status();

      const PipelineTensors tensors = PipelineTensorsOf(params, *plan, rank);
      const std::vector<TrainableTensor> trainable =
          SelectTrainable(TrainableOf(params), tensors.used);
      CpuBackend backend;
      ASSERT_TRUE(
          SumSharedGradients(backend, *run->group, tensors, trainable).ok());
      // Each tensor counts once, on its owning rank.
      const absl::StatusOr<double> squared_norm = SumInRankOrder(
          *run->group,
          GradSquaredSum(backend, SelectTrainable(trainable, tensors.owned)));
      ASSERT_TRUE(squared_norm.ok()) << squared_norm.status();
      for (const TrainableTensor& t :
           SelectTrainable(trainable, tensors.used)) {
        const std::vector<float>& want = expected.by_name.at(t.name);
        double norm = 0, error = 0;
        for (int64_t i = 0; i < t.grad->numel(); ++i) {
          const double diff = double{t.grad->data()[i]} - want[i];
          norm += double{want[i]} * want[i];
          error += diff * diff;
        }
        EXPECT_LE(std::sqrt(error), 1e-5 * std::sqrt(norm))
            << "rank " << rank << " " << t.name;
      }
      std::lock_guard<std::mutex> lock(mu);
      squared_norms.push_back(*squared_norm);
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_EQ(squared_norms.size(), static_cast<size_t>(pp));
  for (double squared_norm : squared_norms) {
    EXPECT_NEAR(std::sqrt(squared_norm), std::sqrt(expected.squared_norm),
                1e-5 * std::sqrt(expected.squared_norm));
  }
}

TEST(PipelineGradientsTest, TwoStagesSumOnlyTheEmbedding) {
  ExpectRanksMatchTheWholeModel("Etttttt|ttmL");
}

TEST(PipelineGradientsTest, InterleavedStagesSumOnlyTheEmbedding) {
  ExpectRanksMatchTheWholeModel("Et|t|tttt|ttmL");
}

// The embedding is read on the first and last of four ranks; the middle ones
// hold no copy and take no part in its sum.
TEST(PipelineGradientsTest, FourStagesSumTheEmbeddingOnItsReadersOnly) {
  ExpectRanksMatchTheWholeModel("Et|t|tttt|ttmL", 4);
}

}  // namespace
}  // namespace glm
