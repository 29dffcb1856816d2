#include "cli/data_command.h"

#include <string>

#include "data/indexed_dataset.h"
#include "data/packed_sft_dataset.h"
#include "gtest/gtest.h"

namespace glm {
namespace {

const char kCorpus[] = "data/corpus/english_text.jsonl";
const char kChat[] = "data/corpus/chat_sft.jsonl";

const Command& Find(const std::string& words) {
  static const std::vector<Command> commands = DataCommands();
  for (const Command& command : commands) {
    if (command.words == words) return command;
  }
  ADD_FAILURE() << "no command " << words;
  return commands.front();
}

// Runs a command, returning its exit code and stdout.
int RunCommand(const std::string& words, const std::vector<std::string>& args,
               std::string* out) {
  ::testing::internal::CaptureStdout();
  const int code = Find(words).run(args);
  *out = ::testing::internal::GetCapturedStdout();
  return code;
}

TEST(DataCommandTest, PreprocessesTheShippedCorpus) {
  const std::string prefix = ::testing::TempDir() + "/corpus";
  std::string out;
  ASSERT_EQ(RunCommand(
                "data preprocess",
                {"--input", kCorpus, "--output-prefix", prefix, "--append-eod"},
                &out),
            0);
  EXPECT_NE(out.find("documents: 56\n"), std::string::npos) << out;
  EXPECT_NE(out.find("wrote " + prefix + ".idx"), std::string::npos) << out;
  auto dataset = IndexedDataset::Open(prefix);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->document_count(), 56);
  EXPECT_GT((*dataset)->element_count(), 30000);
  EXPECT_EQ((*dataset)->Sequence(0).back(), 256);  // end of document

  ASSERT_EQ(RunCommand("data inspect",
                       {"--prefix=" + prefix, "--max-tokens=20"}, &out),
            0);
  EXPECT_NE(out.find("documents: 56\n"), std::string::npos) << out;
  EXPECT_NE(out.find("The river begins as"), std::string::npos) << out;
}

TEST(DataCommandTest, CreatesTheOutputFolders) {
  const std::string dir = ::testing::TempDir() + "/new/nested";
  std::string out;
  ASSERT_EQ(RunCommand("data preprocess",
                       {"--input", kCorpus, "--output-prefix", dir + "/text",
                        "--append-eod"},
                       &out),
            0);
  EXPECT_TRUE(IndexedDataset::Open(dir + "/text").ok());
  ASSERT_EQ(RunCommand("data pack",
                       {"--input", kChat, "--seq-length=512", "--output-prefix",
                        dir + "/packed/chat"},
                       &out),
            0);
  EXPECT_NE(out.find("wrote " + dir + "/packed/chat"), std::string::npos)
      << out;
}

TEST(DataCommandTest, PacksTheShippedChats) {
  const std::string prefix = ::testing::TempDir() + "/chat";
  std::string out;
  ASSERT_EQ(RunCommand("data pack",
                       {"--input", kChat, "--seq-length=512",
                        "--pad-seq-to-mult=8", "--output-prefix", prefix},
                       &out),
            0);
  EXPECT_NE(out.find("conversations: 324\n"), std::string::npos) << out;
  EXPECT_NE(out.find("packing efficiency: "), std::string::npos) << out;
  auto packed = PackedSftDataset::Open(prefix, 1, 0);
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_EQ((*packed)->seq_length(), 512);
  EXPECT_NE(out.find("rows: " + std::to_string((*packed)->rows()) + " of"),
            std::string::npos)
      << out;

  ASSERT_EQ(RunCommand("data inspect", {"--prefix=" + prefix}, &out), 0);
  EXPECT_NE(out.find("<|user|>\n"), std::string::npos) << out;
  EXPECT_NE(out.find("<|assistant|>\n"), std::string::npos) << out;
}

TEST(DataCommandTest, ExitCodes) {
  std::string out;
  EXPECT_EQ(RunCommand("data preprocess", {"--output-prefix=/tmp/x"}, &out), 2);
  EXPECT_EQ(RunCommand("data preprocess", {"--bogus"}, &out), 2);
  EXPECT_EQ(RunCommand("data preprocess", {"--help"}, &out), 0);
  EXPECT_NE(out.find("--append-eod"), std::string::npos);
  EXPECT_EQ(RunCommand("data preprocess",
                       {"--input=/nonexistent.jsonl",
                        "--output-prefix=" + ::testing::TempDir() + "/none"},
                       &out),
            1);
  EXPECT_EQ(
      RunCommand("data pack",
                 {"--input", kChat, "--seq-length=lots", "--output-prefix=p"},
                 &out),
      2);
  EXPECT_EQ(
      RunCommand("data pack",
                 {"--input", kChat, "--seq-length=4", "--pad-seq-to-mult=8",
                  "--output-prefix=" + ::testing::TempDir() + "/p"},
                 &out),
      1);
  EXPECT_EQ(RunCommand("data inspect", {"--prefix=/nonexistent/prefix"}, &out),
            1);
  EXPECT_EQ(RunCommand("data inspect", {}, &out), 2);
}

TEST(PackingStatsTextTest, ReportsLikeTheCards) {
  PackingStats stats;
  stats.sequences = 95;
  stats.rows = 4;
  stats.real_tokens = 8000;
  stats.padded_sequence_tokens = 8100;
  stats.token_slots = 4 * 2048;
  stats.supervised_tokens = 3000;
  EXPECT_EQ(PackingStatsText(stats, 2048, 8),
            "rows: 4 of 2048 tokens (sequences padded to a multiple of 8)\n"
            "sequences: 95 (0 truncated)\n"
            "packing efficiency: 97.66% (8000 real tokens / 8192 token "
            "slots)\n"
            "fill with pad-to-multiple: 98.88%\n"
            "packing factor: 23.75 sequences per row\n"
            "supervised tokens: 3000\n");
}

}  // namespace
}  // namespace glm
