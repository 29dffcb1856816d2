// The scheduler over the real job table, worker registry and rendezvous table
// (no RPC): a failed or silent rank restarts the job while
// spec.training.max_restarts allows, else fails it; the other ranks of the
// ended attempt stop before their workers take new work.
#include "coordinator/scheduler.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "coordinator/assignment_builder.h"
#include "gtest/gtest.h"
#include "jobspec/test_specs.h"

namespace glm {
namespace {

constexpr int64_t kHeartbeatTimeoutMs = 1500;

class SchedulerTest : public ::testing::Test {
 protected:
  SchedulerTest()
      : store_(*JobStore::Open(absl::StrCat(
            std::getenv("TEST_TMPDIR"), "/",
            ::testing::UnitTest::GetInstance()->current_test_info()->name()))),
        jobs_(store_.get()),
        workers_(kHeartbeatTimeoutMs),
        scheduler_(&jobs_, &workers_, &rendezvous_, 1000) {}

  std::string AddWorker(int64_t now_ms = 0) {
    v1::RegisterWorkerRequest request;
    request.set_device_kind(v1::CPU);
    return workers_.Register(request, now_ms).id;
  }

  // Submits the two-rank test job and schedules it on two new workers, whose
  // assignments are delivered; returns the job id.
  std::string StartTwoRankJob(int max_restarts,
                              int scheduling_timeout_seconds = 0) {
    v1::JobSpec spec = LoadTestSpec("tiny_job.json");
    spec.mutable_training()->set_max_restarts(max_restarts);
    spec.set_scheduling_timeout_seconds(scheduling_timeout_seconds);
    const std::string id = jobs_.Create(spec)->id();
    for (int i = 0; i < 2; ++i) AddWorker();
    EXPECT_TRUE(scheduler_.ScheduleReady().ok());
    const v1::Job job = *jobs_.Get(id);
    EXPECT_EQ(job.state(), v1::SCHEDULED);
    for (const std::string& worker : job.worker_ids()) {
      EXPECT_TRUE(workers_.NextAssignment(worker, absl::ZeroDuration()));
      Heartbeat(worker, id, 0);
    }
    EXPECT_EQ(jobs_.Get(id)->state(), v1::RUNNING);
    return id;
  }

  v1::HeartbeatResponse Heartbeat(const std::string& worker,
                                  const std::string& job_id, int64_t now_ms) {
    v1::HeartbeatRequest request;
    request.set_worker_id(worker);
    request.set_job_id(job_id);
    absl::StatusOr<v1::HeartbeatResponse> response =
        scheduler_.OnHeartbeat(request, now_ms);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.value_or(v1::HeartbeatResponse());
  }

  absl::Status Report(const std::string& worker, const std::string& job_id,
                      int rank, int attempt, bool ok) {
    v1::ReportJobResultRequest request;
    request.set_worker_id(worker);
    request.set_job_id(job_id);
    request.set_rank(rank);
    request.set_attempt(attempt);
    request.set_ok(ok);
    request.set_message(ok ? "" : "gloo: connection closed by peer");
    return scheduler_.OnJobResult(request);
  }

  std::unique_ptr<JobStore> store_;
  JobTable jobs_;
  WorkerRegistry workers_;
  RendezvousTable rendezvous_;
  Scheduler scheduler_;
};

TEST_F(SchedulerTest, PendingJobFailsOnceItsSchedulingTimeoutPasses) {
  v1::JobSpec spec = LoadTestSpec("tiny_job.json");  // two ranks
  spec.set_scheduling_timeout_seconds(30);
  const v1::Job job = *jobs_.Create(spec);
  const std::string patient = jobs_.Create(LoadTestSpec("tiny_job.json"))->id();
  AddWorker();
  ASSERT_TRUE(scheduler_.ScheduleReady().ok());
  const int64_t submitted_ms = job.history(0).unix_ms();

  ASSERT_TRUE(scheduler_.FailJobsWaitingTooLong(submitted_ms + 29999).ok());
  EXPECT_EQ(jobs_.Get(job.id())->state(), v1::PENDING);
  ASSERT_TRUE(scheduler_.FailJobsWaitingTooLong(submitted_ms + 30000).ok());
  const v1::Job failed = *jobs_.Get(job.id());
  EXPECT_EQ(failed.state(), v1::FAILED);
  EXPECT_EQ(failed.message(),
            "waited 30 s (scheduling_timeout_seconds) for 2 idle cpu workers "
            "(parallel.world_size); 1 available");
  // 0: no timeout.
  ASSERT_TRUE(scheduler_.FailJobsWaitingTooLong(submitted_ms + 1000000).ok());
  EXPECT_EQ(jobs_.Get(patient)->state(), v1::PENDING);
}

TEST_F(SchedulerTest, SchedulingTimeoutCountsFromTheRequeueOfARestart) {
  const std::string id =
      StartTwoRankJob(/*max_restarts=*/1, /*scheduling_timeout_seconds=*/5);
  absl::SleepFor(absl::Milliseconds(50));
  const v1::Job running = *jobs_.Get(id);
  ASSERT_TRUE(Report(running.worker_ids(0), id, 0, 1, false).ok());
  const v1::Job requeued = *jobs_.Get(id);
  ASSERT_EQ(requeued.state(), v1::PENDING);
  const int64_t requeued_ms = requeued.history().rbegin()->unix_ms();
  ASSERT_GE(requeued_ms - requeued.created_unix_ms(), 50);

  ASSERT_TRUE(scheduler_.FailJobsWaitingTooLong(requeued_ms + 4999).ok());
  EXPECT_EQ(jobs_.Get(id)->state(), v1::PENDING);
  ASSERT_TRUE(scheduler_.FailJobsWaitingTooLong(requeued_ms + 5000).ok());
  EXPECT_EQ(jobs_.Get(id)->state(), v1::FAILED);
}

TEST_F(SchedulerTest, FailedRankRestartsTheJobOnWorkersThatAreFree) {
  const std::string id = StartTwoRankJob(/*max_restarts=*/1);
  const v1::Job started = *jobs_.Get(id);
  const std::string rank0 = started.worker_ids(0);
  const std::string rank1 = started.worker_ids(1);

  ASSERT_TRUE(Report(rank1, id, 1, 1, /*ok=*/false).ok());
  v1::Job job = *jobs_.Get(id);
  EXPECT_EQ(job.state(), v1::PENDING);
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_EQ(job.history().rbegin()->reason(),
            absl::StrCat("restart 1 of 1: rank 1 (", rank1,
                         ") failed: gloo: connection closed by peer"));

  // Rank 0 still trains: it is told to stop and is not free.
  const v1::HeartbeatResponse stop = Heartbeat(rank0, id, 10);
  EXPECT_TRUE(stop.stop_job());
  EXPECT_NE(stop.reason().find("attempt 1 ended (PENDING)"), std::string::npos)
      << stop.reason();
  EXPECT_EQ(workers_.IdleWorkers(v1::CPU), std::vector<std::string>{rank1});
  ASSERT_TRUE(scheduler_.ScheduleReady().ok());
  EXPECT_EQ(jobs_.Get(id)->state(), v1::PENDING);  // one free worker of two

  // A new worker joins: attempt 2 runs on it and the failed rank's worker.
  const std::string spare = AddWorker(10);
  ASSERT_TRUE(scheduler_.ScheduleReady().ok());
  job = *jobs_.Get(id);
  EXPECT_EQ(job.state(), v1::SCHEDULED);
  EXPECT_EQ(std::vector<std::string>(job.worker_ids().begin(),
                                     job.worker_ids().end()),
            (std::vector<std::string>{rank1, spare}));
  std::optional<v1::Assignment> next =
      workers_.NextAssignment(spare, absl::ZeroDuration());
  ASSERT_TRUE(next);
  EXPECT_EQ(next->attempt(), 2);
  EXPECT_EQ(next->rendezvous().scope(), RendezvousScope(id, 2));

  // Rank 0 of attempt 1 stops and reports: its worker is free again.
  EXPECT_TRUE(Heartbeat(rank0, id, 20).stop_job());
  ASSERT_TRUE(Report(rank0, id, 0, 1, /*ok=*/false).ok());
  EXPECT_EQ(workers_.IdleWorkers(v1::CPU), std::vector<std::string>{rank0});
  EXPECT_EQ(jobs_.Get(id)->state(), v1::SCHEDULED);
  EXPECT_FALSE(Heartbeat(rank0, "", 30).stop_job());
}

TEST_F(SchedulerTest, NoRestartsLeftFailsTheJobWithTheReason) {
  const std::string id = StartTwoRankJob(/*max_restarts=*/0);
  const std::string rank0 = jobs_.Get(id)->worker_ids(0);
  ASSERT_TRUE(Report(rank0, id, 0, 1, /*ok=*/false).ok());
  const v1::Job job = *jobs_.Get(id);
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_EQ(job.message(), absl::StrCat("rank 0 (", rank0,
                                        ") failed: gloo: connection closed "
                                        "by peer"));
}

TEST_F(SchedulerTest, SilentWorkerRestartsOnceThenFails) {
  const std::string id = StartTwoRankJob(/*max_restarts=*/1);
  std::string rank0 = jobs_.Get(id)->worker_ids(0);
  std::string rank1 = jobs_.Get(id)->worker_ids(1);

  // Rank 1 goes silent; rank 0 keeps heart-beating.
  Heartbeat(rank0, id, 1000);
  scheduler_.ExpireSilentWorkers(kHeartbeatTimeoutMs + 1);
  v1::Job job = *jobs_.Get(id);
  EXPECT_EQ(job.state(), v1::PENDING);
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_EQ(job.history().rbegin()->reason(),
            absl::StrCat("restart 1 of 1: ", rank1, " (rank 1) sent no ",
                         "heartbeat for 1500 ms"));
  EXPECT_TRUE(Heartbeat(rank0, id, 1600).stop_job());

  // Rank 0 never reports: it is freed when it too goes silent.
  const std::string spare = AddWorker(2000);
  scheduler_.ExpireSilentWorkers(3200);
  EXPECT_EQ(workers_.IdleWorkers(v1::CPU), std::vector<std::string>{spare});
  const std::string second = AddWorker(3200);
  ASSERT_TRUE(scheduler_.ScheduleReady().ok());
  job = *jobs_.Get(id);
  ASSERT_EQ(job.state(), v1::SCHEDULED);
  for (const std::string& worker : job.worker_ids()) {
    Heartbeat(worker, id, 3300);
  }
  EXPECT_EQ(jobs_.Get(id)->state(), v1::RUNNING);

  // A second loss: no restarts left.
  Heartbeat(spare, id, 4000);
  scheduler_.ExpireSilentWorkers(3300 + kHeartbeatTimeoutMs + 1);
  job = *jobs_.Get(id);
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_EQ(job.message(),
            absl::StrCat(second, " (rank 1) sent no heartbeat for 1500 ms",
                         " (after 1 restarts, the most allowed)"));
}

TEST_F(SchedulerTest, UndeliveredAssignmentIsWithdrawnAndItsWorkerFreed) {
  v1::JobSpec spec = LoadTestSpec("tiny_job.json");
  const std::string id = jobs_.Create(spec)->id();
  const std::string first = AddWorker();
  const std::string second = AddWorker();
  ASSERT_TRUE(scheduler_.ScheduleReady().ok());
  ASSERT_TRUE(workers_.NextAssignment(first, absl::ZeroDuration()));
  ASSERT_TRUE(scheduler_.Cancel(id, "").ok());
  // The second worker never received its rank; the first must stop first.
  EXPECT_EQ(workers_.IdleWorkers(v1::CPU), std::vector<std::string>{second});
  EXPECT_FALSE(workers_.NextAssignment(second, absl::ZeroDuration()));
  EXPECT_TRUE(Heartbeat(first, id, 10).stop_job());
  ASSERT_TRUE(Report(first, id, 0, 1, /*ok=*/false).ok());
  EXPECT_EQ(workers_.IdleWorkers(v1::CPU),
            (std::vector<std::string>{first, second}));
}

TEST_F(SchedulerTest,
       StoppingWorkerWhoseReportIsLostIsFreedWhenIdleLongEnough) {
  const std::string id = StartTwoRankJob(/*max_restarts=*/1);
  const std::string rank0 = jobs_.Get(id)->worker_ids(0);
  const std::string rank1 = jobs_.Get(id)->worker_ids(1);
  ASSERT_TRUE(Report(rank1, id, 1, 1, /*ok=*/false).ok());
  EXPECT_TRUE(Heartbeat(rank0, id, 100).stop_job());
  // Idle right after the stop: it may not have started the rank yet.
  EXPECT_TRUE(Heartbeat(rank0, "", 200).stop_job());
  EXPECT_EQ(workers_.IdleWorkers(v1::CPU), std::vector<std::string>{rank1});
  // Still idle a heartbeat timeout later: its result report was lost.
  EXPECT_FALSE(Heartbeat(rank0, "", 100 + kHeartbeatTimeoutMs + 1).stop_job());
  EXPECT_EQ(workers_.IdleWorkers(v1::CPU),
            (std::vector<std::string>{rank0, rank1}));
}

TEST_F(SchedulerTest, CoordinatorRestartRequeuesRunningJobsWithRestartsLeft) {
  const std::string restartable = StartTwoRankJob(/*max_restarts=*/1);
  const std::string final_attempt = StartTwoRankJob(/*max_restarts=*/0);
  // A new coordinator on the same store: its workers and attempts are new.
  WorkerRegistry workers(kHeartbeatTimeoutMs);
  RendezvousTable rendezvous;
  Scheduler restarted(&jobs_, &workers, &rendezvous, 1000);
  ASSERT_TRUE(restarted.RecoverAfterRestart().ok());

  const std::string reason =
      "coordinator restarted while the job ran; its workers are gone";
  v1::Job job = *jobs_.Get(restartable);
  EXPECT_EQ(job.state(), v1::PENDING);
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_EQ(job.worker_ids_size(), 0);
  EXPECT_EQ(job.history().rbegin()->reason(), "restart 1 of 1: " + reason);
  job = *jobs_.Get(final_attempt);
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_EQ(job.message(), reason);
}

TEST_F(SchedulerTest, ADeregisteredWorkerIsNeverAssignedAJob) {
  const std::string stopped = AddWorker();
  const std::string idle = AddWorker();
  ASSERT_TRUE(scheduler_.OnDeregister(stopped).ok());
  EXPECT_EQ(scheduler_.OnDeregister(stopped).code(),
            absl::StatusCode::kNotFound);
  const std::string id = jobs_.Create(LoadTestSpec("tiny_job.json"))->id();
  ASSERT_TRUE(scheduler_.ScheduleReady().ok());
  EXPECT_EQ(jobs_.Get(id)->state(), v1::PENDING);  // one worker left of two

  const std::string added = AddWorker();
  ASSERT_TRUE(scheduler_.ScheduleReady().ok());
  const v1::Job job = *jobs_.Get(id);
  EXPECT_EQ(job.state(), v1::SCHEDULED);
  EXPECT_EQ(std::vector<std::string>(job.worker_ids().begin(),
                                     job.worker_ids().end()),
            (std::vector<std::string>{idle, added}));
}

TEST_F(SchedulerTest, ARankWhoseWorkerDeregistersRestartsTheJobAtOnce) {
  const std::string id = StartTwoRankJob(/*max_restarts=*/1);
  const std::string rank0 = jobs_.Get(id)->worker_ids(0);
  ASSERT_TRUE(scheduler_.OnDeregister(rank0).ok());
  const v1::Job job = *jobs_.Get(id);
  EXPECT_EQ(job.state(), v1::PENDING);
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_NE(job.history().rbegin()->reason().find(
                rank0 + " (rank 0) stopped and deregistered"),
            std::string::npos)
      << job.history().rbegin()->reason();
}

}  // namespace
}  // namespace glm
