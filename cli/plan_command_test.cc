#include "cli/plan_command.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace glm {
namespace {

std::string TextOf(const std::vector<std::string>& args) {
  absl::StatusOr<std::string> text = PlanText(args);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

std::string ErrorOf(const std::vector<std::string>& args) {
  absl::StatusOr<std::string> text = PlanText(args);
  EXPECT_FALSE(text.ok()) << *text;
  return text.ok() ? "" : std::string(text.status().message());
}

TEST(PlanCommandTest, ExplainsOneSplitTermByTerm) {
  const std::string text =
      TextOf({"--preset=glm5.2-mini", "--cluster=h200", "--world=8",
              "--seq-length=4096", "--global-batch=64", "--explain", "--pp=2",
              "--ep=4", "--recompute=selective"});
  for (const char* part :
       {"cluster: 8 x H200 SXM 141GB", "split TP1 PP2 VPP1 CP1 EP4 ETP1 DP4",
        "recomputation selective", "memory of each pp rank's busiest rank",
        "moments", "attention output", "routed experts", "pipeline bubble",
        "TFLOP/s"}) {
    EXPECT_NE(text.find(part), std::string::npos) << part << "\n" << text;
  }
}

TEST(PlanCommandTest, SearchesAndRanksSplits) {
  const std::string text =
      TextOf({"--preset=glm5.2-mini", "--cluster=h200", "--world=8",
              "--global-batch=64", "--top=3", "--max-vpp=2", "--max-etp=1"});
  EXPECT_NE(text.find("splits tried"), std::string::npos) << text;
  EXPECT_NE(text.find("\n1  "), std::string::npos) << text;
  EXPECT_NE(text.find("\n3  "), std::string::npos) << text;
  EXPECT_NE(text.find("the fastest, term by term"), std::string::npos);
}

TEST(PlanCommandTest, SaysWhenNothingFits) {
  const std::string text =
      TextOf({"--preset=glm5.2", "--cluster=h100", "--world=8",
              "--global-batch=8", "--max-vpp=1", "--max-etp=1"});
  EXPECT_NE(text.find("no split of 8 H100 SXM 80GB fits"), std::string::npos)
      << text;
}

TEST(PlanCommandTest, CpuRanksPlanThisTrainer) {
  const std::string text =
      TextOf({"--preset=glm5.2-tiny", "--cluster=cpu", "--world=4",
              "--seq-length=256", "--global-batch=8", "--micro-batch=2"});
  EXPECT_NE(text.find("precision fp32"), std::string::npos) << text;
  EXPECT_NE(text.find("recomputation none"), std::string::npos) << text;
}

TEST(PlanCommandTest, CudaBf16ModeAddsWeightCopies) {
  const std::vector<std::string> args = {
      "--preset=glm5.2-tiny", "--cluster=h200", "--world=2", "--seq-length=256",
      "--global-batch=8",     "--explain",      "--pp=2"};
  std::vector<std::string> copies = args;
  copies.push_back("--precision=fp32-bf16-copies");
  const std::string text = TextOf(copies);
  EXPECT_NE(text.find("precision fp32-bf16-copies"), std::string::npos) << text;
  EXPECT_NE(text.find("bf16 copies"), std::string::npos) << text;
  std::vector<std::string> fp32 = args;
  fp32.push_back("--precision=fp32");
  EXPECT_NE(TextOf(fp32), text);
  EXPECT_NE(ErrorOf({"--preset=glm5.2-tiny", "--cluster=cpu", "--world=1",
                     "--seq-length=64", "--global-batch=2",
                     "--precision=fp32-bf16-copies"})
                .find("--precision"),
            std::string::npos);
}

TEST(PlanCommandTest, ErrorsNameTheFlag) {
  EXPECT_NE(ErrorOf({"--preset=glm5.2-mini", "--cluster=h200"}).find("--world"),
            std::string::npos);
  EXPECT_NE(
      ErrorOf({"--preset=glm5.2-mini", "--world=8", "--explain", "--tp=3"})
          .find("--tp: 3 does not divide"),
      std::string::npos);
  EXPECT_NE(ErrorOf({"--preset=nope", "--world=8"}).find("--preset"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"--preset=glm5.2-mini", "--world=8", "--cluster=tpu"})
                .find("--cluster"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"--preset=glm5.2-tiny", "--cluster=cpu", "--world=1",
                     "--seq-length=64", "--global-batch=2",
                     "--recompute=selective", "--explain"})
                .find("--recompute"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"--preset=glm5.2-mini", "--world=8", "--global-batch=3",
                     "--micro-batch=2"})
                .find("--global-batch"),
            std::string::npos);
  EXPECT_NE(ErrorOf({"--preset=glm5.2-mini", "--world=8", "--explain", "--pp=4",
                     "--layout=Etttttttttttt|t|m|L"})
                .find("--layout"),
            std::string::npos);
}

TEST(PlanCommandTest, ReadsAConfigFile) {
  const std::string text =
      TextOf({"--config=planner/testdata/cpu_bench_config.json",
              "--cluster=cpu", "--world=2", "--seq-length=512",
              "--global-batch=8", "--micro-batch=2", "--explain", "--pp=2"});
  EXPECT_NE(text.find("hidden 256"), std::string::npos) << text;
}

TEST(PlanCommandTest, IsAGlmctlCommand) {
  const std::vector<Command> commands = PlanCommands();
  ASSERT_EQ(commands.size(), 1u);
  EXPECT_EQ(commands[0].words, "plan");
  EXPECT_EQ(commands[0].run({"--help"}), 0);
  EXPECT_EQ(commands[0].run({"--world=x"}), 2);
}

}  // namespace
}  // namespace glm
