#include "coordinator/test_coordinator.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "proto/job_service.grpc.pb.h"
#include "proto/worker_service.grpc.pb.h"

namespace glm {

TestCoordinator::TestCoordinator(const std::string& name,
                                 int64_t heartbeat_timeout_ms,
                                 bool serve_metrics,
                                 int64_t rendezvous_timeout_ms) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  options_.state_dir = absl::StrCat(tmp ? tmp : "/tmp", "/", name);
  std::system(absl::StrCat("rm -rf '", options_.state_dir, "'").c_str());
  options_.listen = "127.0.0.1:0";
  if (serve_metrics) options_.metrics_listen = "127.0.0.1:0";
  options_.operator_token = kOperatorToken;
  options_.worker_token = kWorkerToken;
  options_.heartbeat_interval_ms = heartbeat_timeout_ms / 5;
  options_.heartbeat_timeout_ms = heartbeat_timeout_ms;
  options_.rendezvous_timeout_ms = rendezvous_timeout_ms;
  absl::Status started = Restart();
  if (!started.ok()) {
    std::fprintf(stderr, "coordinator failed to start: %s\n",
                 started.ToString().c_str());
    std::abort();
  }
}

absl::Status TestCoordinator::Restart() {
  if (coordinator_) coordinator_->Shutdown();
  coordinator_.reset();
  absl::StatusOr<std::unique_ptr<Coordinator>> started =
      Coordinator::Start(options_);
  if (!started.ok()) return started.status();
  coordinator_ = *std::move(started);
  return absl::OkStatus();
}

absl::Status TestCoordinator::RestartOnSamePort() {
  options_.listen = target();
  return Restart();
}

std::string TestCoordinator::target() const {
  return absl::StrCat("127.0.0.1:", coordinator_->port());
}

std::shared_ptr<ClientConnection> TestCoordinator::Connect(
    const std::string& token) const {
  return PlaintextConnection(target(), token);
}

std::shared_ptr<ClientConnection> TestCoordinator::ConnectAsRegisteredWorker()
    const {
  std::shared_ptr<ClientConnection> connection = ConnectAsWorker();
  RegisterWorker(v1::CPU, connection);
  return connection;
}

v1::Job TestCoordinator::GetJob(const std::string& id) const {
  std::shared_ptr<ClientConnection> connection = ConnectAsOperator();
  auto jobs = v1::JobService::NewStub(connection->channel());
  v1::GetJobRequest request;
  request.set_id(id);
  v1::Job job;
  grpc::Status status =
      jobs->GetJob(connection->NewContext().get(), request, &job);
  EXPECT_TRUE(status.ok()) << id << ": " << status.error_message();
  return job;
}

std::string TestCoordinator::RegisterWorker(
    v1::DeviceKind kind, const std::shared_ptr<ClientConnection>& over) const {
  std::shared_ptr<ClientConnection> connection =
      over ? over : ConnectAsWorker();
  return RegisterTestWorker(kind, *connection);
}

std::string RegisterTestWorker(v1::DeviceKind kind,
                               ClientConnection& connection) {
  auto workers = v1::WorkerService::NewStub(connection.channel());
  v1::RegisterWorkerRequest request;
  request.set_hostname("test");
  request.set_device_kind(kind);
  v1::RegisterWorkerResponse response;
  grpc::Status status = workers->RegisterWorker(connection.NewContext().get(),
                                                request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  connection.SetWorkerIdentity(
      {response.worker_id(), response.worker_secret()});
  return response.worker_id();
}

void TestCoordinator::WaitForWorkers(int count, absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  while (coordinator_->AliveWorkers() < count && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_GE(coordinator_->AliveWorkers(), count)
      << "workers did not register within " << timeout;
}

}  // namespace glm
