// Tests' coordinator: a real Coordinator serving on 127.0.0.1 (free ports) with
// its store under TEST_TMPDIR, and connections to it with the operator token,
// the worker token (registered as a worker or not), or any other.
#ifndef GLM_COORDINATOR_TEST_COORDINATOR_H_
#define GLM_COORDINATOR_TEST_COORDINATOR_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/coordinator.h"
#include "proto/job_service.pb.h"
#include "proto/worker_service.pb.h"
#include "rpc/client_connection.h"

namespace glm {

class TestCoordinator {
 public:
  static constexpr char kOperatorToken[] = "test-operator-token-3f9a";
  static constexpr char kWorkerToken[] = "test-worker-token-c27e";

  // Starts with a fresh state directory named `name`. Metrics are served only
  // when asked: stopping prometheus-cpp's HTTP server takes up to 2 s.
  explicit TestCoordinator(const std::string& name,
                           int64_t heartbeat_timeout_ms = 10000,
                           bool serve_metrics = false,
                           int64_t rendezvous_timeout_ms = 300000);

  // Shuts down and starts again on the same state directory (new ports).
  absl::Status Restart();
  // Restarts keeping the gRPC port, so that clients connected before (worker
  // processes) reach the new coordinator.
  absl::Status RestartOnSamePort();
  Coordinator& coordinator() { return *coordinator_; }
  const CoordinatorOptions& options() const { return options_; }
  std::string target() const;

  std::shared_ptr<ClientConnection> Connect(const std::string& token) const;
  std::shared_ptr<ClientConnection> ConnectAsOperator() const {
    return Connect(kOperatorToken);
  }
  // With the worker token, not yet registered (CoordinatorClient registers).
  std::shared_ptr<ClientConnection> ConnectAsWorker() const {
    return Connect(kWorkerToken);
  }
  // With the worker token and the identity of a CPU worker registered for it
  // (RegisterWorker's), for calls such as rendezvous.
  std::shared_ptr<ClientConnection> ConnectAsRegisteredWorker() const;
  // The job as JobService/GetJob returns it (a failed call fails the test).
  v1::Job GetJob(const std::string& id) const;
  // Registers a worker of `kind` through WorkerService (over `connection`,
  // which then carries its identity; a new worker connection when null) and
  // returns its id. It sends no heartbeat: it is declared dead after the
  // heartbeat timeout.
  std::string RegisterWorker(
      v1::DeviceKind kind,
      const std::shared_ptr<ClientConnection>& connection = nullptr) const;
  // Waits until `count` workers are alive (worker processes the test
  // started); fails the test after `timeout`.
  void WaitForWorkers(int count,
                      absl::Duration timeout = absl::Seconds(30)) const;

 private:
  CoordinatorOptions options_;
  std::unique_ptr<Coordinator> coordinator_;
};

// Registers a worker of `kind` over `connection` (which must carry the worker
// token; it then carries the worker's identity) and returns its id.
std::string RegisterTestWorker(v1::DeviceKind kind,
                               ClientConnection& connection);

}  // namespace glm

#endif  // GLM_COORDINATOR_TEST_COORDINATOR_H_
