// glmctl's job commands against a real in-process coordinator on 127.0.0.1,
// with two registered workers playing the ranks' part, so `watch` follows a job
// to its end.
#include "cli/job_commands.h"

#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "absl/strings/str_split.h"
#include "coordinator/test_coordinator.h"
#include "gtest/gtest.h"
#include "worker/coordinator_client.h"

namespace glm {
namespace {

// The job id in submit's "submitted job-TAG-000001 (STATE)".
std::string SubmittedId(const std::string& out) {
  const std::string prefix = "submitted ";
  if (out.rfind(prefix, 0) != 0) return "";
  return out.substr(prefix.size(),
                    out.find(' ', prefix.size()) - prefix.size());
}

// Whether a line of `table` holds `cells` in this order.
bool HasRow(const std::string& table, const std::vector<std::string>& cells) {
  for (absl::string_view line : absl::StrSplit(table, '\n')) {
    size_t at = 0;
    bool all = true;
    for (const std::string& cell : cells) {
      at = line.find(cell, at);
      if (at == absl::string_view::npos) {
        all = false;
        break;
      }
      at += cell.size();
    }
    if (all) return true;
  }
  return false;
}

class JobCommandsTest : public ::testing::Test {
 protected:
  JobCommandsTest() : server_("job_commands") {
    token_file_ = std::string(std::getenv("TEST_TMPDIR")) + "/token";
    std::ofstream(token_file_) << TestCoordinator::kOperatorToken << "\n";
  }

  // Runs `glmctl WORDS ARGS... --coordinator=... --token-file=...`, capturing
  // stdout.
  int Run(const std::string& words, std::vector<std::string> args,
          std::string* out) {
    args.push_back("--coordinator=" + server_.target());
    args.push_back("--token-file=" + token_file_);
    for (const Command& command : JobCommands()) {
      if (command.words != words) continue;
      std::stringstream captured;
      std::streambuf* original = std::cout.rdbuf(captured.rdbuf());
      const int code = command.run(args);
      std::cout.rdbuf(original);
      *out = captured.str();
      return code;
    }
    ADD_FAILURE() << "no command " << words;
    return -1;
  }

  TestCoordinator server_;
  std::string token_file_;
};

TEST_F(JobCommandsTest, WatchFollowsAJobToSuccess) {
  CoordinatorClient first(server_.ConnectAsWorker());
  CoordinatorClient second(server_.ConnectAsWorker());
  ASSERT_TRUE(first.Register(DescribeThisHost(v1::CPU, "127.0.0.1:0")).ok());
  ASSERT_TRUE(second.Register(DescribeThisHost(v1::CPU, "127.0.0.1:0")).ok());
  std::string out;
  ASSERT_EQ(Run("submit", {"-f", "jobspec/testdata/tiny_job.json"}, &out), 0);
  const std::string job = SubmittedId(out);
  EXPECT_EQ(out, "submitted " + job + " (SCHEDULED)\n");

  std::string watched;
  int watch_code = -1;
  std::thread watcher([&] { watch_code = Run("watch", {job}, &watched); });
  absl::SleepFor(absl::Milliseconds(200));
  v1::StepMetrics step;
  step.set_iteration(5);
  step.set_train_iters(20);
  step.set_lm_loss(3.5);
  step.set_tokens_per_sec_per_device(1234);
  step.set_step_time_ms(1000);
  ASSERT_FALSE(*first.ReportMetrics(job, 1, 0, step));
  ASSERT_FALSE(*second.ReportMetrics(job, 1, 1, step));
  ASSERT_TRUE(first.ReportJobResult(job, 0, 1, true, "").ok());
  ASSERT_TRUE(second.ReportJobResult(job, 1, 1, true, "").ok());
  watcher.join();

  EXPECT_EQ(watch_code, 0);
  // The step shows as it happens, or at once when the watch started late.
  EXPECT_NE(watched.find("step 5/20 (25%) loss 3.5000 tokens/s 1234 ETA 15s"),
            std::string::npos)
      << watched;
  EXPECT_NE(watched.find(job + " SUCCEEDED: all 2 ranks finished"),
            std::string::npos)
      << watched;

  ASSERT_EQ(Run("list", {"--state=SUCCEEDED"}, &out), 0);
  EXPECT_NE(out.find(job + "  tiny-pretrain  SUCCEEDED  5/20  3.5000"),
            std::string::npos)
      << out;
  ASSERT_EQ(Run("list", {"--state=RUNNING"}, &out), 0);
  EXPECT_EQ(out.find(job), std::string::npos) << out;
  EXPECT_EQ(Run("list", {"--state=DONE"}, &out), 2);
}

TEST_F(JobCommandsTest, CheckpointsAreListed) {
  // The two ranks of the job; the first (rank 0) reports its checkpoint.
  CoordinatorClient worker(server_.ConnectAsWorker());
  CoordinatorClient other(server_.ConnectAsWorker());
  ASSERT_TRUE(worker.Register(DescribeThisHost(v1::CPU, "127.0.0.1:0")).ok());
  ASSERT_TRUE(other.Register(DescribeThisHost(v1::CPU, "127.0.0.1:0")).ok());
  std::string out;
  ASSERT_EQ(Run("submit", {"-f", "jobspec/testdata/tiny_job.json"}, &out), 0);
  const std::string job = SubmittedId(out);
  v1::CheckpointManifest manifest;
  manifest.set_job_id(job);
  manifest.set_iteration(10);
  manifest.set_consumed_samples(40);
  manifest.set_kind("full");
  manifest.set_directory("/ckpt/iter_0000010");
  ASSERT_TRUE(worker.ReportCheckpoint(1, 0, manifest).ok());
  ASSERT_EQ(Run("checkpoints", {job}, &out), 0);
  EXPECT_NE(out.find("10         full  40"), std::string::npos) << out;
  EXPECT_NE(out.find("/ckpt/iter_0000010"), std::string::npos) << out;
  ASSERT_EQ(Run("checkpoints", {job, "--output=json"}, &out), 0);
  EXPECT_NE(out.find("\"iteration\": \"10\""), std::string::npos) << out;
  EXPECT_EQ(Run("checkpoints", {}, &out), 2);  // the job id is required
}

TEST_F(JobCommandsTest, ListFollowsEveryPage) {
  server_.RegisterWorker(v1::CPU);  // the jobs wait for a second worker
  std::string out;
  // More jobs than one page holds (100 by default).
  constexpr int kJobs = 103;
  std::string last;
  for (int i = 0; i < kJobs; ++i) {
    ASSERT_EQ(Run("submit", {"-f", "jobspec/testdata/tiny_job.json"}, &out), 0);
    last = SubmittedId(out);
  }
  ASSERT_EQ(Run("list", {}, &out), 0);
  int rows = 0;
  for (size_t at = out.find("tiny-pretrain"); at != std::string::npos;
       at = out.find("tiny-pretrain", at + 1)) {
    ++rows;
  }
  EXPECT_EQ(rows, kJobs);
  EXPECT_NE(out.find(last), std::string::npos);
}

TEST_F(JobCommandsTest, AuditListsStateChangesForOperatorsOnly) {
  const std::string worker = server_.RegisterWorker(v1::CPU);
  std::string out;
  ASSERT_EQ(Run("submit", {"-f", "jobspec/testdata/tiny_job.json"}, &out), 0);
  const std::string job = SubmittedId(out);
  ASSERT_EQ(Run("cancel", {job}, &out), 0);
  ASSERT_EQ(Run("audit", {}, &out), 0);
  EXPECT_TRUE(HasRow(
      out, {"1", "worker", "WorkerService/RegisterWorker", worker, "OK"}))
      << out;
  EXPECT_TRUE(HasRow(out, {"2", "operator", "ipv4:127.0.0.1",
                           "JobService/SubmitJob", job, "OK"}))
      << out;
  EXPECT_TRUE(HasRow(out, {"3", "operator", "JobService/CancelJob", job, "OK"}))
      << out;
  ASSERT_EQ(Run("audit", {"--after=2"}, &out), 0);
  EXPECT_EQ(out.find("SubmitJob"), std::string::npos) << out;
  EXPECT_NE(out.find("CancelJob"), std::string::npos) << out;

  const std::string worker_token =
      std::string(std::getenv("TEST_TMPDIR")) + "/worker_token";
  std::ofstream(worker_token) << TestCoordinator::kWorkerToken << "\n";
  token_file_ = worker_token;
  EXPECT_EQ(Run("audit", {}, &out), 1);
}

}  // namespace
}  // namespace glm
