// CoordinatorClient against a real in-process coordinator on 127.0.0.1: the
// scheduler assigns ranks to registered workers, follows the attempt to its
// end, and fails jobs whose workers fail or go silent.
#include "worker/coordinator_client.h"

#include <algorithm>
#include <map>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/strip.h"
#include "coordinator/test_coordinator.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "jobspec/test_specs.h"
#include "proto/job_service.grpc.pb.h"

namespace glm {
namespace {

// "worker-" and 128 random bits in hex.
bool IsRandomWorkerId(const std::string& id) {
  const absl::string_view hex = absl::StripPrefix(id, "worker-");
  return hex.size() == 32 && hex.size() + 7 == id.size() &&
         std::all_of(hex.begin(), hex.end(), absl::ascii_isxdigit);
}

// A registered worker whose assignments are collected by a thread watching the
// stream. It runs no training: the test plays the rank's part.
class WatchingWorker {
 public:
  WatchingWorker(const TestCoordinator& server, v1::DeviceKind kind)
      : client_(server.ConnectAsWorker()) {
    absl::Status registered =
        client_.Register(DescribeThisHost(kind, "127.0.0.1:0"));
    EXPECT_TRUE(registered.ok()) << registered;
    watcher_ = std::thread([this] {
      watch_status_ = client_.WatchAssignments([this](const v1::Assignment& a) {
        absl::MutexLock lock(&mu_);
        assignments_.push_back(a);
      });
    });
  }
  ~WatchingWorker() {
    client_.CancelWatch();
    watcher_.join();
  }

  // The first assignment, waiting up to 5 s for it.
  std::optional<v1::Assignment> Await() {
    absl::MutexLock lock(&mu_);
    auto arrived = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !assignments_.empty();
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&arrived), absl::Seconds(5))) {
      return std::nullopt;
    }
    return assignments_.front();
  }

  CoordinatorClient& client() { return client_; }

 private:
  CoordinatorClient client_;
  std::thread watcher_;
  absl::Status watch_status_;
  absl::Mutex mu_;
  std::vector<v1::Assignment> assignments_ ABSL_GUARDED_BY(mu_);
};

class CoordinatorClientTest : public ::testing::Test {
 protected:
  explicit CoordinatorClientTest(int64_t heartbeat_timeout_ms = 10000)
      : server_(::testing::UnitTest::GetInstance()->current_test_info()->name(),
                heartbeat_timeout_ms),
        connection_(server_.ConnectAsOperator()),
        jobs_(v1::JobService::NewStub(connection_->channel())) {}

  // The tiny job allows a restart; these tests follow a job to its failure
  // (restarts are tested in coordinator/scheduler_test and
  // tests/worker_restart).
  static v1::JobSpec WithoutRestarts(v1::JobSpec spec) {
    spec.mutable_training()->set_max_restarts(0);
    return spec;
  }

  std::string Submit(const v1::JobSpec& spec) {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    v1::SubmitJobResponse response;
    grpc::Status status =
        jobs_->SubmitJob(connection_->NewContext().get(), request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.job().id();
  }

  v1::Job Get(const std::string& id) { return server_.GetJob(id); }

  // The job's state once it is `state`, or the last seen after 5 s.
  v1::Job AwaitState(const std::string& id, v1::JobState state) {
    v1::Job job;
    for (int i = 0; i < 100; ++i) {
      job = Get(id);
      if (job.state() == state) break;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return job;
  }

  TestCoordinator server_;
  std::shared_ptr<ClientConnection> connection_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
};

TEST_F(CoordinatorClientTest, RanksAreAssignedAndTheJobRunsToSuccess) {
  WatchingWorker gpu(server_, v1::CUDA);  // wrong device: never assigned
  WatchingWorker first(server_, v1::CPU);
  const std::string id = Submit(LoadTestSpec("tiny_job.json"));
  EXPECT_EQ(Get(id).state(), v1::PENDING);  // one of two ranks
  WatchingWorker second(server_, v1::CPU);

  std::map<int, v1::Assignment> by_rank;
  for (WatchingWorker* worker : {&first, &second}) {
    std::optional<v1::Assignment> assignment = worker->Await();
    ASSERT_TRUE(assignment.has_value());
    by_rank[assignment->rank()] = *assignment;
  }
  ASSERT_EQ(by_rank.size(), 2u);
  const v1::Assignment& rank0 = by_rank[0];
  const v1::Assignment& rank1 = by_rank[1];
  EXPECT_EQ(rank0.job_id(), id);
  EXPECT_EQ(rank0.attempt(), 1);
  EXPECT_EQ(rank0.world_size(), 2);
  EXPECT_EQ(rank0.spec().name(), "tiny-pretrain");
  EXPECT_EQ(rank0.rendezvous().scope(), id + "/attempt-1");
  EXPECT_GT(rank0.rendezvous().timeout_ms(), 0);
  EXPECT_EQ(rank1.job_id(), id);

  v1::Job scheduled = Get(id);
  EXPECT_EQ(scheduled.state(), v1::SCHEDULED);
  ASSERT_EQ(scheduled.worker_ids_size(), 2);
  EXPECT_EQ(scheduled.worker_ids(0), first.client().worker_id());

  // Rank 0 reports a step, rank 1 a heartbeat naming the job: both show life.
  v1::StepMetrics step;
  step.set_iteration(1);
  step.set_train_iters(20);
  step.set_lm_loss(6.25);
  absl::StatusOr<bool> stop = first.client().ReportMetrics(id, 1, 0, step);
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_FALSE(*stop);
  EXPECT_EQ(Get(id).state(), v1::SCHEDULED);
  second.client().SetCurrentJob(id, 1);
  ASSERT_TRUE(second.client().Heartbeat().ok());
  v1::Job running = Get(id);
  EXPECT_EQ(running.state(), v1::RUNNING);
  EXPECT_DOUBLE_EQ(running.latest_metrics().lm_loss(), 6.25);

  v1::CheckpointManifest manifest;
  manifest.set_job_id(id);
  manifest.set_iteration(10);
  manifest.set_directory("/ckpt/iter_0000010");
  manifest.add_tensors()->set_name("model.norm.weight");
  manifest.add_shards()->set_path("rank_00000.safetensors");
  ASSERT_TRUE(first.client().ReportCheckpoint(1, 0, manifest).ok());
  v1::ListCheckpointsRequest list;
  list.set_job_id(id);
  v1::ListCheckpointsResponse checkpoints;
  ASSERT_TRUE(
      jobs_
          ->ListCheckpoints(connection_->NewContext().get(), list, &checkpoints)
          .ok());
  ASSERT_EQ(checkpoints.checkpoints_size(), 1);
  EXPECT_EQ(checkpoints.checkpoints(0).iteration(), 10);
  EXPECT_EQ(checkpoints.checkpoints(0).tensors_size(), 1);
  // A job list carries the manifests without their tensor and shard tables
  // unless asked.
  for (bool full : {false, true}) {
    v1::ListJobsRequest request;
    request.set_full_manifests(full);
    v1::ListJobsResponse listed;
    ASSERT_TRUE(
        jobs_->ListJobs(connection_->NewContext().get(), request, &listed)
            .ok());
    for (const v1::Job& job : listed.jobs()) {
      if (job.id() != id) continue;
      ASSERT_EQ(job.checkpoints_size(), 1);
      EXPECT_EQ(job.checkpoints(0).iteration(), 10);
      EXPECT_EQ(job.checkpoints(0).tensors_size(), full ? 1 : 0);
      EXPECT_EQ(job.checkpoints(0).shards_size(), full ? 1 : 0);
    }
  }
  EXPECT_EQ(Get(id).checkpoints(0).tensors_size(), 1);

  ASSERT_TRUE(first.client().ReportJobResult(id, 0, 1, true, "").ok());
  EXPECT_EQ(Get(id).state(), v1::RUNNING);
  ASSERT_TRUE(second.client().ReportJobResult(id, 1, 1, true, "").ok());
  v1::Job done = Get(id);
  EXPECT_EQ(done.state(), v1::SUCCEEDED);
  EXPECT_EQ(done.worker_ids_size(), 0);
  // A stale report for the ended attempt is refused.
  EXPECT_EQ(first.client().ReportJobResult(id, 0, 1, true, "").code(),
            absl::StatusCode::kFailedPrecondition);
  // The freed workers take the next job.
  const std::string next = Submit(LoadTestSpec("tiny_job.json"));
  EXPECT_EQ(Get(next).state(), v1::SCHEDULED);
}

TEST_F(CoordinatorClientTest, ARankFailureFailsTheJobAndStopsTheOthers) {
  WatchingWorker first(server_, v1::CPU);
  WatchingWorker second(server_, v1::CPU);
  const std::string id = Submit(WithoutRestarts(LoadTestSpec("tiny_job.json")));
  std::optional<v1::Assignment> assignment = second.Await();
  ASSERT_TRUE(assignment.has_value());
  std::optional<v1::Assignment> first_assignment = first.Await();
  ASSERT_TRUE(first_assignment.has_value());
  ASSERT_TRUE(
      second.client()
          .ReportJobResult(id, assignment->rank(), 1, false, "out of memory")
          .ok());
  v1::Job failed = Get(id);
  EXPECT_EQ(failed.state(), v1::FAILED);
  EXPECT_NE(failed.message().find("out of memory"), std::string::npos);
  EXPECT_NE(failed.message().find(second.client().worker_id()),
            std::string::npos);

  first.client().SetCurrentJob(id, 3);
  absl::StatusOr<v1::HeartbeatResponse> beat = first.client().Heartbeat();
  ASSERT_TRUE(beat.ok());
  EXPECT_TRUE(beat->stop_job());
  EXPECT_NE(beat->reason().find("out of memory"), std::string::npos);
  v1::StepMetrics step;
  EXPECT_TRUE(
      *first.client().ReportMetrics(id, 1, first_assignment->rank(), step));
}

TEST_F(CoordinatorClientTest,
       ARestartRequeuesScheduledJobsAndFailsRunningOnes) {
  WatchingWorker first(server_, v1::CPU);
  WatchingWorker second(server_, v1::CPU);
  const std::string running =
      Submit(WithoutRestarts(LoadTestSpec("tiny_job.json")));
  ASSERT_TRUE(first.Await().has_value());
  ASSERT_TRUE(second.Await().has_value());
  for (WatchingWorker* worker : {&first, &second}) {
    worker->client().SetCurrentJob(running, 1);
    ASSERT_TRUE(worker->client().Heartbeat().ok());
  }
  ASSERT_EQ(Get(running).state(), v1::RUNNING);
  WatchingWorker third(server_, v1::CPU);
  WatchingWorker fourth(server_, v1::CPU);
  const std::string scheduled = Submit(LoadTestSpec("tiny_job.json"));
  ASSERT_EQ(Get(scheduled).state(), v1::SCHEDULED);

  ASSERT_TRUE(server_.Restart().ok());
  connection_ = server_.ConnectAsOperator();
  jobs_ = v1::JobService::NewStub(connection_->channel());

  v1::Job failed = Get(running);
  EXPECT_EQ(failed.state(), v1::FAILED);
  EXPECT_NE(failed.message().find("coordinator restarted"), std::string::npos);
  v1::Job requeued = Get(scheduled);
  EXPECT_EQ(requeued.state(), v1::PENDING);
  ASSERT_EQ(requeued.history_size(), 3);
  EXPECT_EQ(requeued.history(2).from(), v1::SCHEDULED);
  // Workers of the old coordinator are unknown to the new one: they register
  // again, under new random ids.
  CoordinatorClient stale(server_.ConnectAsWorker());
  ASSERT_TRUE(stale.Register(DescribeThisHost(v1::CPU, "127.0.0.1:0")).ok());
  EXPECT_TRUE(IsRandomWorkerId(stale.worker_id())) << stale.worker_id();
  for (WatchingWorker* old : {&first, &second, &third, &fourth}) {
    EXPECT_NE(old->client().worker_id(), stale.worker_id());
  }
  WatchingWorker again(server_, v1::CPU);
  std::optional<v1::Assignment> assignment = again.Await();
  ASSERT_TRUE(assignment.has_value());
  EXPECT_EQ(assignment->job_id(), scheduled);
  EXPECT_EQ(assignment->attempt(), 2);
  EXPECT_EQ(assignment->rendezvous().scope(), scheduled + "/attempt-2");
}

TEST_F(CoordinatorClientTest, AWorkerForgottenByARestartRegistersAgain) {
  CoordinatorClient client(server_.ConnectAsWorker());
  ASSERT_TRUE(client.Register(DescribeThisHost(v1::CPU, "127.0.0.1:0")).ok());
  const std::string before = client.worker_id();
  ASSERT_TRUE(client.Heartbeat().ok());

  ASSERT_TRUE(server_.RestartOnSamePort().ok());
  // The first worker of the new coordinator does not get the stale id.
  CoordinatorClient newcomer(server_.ConnectAsWorker());
  ASSERT_TRUE(newcomer.Register(DescribeThisHost(v1::CPU, "127.0.0.1:0")).ok());
  EXPECT_NE(newcomer.worker_id(), before);
  // The old client reaches the new coordinator on its old connection, which
  // does not know its id.
  absl::Status stale = client.Heartbeat().status();
  for (int i = 0; i < 50 && absl::IsUnavailable(stale); ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    stale = client.Heartbeat().status();
  }
  EXPECT_EQ(stale.code(), absl::StatusCode::kNotFound) << stale;
  EXPECT_NE(stale.message().find(before), std::string::npos) << stale;
  EXPECT_TRUE(CoordinatorForgotWorker(stale));

  ASSERT_TRUE(client.RegisterAgain().ok());
  EXPECT_NE(client.worker_id(), before);
  EXPECT_NE(client.worker_id(), newcomer.worker_id());
  EXPECT_TRUE(client.Heartbeat().ok());
  EXPECT_FALSE(CoordinatorForgotWorker(absl::UnavailableError("down")));
}

class HeartbeatTimeoutTest : public CoordinatorClientTest {
 protected:
  HeartbeatTimeoutTest() : CoordinatorClientTest(400) {}
};

TEST_F(HeartbeatTimeoutTest, ASilentWorkerIsDeclaredDeadAndItsJobFails) {
  WatchingWorker alive(server_, v1::CPU);
  WatchingWorker silent(server_, v1::CPU);
  std::vector<std::string> stops;
  absl::Mutex stops_mu;
  alive.client().StartHeartbeats(
      [&](const std::string& reason) {
        absl::MutexLock lock(&stops_mu);
        stops.push_back(reason);
      },
      nullptr);
  const std::string id = Submit(WithoutRestarts(LoadTestSpec("tiny_job.json")));
  ASSERT_TRUE(alive.Await().has_value());
  alive.client().SetCurrentJob(id, 0);

  v1::Job failed = AwaitState(id, v1::FAILED);
  ASSERT_EQ(failed.state(), v1::FAILED);
  EXPECT_NE(failed.message().find(silent.client().worker_id()),
            std::string::npos)
      << failed.message();
  EXPECT_NE(failed.message().find("no heartbeat"), std::string::npos);
  EXPECT_EQ(silent.client().Heartbeat().status().code(),
            absl::StatusCode::kFailedPrecondition);
  // The surviving rank's heartbeats tell it to stop.
  {
    absl::MutexLock lock(&stops_mu);
    auto stopped = [&] { return !stops.empty(); };
    stops_mu.AwaitWithTimeout(absl::Condition(&stopped), absl::Seconds(5));
  }
  alive.client().StopHeartbeats();
  absl::MutexLock lock(&stops_mu);
  ASSERT_FALSE(stops.empty());
  EXPECT_NE(stops.front().find("FAILED"), std::string::npos) << stops.front();
}

}  // namespace
}  // namespace glm
