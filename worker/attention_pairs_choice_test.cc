#include "worker/attention_pairs_choice.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/statusor.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "jobspec/device_rules.h"
#include "kernels/attention_pairs.h"
#include "planner/attention_cap.h"
#include "planner/long_context_options.h"
#include "proto/job_spec.pb.h"
#include "training/trainer.h"
#include "worker/training_job.h"

namespace glm {
namespace {

constexpr char kVariable[] = "GLM_ATTENTION_PAIRS_PER_CALL";
constexpr int64_t kMiB = int64_t{1} << 20;
const DeviceDescription kH100{"NVIDIA H100 80GB HBM3", 81559 * kMiB};

// Each test starts with the variable unset and leaves it so.
class AttentionPairsChoiceTest : public ::testing::Test {
 protected:
  void SetUp() override { unsetenv(kVariable); }
  void TearDown() override { unsetenv(kVariable); }
};

v1::JobSpec OneGpu() {
  v1::JobSpec spec;
  spec.set_precision("bf16");
  spec.mutable_parallel()->set_world_size(1);
  return spec;
}

AttentionPairsChoice Choose(const v1::JobSpec& spec,
                            const TrainerOptions& options,
                            const DeviceDescription& device) {
  absl::StatusOr<AttentionPairsChoice> choice =
      ChooseAttentionPairsPerCall(spec, options, device);
  EXPECT_TRUE(choice.ok()) << choice.status();
  return choice.ok() ? *choice : AttentionPairsChoice{};
}

// 64k on an H100 at the default would be over the card (run78 ran out of
// memory there); the choice is a smaller call, noted for the log.
TEST_F(AttentionPairsChoiceTest, FitsALongSequenceToAnH100) {
  const AttentionPairsChoice choice =
      Choose(OneGpu(), LongContextOptions(65536), kH100);
  EXPECT_LT(choice.pairs_per_call, kDefaultAttentionPairsPerCall);
  EXPECT_GE(choice.pairs_per_call, kMinFittedAttentionPairsPerCall);
  EXPECT_NE(choice.note.find("GLM_ATTENTION_PAIRS_PER_CALL unset"),
            std::string::npos)
      << choice.note;
  EXPECT_NE(choice.note.find("NVIDIA H100 80GB HBM3"), std::string::npos)
      << choice.note;
}

// The default stands, without a note, where it fits, on the CPU, and where
// the job splits its model over ranks.
TEST_F(AttentionPairsChoiceTest, KeepsTheDefaultWhereItFitsOrIsNotModelled) {
  v1::JobSpec tensor_parallel = OneGpu();
  tensor_parallel.mutable_parallel()->set_world_size(2);
  tensor_parallel.mutable_parallel()->set_tp(2);
  const struct {
    const char* what;
    v1::JobSpec spec;
    TrainerOptions options;
    DeviceDescription device;
  } cases[] = {
      {"4k on an H100", OneGpu(), LongContextOptions(4096), kH100},
      {"64k on an H200",
       OneGpu(),
       LongContextOptions(65536),
       {"NVIDIA H200", 143771 * kMiB}},
      {"the CPU", OneGpu(), LongContextOptions(65536), {"cpu", 0}},
      {"tp 2", tensor_parallel, LongContextOptions(65536), kH100},
  };
  for (const auto& c : cases) {
    const AttentionPairsChoice choice = Choose(c.spec, c.options, c.device);
    EXPECT_EQ(choice.pairs_per_call, kDefaultAttentionPairsPerCall) << c.what;
    EXPECT_EQ(choice.note, "") << c.what;
  }
}

// A job no call size fits gets the fewest tried, and a warning.
TEST_F(AttentionPairsChoiceTest, WarnsWhenNothingFits) {
  const AttentionPairsChoice choice =
      Choose(OneGpu(), LongContextOptions(262144), kH100);
  EXPECT_EQ(choice.pairs_per_call, kMinFittedAttentionPairsPerCall);
  EXPECT_NE(choice.note.find("may run out of memory"), std::string::npos)
      << choice.note;
}

// The user's number wins; a number that is not one fails, naming it.
TEST_F(AttentionPairsChoiceTest, TheEnvironmentWins) {
  setenv(kVariable, "1000000", 1);
  const AttentionPairsChoice choice =
      Choose(OneGpu(), LongContextOptions(65536), kH100);
  EXPECT_EQ(choice.pairs_per_call, 1000000);
  EXPECT_EQ(choice.note, "");
  setenv(kVariable, "lots", 1);
  const absl::StatusOr<AttentionPairsChoice> bad =
      ChooseAttentionPairsPerCall(OneGpu(), LongContextOptions(4096), kH100);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(kVariable), std::string::npos);
}

// Every GPU job the training checks and the examples run (SFT, LoRA, graphs,
// recomputation, data parallelism, a 16k sequence, model splits) gets a
// choice from the planner without an error on an H100, and, all of them
// fitting it with room, the default without a note.
TEST_F(AttentionPairsChoiceTest, EveryGpuJobOfTheChecksKeepsTheDefault) {
  std::vector<std::string> files = {"examples/pretrain_cuda.json"};
  for (const auto& entry :
       std::filesystem::directory_iterator("tests/gpu/jobs"))
    files.push_back(entry.path().string());
  ASSERT_GT(files.size(), 20u);
  for (const std::string& file : files) {
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    v1::JobSpec spec;
    ASSERT_TRUE(
        google::protobuf::util::JsonStringToMessage(text.str(), &spec).ok())
        << file;
    if (spec.device() == "cpu") continue;  // the checks' CPU references
    absl::StatusOr<JobPlan> plan = ValidateForWorker(spec, "cuda:0");
    ASSERT_TRUE(plan.ok()) << file << ": " << plan.status();
    const TrainerOptions options =
        TrainerOptionsFromSpec(plan->model, spec.training());
    const AttentionPairsChoice choice = Choose(spec, options, kH100);
    EXPECT_EQ(choice.pairs_per_call, kDefaultAttentionPairsPerCall) << file;
    EXPECT_EQ(choice.note, "") << file;
  }
}

}  // namespace
}  // namespace glm
