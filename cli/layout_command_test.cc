#include "cli/layout_command.h"

#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace glm {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Result {
  int code;
  std::string out, err;
};

Result Invoke(int (*command)(const std::vector<std::string>&, std::ostream&,
                             std::ostream&),
              const std::vector<std::string>& args) {
  std::ostringstream out, err;
  const int code = command(args, out, err);
  return {code, out.str(), err.str()};
}

const std::vector<std::string> kGlm52 = {"--num-layers=78", "--mtp-layers=1",
                                         "--index-topk-freq=4",
                                         "--index-skip-topk-offset=3"};

std::vector<std::string> With(std::vector<std::string> args) {
  args.insert(args.end(), kGlm52.begin(), kGlm52.end());
  return args;
}

TEST(LayoutCheckCommandTest, VerificationCardLayoutPrintsTable) {
  Result r =
      Invoke(RunLayoutCheck,
             With({"--pp=11", "--layout=Etttttt|(tttttttt|)*8,tttt|ttttmL"}));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("stages: 11 (pp 11 x vpp 1)"));
  // stage, pp rank, chunk, layers, count, computing layers, marks, cost
  EXPECT_THAT(r.out, HasSubstr("0      0        0      1-6       6       1-3"));
  EXPECT_THAT(r.out, HasSubstr("10     10       0      75-78     4       75"));
  EXPECT_THAT(r.out, HasSubstr("m L"));
}

TEST(LayoutCheckCommandTest, BadUnevenSplitNamesLayersAndSuggests) {
  Result r =
      Invoke(RunLayoutCheck, With({"--pp=4", "--num-layers-in-last-stage=18"}));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.out, HasSubstr("starts at layer 21"));
  EXPECT_THAT(r.out, HasSubstr("source computing layer 19"));
  EXPECT_THAT(r.out, HasSubstr("starts at layer 41"));
  EXPECT_THAT(r.out, HasSubstr("starts at layer 61"));
  EXPECT_THAT(r.out, HasSubstr("suggestion (each stage boundary moved"));
  EXPECT_THAT(r.out, HasSubstr("\n  E" + std::string(18, 't') + "|"));
}

TEST(LayoutCheckCommandTest, GoodUnevenSplitPasses) {
  Result r =
      Invoke(RunLayoutCheck, With({"--pp=4", "--num-layers-in-first-stage=14",
                                   "--num-layers-in-last-stage=24"}));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("15-34"));
  EXPECT_THAT(r.out, HasSubstr("55-78"));
}

TEST(LayoutCheckCommandTest, JsonOutput) {
  Result r = Invoke(RunLayoutCheck,
                    With({"--pp=4", "--num-layers-in-first-stage=14",
                          "--num-layers-in-last-stage=24", "--output=json"}));
  ASSERT_EQ(r.code, 0);
  nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_TRUE(report["valid"].get<bool>());
  EXPECT_EQ(report["stages"][1]["first_layer"], 15);
  EXPECT_EQ(report["stages"][3]["mtp_layers"], 1);

  r = Invoke(RunLayoutCheck, With({"--pp=4", "--num-layers-in-last-stage=18",
                                   "--output=json"}));
  ASSERT_EQ(r.code, 1);
  report = nlohmann::json::parse(r.out);
  EXPECT_FALSE(report["valid"].get<bool>());
  EXPECT_THAT(report["error"].get<std::string>(), HasSubstr("layer 61"));
  EXPECT_TRUE(report.contains("suggestion"));
}

TEST(LayoutCheckCommandTest, SyntaxErrorIsInvalidLayout) {
  Result r = Invoke(RunLayoutCheck, With({"--pp=2", "--layout=Et*40|t*38)mL"}));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.out, HasSubstr("unmatched ')' at position 11"));
  EXPECT_THAT(r.out, HasSubstr("suggestion (balanced plan"));
}

TEST(LayoutCheckCommandTest, BadUsageExitsTwo) {
  EXPECT_EQ(Invoke(RunLayoutCheck, {"--pp=4"}).code, 2);  // no --num-layers
  EXPECT_EQ(Invoke(RunLayoutCheck, With({"--pp=four"})).code, 2);
  EXPECT_EQ(Invoke(RunLayoutCheck, With({"--pp=4", "--bogus=1"})).code, 2);
  EXPECT_EQ(Invoke(RunLayoutCheck, With({"--pp=4", "--output=xml"})).code, 2);
  EXPECT_EQ(Invoke(RunLayoutCheck, With({"--pp=4", "extra"})).code, 2);
  EXPECT_EQ(Invoke(RunLayoutCheck, With({"--pp=1", "--layout=Et*78mL",
                                         "--num-layers-in-first-stage=78"}))
                .code,
            2);
  Result help = Invoke(RunLayoutCheck, {"--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_THAT(help.out, HasSubstr("--num-layers-in-first-stage"));
  EXPECT_THAT(help.out, HasSubstr("cost model"));
}

TEST(LayoutPlanCommandTest, PrintsLayoutTableAndCostModel) {
  Result r = Invoke(RunLayoutPlan, With({"--pp=8"}));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("layout: E"));
  EXPECT_THAT(r.out, HasSubstr("stages: 8 (pp 8 x vpp 1)"));
  EXPECT_THAT(r.out, HasSubstr("cost model"));
  const size_t start = r.out.find("layout: ") + 8;
  const std::string layout =
      r.out.substr(start, r.out.find('\n', start) - start);
  EXPECT_EQ(Invoke(RunLayoutCheck, With({"--pp=8", "--layout=" + layout})).code,
            0);
}

TEST(LayoutPlanCommandTest, VirtualStagesAndJson) {
  Result r =
      Invoke(RunLayoutPlan, With({"--pp=4", "--vpp=2", "--output=json"}));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["vpp"], 2);
  EXPECT_EQ(report["stages"].size(), 8u);
  EXPECT_EQ(report["cost_model"]["loss"], 2.0);
}

TEST(LayoutPlanCommandTest, ExplainsWhyNoLayoutExists) {
  Result r =
      Invoke(RunLayoutPlan, {"--num-layers=8", "--pp=2", "--index-topk-freq=4",
                             "--index-skip-topk-offset=0"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.out, HasSubstr("no layout: index sharing: layer 1 is a skip"));
  EXPECT_EQ(Invoke(RunLayoutPlan, {"--pp=2"}).code, 2);
  EXPECT_EQ(Invoke(RunLayoutPlan, With({"--pp=2", "--layout=Et*78mL"})).code,
            2);
}

TEST(GridCommandTest, PrintsEveryRank) {
  Result r = Invoke(RunGrid, {"--world=8", "--tp=2", "--pp=2", "--ep=2"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("world 8 = tp 2 x cp 1 x dp 2 x pp 2; experts: "
                               "etp 1 x ep 2 x edp 2 x pp 2"));
  // rank tp cp dp pp etp ep edp
  EXPECT_THAT(r.out, HasSubstr("\n6      0    0    1    1    0    0    1\n"));
  EXPECT_THAT(r.out, HasSubstr("\n7      1    0    1    1    0    1    1\n"));
}

TEST(GridCommandTest, ConstraintViolationAndJson) {
  Result r = Invoke(RunGrid, {"--world=12", "--tp=2", "--pp=4"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.out, HasSubstr("world % (tp*cp*pp) == 0 violated"));
  r = Invoke(RunGrid, {"--world=8", "--ep=4", "--num-experts=6"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.out, HasSubstr("num_experts % ep == 0"));
  r = Invoke(RunGrid, {"--world=4", "--cp=2", "--output=json"});
  ASSERT_EQ(r.code, 0);
  nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["dp"], 2);
  EXPECT_EQ(report["ranks"][3]["cp"], 1);
  EXPECT_EQ(report["ranks"][3]["dp"], 1);
  EXPECT_EQ(Invoke(RunGrid, {"--tp=2"}).code, 2);
}

TEST(LayoutCommandsTest, RegistersThreeCommands) {
  std::vector<std::string> words;
  for (const Command& command : LayoutCommands())
    words.push_back(command.words);
  EXPECT_THAT(words,
              ::testing::ElementsAre("layout check", "layout plan", "grid"));
}

}  // namespace
}  // namespace glm
