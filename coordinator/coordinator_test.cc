// The coordinator over its real gRPC API on 127.0.0.1: auth refusals, submit
// validation, persistence across a restart, and a Prometheus scrape.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/escaping.h"
#include "coordinator/test_coordinator.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "jobspec/test_specs.h"
#include "proto/job_service.grpc.pb.h"
#include "proto/worker_service.grpc.pb.h"
#include "rpc/bearer_token.h"

namespace glm {
namespace {

class CoordinatorTest : public ::testing::Test {
 protected:
  explicit CoordinatorTest(bool serve_metrics = false)
      : server_(::testing::UnitTest::GetInstance()->current_test_info()->name(),
                10000, serve_metrics) {
    Reconnect();
  }

  void Reconnect() {
    connection_ = server_.ConnectAsOperator();
    jobs_ = v1::JobService::NewStub(connection_->channel());
  }

  absl::StatusOr<v1::Job> Submit(const v1::JobSpec& spec) {
    v1::SubmitJobRequest request;
    *request.mutable_spec() = spec;
    v1::SubmitJobResponse response;
    grpc::Status status =
        jobs_->SubmitJob(connection_->NewContext().get(), request, &response);
    if (!status.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          status.error_message());
    }
    return response.job();
  }

  TestCoordinator server_;
  std::shared_ptr<ClientConnection> connection_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
};

TEST_F(CoordinatorTest, RefusesCallsWithoutTheRightToken) {
  auto channel =
      grpc::CreateChannel(server_.target(), grpc::InsecureChannelCredentials());
  auto stub = v1::JobService::NewStub(channel);
  v1::ListJobsRequest request;
  v1::ListJobsResponse response;

  grpc::ClientContext no_header;
  grpc::Status status = stub->ListJobs(&no_header, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(status.error_message().find("missing"), std::string::npos);

  grpc::ClientContext wrong;
  wrong.AddMetadata(kAuthorizationHeader, AuthorizationValue("guess"));
  status = stub->ListJobs(&wrong, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(status.error_message(), "wrong bearer token");

  grpc::ClientContext not_bearer;
  not_bearer.AddMetadata(kAuthorizationHeader, TestCoordinator::kOperatorToken);
  status = stub->ListJobs(&not_bearer, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);

  grpc::ClientContext right;
  right.AddMetadata(kAuthorizationHeader,
                    AuthorizationValue(TestCoordinator::kOperatorToken));
  status = stub->ListJobs(&right, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();

  // A refused submit stores nothing.
  grpc::ClientContext wrong_submit;
  wrong_submit.AddMetadata(kAuthorizationHeader, AuthorizationValue("guess"));
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = LoadTestSpec("tiny_job.json");
  v1::SubmitJobResponse submitted;
  EXPECT_EQ(stub->SubmitJob(&wrong_submit, submit, &submitted).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  v1::ListJobsResponse listed;
  ASSERT_TRUE(
      jobs_->ListJobs(connection_->NewContext().get(), request, &listed).ok());
  EXPECT_EQ(listed.jobs_size(), 0);
}

TEST_F(CoordinatorTest, InvalidSpecIsRejectedAndNothingStored) {
  absl::StatusOr<v1::Job> job = Submit(LoadTestSpec("skip_layer_job.json"));
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job.status().message().rfind("parallel.layout: ", 0), 0u)
      << job.status();
  v1::ListJobsResponse listed;
  ASSERT_TRUE(jobs_
                  ->ListJobs(connection_->NewContext().get(),
                             v1::ListJobsRequest(), &listed)
                  .ok());
  EXPECT_EQ(listed.jobs_size(), 0);
}

TEST_F(CoordinatorTest, ListJobsComesInPagesInIdOrder) {
  server_.RegisterWorker(v1::CPU);  // the jobs wait for a second worker
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<v1::Job> job = Submit(LoadTestSpec("tiny_job.json"));
    ASSERT_TRUE(job.ok()) << job.status();
    ids.push_back(job->id());
  }
  v1::ListJobsRequest request;
  request.set_page_size(2);
  std::vector<std::string> listed;
  int pages = 0;
  do {
    v1::ListJobsResponse page;
    ASSERT_TRUE(
        jobs_->ListJobs(connection_->NewContext().get(), request, &page).ok());
    EXPECT_LE(page.jobs_size(), 2);
    for (const v1::Job& job : page.jobs()) listed.push_back(job.id());
    request.set_page_token(page.next_page_token());
    ++pages;
  } while (!request.page_token().empty() && pages < 10);
  EXPECT_EQ(listed, ids);
  EXPECT_EQ(pages, 3);

  // A state filter pages over the matching jobs only.
  request.Clear();
  request.add_states(v1::CANCELLED);
  v1::ListJobsResponse none;
  ASSERT_TRUE(
      jobs_->ListJobs(connection_->NewContext().get(), request, &none).ok());
  EXPECT_EQ(none.jobs_size(), 0);
  EXPECT_TRUE(none.next_page_token().empty());

  request.Clear();
  request.set_page_size(-1);
  grpc::Status negative =
      jobs_->ListJobs(connection_->NewContext().get(), request, &none);
  EXPECT_EQ(negative.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(negative.error_message().rfind("page_size: ", 0), 0u);
}

TEST_F(CoordinatorTest, SubmitNeedsARegisteredWorkerOfTheJobsDevice) {
  absl::StatusOr<v1::Job> job = Submit(LoadTestSpec("tiny_job.json"));
  EXPECT_EQ(job.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(job.status().message().rfind(
                "device: no registered worker runs cpu jobs", 0),
            0u)
      << job.status();
  server_.RegisterWorker(v1::CPU);
  v1::JobSpec on_gpu = LoadTestSpec("tiny_job.json");
  on_gpu.set_device("cuda");
  job = Submit(on_gpu);
  EXPECT_EQ(job.status().message().rfind(
                "device: no registered worker runs cuda jobs (1 registered: "
                "1 cpu, 0 cuda)",
                0),
            0u)
      << job.status();
  // A job short of workers is accepted: more may register.
  job = Submit(LoadTestSpec("tiny_job.json"));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::PENDING);
}

TEST_F(CoordinatorTest, RestartedCoordinatorHasEveryJobAndItsHistory) {
  server_.RegisterWorker(v1::CPU);
  absl::StatusOr<v1::Job> cancelled = Submit(LoadTestSpec("tiny_job.json"));
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  absl::StatusOr<v1::Job> waiting = Submit(LoadTestSpec("tiny_job.json"));
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  // "job-TAG" (the store's tag) and the counter: job-TAG-000001, ...
  const std::string prefix = cancelled->id().substr(0, 10);
  EXPECT_EQ(cancelled->id(), prefix + "-000001");
  EXPECT_EQ(waiting->id(), prefix + "-000002");
  v1::CancelJobRequest cancel;
  cancel.set_id(cancelled->id());
  cancel.set_reason("changed my mind");
  v1::Job after_cancel;
  ASSERT_TRUE(
      jobs_->CancelJob(connection_->NewContext().get(), cancel, &after_cancel)
          .ok());
  EXPECT_EQ(after_cancel.state(), v1::CANCELLED);
  // Cancelling again is an illegal transition.
  grpc::Status again =
      jobs_->CancelJob(connection_->NewContext().get(), cancel, &after_cancel);
  EXPECT_EQ(again.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(again.error_message().find("CANCELLED -> CANCELLED"),
            std::string::npos);

  ASSERT_TRUE(server_.Restart().ok());
  Reconnect();
  server_.RegisterWorker(v1::CPU);  // the restart forgot the workers

  v1::GetJobRequest get;
  get.set_id(cancelled->id());
  v1::Job stored;
  ASSERT_TRUE(
      jobs_->GetJob(connection_->NewContext().get(), get, &stored).ok());
  EXPECT_EQ(stored.state(), v1::CANCELLED);
  EXPECT_EQ(stored.message(), "changed my mind");
  ASSERT_EQ(stored.history_size(), 2);
  EXPECT_EQ(stored.history(0).to(), v1::PENDING);
  EXPECT_EQ(stored.history(1).from(), v1::PENDING);
  EXPECT_EQ(stored.history(1).to(), v1::CANCELLED);
  EXPECT_EQ(stored.spec().name(), "tiny-pretrain");

  get.set_id(waiting->id());
  ASSERT_TRUE(
      jobs_->GetJob(connection_->NewContext().get(), get, &stored).ok());
  EXPECT_EQ(stored.state(), v1::PENDING);

  absl::StatusOr<v1::Job> next = Submit(LoadTestSpec("tiny_job.json"));
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->id(), prefix + "-000003");

  get.set_id("job-000404");
  EXPECT_EQ(
      jobs_->GetJob(connection_->NewContext().get(), get, &stored).error_code(),
      grpc::StatusCode::NOT_FOUND);
}

TEST_F(CoordinatorTest, WatchSendsCurrentStateThenChangesUntilTheEnd) {
  server_.RegisterWorker(v1::CPU);
  absl::StatusOr<v1::Job> job = Submit(LoadTestSpec("tiny_job.json"));
  ASSERT_TRUE(job.ok());
  v1::WatchJobRequest request;
  request.set_id(job->id());
  std::unique_ptr<grpc::ClientContext> context =
      connection_->NewContext(absl::Seconds(10));
  auto reader = jobs_->WatchJob(context.get(), request);
  v1::JobEvent event;
  ASSERT_TRUE(reader->Read(&event));
  EXPECT_EQ(event.job().state(), v1::PENDING);
  EXPECT_EQ(event.state_change().to(), v1::PENDING);

  v1::CancelJobRequest cancel;
  cancel.set_id(job->id());
  v1::Job cancelled;
  ASSERT_TRUE(
      jobs_->CancelJob(connection_->NewContext().get(), cancel, &cancelled)
          .ok());
  ASSERT_TRUE(reader->Read(&event));
  EXPECT_EQ(event.state_change().from(), v1::PENDING);
  EXPECT_EQ(event.state_change().to(), v1::CANCELLED);
  EXPECT_FALSE(reader->Read(&event));  // the stream ends with the job
  EXPECT_TRUE(reader->Finish().ok());
}

TEST_F(CoordinatorTest, AJobShortOfWorkersFailsAfterItsSchedulingTimeout) {
  server_.RegisterWorker(v1::CPU);
  server_.RegisterWorker(v1::CUDA);  // another device: not counted
  v1::JobSpec spec = LoadTestSpec("tiny_job.json");  // two ranks
  spec.set_scheduling_timeout_seconds(1);
  absl::StatusOr<v1::Job> job = Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<v1::Job> patient = Submit(LoadTestSpec("tiny_job.json"));
  ASSERT_TRUE(patient.ok()) << patient.status();

  const absl::Time start = absl::Now();
  v1::Job failed = server_.GetJob(job->id());
  while (failed.state() == v1::PENDING &&
         absl::Now() - start < absl::Seconds(5)) {
    absl::SleepFor(absl::Milliseconds(50));
    failed = server_.GetJob(job->id());
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  ASSERT_EQ(failed.state(), v1::FAILED) << failed.DebugString();
  EXPECT_EQ(failed.message(),
            "waited 1 s (scheduling_timeout_seconds) for 2 idle cpu workers "
            "(parallel.world_size); 1 available");
  EXPECT_GE(failed.updated_unix_ms() - failed.created_unix_ms(), 1000);
  // A job without a scheduling timeout keeps waiting.
  EXPECT_EQ(server_.GetJob(patient->id()).state(), v1::PENDING);
}

// GET /metrics over a plain socket: the real HTTP endpoint, no client library.
// `headers`: more header lines, each ending in \r\n.
std::string HttpGet(int port, const std::string& path,
                    const std::string& headers = "") {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) !=
      0) {
    close(fd);
    return "";
  }
  const std::string request =
      "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n" + headers + "\r\n";
  send(fd, request.data(), request.size(), 0);
  std::string reply;
  char buffer[4096];
  for (ssize_t n; (n = recv(fd, buffer, sizeof(buffer), 0)) > 0;) {
    reply.append(buffer, n);
  }
  close(fd);
  return reply;
}

class CoordinatorMetricsTest : public CoordinatorTest {
 protected:
  CoordinatorMetricsTest() : CoordinatorTest(/*serve_metrics=*/true) {}
};

TEST_F(CoordinatorMetricsTest, MetricsAreScrapedOverHttp) {
  std::shared_ptr<ClientConnection> worker = server_.ConnectAsWorker();
  const std::string first = server_.RegisterWorker(v1::CPU, worker);
  server_.RegisterWorker(v1::CPU);
  absl::StatusOr<v1::Job> job = Submit(LoadTestSpec("tiny_job.json"));
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(Submit(LoadTestSpec("tiny_job.json")).ok());  // waits: no workers
  v1::StepMetrics step;
  step.set_iteration(7);
  step.set_lm_loss(4.5);
  step.set_grad_norm(1.25);
  step.set_tokens_per_sec_per_device(1500);
  step.set_tflops_per_device(0.5);
  step.set_indexer_loss(0.125);
  step.add_expert_load_imbalance(1.5);
  step.add_expert_load_imbalance(2.75);
  v1::ReportMetricsRequest report;
  report.set_worker_id(first);
  report.set_job_id(job->id());
  report.set_attempt(1);
  *report.mutable_metrics() = step;
  v1::ReportMetricsResponse reported;
  ASSERT_TRUE(v1::WorkerService::NewStub(worker->channel())
                  ->ReportMetrics(worker->NewContext().get(), report, &reported)
                  .ok());
  ASSERT_FALSE(reported.stop_job());
  EXPECT_FALSE(Submit(LoadTestSpec("skip_layer_job.json")).ok());
  auto refused = server_.Connect("wrong");
  auto stub = v1::JobService::NewStub(refused->channel());
  v1::ListJobsResponse listed;
  EXPECT_FALSE(stub->ListJobs(refused->NewContext().get(),
                              v1::ListJobsRequest(), &listed)
                   .ok());

  const int port = server_.coordinator().metrics_port();
  ASSERT_GT(port, 0);
  std::string body;
  // Gauges are refreshed by the coordinator's periodic tick.
  for (int i = 0; i < 50; ++i) {
    body = HttpGet(port, "/metrics");
    if (body.find("glm_jobs{state=\"PENDING\"} 1") != std::string::npos) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_NE(body.find("200 OK"), std::string::npos) << body;
  EXPECT_NE(body.find("glm_jobs{state=\"PENDING\"} 1"), std::string::npos)
      << body;
  EXPECT_NE(body.find("glm_jobs{state=\"SCHEDULED\"} 1"), std::string::npos);
  EXPECT_NE(body.find("glm_jobs{state=\"RUNNING\"} 0"), std::string::npos);
  EXPECT_NE(body.find("glm_workers{status=\"registered\"} 2"),
            std::string::npos);
  EXPECT_NE(body.find("glm_workers{status=\"alive\"} 2"), std::string::npos);
  EXPECT_NE(body.find("glm_rpcs_total{code=\"OK\",method=\"JobService/"
                      "SubmitJob\"} 2"),
            std::string::npos)
      << body;
  for (const std::string& line : {
           "glm_job_iteration{job_id=\"" + job->id() + "\"} 7",
           "glm_job_lm_loss{job_id=\"" + job->id() + "\"} 4.5",
           "glm_job_grad_norm{job_id=\"" + job->id() + "\"} 1.25",
           "glm_job_tokens_per_second_per_device{job_id=\"" + job->id() +
               "\"} 1500",
           "glm_job_tflops_per_device{job_id=\"" + job->id() + "\"} 0.5",
           "glm_job_indexer_loss{job_id=\"" + job->id() + "\"} 0.125",
           "glm_job_expert_load_imbalance{job_id=\"" + job->id() +
               "\",moe_layer=\"1\"} 2.75",
       }) {
    EXPECT_NE(body.find(line), std::string::npos) << line;
  }
  EXPECT_NE(body.find("glm_rpcs_total{code=\"INVALID_ARGUMENT\",method="
                      "\"JobService/SubmitJob\"} 1"),
            std::string::npos);
  EXPECT_NE(body.find("glm_rpcs_total{code=\"UNAUTHENTICATED\",method="
                      "\"JobService/ListJobs\"} 1"),
            std::string::npos);
  EXPECT_NE(body.find("glm_rpc_latency_seconds_count{method=\"JobService/"
                      "SubmitJob\"} 3"),
            std::string::npos);
}

TEST(CoordinatorMetricsTokenTest, MetricsNeedTheTokenWhenOneIsSet) {
  CoordinatorOptions options;
  options.listen = "127.0.0.1:0";
  options.state_dir =
      std::string(std::getenv("TEST_TMPDIR")) + "/metrics_token";
  options.operator_token = TestCoordinator::kOperatorToken;
  options.worker_token = TestCoordinator::kWorkerToken;
  options.metrics_listen = "127.0.0.1:0";
  options.metrics_token = "metrics-token-81c2";
  absl::StatusOr<std::unique_ptr<Coordinator>> coordinator =
      Coordinator::Start(options);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  const int port = (*coordinator)->metrics_port();
  auto basic = [](const std::string& password) {
    return "Authorization: Basic " +
           absl::Base64Escape("prometheus:" + password) + "\r\n";
  };
  EXPECT_NE(HttpGet(port, "/metrics").find("401"), std::string::npos);
  EXPECT_NE(HttpGet(port, "/metrics", basic("guess")).find("401"),
            std::string::npos);
  std::string scraped;
  // Gauges appear with the coordinator's first tick.
  for (int i = 0; i < 50; ++i) {
    scraped = HttpGet(port, "/metrics", basic("metrics-token-81c2"));
    if (scraped.find("glm_workers") != std::string::npos) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_NE(scraped.find("200 OK"), std::string::npos) << scraped;
  EXPECT_NE(scraped.find("glm_workers"), std::string::npos) << scraped;
}

std::string ReadTestFile(const std::string& path) {
  std::ifstream in("coordinator/testdata/" + path);
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}

TEST(CoordinatorTlsTest, ServesTlsAndStillRequiresTheToken) {
  CoordinatorOptions options;
  options.listen = "127.0.0.1:0";
  options.state_dir = std::string(std::getenv("TEST_TMPDIR")) + "/tls";
  options.operator_token = TestCoordinator::kOperatorToken;
  options.worker_token = TestCoordinator::kWorkerToken;
  options.tls_cert_pem = ReadTestFile("tls/loopback.crt");
  options.tls_key_pem = ReadTestFile("tls/loopback.key");
  ASSERT_FALSE(options.tls_cert_pem.empty());
  absl::StatusOr<std::unique_ptr<Coordinator>> coordinator =
      Coordinator::Start(options);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  ConnectionOptions client;
  client.target = "127.0.0.1:" + std::to_string((*coordinator)->port());
  client.token = TestCoordinator::kOperatorToken;
  client.tls_root_pem = options.tls_cert_pem;
  auto call = [](const ConnectionOptions& options) {
    ClientConnection connection(options);
    auto stub = v1::JobService::NewStub(connection.channel());
    v1::ListJobsResponse response;
    return stub->ListJobs(connection.NewContext(absl::Seconds(5)).get(),
                          v1::ListJobsRequest(), &response);
  };
  grpc::Status status = call(client);
  EXPECT_TRUE(status.ok()) << status.error_message();

  ConnectionOptions wrong_token = client;
  wrong_token.token = "guess";
  EXPECT_EQ(call(wrong_token).error_code(), grpc::StatusCode::UNAUTHENTICATED);

  ConnectionOptions plaintext = client;
  plaintext.tls_root_pem.clear();
  EXPECT_EQ(call(plaintext).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(CoordinatorTlsTest, WorkerCallsNeedAClientCertificateUnderMutualTls) {
  CoordinatorOptions options;
  options.listen = "127.0.0.1:0";
  options.state_dir = std::string(std::getenv("TEST_TMPDIR")) + "/mtls";
  options.operator_token = TestCoordinator::kOperatorToken;
  options.worker_token = TestCoordinator::kWorkerToken;
  options.tls_cert_pem = ReadTestFile("tls/loopback.crt");
  options.tls_key_pem = ReadTestFile("tls/loopback.key");
  options.tls_client_ca_pem = ReadTestFile("tls/worker_ca.crt");
  ASSERT_FALSE(options.tls_client_ca_pem.empty());
  absl::StatusOr<std::unique_ptr<Coordinator>> coordinator =
      Coordinator::Start(options);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  ConnectionOptions worker;
  worker.target = "127.0.0.1:" + std::to_string((*coordinator)->port());
  worker.token = TestCoordinator::kWorkerToken;
  worker.tls_root_pem = options.tls_cert_pem;
  auto register_worker = [](const ConnectionOptions& options) {
    ClientConnection connection(options);
    v1::RegisterWorkerRequest request;
    request.set_device_kind(v1::CPU);
    v1::RegisterWorkerResponse response;
    return v1::WorkerService::NewStub(connection.channel())
        ->RegisterWorker(connection.NewContext(absl::Seconds(5)).get(), request,
                         &response);
  };

  grpc::Status without = register_worker(worker);
  EXPECT_EQ(without.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(without.error_message().find("needs a client certificate"),
            std::string::npos)
      << without.error_message();
  EXPECT_EQ((*coordinator)->AliveWorkers(), 0);

  ConnectionOptions with_certificate = worker;
  with_certificate.tls_cert_pem = ReadTestFile("tls/worker.crt");
  with_certificate.tls_key_pem = ReadTestFile("tls/worker.key");
  grpc::Status with = register_worker(with_certificate);
  EXPECT_TRUE(with.ok()) << with.error_message();
  EXPECT_EQ((*coordinator)->AliveWorkers(), 1);

  // A certificate the CA did not sign fails the handshake.
  ConnectionOptions self_signed = worker;
  self_signed.tls_cert_pem = options.tls_cert_pem;
  self_signed.tls_key_pem = options.tls_key_pem;
  EXPECT_FALSE(register_worker(self_signed).ok());

  // Operators connect without a certificate.
  ConnectionOptions operator_ = worker;
  operator_.token = TestCoordinator::kOperatorToken;
  ClientConnection connection(operator_);
  v1::ListJobsResponse listed;
  grpc::Status listed_status =
      v1::JobService::NewStub(connection.channel())
          ->ListJobs(connection.NewContext(absl::Seconds(5)).get(),
                     v1::ListJobsRequest(), &listed);
  EXPECT_TRUE(listed_status.ok()) << listed_status.error_message();
}

}  // namespace
}  // namespace glm
