// Least privilege on the coordinator's API: every cross-role call (a worker
// token on JobService, the operator token on WorkerService), a worker acting
// as another, and reports from workers not assigned the job rank they name
// are refused, and leave the store as it was.
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "coordinator/test_coordinator.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "jobspec/path_roots.h"
#include "jobspec/test_specs.h"
#include "proto/job_service.grpc.pb.h"
#include "proto/rendezvous_service.grpc.pb.h"
#include "proto/worker_service.grpc.pb.h"
#include "rpc/bearer_token.h"
#include "rpc/worker_identity.h"

namespace glm {
namespace {

bool Mentions(const grpc::Status& status, const std::string& text) {
  return status.error_message().find(text) != std::string::npos;
}

class AccessTest : public ::testing::Test {
 protected:
  AccessTest()
      : server_(
            ::testing::UnitTest::GetInstance()->current_test_info()->name()),
        operator_(server_.ConnectAsOperator()),
        jobs_(v1::JobService::NewStub(operator_->channel())) {}

  // A registered worker's connection and its WorkerService stub.
  struct Worker {
    std::string id;
    std::shared_ptr<ClientConnection> connection;
    std::unique_ptr<v1::WorkerService::Stub> stub;
  };
  Worker AddWorker(v1::DeviceKind kind = v1::CPU) {
    Worker worker;
    worker.connection = server_.ConnectAsWorker();
    worker.id = server_.RegisterWorker(kind, worker.connection);
    worker.stub = v1::WorkerService::NewStub(worker.connection->channel());
    return worker;
  }

  std::vector<v1::Job> ListAll() {
    v1::ListJobsResponse listed;
    grpc::Status status = jobs_->ListJobs(operator_->NewContext().get(),
                                          v1::ListJobsRequest(), &listed);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return {listed.jobs().begin(), listed.jobs().end()};
  }

  std::string SubmitTinyJob() {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = LoadTestSpec("tiny_job.json");
    v1::SubmitJobResponse response;
    grpc::Status status =
        jobs_->SubmitJob(operator_->NewContext().get(), request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.job().id();
  }

  grpc::Status ReportMetrics(const Worker& worker, const std::string& job_id,
                             int attempt, int rank) {
    v1::ReportMetricsRequest request;
    request.set_worker_id(worker.id);
    request.set_job_id(job_id);
    request.set_attempt(attempt);
    request.set_rank(rank);
    request.mutable_metrics()->set_iteration(3);
    request.mutable_metrics()->set_lm_loss(9.5);
    v1::ReportMetricsResponse response;
    return worker.stub->ReportMetrics(worker.connection->NewContext().get(),
                                      request, &response);
  }

  grpc::Status ReportCheckpoint(const Worker& worker, const std::string& job_id,
                                int attempt, int rank) {
    v1::ReportCheckpointRequest request;
    request.set_worker_id(worker.id);
    request.set_attempt(attempt);
    request.set_rank(rank);
    request.mutable_manifest()->set_job_id(job_id);
    request.mutable_manifest()->set_iteration(10);
    v1::ReportCheckpointResponse response;
    return worker.stub->ReportCheckpoint(worker.connection->NewContext().get(),
                                         request, &response);
  }

  grpc::Status ReportFailure(const Worker& worker, const std::string& job_id,
                             int attempt, int rank) {
    v1::ReportJobResultRequest request;
    request.set_worker_id(worker.id);
    request.set_job_id(job_id);
    request.set_attempt(attempt);
    request.set_rank(rank);
    request.set_ok(false);
    request.set_message("forged failure");
    v1::ReportJobResultResponse response;
    return worker.stub->ReportJobResult(worker.connection->NewContext().get(),
                                        request, &response);
  }

  grpc::Status HeartbeatNaming(const Worker& worker,
                               const std::string& job_id) {
    v1::HeartbeatRequest request;
    request.set_worker_id(worker.id);
    request.set_job_id(job_id);
    v1::HeartbeatResponse response;
    return worker.stub->Heartbeat(worker.connection->NewContext().get(),
                                  request, &response);
  }

  TestCoordinator server_;
  std::shared_ptr<ClientConnection> operator_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
};

TEST_F(AccessTest, TheWorkerTokenCannotSubmitCancelListGetOrWatch) {
  AddWorker();
  AddWorker();
  const std::string id = SubmitTinyJob();
  const v1::Job before = server_.GetJob(id);
  std::shared_ptr<ClientConnection> worker = server_.ConnectAsWorker();
  auto stub = v1::JobService::NewStub(worker->channel());

  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = LoadTestSpec("tiny_job.json");
  v1::SubmitJobResponse submitted;
  grpc::Status status =
      stub->SubmitJob(worker->NewContext().get(), submit, &submitted);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(Mentions(status, "JobService/SubmitJob needs the operator token"))
      << status.error_message();

  v1::CancelJobRequest cancel;
  cancel.set_id(id);
  v1::Job cancelled;
  EXPECT_EQ(stub->CancelJob(worker->NewContext().get(), cancel, &cancelled)
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  v1::ListJobsResponse listed;
  EXPECT_EQ(
      stub->ListJobs(worker->NewContext().get(), v1::ListJobsRequest(), &listed)
          .error_code(),
      grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(listed.jobs_size(), 0);

  v1::GetJobRequest get;
  get.set_id(id);
  v1::Job got;
  EXPECT_EQ(stub->GetJob(worker->NewContext().get(), get, &got).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  v1::WatchJobRequest watch;
  watch.set_id(id);
  std::unique_ptr<grpc::ClientContext> context = worker->NewContext();
  auto reader = stub->WatchJob(context.get(), watch);
  v1::JobEvent event;
  EXPECT_FALSE(reader->Read(&event));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);

  // The store is as it was: one job, not cancelled.
  std::vector<v1::Job> jobs = ListAll();
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0].state(), before.state());
  EXPECT_EQ(jobs[0].history_size(), before.history_size());
}

grpc::Status RendezvousSet(const ClientConnection& connection,
                           const std::string& scope, const std::string& value) {
  v1::RendezvousSetRequest request;
  request.set_scope(scope);
  request.set_key("rank0_address");
  request.set_value(value);
  v1::RendezvousSetResponse response;
  return v1::RendezvousService::NewStub(connection.channel())
      ->Set(connection.NewContext().get(), request, &response);
}

// The value under rank0_address in `scope`; empty when unset.
std::string RendezvousGet(const ClientConnection& connection,
                          const std::string& scope) {
  v1::RendezvousGetRequest request;
  request.set_scope(scope);
  request.set_key("rank0_address");
  v1::RendezvousGetResponse response;
  grpc::Status status =
      v1::RendezvousService::NewStub(connection.channel())
          ->Get(connection.NewContext().get(), request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response.value();
}

TEST_F(AccessTest, AnAttemptsRendezvousIsForItsRanksOnly) {
  Worker rank0 = AddWorker();
  // A GPU worker is never given this CPU job's ranks.
  Worker outsider = AddWorker(v1::CUDA);
  const std::string id = SubmitTinyJob();  // waits for a second CPU worker
  const std::string scope = id + "/attempt-1";
  // Written before the attempt exists: dropped when it is scheduled.
  ASSERT_TRUE(RendezvousSet(*outsider.connection, scope, "10.6.6.6").ok());
  Worker rank1 = AddWorker();
  ASSERT_EQ(server_.GetJob(id).state(), v1::SCHEDULED);
  EXPECT_EQ(RendezvousGet(*rank0.connection, scope), "");

  grpc::Status refused = RendezvousSet(*outsider.connection, scope, "10.6.6.6");
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(
      Mentions(refused, outsider.id + " holds no rank of " + id + " attempt 1"))
      << refused.error_message();
  ASSERT_TRUE(RendezvousSet(*rank1.connection, scope, "10.0.0.1").ok());
  EXPECT_EQ(RendezvousGet(*rank0.connection, scope), "10.0.0.1");
}

TEST_F(AccessTest, TheAuditLogRecordsStateChangesAndRefusals) {
  Worker rank0 = AddWorker();
  Worker rank1 = AddWorker();
  const std::string id = SubmitTinyJob();
  // Refused: the worker token cancelling; allowed: the operator cancelling.
  std::shared_ptr<ClientConnection> worker = server_.ConnectAsWorker();
  v1::CancelJobRequest cancel;
  cancel.set_id(id);
  v1::Job cancelled;
  EXPECT_FALSE(v1::JobService::NewStub(worker->channel())
                   ->CancelJob(worker->NewContext().get(), cancel, &cancelled)
                   .ok());
  ASSERT_TRUE(
      jobs_->CancelJob(operator_->NewContext().get(), cancel, &cancelled).ok());
  // Not recorded: a read and an accepted heartbeat.
  ASSERT_FALSE(ListAll().empty());
  ASSERT_TRUE(HeartbeatNaming(rank0, "").ok());

  v1::ListAuditRequest request;
  request.set_page_size(3);
  std::vector<v1::AuditEntry> entries;
  int pages = 0;
  do {
    v1::ListAuditResponse page;
    grpc::Status status =
        jobs_->ListAudit(operator_->NewContext().get(), request, &page);
    ASSERT_TRUE(status.ok()) << status.error_message();
    entries.insert(entries.end(), page.entries().begin(), page.entries().end());
    request.set_after_sequence(page.next_after_sequence());
    ++pages;
  } while (request.after_sequence() != 0 && pages < 10);
  ASSERT_EQ(entries.size(), 5u);
  EXPECT_EQ(pages, 2);
  auto expect = [&](int i, const std::string& method, const std::string& role,
                    const std::string& subject, const std::string& outcome) {
    SCOPED_TRACE(i);
    EXPECT_EQ(entries[i].sequence(), i + 1);
    EXPECT_EQ(entries[i].method(), method);
    EXPECT_EQ(entries[i].role(), role);
    EXPECT_EQ(entries[i].subject(), subject);
    EXPECT_EQ(entries[i].outcome(), outcome);
    EXPECT_EQ(entries[i].client(), "ipv4:127.0.0.1");
    EXPECT_GT(entries[i].unix_ms(), 0);
  };
  expect(0, "WorkerService/RegisterWorker", "worker", rank0.id, "OK");
  expect(1, "WorkerService/RegisterWorker", "worker", rank1.id, "OK");
  expect(2, "JobService/SubmitJob", "operator", id, "OK");
  expect(3, "JobService/CancelJob", "worker", id, "PERMISSION_DENIED");
  EXPECT_NE(entries[3].message().find("needs the operator token"),
            std::string::npos);
  expect(4, "JobService/CancelJob", "operator", id, "OK");

  // A refused report names the worker that made it.
  EXPECT_FALSE(ReportFailure(rank1, "job-elsewhere", 1, 0).ok());
  v1::ListAuditResponse latest;
  request.set_after_sequence(5);
  ASSERT_TRUE(
      jobs_->ListAudit(operator_->NewContext().get(), request, &latest).ok());
  ASSERT_EQ(latest.entries_size(), 1);
  EXPECT_EQ(latest.entries(0).worker_id(), rank1.id);
  EXPECT_EQ(latest.entries(0).subject(), "job-elsewhere");
  EXPECT_EQ(latest.entries(0).outcome(), "PERMISSION_DENIED");

  // Workers cannot read it.
  v1::ListAuditResponse refused;
  EXPECT_EQ(v1::JobService::NewStub(worker->channel())
                ->ListAudit(worker->NewContext().get(), request, &refused)
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(AccessTest, TheOperatorTokenCannotRegisterOrReportAsAWorker) {
  auto stub = v1::WorkerService::NewStub(operator_->channel());
  v1::RegisterWorkerRequest request;
  request.set_device_kind(v1::CPU);
  v1::RegisterWorkerResponse response;
  grpc::Status status =
      stub->RegisterWorker(operator_->NewContext().get(), request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(Mentions(status, "needs the worker token"))
      << status.error_message();
  EXPECT_EQ(server_.coordinator().AliveWorkers(), 0);

  // Nor with a registered worker's identity added.
  Worker worker = AddWorker();
  grpc::ClientContext context;
  context.AddMetadata(kAuthorizationHeader,
                      AuthorizationValue(TestCoordinator::kOperatorToken));
  context.AddMetadata(kWorkerIdHeader, worker.id);
  v1::HeartbeatRequest beat;
  beat.set_worker_id(worker.id);
  v1::HeartbeatResponse answer;
  EXPECT_EQ(stub->Heartbeat(&context, beat, &answer).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(AccessTest, CoordinatorRefusesMissingOrSharedTokens) {
  CoordinatorOptions options = server_.options();
  options.worker_token = options.operator_token;
  absl::StatusOr<std::unique_ptr<Coordinator>> shared =
      Coordinator::Start(options);
  ASSERT_FALSE(shared.ok());
  EXPECT_NE(shared.status().message().find("must differ"), std::string::npos);
  options.worker_token.clear();
  EXPECT_EQ(Coordinator::Start(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(AccessTest, WorkerIdsAreRandomAndCallsAreBoundToTheRegistration) {
  Worker first = AddWorker();
  Worker second = AddWorker();
  for (const std::string& id : {first.id, second.id}) {
    EXPECT_EQ(id.size(), std::string("worker-").size() + 32) << id;
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef", 7), std::string::npos)
        << id;
  }
  EXPECT_NE(first.id, second.id);

  // The worker token without the registration's secret.
  std::shared_ptr<ClientConnection> bare = server_.ConnectAsWorker();
  auto stub = v1::WorkerService::NewStub(bare->channel());
  v1::DeregisterWorkerRequest leave;
  leave.set_worker_id(first.id);
  v1::DeregisterWorkerResponse left;
  grpc::Status status =
      stub->DeregisterWorker(bare->NewContext().get(), leave, &left);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);

  // The first worker's id with a guessed secret.
  bare->SetWorkerIdentity({first.id, "00"});
  status = stub->DeregisterWorker(bare->NewContext().get(), leave, &left);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(Mentions(status, "wrong glm-worker-secret"))
      << status.error_message();

  // The second worker, authenticated as itself, naming the first.
  status = second.stub->DeregisterWorker(second.connection->NewContext().get(),
                                         leave, &left);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(Mentions(status, "is not the worker making this call"))
      << status.error_message();
  EXPECT_EQ(server_.coordinator().AliveWorkers(), 2);
}

TEST_F(AccessTest, ReportsFromWorkersNotAssignedTheJobRankAreRefused) {
  Worker rank0 = AddWorker();
  Worker rank1 = AddWorker();
  const std::string id = SubmitTinyJob();
  Worker outsider = AddWorker();
  const v1::Job before = server_.GetJob(id);
  ASSERT_EQ(before.state(), v1::SCHEDULED);
  ASSERT_EQ(before.worker_ids(0), rank0.id);

  for (const grpc::Status& status :
       {ReportMetrics(outsider, id, 1, 0), ReportCheckpoint(outsider, id, 1, 0),
        ReportFailure(outsider, id, 1, 0), HeartbeatNaming(outsider, id)}) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_TRUE(Mentions(status, outsider.id)) << status.error_message();
    EXPECT_TRUE(Mentions(status, id)) << status.error_message();
  }
  // An assigned worker reporting for another rank or attempt.
  grpc::Status status = ReportFailure(rank0, id, 1, 1);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(Mentions(status, "was not assigned rank 1 of " + id +
                                   " attempt 1 (it was assigned rank 0 of " +
                                   id + " attempt 1)"))
      << status.error_message();
  EXPECT_EQ(ReportCheckpoint(rank1, id, 2, 1).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(ReportMetrics(rank1, id, 1, 0).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  // Nothing was recorded: no metrics, no checkpoint, no failure.
  const v1::Job after = server_.GetJob(id);
  EXPECT_EQ(after.state(), v1::SCHEDULED);
  EXPECT_EQ(after.restarts(), 0);
  EXPECT_EQ(after.history_size(), before.history_size());
  EXPECT_EQ(after.checkpoints_size(), 0);
  EXPECT_EQ(after.latest_metrics().iteration(), 0);

  // The assigned ranks' own reports are taken.
  EXPECT_TRUE(ReportMetrics(rank0, id, 1, 0).ok());
  EXPECT_TRUE(ReportCheckpoint(rank0, id, 1, 0).ok());
  EXPECT_TRUE(HeartbeatNaming(rank1, id).ok());
  const v1::Job reported = server_.GetJob(id);
  EXPECT_EQ(reported.state(), v1::RUNNING);
  EXPECT_EQ(reported.checkpoints_size(), 1);
  EXPECT_EQ(reported.latest_metrics().iteration(), 3);
}

// A coordinator of its own (not TestCoordinator's options) with a fresh store
// under TEST_TMPDIR/`name`, and connections to it.
class OwnCoordinator {
 public:
  OwnCoordinator(const std::string& name,
                 const std::function<void(CoordinatorOptions*)>& configure)
      : dir_(std::filesystem::path(std::getenv("TEST_TMPDIR")) / name) {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    CoordinatorOptions options;
    options.listen = "127.0.0.1:0";
    options.state_dir = dir_ / "state";
    options.operator_token = TestCoordinator::kOperatorToken;
    options.worker_token = TestCoordinator::kWorkerToken;
    configure(&options);
    absl::StatusOr<std::unique_ptr<Coordinator>> started =
        Coordinator::Start(options);
    EXPECT_TRUE(started.ok()) << started.status();
    if (started.ok()) coordinator_ = *std::move(started);
  }

  const std::filesystem::path& dir() const { return dir_; }
  std::shared_ptr<ClientConnection> Connect(const char* token) const {
    return std::make_shared<ClientConnection>(ConnectionOptions{
        "127.0.0.1:" + std::to_string(coordinator_->port()), token, ""});
  }

 private:
  std::filesystem::path dir_;
  std::unique_ptr<Coordinator> coordinator_;
};

TEST(PathRootsTest, SubmitRefusesPathsOutsideTheRootsAndStoresNothing) {
  const std::filesystem::path root =
      std::filesystem::path(std::getenv("TEST_TMPDIR")) / "roots";
  OwnCoordinator server("roots", [&](CoordinatorOptions* options) {
    options->path_roots = *ParsePathRoots(root.string());
  });
  std::shared_ptr<ClientConnection> worker =
      server.Connect(TestCoordinator::kWorkerToken);
  RegisterTestWorker(v1::CPU, *worker);
  std::shared_ptr<ClientConnection> operator_ =
      server.Connect(TestCoordinator::kOperatorToken);
  auto jobs = v1::JobService::NewStub(operator_->channel());
  auto submit = [&](const std::string& save_dir) {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = LoadTestSpec("tiny_job.json");
    request.mutable_spec()->mutable_data()->mutable_sources(0)->set_path(
        (root / "data" / "tiny").string());
    request.mutable_spec()->mutable_training()->set_save_dir(save_dir);
    v1::SubmitJobResponse response;
    return jobs->SubmitJob(operator_->NewContext().get(), request, &response);
  };

  grpc::Status outside = submit("/etc/glm-checkpoints");
  EXPECT_EQ(outside.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(outside.error_message().rfind("training.save_dir: ", 0), 0u)
      << outside.error_message();
  EXPECT_EQ(submit((root / ".." / "escaped").string()).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::ListJobsResponse listed;
  ASSERT_TRUE(jobs->ListJobs(operator_->NewContext().get(),
                             v1::ListJobsRequest(), &listed)
                  .ok());
  EXPECT_EQ(listed.jobs_size(), 0);

  grpc::Status inside = submit((root / "checkpoints").string());
  EXPECT_TRUE(inside.ok()) << inside.error_message();
}

TEST(WatchQuotaTest, AClientHoldsAtMostItsWatchStreams) {
  OwnCoordinator server("watch_quota", [](CoordinatorOptions* options) {
    options->max_watches_per_client = 2;
  });
  std::shared_ptr<ClientConnection> worker =
      server.Connect(TestCoordinator::kWorkerToken);
  RegisterTestWorker(v1::CPU, *worker);
  std::shared_ptr<ClientConnection> operator_ =
      server.Connect(TestCoordinator::kOperatorToken);
  auto jobs = v1::JobService::NewStub(operator_->channel());
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = LoadTestSpec("tiny_job.json");
  v1::SubmitJobResponse submitted;
  ASSERT_TRUE(
      jobs->SubmitJob(operator_->NewContext().get(), submit, &submitted).ok());
  v1::WatchJobRequest watch;
  watch.set_id(submitted.job().id());

  struct Watch {
    std::unique_ptr<grpc::ClientContext> context;
    std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader;
  };
  auto open = [&] {
    Watch opened{operator_->NewContext(), nullptr};
    opened.reader = jobs->WatchJob(opened.context.get(), watch);
    return opened;
  };
  std::vector<Watch> watches;
  for (int i = 0; i < 2; ++i) {
    watches.push_back(open());
    v1::JobEvent first;
    ASSERT_TRUE(watches.back().reader->Read(&first));  // the job as it stands
  }
  Watch third = open();
  v1::JobEvent event;
  EXPECT_FALSE(third.reader->Read(&event));
  grpc::Status refused = third.reader->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(Mentions(refused, "--max-watches-per-client"))
      << refused.error_message();

  // A closed watch frees its slot (the server notices within its poll).
  watches[0].context->TryCancel();
  watches[0].reader->Finish();
  bool reopened = false;
  for (int i = 0; i < 50 && !reopened; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
    Watch again = open();
    reopened = again.reader->Read(&event);
    again.context->TryCancel();
    again.reader->Finish();
  }
  EXPECT_TRUE(reopened);
  for (Watch& open_watch : watches) open_watch.context->TryCancel();
}

}  // namespace
}  // namespace glm
