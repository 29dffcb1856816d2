// A worker's side of WorkerService: register, heartbeat (on a thread of its
// own), receive assignments, report metrics, checkpoints and results. Every
// call carries the worker token of the connection and, after registration,
// the worker's id and secret.
#ifndef GLM_WORKER_COORDINATOR_CLIENT_H_
#define GLM_WORKER_COORDINATOR_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "proto/worker_service.grpc.pb.h"
#include "rpc/client_connection.h"

namespace glm {

// What this machine offers, for registration: hostname and CPU cores filled in.
v1::RegisterWorkerRequest DescribeThisHost(v1::DeviceKind kind,
                                           const std::string& address);

// True when a call naming this worker failed because the coordinator no longer
// knows it: the coordinator restarted since it registered (NOT_FOUND) or
// declared it dead (FAILED_PRECONDITION). It must register again.
bool CoordinatorForgotWorker(const absl::Status& status);

// True when the coordinator refused a heartbeat or report because this worker
// (as registered now) holds no such job rank: it registered again after a
// coordinator restart while an old rank still ran. That rank must stop.
bool CoordinatorRefusedJob(const absl::Status& status);

class CoordinatorClient {
 public:
  explicit CoordinatorClient(std::shared_ptr<ClientConnection> connection);
  // Stops heartbeats and any assignment watch.
  ~CoordinatorClient();

  CoordinatorClient(const CoordinatorClient&) = delete;
  CoordinatorClient& operator=(const CoordinatorClient&) = delete;

  absl::Status Register(const v1::RegisterWorkerRequest& request);
  // Registers again with the request of the last Register: a new worker id.
  absl::Status RegisterAgain();
  // The connection to the coordinator, for its other services (rendezvous).
  std::shared_ptr<ClientConnection> connection() const { return connection_; }
  // Valid after Register.
  std::string worker_id() const;
  int64_t heartbeat_interval_ms() const;

  // The job (and its iteration) that heartbeats report; empty job: idle.
  void SetCurrentJob(const std::string& job_id, int64_t iteration);

  // One heartbeat now.
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat();
  // Heartbeats every interval on a thread until StopHeartbeats. `on_stop_job`
  // runs (on that thread) with the reason when the coordinator says the current
  // job ended or refuses it (CoordinatorRefusedJob); `on_error` when a
  // heartbeat fails otherwise (e.g. the worker was declared dead).
  void StartHeartbeats(std::function<void(const std::string&)> on_stop_job,
                       std::function<void(const absl::Status&)> on_error);
  void StopHeartbeats();

  // Blocks, calling `on_assignment` for each assignment pushed to this worker,
  // until the stream ends (its status is returned) or CancelWatch is called
  // (CANCELLED).
  absl::Status WatchAssignments(
      const std::function<void(const v1::Assignment&)>& on_assignment);
  void CancelWatch();

  // True when the coordinator says the job has ended, or refuses the report
  // (CoordinatorRefusedJob), and the rank should stop.
  absl::StatusOr<bool> ReportMetrics(const std::string& job_id, int attempt,
                                     int rank, const v1::StepMetrics& metrics);
  absl::Status ReportCheckpoint(int attempt, int rank,
                                const v1::CheckpointManifest& manifest);
  absl::Status ReportJobResult(const std::string& job_id, int rank, int attempt,
                               bool ok, const std::string& message);
  // Leaves the coordinator for good (the worker is stopping).
  absl::Status Deregister();

 private:
  void HeartbeatLoop(std::function<void(const std::string&)> on_stop_job,
                     std::function<void(const absl::Status&)> on_error);

  std::shared_ptr<ClientConnection> connection_;
  std::unique_ptr<v1::WorkerService::Stub> stub_;

  mutable absl::Mutex mu_;
  v1::RegisterWorkerRequest registration_ ABSL_GUARDED_BY(mu_);
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  int64_t heartbeat_interval_ms_ ABSL_GUARDED_BY(mu_) = 1000;
  std::string job_id_ ABSL_GUARDED_BY(mu_);
  int64_t iteration_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::ClientContext* watch_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool watch_cancelled_ ABSL_GUARDED_BY(mu_) = false;

  std::unique_ptr<absl::Notification> stop_heartbeats_;
  std::thread heartbeat_thread_;
};

}  // namespace glm

#endif  // GLM_WORKER_COORDINATOR_CLIENT_H_
