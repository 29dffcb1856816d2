// A glm-coordinator process on 127.0.0.1, for the tests and benchmarks that
// need the real binary (killed with SIGKILL, its memory measured) rather than
// a Coordinator in their own process.
#ifndef GLM_COORDINATOR_COORDINATOR_PROCESS_H_
#define GLM_COORDINATOR_COORDINATOR_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace glm {

struct CoordinatorProcessOptions {
  // The glm-coordinator binary (in runfiles: coordinator/glm-coordinator).
  std::string binary = "coordinator/glm-coordinator";
  std::string state_dir;
  std::string operator_token_file;
  std::string worker_token_file;
  std::string path_roots;
  // Where its stderr goes (truncated at each start).
  std::string log;
  // The gRPC port; 0 picks a free one.
  int port = 0;
  // Further --flag=value arguments.
  std::vector<std::string> extra_flags;
};

class CoordinatorProcess {
 public:
  // Starts the binary and waits (up to 30 s) until it serves.
  static absl::StatusOr<std::unique_ptr<CoordinatorProcess>> Start(
      const CoordinatorProcessOptions& options);
  // SIGTERM and wait, unless it was killed already.
  ~CoordinatorProcess();

  CoordinatorProcess(const CoordinatorProcess&) = delete;
  CoordinatorProcess& operator=(const CoordinatorProcess&) = delete;

  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  std::string target() const;
  // Sends `signal` and waits for the process to end; returns its wait status.
  int Kill(int signal);
  // The resident set size now (VmRSS of /proc/PID/status), in KiB.
  absl::StatusOr<int64_t> ResidentKib() const;

 private:
  CoordinatorProcess(pid_t pid, int port) : pid_(pid), port_(port) {}

  pid_t pid_;
  int port_;
  bool running_ = true;
};

}  // namespace glm

#endif  // GLM_COORDINATOR_COORDINATOR_PROCESS_H_
