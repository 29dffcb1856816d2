#include "worker/attention_pairs_choice.h"

#include <cstdlib>
#include <string>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "kernels/attention_pairs.h"
#include "planner/attention_cap.h"
#include "planner/long_context_options.h"
#include "proto/job_spec.pb.h"
#include "training/trainer.h"

namespace glm {
namespace {

constexpr char kVariable[] = "GLM_ATTENTION_PAIRS_PER_CALL";
constexpr int64_t kMiB = int64_t{1} << 20;
const DeviceDescription kH100{"NVIDIA H100 80GB HBM3", 81559 * kMiB};

// The variable unset for the test's span, then as it was.
class AttentionPairsChoiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* value = std::getenv(kVariable)) saved_ = value;
    unsetenv(kVariable);
  }
  void TearDown() override {
    if (saved_.empty()) {
      unsetenv(kVariable);
    } else {
      setenv(kVariable, saved_.c_str(), 1);
    }
  }

 private:
  std::string saved_;
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

}  // namespace
}  // namespace glm
