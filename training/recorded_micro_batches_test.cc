// RecordedMicroBatches' choice of when to run, record and replay, on the CPU
// backend with a recording that keeps the work and runs it again on Replay:
// every schedule of eager runs and replays gives the eager step's losses,
// expert loads and gradients bitwise.
#include "training/recorded_micro_batches.h"

#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/test_model_util.h"

namespace glm {
namespace {

struct Totals {
  double lm_loss = 0, mtp_loss = 0, indexer_loss = 0;
  std::vector<std::vector<int64_t>> expert_load;
};

// A recording that runs the host code again on each replay (what a CUDA
// graph replays, the same ops over the same memory). `fail` makes every
// Record an error.
class ReplayingBackend : public CpuBackend {
 public:
  bool fail = false;
  int records = 0;

  absl::StatusOr<std::unique_ptr<RecordedWork>> Record(
      const std::function<absl::Status()>& work) override {
    ++records;
    if (fail) return absl::FailedPreconditionError("no recording here");
    return std::unique_ptr<RecordedWork>(new Replaying(work));
  }

 private:
  class Replaying : public RecordedWork {
   public:
    explicit Replaying(std::function<absl::Status()> work)
        : work_(std::move(work)) {}
    void Replay() override { EXPECT_TRUE(work_().ok()); }

   private:
    std::function<absl::Status()> work_;
  };
};

class RecordedMicroBatchesTest : public ::testing::Test {
 protected:
  RecordedMicroBatchesTest() : config_(TinyTestConfig()), params_(config_) {
    params_.InitRandom(
        /*seed=*/5, 1.2f / std::sqrt(static_cast<float>(config_.hidden_size)));
  }

  // One step over `batches`: recorded on `backend` when given, else eager.
  std::vector<std::vector<float>> Step(const std::vector<Batch>& batches,
                                       ReplayingBackend* backend,
                                       RecordedMicroBatches* recorded,
                                       Totals* totals) {
    params_.ZeroGrad();
    Backend& on = backend != nullptr ? *backend : eager_;
    LossOptions options;
    options.return_logits = false;
    options.record_selections = false;
    GlmModel model(&params_, &on, options);
    StepTotals step(on.allocator());
    for (const Batch& batch : batches) {
      EXPECT_TRUE(model.Load(batch).ok());
      if (recorded != nullptr) {
        EXPECT_TRUE(recorded->Run(model, &step).ok());
      } else {
        EXPECT_TRUE(model.TrainLoaded(&step).ok());
      }
    }
    step.ReadInto(totals);
    return GradientValues(params_);
  }

  void ExpectSameStep(const std::vector<Batch>& batches,
                      ReplayingBackend* backend, int64_t replays,
                      size_t capacity = 2) {
    Totals eager, recorded_totals;
    const auto want = Step(batches, nullptr, nullptr, &eager);
    RecordedMicroBatches recorded(backend, capacity);
    const auto got = Step(batches, backend, &recorded, &recorded_totals);
    EXPECT_EQ(recorded.replays(), replays);
    EXPECT_EQ(recorded_totals.lm_loss, eager.lm_loss);
    EXPECT_EQ(recorded_totals.mtp_loss, eager.mtp_loss);
    EXPECT_EQ(recorded_totals.indexer_loss, eager.indexer_loss);
    EXPECT_GT(eager.indexer_loss, 0.0);
    EXPECT_EQ(recorded_totals.expert_load, eager.expert_load);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(got[i] == want[i]) << "gradient " << i;
    }
  }

  ModelConfig config_;
  ModelParameters params_;
  CpuBackend eager_;
};

const std::vector<int32_t> kSeqA = {3, 17, 4, 29, 8, 8, 21};
const std::vector<int32_t> kSeqB = {11, 2, 30, 5, 19, 7, 1};
const std::vector<int32_t> kSeqC = {9, 12, 6, 14, 23, 2, 18};

// Same shape three times: eager, then recorded and replayed, then replayed.
TEST_F(RecordedMicroBatchesTest, RepeatedShapesReplayTheRecording) {
  ReplayingBackend backend;
  ExpectSameStep({Batch::FromSequences({kSeqA}), Batch::FromSequences({kSeqB}),
                  Batch::FromSequences({kSeqC})},
                 &backend, 2);
  EXPECT_EQ(backend.records, 1);
}

// Other sequence starts are another shape: it runs eagerly the first time.
TEST_F(RecordedMicroBatchesTest, EachShapeStartsUnrecorded) {
  ReplayingBackend backend;
  ExpectSameStep({Batch::FromSequences({kSeqA}),
                  Batch::FromSequences({{3, 17, 4}, {29, 8, 8, 21}}),
                  Batch::FromSequences({kSeqB}),
                  Batch::FromSequences({{9, 12, 6}, {14, 23, 2, 18}})},
                 &backend, 2);
}

// Keeping one recording, two shapes in turn: each new recording drops the
// other's, which is recorded again when its shape returns.
TEST_F(RecordedMicroBatchesTest, DroppedRecordingsAreMadeAgain) {
  ReplayingBackend backend;
  const Batch a = Batch::FromSequences({kSeqA}),
              b = Batch::FromSequences({{9, 12, 6}, {14, 23, 2, 18}});
  // a eager, a recorded, b eager, b recorded (a's dropped), a recorded.
  ExpectSameStep({a, a, b, b, a}, &backend, 3, /*capacity=*/1);
  EXPECT_EQ(backend.records, 3);
}

// A shape whose recording fails stays eager, and is not recorded again.
TEST_F(RecordedMicroBatchesTest, FailedRecordingRunsEagerly) {
  ReplayingBackend backend;
  backend.fail = true;
  ExpectSameStep({Batch::FromSequences({kSeqA}), Batch::FromSequences({kSeqB}),
                  Batch::FromSequences({kSeqC})},
                 &backend, 0);
  EXPECT_EQ(backend.records, 1);
}

// The CPU backend records nothing: every micro batch runs eagerly.
TEST_F(RecordedMicroBatchesTest, BackendWithoutRecordingRunsEagerly) {
  CpuBackend cpu;
  RecordedMicroBatches recorded(&cpu);
  GlmModel model(&params_, &cpu);
  StepTotals step(nullptr);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(model.Load(Batch::FromSequences({kSeqA})).ok());
    ASSERT_TRUE(recorded.Run(model, &step).ok());
  }
  EXPECT_EQ(recorded.replays(), 0);
}

}  // namespace
}  // namespace glm
