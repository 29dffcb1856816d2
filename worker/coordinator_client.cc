#include "worker/coordinator_client.h"

#include <unistd.h>

#include <utility>

#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "rpc/grpc_status.h"

namespace glm {
namespace {

// Unary calls that take longer than this mean the coordinator is unreachable.
constexpr absl::Duration kCallTimeout = absl::Seconds(10);

}  // namespace

v1::RegisterWorkerRequest DescribeThisHost(v1::DeviceKind kind,
                                           const std::string& address) {
  v1::RegisterWorkerRequest request;
  char hostname[256] = {};
  gethostname(hostname, sizeof(hostname) - 1);
  request.set_hostname(hostname);
  request.set_address(address);
  request.set_device_kind(kind);
  request.set_cpu_cores(static_cast<int>(std::thread::hardware_concurrency()));
  return request;
}

bool CoordinatorForgotWorker(const absl::Status& status) {
  return status.code() == absl::StatusCode::kNotFound ||
         status.code() == absl::StatusCode::kFailedPrecondition;
}

bool CoordinatorRefusedJob(const absl::Status& status) {
  return status.code() == absl::StatusCode::kPermissionDenied;
}

CoordinatorClient::CoordinatorClient(
    std::shared_ptr<ClientConnection> connection)
    : connection_(std::move(connection)),
      stub_(v1::WorkerService::NewStub(connection_->channel())) {}

CoordinatorClient::~CoordinatorClient() {
  StopHeartbeats();
  CancelWatch();
}

absl::Status CoordinatorClient::Register(
    const v1::RegisterWorkerRequest& request) {
  v1::RegisterWorkerResponse response;
  grpc::Status status = stub_->RegisterWorker(
      connection_->NewContext(kCallTimeout).get(), request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  connection_->SetWorkerIdentity(
      {response.worker_id(), response.worker_secret()});
  absl::MutexLock lock(&mu_);
  registration_ = request;
  worker_id_ = response.worker_id();
  heartbeat_interval_ms_ = response.heartbeat_interval_ms();
  return absl::OkStatus();
}

absl::Status CoordinatorClient::RegisterAgain() {
  v1::RegisterWorkerRequest request;
  {
    absl::MutexLock lock(&mu_);
    request = registration_;
  }
  return Register(request);
}

std::string CoordinatorClient::worker_id() const {
  absl::MutexLock lock(&mu_);
  return worker_id_;
}

int64_t CoordinatorClient::heartbeat_interval_ms() const {
  absl::MutexLock lock(&mu_);
  return heartbeat_interval_ms_;
}

void CoordinatorClient::SetCurrentJob(const std::string& job_id,
                                      int64_t iteration) {
  absl::MutexLock lock(&mu_);
  job_id_ = job_id;
  iteration_ = iteration;
}

absl::StatusOr<v1::HeartbeatResponse> CoordinatorClient::Heartbeat() {
  v1::HeartbeatRequest request;
  {
    absl::MutexLock lock(&mu_);
    request.set_worker_id(worker_id_);
    request.set_job_id(job_id_);
    request.set_iteration(iteration_);
  }
  v1::HeartbeatResponse response;
  grpc::Status status = stub_->Heartbeat(
      connection_->NewContext(kCallTimeout).get(), request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

void CoordinatorClient::StartHeartbeats(
    std::function<void(const std::string&)> on_stop_job,
    std::function<void(const absl::Status&)> on_error) {
  StopHeartbeats();
  stop_heartbeats_ = std::make_unique<absl::Notification>();
  heartbeat_thread_ = std::thread([this, on_stop_job = std::move(on_stop_job),
                                   on_error = std::move(on_error)] {
    HeartbeatLoop(on_stop_job, on_error);
  });
}

void CoordinatorClient::HeartbeatLoop(
    std::function<void(const std::string&)> on_stop_job,
    std::function<void(const absl::Status&)> on_error) {
  do {
    absl::StatusOr<v1::HeartbeatResponse> response = Heartbeat();
    if (CoordinatorRefusedJob(response.status())) {
      if (on_stop_job) on_stop_job(std::string(response.status().message()));
    } else if (!response.ok()) {
      if (on_error) on_error(response.status());
    } else if (response->stop_job() && on_stop_job) {
      on_stop_job(response->reason());
    }
  } while (!stop_heartbeats_->WaitForNotificationWithTimeout(
      absl::Milliseconds(heartbeat_interval_ms())));
}

void CoordinatorClient::StopHeartbeats() {
  if (!heartbeat_thread_.joinable()) return;
  stop_heartbeats_->Notify();
  heartbeat_thread_.join();
}

absl::Status CoordinatorClient::WatchAssignments(
    const std::function<void(const v1::Assignment&)>& on_assignment) {
  std::unique_ptr<grpc::ClientContext> context = connection_->NewContext();
  v1::WatchAssignmentsRequest request;
  {
    absl::MutexLock lock(&mu_);
    if (watch_cancelled_) return absl::CancelledError("watch cancelled");
    request.set_worker_id(worker_id_);
    watch_context_ = context.get();
  }
  std::unique_ptr<grpc::ClientReader<v1::Assignment>> reader =
      stub_->WatchAssignments(context.get(), request);
  v1::Assignment assignment;
  while (reader->Read(&assignment)) on_assignment(assignment);
  grpc::Status status = reader->Finish();
  absl::MutexLock lock(&mu_);
  watch_context_ = nullptr;
  return FromGrpcStatus(status);
}

void CoordinatorClient::CancelWatch() {
  absl::MutexLock lock(&mu_);
  watch_cancelled_ = true;
  if (watch_context_) watch_context_->TryCancel();
}

absl::StatusOr<bool> CoordinatorClient::ReportMetrics(
    const std::string& job_id, int attempt, int rank,
    const v1::StepMetrics& metrics) {
  v1::ReportMetricsRequest request;
  request.set_worker_id(worker_id());
  request.set_job_id(job_id);
  request.set_attempt(attempt);
  request.set_rank(rank);
  *request.mutable_metrics() = metrics;
  v1::ReportMetricsResponse response;
  absl::Status status = FromGrpcStatus(stub_->ReportMetrics(
      connection_->NewContext(kCallTimeout).get(), request, &response));
  if (CoordinatorRefusedJob(status)) return true;
  if (!status.ok()) return status;
  return response.stop_job();
}

absl::Status CoordinatorClient::ReportCheckpoint(
    int attempt, int rank, const v1::CheckpointManifest& manifest) {
  v1::ReportCheckpointRequest request;
  request.set_worker_id(worker_id());
  request.set_attempt(attempt);
  request.set_rank(rank);
  *request.mutable_manifest() = manifest;
  v1::ReportCheckpointResponse response;
  return FromGrpcStatus(stub_->ReportCheckpoint(
      connection_->NewContext(kCallTimeout).get(), request, &response));
}

absl::Status CoordinatorClient::ReportJobResult(const std::string& job_id,
                                                int rank, int attempt, bool ok,
                                                const std::string& message) {
  v1::ReportJobResultRequest request;
  request.set_worker_id(worker_id());
  request.set_job_id(job_id);
  request.set_rank(rank);
  request.set_attempt(attempt);
  request.set_ok(ok);
  request.set_message(message);
  v1::ReportJobResultResponse response;
  return FromGrpcStatus(stub_->ReportJobResult(
      connection_->NewContext(kCallTimeout).get(), request, &response));
}

absl::Status CoordinatorClient::Deregister() {
  v1::DeregisterWorkerRequest request;
  request.set_worker_id(worker_id());
  v1::DeregisterWorkerResponse response;
  return FromGrpcStatus(stub_->DeregisterWorker(
      connection_->NewContext(kCallTimeout).get(), request, &response));
}

}  // namespace glm
