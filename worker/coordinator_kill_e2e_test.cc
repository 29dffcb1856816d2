// The real glm-coordinator killed with SIGKILL while operators submit and
// cancel jobs and workers heartbeat and report metrics, checkpoints and
// results, then started again on the same RocksDB store and port; three
// rounds. Every write the coordinator acknowledged before the kill is there
// after it, no job is duplicated, the workers register again, and the jobs
// they held are requeued or restarted and run to the end on them.
//
// The workers are WorkerService clients (CoordinatorClient) that report
// without training, so that the three rounds take about 10 s.
#include <signal.h>

#include <atomic>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "coordinator/coordinator_process.h"
#include "coordinator/job_state_machine.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/job_service.grpc.pb.h"
#include "rpc/client_connection.h"
#include "worker/coordinator_client.h"
#include "worker/test_processes.h"

namespace glm {
namespace {

constexpr char kOperatorToken[] = "kill-test-operator-token";
constexpr char kWorkerToken[] = "kill-test-worker-token";
constexpr int kRounds = 3;
constexpr int kSubmitters = 3;
constexpr int kCancellers = 1;
constexpr int kWorkers = 3;
// Each assignment reports this many iterations, a checkpoint after each.
constexpr int kReportedIterations = 3;
// What an iteration takes, so that cancels find jobs running.
constexpr absl::Duration kIterationTime = absl::Milliseconds(15);
constexpr absl::Duration kCallTimeout = absl::Seconds(5);
// How long a round's clients run before the kill.
constexpr absl::Duration kKillAfter[kRounds] = {
    absl::Milliseconds(400), absl::Milliseconds(700), absl::Milliseconds(1000)};

// What the clients attempted and what the coordinator acknowledged.
struct Ledger {
  absl::Mutex mu;
  int attempted_submits ABSL_GUARDED_BY(mu) = 0;
  // By id: the job as SubmitJob returned it.
  std::map<std::string, v1::Job> submitted ABSL_GUARDED_BY(mu);
  std::set<std::string> cancelled ABSL_GUARDED_BY(mu);
  // By job id: the iterations of acknowledged checkpoint reports.
  std::map<std::string, std::set<int64_t>> checkpoints ABSL_GUARDED_BY(mu);
  std::set<std::string> succeeded ABSL_GUARDED_BY(mu);
  // By job id: the highest attempt a worker was assigned.
  std::map<std::string, int> assigned_attempt ABSL_GUARDED_BY(mu);
};

// A worker that takes each assignment and reports it through to success
// without training, registering again whenever the coordinator forgot it.
class ReportingWorker {
 public:
  ReportingWorker(const std::string& target, Ledger* ledger)
      : client_(PlaintextConnection(target, kWorkerToken)), ledger_(ledger) {
    thread_ = std::thread([this] { Run(); });
  }
  ~ReportingWorker() {
    stop_ = true;
    client_.CancelWatch();
    thread_.join();
  }

  // The worker id the coordinator gave it last; empty before.
  std::string worker_id() {
    absl::MutexLock lock(&mu_);
    return worker_id_;
  }
  // The job it holds now (empty when idle) and its attempt.
  std::pair<std::string, int> held() {
    absl::MutexLock lock(&mu_);
    return held_;
  }

 private:
  void Run() {
    while (!stop_) {
      if (!Registered()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      // Ends when the coordinator dies, forgets this worker, or at stop: the
      // next turn registers again if needed.
      client_
          .WatchAssignments(
              [this](const v1::Assignment& assignment) { Hold(assignment); })
          .IgnoreError();
    }
  }

  // True once registered with the coordinator serving now: a first
  // registration, or again after a heartbeat says it forgot this worker.
  bool Registered() {
    absl::Status status;
    if (worker_id().empty()) {
      status = client_.Register(DescribeThisHost(v1::CPU, "127.0.0.1:0"));
    } else {
      client_.SetCurrentJob("", 0);
      status = client_.Heartbeat().status();
      if (CoordinatorForgotWorker(status)) status = client_.RegisterAgain();
    }
    if (!status.ok()) return false;
    absl::MutexLock lock(&mu_);
    worker_id_ = client_.worker_id();
    return true;
  }

  void Hold(const v1::Assignment& assignment) {
    {
      absl::MutexLock lock(&ledger_->mu);
      int& attempt = ledger_->assigned_attempt[assignment.job_id()];
      attempt = std::max(attempt, assignment.attempt());
    }
    SetHeld({assignment.job_id(), assignment.attempt()});
    if (ReportIterations(assignment)) ReportSuccess(assignment);
    SetHeld({"", 0});
  }

  void SetHeld(std::pair<std::string, int> job) {
    absl::MutexLock lock(&mu_);
    held_ = std::move(job);
  }

  // Heartbeat, metrics and a checkpoint for each iteration; false when the
  // job should stop (cancelled, refused) or the coordinator cannot be reached.
  bool ReportIterations(const v1::Assignment& assignment) {
    const std::string& job = assignment.job_id();
    for (int64_t iteration = 1; iteration <= kReportedIterations; ++iteration) {
      client_.SetCurrentJob(job, iteration);
      absl::StatusOr<v1::HeartbeatResponse> beat = client_.Heartbeat();
      if (!beat.ok() || beat->stop_job()) return false;
      v1::StepMetrics metrics;
      metrics.set_iteration(iteration);
      metrics.set_train_iters(kReportedIterations);
      absl::StatusOr<bool> stop = client_.ReportMetrics(
          job, assignment.attempt(), assignment.rank(), metrics);
      if (!stop.ok() || *stop) return false;
      v1::CheckpointManifest manifest;
      manifest.set_job_id(job);
      manifest.set_iteration(iteration);
      manifest.set_directory(absl::StrCat(
          assignment.spec().training().save_dir(), "/iter_", iteration));
      if (!client_
               .ReportCheckpoint(assignment.attempt(), assignment.rank(),
                                 manifest)
               .ok()) {
        return false;
      }
      {
        absl::MutexLock lock(&ledger_->mu);
        ledger_->checkpoints[job].insert(iteration);
      }
      absl::SleepFor(kIterationTime);
    }
    return true;
  }

  void ReportSuccess(const v1::Assignment& assignment) {
    if (client_
            .ReportJobResult(assignment.job_id(), assignment.rank(),
                             assignment.attempt(), /*ok=*/true, "")
            .ok()) {
      absl::MutexLock lock(&ledger_->mu);
      ledger_->succeeded.insert(assignment.job_id());
    }
  }

  CoordinatorClient client_;
  Ledger* ledger_;
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  std::pair<std::string, int> held_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// An operator's calls, each with a deadline.
class Operator {
 public:
  explicit Operator(const std::string& target)
      : connection_(PlaintextConnection(target, kOperatorToken)),
        stub_(v1::JobService::NewStub(connection_->channel())) {}

  grpc::Status Submit(const v1::JobSpec& spec, v1::Job* job) {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    v1::SubmitJobResponse response;
    grpc::Status status = stub_->SubmitJob(
        connection_->NewContext(kCallTimeout).get(), request, &response);
    *job = response.job();
    return status;
  }
  grpc::Status Cancel(const std::string& id, v1::Job* job) {
    v1::CancelJobRequest request;
    request.set_id(id);
    request.set_reason("cancelled by the kill test");
    return stub_->CancelJob(connection_->NewContext(kCallTimeout).get(),
                            request, job);
  }
  grpc::Status Get(const std::string& id, v1::Job* job) {
    v1::GetJobRequest request;
    request.set_id(id);
    return stub_->GetJob(connection_->NewContext(kCallTimeout).get(), request,
                         job);
  }
  // Every job, page by page.
  std::vector<v1::Job> ListAll() {
    std::vector<v1::Job> jobs;
    v1::ListJobsRequest request;
    request.set_page_size(100);
    do {
      v1::ListJobsResponse page;
      grpc::Status status = stub_->ListJobs(
          connection_->NewContext(kCallTimeout).get(), request, &page);
      EXPECT_TRUE(status.ok()) << status.error_message();
      if (!status.ok()) break;
      jobs.insert(jobs.end(), page.jobs().begin(), page.jobs().end());
      request.set_page_token(page.next_page_token());
    } while (!request.page_token().empty());
    return jobs;
  }

 private:
  std::shared_ptr<ClientConnection> connection_;
  std::unique_ptr<v1::JobService::Stub> stub_;
};

class CoordinatorKillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir("coordinator_kill");
    data_ = WriteDocuments(dir_);
    options_.state_dir = dir_ + "/state";
    options_.operator_token_file = dir_ + "/operator_token";
    options_.worker_token_file = dir_ + "/worker_token";
    std::ofstream(options_.operator_token_file) << kOperatorToken;
    std::ofstream(options_.worker_token_file) << kWorkerToken;
    options_.path_roots = dir_;
    options_.log = dir_ + "/coordinator.log";
    // Slow (sanitized) workers are not declared dead mid-round.
    options_.extra_flags = {"--heartbeat-timeout-ms=60000"};
    StartCoordinator();
  }

  void StartCoordinator() {
    absl::StatusOr<std::unique_ptr<CoordinatorProcess>> started =
        CoordinatorProcess::Start(options_);
    ASSERT_TRUE(started.ok()) << started.status();
    coordinator_ = *std::move(started);
    options_.port = coordinator_->port();  // restarts keep the port
  }

  v1::JobSpec Spec(const std::string& name) const {
    v1::JobSpec spec = TinyPretrainSpec(data_, dir_ + "/checkpoints/" + name,
                                        /*world_size=*/1, kReportedIterations);
    spec.set_name(name);
    spec.mutable_training()->set_max_restarts(kRounds);
    return spec;
  }

  // Submits jobs named after the round and submitter until `stop`.
  void Submit(int round, int submitter, const std::atomic<bool>& stop) {
    Operator client(coordinator_->target());
    for (int i = 0; !stop; ++i) {
      {
        absl::MutexLock lock(&ledger_.mu);
        ++ledger_.attempted_submits;
      }
      v1::Job job;
      if (client
              .Submit(
                  Spec(absl::StrCat("kill-r", round, "-s", submitter, "-", i)),
                  &job)
              .ok()) {
        absl::MutexLock lock(&ledger_.mu);
        ledger_.submitted[job.id()] = job;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
  }

  // Cancels the newest acknowledged job (most likely queued or running) every
  // so often until `stop`.
  void Cancel(const std::atomic<bool>& stop) {
    Operator client(coordinator_->target());
    std::string last;
    while (!stop) {
      const std::string id = NewestSubmitted();
      v1::Job job;
      if (id != last && client.Cancel(id, &job).ok()) {
        EXPECT_EQ(job.state(), v1::CANCELLED) << job.DebugString();
        absl::MutexLock lock(&ledger_.mu);
        ledger_.cancelled.insert(id);
      }
      last = id;
      std::this_thread::sleep_for(std::chrono::milliseconds(40));
    }
  }

  // Ids are issued in increasing order.
  std::string NewestSubmitted() {
    absl::MutexLock lock(&ledger_.mu);
    return ledger_.submitted.empty() ? "" : ledger_.submitted.rbegin()->first;
  }

  // Runs the operators for `kill_after`, kills the coordinator with SIGKILL
  // and stops them; returns the jobs the workers held at the kill.
  std::map<std::string, int> LoadAndKill(int round, absl::Duration kill_after) {
    std::atomic<bool> stop{false};
    std::vector<std::thread> operators;
    for (int s = 0; s < kSubmitters; ++s) {
      operators.emplace_back(
          [this, round, s, &stop] { Submit(round, s, stop); });
    }
    for (int c = 0; c < kCancellers; ++c) {
      operators.emplace_back([this, &stop] { Cancel(stop); });
    }
    absl::SleepFor(kill_after);
    std::map<std::string, int> held;
    for (auto& worker : workers_) {
      if (auto [job, attempt] = worker->held(); !job.empty())
        held[job] = attempt;
    }
    const int wait_status = coordinator_->Kill(SIGKILL);
    EXPECT_TRUE(WIFSIGNALED(wait_status) && WTERMSIG(wait_status) == SIGKILL);
    stop = true;
    for (std::thread& t : operators) t.join();
    return held;
  }

  // Every acknowledged submit is there with its spec, every acknowledged
  // cancel cancelled, every acknowledged checkpoint listed; ids and names are
  // unique and no more jobs than submits attempted.
  void ExpectAcknowledgedWrites() {
    Operator client(coordinator_->target());
    const std::vector<v1::Job> jobs = client.ListAll();
    std::set<std::string> ids, names;
    for (const v1::Job& job : jobs) {
      EXPECT_TRUE(ids.insert(job.id()).second) << "duplicate id " << job.id();
      EXPECT_TRUE(names.insert(job.spec().name()).second)
          << "duplicate job " << job.spec().name();
    }
    absl::MutexLock lock(&ledger_.mu);
    EXPECT_GE(jobs.size(), ledger_.submitted.size());
    EXPECT_LE(jobs.size(), static_cast<size_t>(ledger_.attempted_submits));
    for (const auto& [id, acknowledged] : ledger_.submitted) {
      v1::Job job;
      grpc::Status status = client.Get(id, &job);
      ASSERT_TRUE(status.ok())
          << "acknowledged job " << id << " lost: " << status.error_message();
      EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
          job.spec(), acknowledged.spec()))
          << job.spec().DebugString();
      if (ledger_.cancelled.count(id)) {
        EXPECT_EQ(job.state(), v1::CANCELLED);
      }
      if (ledger_.succeeded.count(id)) {
        EXPECT_TRUE(job.state() == v1::SUCCEEDED ||
                    job.state() == v1::CANCELLED)
            << job.DebugString();
      }
      std::set<int64_t> listed;
      for (const auto& manifest : job.checkpoints()) {
        listed.insert(manifest.iteration());
      }
      for (int64_t iteration : ledger_.checkpoints[id]) {
        EXPECT_TRUE(listed.count(iteration))
            << "acknowledged checkpoint " << iteration << " of " << id
            << " lost";
      }
    }
  }

  // A job a worker held at the kill has ended (its result or cancel landed
  // first) or went back to the queue because of the restart.
  void ExpectRequeuedOrEnded(const std::map<std::string, int>& held,
                             absl::Time killed_at) {
    Operator client(coordinator_->target());
    for (const auto& [id, attempt] : held) {
      v1::Job job;
      ASSERT_TRUE(client.Get(id, &job).ok()) << id;
      if (IsTerminalState(job.state())) continue;
      bool requeued = false;
      for (const v1::StateChange& change : job.history()) {
        requeued |= change.unix_ms() >= absl::ToUnixMillis(killed_at) &&
                    absl::StrContains(change.reason(), "coordinator restarted");
      }
      EXPECT_TRUE(requeued) << job.DebugString();
    }
  }

  // Waits until every worker registered again (a new id) and every job
  // ended; each job held at the kill and not ended then ran again (a later
  // attempt when it had started). Returns how many held jobs restarted.
  int ExpectWorkersAndJobsCarryOn(const std::vector<std::string>& old_ids,
                                  const std::map<std::string, int>& held) {
    for (size_t w = 0; w < workers_.size(); ++w) {
      const absl::Time deadline = absl::Now() + absl::Seconds(20);
      while (workers_[w]->worker_id() == old_ids[w] && absl::Now() < deadline) {
        absl::SleepFor(absl::Milliseconds(20));
      }
      EXPECT_NE(workers_[w]->worker_id(), old_ids[w])
          << "worker " << w << " did not register again";
    }
    Operator client(coordinator_->target());
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    std::vector<v1::Job> unfinished;
    do {
      absl::SleepFor(absl::Milliseconds(100));
      unfinished.clear();
      for (const v1::Job& job : client.ListAll()) {
        if (!IsTerminalState(job.state())) unfinished.push_back(job);
      }
    } while (!unfinished.empty() && absl::Now() < deadline);
    for (const v1::Job& job : unfinished) ADD_FAILURE() << job.DebugString();
    int restarted = 0;
    for (const auto& [id, attempt] : held) {
      v1::Job job;
      EXPECT_TRUE(client.Get(id, &job).ok()) << id;
      EXPECT_NE(job.state(), v1::FAILED) << job.DebugString();
      if (job.restarts() == 0) continue;
      ++restarted;
      absl::MutexLock lock(&ledger_.mu);
      EXPECT_GT(ledger_.assigned_attempt[id], attempt)
          << "restarted job " << id << " was not assigned again";
    }
    return restarted;
  }

  std::string dir_;
  std::string data_;
  CoordinatorProcessOptions options_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
  Ledger ledger_;
  std::vector<std::unique_ptr<ReportingWorker>> workers_;
};

TEST_F(CoordinatorKillTest, AcknowledgedWritesSurviveKillNine) {
  for (int w = 0; w < kWorkers; ++w) {
    workers_.push_back(
        std::make_unique<ReportingWorker>(coordinator_->target(), &ledger_));
  }
  int restarted = 0;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    std::vector<std::string> old_ids;
    for (auto& worker : workers_) {
      while (worker->worker_id().empty()) {
        absl::SleepFor(absl::Milliseconds(20));
      }
      old_ids.push_back(worker->worker_id());
    }
    const std::map<std::string, int> held =
        LoadAndKill(round, kKillAfter[round]);
    const absl::Time killed_at = absl::Now();
    StartCoordinator();
    ExpectAcknowledgedWrites();
    ExpectRequeuedOrEnded(held, killed_at);
    restarted += ExpectWorkersAndJobsCarryOn(old_ids, held);
    absl::MutexLock lock(&ledger_.mu);
    std::cout << "after round " << round << ": " << ledger_.attempted_submits
              << " submits attempted, " << ledger_.submitted.size()
              << " acknowledged, " << ledger_.cancelled.size()
              << " cancels acknowledged, " << held.size()
              << " jobs held at the kill, " << restarted
              << " of them restarted so far\n";
  }
  // Kills land mid-job: some job ran when the coordinator died.
  EXPECT_GT(restarted, 0);
  workers_.clear();
}

}  // namespace
}  // namespace glm
