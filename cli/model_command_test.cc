#include "cli/model_command.h"

#include "gtest/gtest.h"

namespace glm {
namespace {

TEST(ModelInfoTest, ListsCountsAndLayerKinds) {
  absl::StatusOr<ModelConfig> mini = PresetConfig("glm5.2-mini");
  ASSERT_TRUE(mini.ok());
  const std::string text = ModelInfoText(*mini);
  EXPECT_NE(text.find("2690985216 (2.69B)"), std::string::npos) << text;
  EXPECT_NE(text.find("1      dense  computing\n"), std::string::npos);
  EXPECT_NE(text.find("4      moe    skip (top-k of layer 3)\n"),
            std::string::npos);
  EXPECT_NE(text.find("7      moe    computing\n"), std::string::npos);
  EXPECT_NE(text.find("12     moe    skip (top-k of layer 11)\n"),
            std::string::npos);
  EXPECT_NE(text.find("mtp    moe    skip (top-k of layer 11)\n"),
            std::string::npos);
}

TEST(ModelInfoTest, CommandExitCodes) {
  const std::vector<Command> commands = ModelCommands();
  const Command& info = commands.at(0);
  EXPECT_EQ(info.words, "model info");
  EXPECT_EQ(info.run({"--preset=glm5-tiny"}), 0);
  EXPECT_EQ(info.run({"--preset=nope"}), 1);
  EXPECT_EQ(info.run({"--config=/nonexistent/config.json"}), 1);
  EXPECT_EQ(info.run({}), 2);
  EXPECT_EQ(info.run({"--preset=glm5-tiny", "--config=x"}), 2);
  EXPECT_EQ(info.run({"--bogus"}), 2);
}

TEST(ModelConfigCommandTest, PrintsPresetsAsHfConfigJson) {
  const std::vector<Command> commands = ModelCommands();
  const Command& config = commands.at(1);
  EXPECT_EQ(config.words, "model config");
  testing::internal::CaptureStdout();
  EXPECT_EQ(config.run({"--preset=glm5.2-mini"}), 0);
  const std::string json = testing::internal::GetCapturedStdout();
  absl::StatusOr<ModelConfig> parsed = ParseHfConfigJson(json);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(CountParameters(*parsed).total, 2690985216);
  EXPECT_EQ(config.run({"--preset=glm5.2-mini", "--bogus"}), 2);
}

}  // namespace
}  // namespace glm
