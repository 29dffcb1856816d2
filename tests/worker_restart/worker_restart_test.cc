// A worker killed mid-run: a real coordinator (in-process, on loopback) runs a
// job with max_restarts 1 on real glm-worker processes, one of which is killed
// with SIGKILL two steps after the job's first checkpoint. The coordinator
// notices (the lost rank's heartbeats stop, or a surviving rank's collective
// fails), puts the job back to PENDING and starts attempt 2 on the workers
// left plus a replacement process, which resume from the last checkpoint. The
// job succeeds, and every iteration's losses and gradient norm, from either
// attempt, equal those of an uninterrupted run bit for bit. One rank (the
// coordinator must notice the silence) and two data-parallel ranks.
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/test_coordinator.h"
#include "gtest/gtest.h"
#include "worker/test_processes.h"
#include "worker/training_job.h"

namespace glm {
namespace {

constexpr int kTrainIters = 24;
constexpr int kSaveInterval = 3;
constexpr int64_t kHeartbeatTimeoutMs = 1500;

v1::JobSpec RestartableSpec(const std::string& data, const std::string& save,
                            int world_size) {
  v1::JobSpec spec = TinyPretrainSpec(data, save, world_size, kTrainIters);
  spec.mutable_training()->set_save_interval(kSaveInterval);
  spec.mutable_training()->set_max_restarts(1);
  return spec;
}

// The metrics of every iteration of `spec` run uninterrupted in this process.
std::map<int64_t, v1::StepMetrics> RunInThisProcess(const v1::JobSpec& spec) {
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

// The metrics of every iteration of `spec` run uninterrupted by the
// coordinator's workers.
std::map<int64_t, v1::StepMetrics> RunOnWorkers(const TestCoordinator& server,
                                                const v1::JobSpec& spec) {
  std::map<int64_t, v1::StepMetrics> metrics;
  const v1::Job ended =
      WatchToTheEnd(server, SubmitJob(server, spec), absl::Seconds(30),
                    [&](const v1::JobEvent& event) {
                      if (event.has_metrics()) {
                        metrics[event.metrics().iteration()] = event.metrics();
                      }
                    });
  EXPECT_EQ(ended.state(), v1::SUCCEEDED) << ended.DebugString();
  return metrics;
}

struct InterruptedRun {
  v1::Job ended;
  // Metrics as reported, by attempt number.
  std::map<int, std::vector<v1::StepMetrics>> metrics_by_attempt;
};

// Runs `spec` on `world_size` worker processes, kills the first with SIGKILL
// two steps past the first checkpoint (so that attempt 2 repeats steps that
// attempt 1 reported) and starts a replacement. The workers left are in
// `pids`.
InterruptedRun RunWithOneKill(const TestCoordinator& server,
                              const v1::JobSpec& spec, const std::string& dir,
                              std::vector<pid_t>* pids) {
  const std::string token = dir + "/token";
  std::ofstream(token) << TestCoordinator::kWorkerToken;
  const int world_size = spec.parallel().world_size();
  for (int i = 0; i < world_size; ++i) {
    pids->push_back(SpawnWorker(server.target(), token,
                                absl::StrCat(dir, "/worker", i, ".log")));
  }
  server.WaitForWorkers(world_size);
  const std::string id = SubmitJob(server, spec);
  InterruptedRun run;
  bool killed = false;
  run.ended = WatchToTheEnd(
      server, id, absl::Seconds(40), [&](const v1::JobEvent& event) {
        if (!event.has_metrics()) return;
        // By the job's restarts, not by counting SCHEDULED events: the watch
        // may begin after the first attempt was scheduled (a loaded machine).
        const int attempt = event.job().restarts() + 1;
        run.metrics_by_attempt[attempt].push_back(event.metrics());
        if (!killed && event.metrics().iteration() == kSaveInterval + 2) {
          EXPECT_GT(event.job().checkpoints_size(), 0);
          EXPECT_EQ(kill(pids->front(), SIGKILL), 0);
          waitpid(pids->front(), nullptr, 0);
          killed = true;
          pids->front() =
              SpawnWorker(server.target(), token, dir + "/replacement.log");
        }
      });
  EXPECT_TRUE(killed) << "the job ended before it was interrupted";
  return run;
}

// The job restarted once, for `reason`, and attempt 2 resumed from a
// checkpoint of attempt 1 to the end; every step reported by either attempt
// equals `reference` bit for bit.
void ExpectResumedBitwise(const InterruptedRun& run,
                          const std::vector<std::string>& reasons,
                          const std::map<int64_t, v1::StepMetrics>& reference) {
  const v1::Job& ended = run.ended;
  ASSERT_EQ(ended.state(), v1::SUCCEEDED) << ended.DebugString();
  EXPECT_EQ(ended.restarts(), 1);
  ASSERT_EQ(run.metrics_by_attempt.size(), 2u);
  int restarts = 0;
  for (const v1::StateChange& change : ended.history()) {
    if (change.to() != v1::PENDING ||
        change.from() == v1::JOB_STATE_UNSPECIFIED)
      continue;
    ++restarts;
    EXPECT_EQ(change.reason().rfind("restart 1 of 1: ", 0), 0u)
        << change.reason();
    bool named = false;
    for (const std::string& reason : reasons) {
      named |= change.reason().find(reason) != std::string::npos;
    }
    EXPECT_TRUE(named) << change.reason();
  }
  EXPECT_EQ(restarts, 1);

  const std::vector<v1::StepMetrics>& second = run.metrics_by_attempt.at(2);
  ASSERT_FALSE(second.empty());
  const int64_t resumed_at = second.front().iteration();
  std::printf(
      "attempt 1 reported iterations 1..%lld, attempt 2 %lld..%lld\n",
      static_cast<long long>(run.metrics_by_attempt.at(1).back().iteration()),
      static_cast<long long>(resumed_at),
      static_cast<long long>(second.back().iteration()));
  EXPECT_GT(resumed_at, kSaveInterval);
  EXPECT_EQ((resumed_at - 1) % kSaveInterval, 0);
  EXPECT_EQ(second.back().iteration(), kTrainIters);

  ASSERT_EQ(reference.size(), static_cast<size_t>(kTrainIters));
  for (const auto& [number, metrics] : run.metrics_by_attempt) {
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

TEST(WorkerRestartTest, KilledWorkerIsReplacedAndTheJobResumesBitwise) {
  TestCoordinator server("worker_restart", kHeartbeatTimeoutMs);
  const std::string dir = TempDir("worker_restart");
  const std::string data = WriteDocuments(dir);
  std::vector<pid_t> pids;
  const InterruptedRun run = RunWithOneKill(
      server, RestartableSpec(data, dir + "/save", 1), dir, &pids);
  StopWorkers(pids);
  ExpectResumedBitwise(
      run, {"sent no heartbeat for 1500 ms"},
      RunInThisProcess(RestartableSpec(data, dir + "/uninterrupted", 1)));
}

TEST(WorkerRestartTest,
     KilledDataParallelRankIsReplacedAndTheJobResumesBitwise) {
  TestCoordinator server("dp_restart", kHeartbeatTimeoutMs);
  const std::string dir = TempDir("dp_restart");
  const std::string data = WriteDocuments(dir);
  std::vector<pid_t> pids;
  const InterruptedRun run = RunWithOneKill(
      server, RestartableSpec(data, dir + "/save", 2), dir, &pids);
  // The same job uninterrupted, on the survivor and the replacement.
  const std::map<int64_t, v1::StepMetrics> reference =
      RunOnWorkers(server, RestartableSpec(data, dir + "/uninterrupted", 2));
  StopWorkers(pids);
  ExpectResumedBitwise(run, {" failed: ", " sent no heartbeat for 1500 ms"},
                       reference);
}

}  // namespace
}  // namespace glm
