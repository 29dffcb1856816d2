// A one-machine cluster for `glmctl local`: an embedded coordinator on a
// loopback port with fresh operator and worker tokens, and N glm-worker
// processes registered with it. Everything lives under one state folder (job
// store, worker token, worker logs); the operator token stays in memory.
#ifndef GLM_CLI_LOCAL_CLUSTER_H_
#define GLM_CLI_LOCAL_CLUSTER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "coordinator/coordinator.h"
#include "jobspec/path_roots.h"
#include "rpc/client_connection.h"

namespace glm {

struct LocalClusterOptions {
  std::string state_dir;
  int workers = 1;
  std::string worker_binary;
  // 0: CPU workers. Otherwise worker i runs on GPU i % gpus (more workers
  // than GPUs share them).
  int gpus = 0;
  // Where jobs may read and write (the coordinator's and the workers'
  // --path-roots).
  PathRoots path_roots;
};

class LocalCluster {
 public:
  // Returns once every worker has registered with the coordinator. From then
  // on a worker process that exits is replaced by a new one (its log gets
  // the new one's output appended), as a cluster's scheduler would replace a
  // lost node: a job with training.max_restarts restarts on it.
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(
      const LocalClusterOptions& options);
  // Stops replacing workers, stops them (SIGTERM, then waits) and the
  // coordinator.
  ~LocalCluster();

  // How glmctl's own calls reach the coordinator.
  const ConnectionOptions& connection() const { return connection_; }
  std::string WorkerLog(int worker) const;
  // The process of each worker now, and how many alive workers the
  // coordinator counts (for tests).
  std::vector<pid_t> worker_pids() const;
  int alive_workers() const { return coordinator_->AliveWorkers(); }

 private:
  LocalCluster() = default;
  // Starts worker `index` (its log truncated, or appended to when it
  // replaces an exited one) and records its process.
  absl::Status SpawnWorker(int index, bool replacement);
  // Waits until every worker has registered; an error naming the log of a
  // worker that exited first, or after a minute.
  absl::Status AwaitWorkers();
  // Until stopping_: replaces each worker that exited, at most once a
  // second per worker.
  void SuperviseWorkers();

  LocalClusterOptions options_;
  std::unique_ptr<Coordinator> coordinator_;
  ConnectionOptions connection_;
  std::string worker_token_file_;
  mutable absl::Mutex mutex_;
  std::vector<pid_t> worker_pids_ ABSL_GUARDED_BY(mutex_);
  absl::Notification stopping_;
  std::thread supervisor_;
};

// The glm-worker binary beside this program: in its Bazel runfiles, or in the
// same folder (an installed layout).
absl::StatusOr<std::string> FindWorkerBinary();

}  // namespace glm

#endif  // GLM_CLI_LOCAL_CLUSTER_H_
