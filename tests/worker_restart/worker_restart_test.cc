// A worker killed mid-run: a real coordinator (in-process, on loopback) runs a
// job with max_restarts 1 on a real glm-worker process, which is killed with
// SIGKILL two steps after the job's first checkpoint. The coordinator notices
// within the heartbeat timeout, puts the job back to PENDING and starts attempt
// 2 on a replacement worker process, which resumes from the last checkpoint.
// The job succeeds, and every iteration's losses and gradient norm, from either
// attempt, equal those of an uninterrupted run bit for bit.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "coordinator/test_coordinator.h"
#include "data/indexed_dataset.h"
#include "grpcpp/channel.h"
#include "gtest/gtest.h"
#include "proto/job_service.grpc.pb.h"
#include "worker/training_job.h"

extern char** environ;

namespace glm {
namespace {

constexpr int kTrainIters = 24;
constexpr int kSaveInterval = 3;
constexpr int64_t kHeartbeatTimeoutMs = 1500;

std::string TempDir(const std::string& name) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Documents of pseudo-random byte tokens, each of its own length.
std::string WriteDocuments(const std::string& dir) {
  const std::string prefix = dir + "/documents";
  auto builder = IndexedDatasetBuilder::Create(prefix, TokenDtype::kUint16);
  EXPECT_TRUE(builder.ok());
  uint32_t state = 777;
  for (int document = 0; document < 80; ++document) {
    std::vector<int32_t> ids;
    for (int i = 0; i < 24 + document % 13; ++i) {
      state = state * 1103515245u + 12345u;
      ids.push_back(static_cast<int32_t>((state >> 16) % 256));
    }
    ids.push_back(256);
    EXPECT_TRUE((*builder)->AddDocument(ids).ok());
  }
  EXPECT_TRUE((*builder)->Finish().ok());
  return prefix;
}

v1::JobSpec RestartableSpec(const std::string& data, const std::string& save) {
  v1::JobSpec spec;
  spec.set_name("restart-e2e");
  spec.set_device("cpu");
  spec.mutable_model()->set_preset("glm5.2-tiny");
  spec.mutable_parallel()->set_world_size(1);
  v1::TrainingSpec& t = *spec.mutable_training();
  t.set_mode(v1::PRETRAIN);
  t.set_train_iters(kTrainIters);
  t.set_lr(3e-3);
  t.set_min_lr(3e-4);
  t.set_warmup_iters(2);
  t.set_global_batch_size(4);
  t.set_micro_batch_size(2);
  t.set_seq_length(32);
  t.set_seed(11);
  t.set_save_dir(save);
  t.set_save_interval(kSaveInterval);
  t.set_max_restarts(1);
  v1::DatasetSource& source = *spec.mutable_data()->add_sources();
  source.set_path(data);
  source.set_weight(1.0);
  spec.mutable_data()->set_tokenizer("byte");
  spec.mutable_data()->set_data_seed(4);
  return spec;
}

pid_t SpawnWorker(const std::string& coordinator, const std::string& token,
                  const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> args = {"worker/glm-worker",
                                   "--coordinator=" + coordinator,
                                   "--token-file=" + token};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ),
            0);
  posix_spawn_file_actions_destroy(&actions);
  return pid;
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
  std::shared_ptr<ClientConnection> connection = server.Connect();
  auto stub = v1::JobService::NewStub(connection->channel());
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = spec;
  v1::SubmitJobResponse submitted;
  ASSERT_TRUE(
      stub->SubmitJob(connection->NewContext().get(), submit, &submitted).ok());
  const std::string token = dir + "/token";
  std::ofstream(token) << TestCoordinator::kToken;
  std::vector<pid_t> pids = {
      SpawnWorker(server.target(), token, dir + "/worker0.log")};

  // Follows the job to its end; kills the worker mid-run and starts a
  // replacement.
  std::unique_ptr<grpc::ClientContext> context =
      connection->NewContext(absl::Seconds(50));
  v1::WatchJobRequest watch;
  watch.set_id(submitted.job().id());
  auto reader = stub->WatchJob(context.get(), watch);
  v1::JobEvent event;
  int attempt = 0;
  bool killed = false;
  std::map<int, std::vector<v1::StepMetrics>> metrics_by_attempt;
  while (reader->Read(&event)) {
    const v1::Job& job = event.job();
    if (event.has_state_change() && event.state_change().to() == v1::SCHEDULED)
      ++attempt;
    if (event.has_metrics()) {
      metrics_by_attempt[attempt].push_back(event.metrics());
      // Two steps past the first checkpoint, so that attempt 2 repeats steps
      // that attempt 1 reported.
      if (!killed && event.metrics().iteration() == kSaveInterval + 2) {
        ASSERT_GT(job.checkpoints_size(), 0) << job.DebugString();
        ASSERT_EQ(kill(pids[0], SIGKILL), 0);
        killed = true;
        pids.push_back(
            SpawnWorker(server.target(), token, dir + "/worker1.log"));
      }
    }
    if (job.state() == v1::SUCCEEDED || job.state() == v1::FAILED ||
        job.state() == v1::CANCELLED) {
      break;
    }
  }
  context->TryCancel();
  for (pid_t pid : pids) {
    kill(pid, SIGTERM);
    waitpid(pid, nullptr, 0);
  }

  const v1::Job& ended = event.job();
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
