// A worker killed mid-run: a real coordinator (in-process, on loopback) runs a
// job with max_restarts 1 on a real glm-worker process, which is killed with
// SIGKILL two steps after the job's first checkpoint. The coordinator notices
// within the heartbeat timeout, puts the job back to PENDING and starts attempt
// 2 on a replacement worker process, which resumes from the last checkpoint.
// The job succeeds, and every iteration's losses and gradient norm, from either
// attempt, equal those of an uninterrupted run bit for bit.
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "coordinator/test_coordinator.h"
#include "gtest/gtest.h"
#include "tests/worker_restart/worker_processes.h"
#include "worker/training_job.h"

namespace glm {
namespace {

constexpr int kTrainIters = 24;
constexpr int kSaveInterval = 3;
constexpr int64_t kHeartbeatTimeoutMs = 1500;

v1::JobSpec RestartableSpec(const std::string& data, const std::string& save) {
  v1::JobSpec spec =
      TinyPretrainSpec(data, save, /*world_size=*/1, kTrainIters);
  spec.mutable_training()->set_save_interval(kSaveInterval);
  spec.mutable_training()->set_max_restarts(1);
  return spec;
}

// The metrics of every iteration of `spec` run uninterrupted in this process.
std::map<int64_t, v1::StepMetrics> UninterruptedRun(const v1::JobSpec& spec) {
  v1::Assignment assignment;
  assignment.set_job_id("uninterrupted");
  assignment.set_world_size(1);
  *assignment.mutable_spec() = spec;
  std::map<int64_t, v1::StepMetrics> metrics;
  TrainingJobHooks hooks;
  hooks.log = [](const std::string&) {};
  hooks.on_step = [&](const v1::StepMetrics& step) {
    metrics[step.iteration()] = step;
    return false;
  };
  hooks.on_checkpoint = [](const v1::CheckpointManifest&) {};
  const absl::Status ran = RunTrainingJob(assignment, hooks);
  EXPECT_TRUE(ran.ok()) << ran;
  return metrics;
}

TEST(WorkerRestartTest, KilledWorkerIsReplacedAndTheJobResumesBitwise) {
  TestCoordinator server("worker_restart", kHeartbeatTimeoutMs);
  const std::string dir = TempDir("worker_restart");
  const std::string data = WriteDocuments(dir);
  const v1::JobSpec spec = RestartableSpec(data, dir + "/save");
  const std::string id = SubmitJob(server, spec);
  const std::string token = dir + "/token";
  std::ofstream(token) << TestCoordinator::kToken;
  std::vector<pid_t> pids = {
      SpawnWorker(server.target(), token, dir + "/worker0.log")};

  // Kills the worker mid-run and starts a replacement.
  int attempt = 0;
  bool killed = false;
  std::map<int, std::vector<v1::StepMetrics>> metrics_by_attempt;
  const v1::Job ended = WatchToTheEnd(
      server, id, absl::Seconds(50), [&](const v1::JobEvent& event) {
        if (event.has_state_change() &&
            event.state_change().to() == v1::SCHEDULED) {
          ++attempt;
        }
        if (!event.has_metrics()) return;
        metrics_by_attempt[attempt].push_back(event.metrics());
        // Two steps past the first checkpoint, so that attempt 2 repeats
        // steps that attempt 1 reported.
        if (!killed && event.metrics().iteration() == kSaveInterval + 2) {
          EXPECT_GT(event.job().checkpoints_size(), 0);
          EXPECT_EQ(kill(pids[0], SIGKILL), 0);
          killed = true;
          pids.push_back(
              SpawnWorker(server.target(), token, dir + "/worker1.log"));
        }
      });
  StopWorkers(pids);

  ASSERT_EQ(ended.state(), v1::SUCCEEDED) << ended.DebugString();
  ASSERT_TRUE(killed) << "the job ended before its first checkpoint";
  EXPECT_EQ(ended.restarts(), 1);
  EXPECT_EQ(attempt, 2);
  bool restarted_for_silence = false;
  for (const v1::StateChange& change : ended.history()) {
    if (change.from() == v1::RUNNING && change.to() == v1::PENDING) {
      restarted_for_silence =
          change.reason().find("restart 1 of 1: ") == 0 &&
          change.reason().find("sent no heartbeat") != std::string::npos;
    }
  }
  EXPECT_TRUE(restarted_for_silence) << ended.DebugString();

  // Attempt 2 resumed from a checkpoint of attempt 1, not from scratch.
  ASSERT_FALSE(metrics_by_attempt[2].empty());
  const int64_t resumed_at = metrics_by_attempt[2].front().iteration();
  std::printf("attempt 1 reported iterations 1..%lld, attempt 2 %lld..%lld\n",
              static_cast<long long>(metrics_by_attempt[1].back().iteration()),
              static_cast<long long>(resumed_at),
              static_cast<long long>(metrics_by_attempt[2].back().iteration()));
  EXPECT_GT(resumed_at, kSaveInterval);
  EXPECT_EQ((resumed_at - 1) % kSaveInterval, 0);
  EXPECT_EQ(metrics_by_attempt[2].back().iteration(), kTrainIters);

  const std::map<int64_t, v1::StepMetrics> reference =
      UninterruptedRun(RestartableSpec(data, dir + "/uninterrupted"));
  ASSERT_EQ(reference.size(), static_cast<size_t>(kTrainIters));
  for (const auto& [number, metrics] : metrics_by_attempt) {
    for (const v1::StepMetrics& got : metrics) {
      const v1::StepMetrics& expected = reference.at(got.iteration());
      EXPECT_EQ(got.lm_loss(), expected.lm_loss())
          << "attempt " << number << " iteration " << got.iteration();
      EXPECT_EQ(got.mtp_loss(), expected.mtp_loss())
          << "attempt " << number << " iteration " << got.iteration();
      EXPECT_EQ(got.grad_norm(), expected.grad_norm())
          << "attempt " << number << " iteration " << got.iteration();
    }
  }
}

}  // namespace
}  // namespace glm
