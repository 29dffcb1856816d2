// Data parallelism over two ranks (threads, each with its own Gloo context)
// takes the same steps as one process: same losses, same gradient norm, same
// updated weights.
#include <cmath>
#include <thread>

#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "parallel/gloo_collectives.h"
#include "training/trainer.h"
#include "training/training_data.h"

namespace glm {
namespace {

// Token ids from a fixed integer hash of (sample, position): every sample
// differs, so a rank reading the wrong samples changes the losses.
class HashedTokenDataset : public TokenSampleDataset {
 public:
  explicit HashedTokenDataset(int64_t seq_length) : seq_length_(seq_length) {}
  int64_t size() const override { return 1024; }
  int64_t seq_length() const override { return seq_length_; }
  std::vector<int32_t> Sample(int64_t index) const override {
    std::vector<int32_t> ids;
    for (int64_t i = 0; i <= seq_length_; ++i) {
      const uint64_t h = (index * 2654435761u + i * 40503u) ^ (index >> 3);
      ids.push_back(static_cast<int32_t>(h % 509));
    }
    return ids;
  }

 private:
  int64_t seq_length_;
};

TrainerOptions Options() {
  TrainerOptions o;
  o.model = *PresetConfig("glm5.2-tiny");
  o.train_iters = 3;
  o.global_batch_size = 4;
  o.micro_batch_size = 1;
  o.seq_length = 24;
  o.schedule = {3e-3, 3e-4, 1, 3};
  o.router_bias_update_rate = 1e-2;
  o.seed = 7;
  return o;
}

struct TrainingRun {
  std::vector<v1::StepMetrics> steps;
  std::vector<std::string> names;
  std::vector<std::vector<float>> weights;
};

TrainingRun Train(Collectives* data_parallel) {
  TrainerOptions options = Options();
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(
      options,
      std::make_unique<PretrainData>(
          std::make_unique<HashedTokenDataset>(options.seq_length)),
      nullptr, std::make_unique<CpuBackend>(), data_parallel);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  TrainingRun run;
  if (!trainer.ok()) return run;
  while (!(*trainer)->Done()) {
    absl::StatusOr<v1::StepMetrics> metrics = (*trainer)->Step();
    EXPECT_TRUE(metrics.ok()) << metrics.status();
    if (!metrics.ok()) return run;
    run.steps.push_back(*metrics);
  }
  for (const NamedTensor& named : (*trainer)->params().Named()) {
    run.names.push_back(named.name);
    run.weights.push_back(named.value->values());
  }
  return run;
}

void ExpectRelativelyNear(double a, double b, const std::string& what) {
  EXPECT_LE(std::abs(a - b), 1e-5 * std::max(std::abs(a), std::abs(b)))
      << what << ": " << a << " vs " << b;
}

TEST(DataParallelTest, TwoRanksTakeTheStepsOfOneProcess) {
  const TrainingRun single = Train(nullptr);
  gloo::rendezvous::HashStore store;
  TrainingRun ranks[2];
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      absl::StatusOr<std::unique_ptr<GlooCollectives>> group =
          GlooCollectives::Connect(store, "dp", rank, 2, GlooOptions());
      ASSERT_TRUE(group.ok()) << group.status();
      ranks[rank] = Train(group->get());
    });
  }
  for (std::thread& t : threads) t.join();

  ASSERT_EQ(single.steps.size(), 3u);
  for (const TrainingRun& dp : ranks) {
    ASSERT_EQ(dp.steps.size(), single.steps.size());
    for (size_t i = 0; i < single.steps.size(); ++i) {
      const std::string step = "step " + std::to_string(i + 1);
      ExpectRelativelyNear(dp.steps[i].lm_loss(), single.steps[i].lm_loss(),
                           step + " lm_loss");
      ExpectRelativelyNear(dp.steps[i].mtp_loss(), single.steps[i].mtp_loss(),
                           step + " mtp_loss");
      ExpectRelativelyNear(dp.steps[i].indexer_loss(),
                           single.steps[i].indexer_loss(),
                           step + " indexer_loss");
      ExpectRelativelyNear(dp.steps[i].grad_norm(), single.steps[i].grad_norm(),
                           step + " grad_norm");
      EXPECT_EQ(dp.steps[i].consumed_samples(),
                single.steps[i].consumed_samples());
    }
  }
  // Both ranks hold identical weights, within 1e-5 of the single process in
  // each tensor's relative L2 error. (Element-wise, a weight whose gradient is
  // near zero can differ more: AdamW's first steps move it by about
  // lr * g / (|g| + eps), which magnifies float rounding in the order the
  // ranks' gradients are summed.)
  ASSERT_EQ(ranks[0].weights.size(), single.weights.size());
  for (size_t t = 0; t < single.weights.size(); ++t) {
    EXPECT_EQ(ranks[0].weights[t], ranks[1].weights[t]) << single.names[t];
    double norm = 0, error = 0;
    for (size_t i = 0; i < single.weights[t].size(); ++i) {
      const double diff = single.weights[t][i] - ranks[0].weights[t][i];
      norm += double{single.weights[t][i]} * single.weights[t][i];
      error += diff * diff;
    }
    EXPECT_LE(std::sqrt(error), 1e-5 * std::sqrt(norm)) << single.names[t];
  }
}

TEST(DataParallelTest, RejectsMicroBatchesThatDoNotDivideOverRanks) {
  gloo::rendezvous::HashStore store;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 3; ++rank) {
    threads.emplace_back([&, rank] {
      absl::StatusOr<std::unique_ptr<GlooCollectives>> group =
          GlooCollectives::Connect(store, "dp", rank, 3, GlooOptions());
      ASSERT_TRUE(group.ok()) << group.status();
      TrainerOptions options = Options();
      absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(
          options,
          std::make_unique<PretrainData>(
              std::make_unique<HashedTokenDataset>(options.seq_length)),
          nullptr, std::make_unique<CpuBackend>(), group->get());
      ASSERT_FALSE(trainer.ok());
      EXPECT_NE(trainer.status().message().find("data-parallel size 3"),
                std::string::npos)
          << trainer.status();
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace
}  // namespace glm
