#include "cli/convert_command.h"

#include <filesystem>
#include <sstream>

#include "absl/strings/match.h"
#include "base/command_flags.h"
#include "checkpoint/checkpoint_test_util.h"
#include "checkpoint/synthetic_hf.h"
#include "gtest/gtest.h"

namespace glm {
namespace {

namespace fs = std::filesystem;

std::string MakeHf() {
  const std::string dir = NewTempDir();
  SyntheticHfOptions options;
  options.form = ExpertForm::kFused;
  EXPECT_TRUE(
      WriteSyntheticHfCheckpoint(dir, *PresetConfig("glm5.2-tiny"), options)
          .ok());
  return dir;
}

TEST(ConvertCommandTest, ImportThenExportVerifies) {
  const std::string hf = MakeHf();
  const std::string native = NewTempDir();
  const std::string out = NewTempDir();
  std::ostringstream stdout_text, stderr_text;
  EXPECT_EQ(RunConvertImport({"--hf=" + hf, "--out=" + native, "--pp=2",
                              "--ep=2", "--layout=Etttttt|ttmL"},
                             stdout_text, stderr_text),
            kExitOk)
      << stderr_text.str();
  EXPECT_TRUE(absl::StrContains(stdout_text.str(), "iter_0000000"));
  EXPECT_TRUE(absl::StrContains(stdout_text.str(), "elements bitwise equal"))
      << stdout_text.str();
  EXPECT_TRUE(fs::exists(native + "/iter_0000000/rank_00003.safetensors"));

  stdout_text.str("");
  EXPECT_EQ(RunConvertExport({"--checkpoint=" + native, "--out=" + out,
                              "--max-shard-bytes=100000"},
                             stdout_text, stderr_text),
            kExitOk)
      << stderr_text.str();
  EXPECT_TRUE(absl::StrContains(stdout_text.str(), "verified: "));
  EXPECT_TRUE(fs::exists(out + "/model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(out + "/config.json"));
}

TEST(ConvertCommandTest, UsageAndFailures) {
  std::ostringstream stdout_text, stderr_text;
  EXPECT_EQ(RunConvertImport({"--hf=/x"}, stdout_text, stderr_text),
            kExitUsage);
  EXPECT_TRUE(absl::StrContains(stderr_text.str(), "--out"));
  EXPECT_EQ(
      RunConvertExport({"--checkpoint=/x", "--out=/y", "--max-shard-bytes=0"},
                       stdout_text, stderr_text),
      kExitUsage);
  EXPECT_EQ(RunConvertImport({"--help"}, stdout_text, stderr_text), kExitOk);

  // A damaged native checkpoint fails the export loudly.
  const std::string hf = MakeHf();
  const std::string native = NewTempDir();
  ASSERT_EQ(RunConvertImport({"--hf=" + hf, "--out=" + native}, stdout_text,
                             stderr_text),
            kExitOk);
  const std::string shard = native + "/iter_0000000/rank_00000.safetensors";
  fs::resize_file(shard, fs::file_size(shard) - 1);
  stderr_text.str("");
  EXPECT_EQ(
      RunConvertExport({"--checkpoint=" + native, "--out=" + NewTempDir()},
                       stdout_text, stderr_text),
      kExitFailure);
  EXPECT_TRUE(absl::StrContains(stderr_text.str(), "FAILED"));
  EXPECT_TRUE(absl::StrContains(stderr_text.str(), "truncated"))
      << stderr_text.str();
}

}  // namespace
}  // namespace glm
