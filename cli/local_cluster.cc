#include "cli/local_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

extern char** environ;

namespace glm {
namespace {

// How long the workers may take to start and register.
constexpr absl::Duration kWorkerStartTimeout = absl::Minutes(1);

std::string RandomToken() {
  std::random_device device;
  std::string token;
  for (int i = 0; i < 4; ++i) {
    absl::StrAppend(&token, absl::StrFormat("%08x", device()));
  }
  return token;
}

absl::Status WritePrivateFile(const std::string& path,
                              const std::string& content) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return absl::InternalError("cannot write " + path);
  const bool ok = write(fd, content.data(), content.size()) ==
                  static_cast<ssize_t>(content.size());
  close(fd);
  return ok ? absl::OkStatus() : absl::InternalError("cannot write " + path);
}

}  // namespace

absl::StatusOr<std::string> FindWorkerBinary() {
  const std::filesystem::path self =
      std::filesystem::read_symlink("/proc/self/exe");
  const std::filesystem::path candidates[] = {
      self.string() + ".runfiles/glm/worker/glm-worker",
      self.parent_path().parent_path() / "worker" / "glm-worker",
      self.parent_path() / "glm-worker",
  };
  for (const std::filesystem::path& candidate : candidates) {
    if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return absl::NotFoundError(absl::StrCat(
      "no glm-worker binary beside ", self.string(), "; pass --worker-binary"));
}

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(
    const LocalClusterOptions& options) {
  std::error_code error;
  std::filesystem::create_directories(options.state_dir + "/logs", error);
  if (error) {
    return absl::InternalError(absl::StrCat("cannot create ", options.state_dir,
                                            ": ", error.message()));
  }
  std::unique_ptr<LocalCluster> cluster(new LocalCluster());
  cluster->options_ = options;
  CoordinatorOptions coordinator;
  coordinator.listen = "127.0.0.1:0";
  coordinator.state_dir = options.state_dir + "/coordinator";
  // Two tokens, as on any cluster: glmctl's calls here carry the operator
  // token, and the workers get only the worker token.
  coordinator.operator_token = RandomToken();
  coordinator.worker_token = RandomToken();
  coordinator.path_roots = options.path_roots;
  absl::StatusOr<std::unique_ptr<Coordinator>> started =
      Coordinator::Start(coordinator);
  if (!started.ok()) return started.status();
  cluster->coordinator_ = std::move(*started);
  cluster->connection_.target =
      absl::StrCat("127.0.0.1:", cluster->coordinator_->port());
  cluster->connection_.token = coordinator.operator_token;

  cluster->worker_token_file_ = options.state_dir + "/worker-token";
  if (absl::Status written = WritePrivateFile(cluster->worker_token_file_,
                                              coordinator.worker_token);
      !written.ok()) {
    return written;
  }
  for (int i = 0; i < options.workers; ++i) {
    if (absl::Status spawned = cluster->SpawnWorker(i, false); !spawned.ok()) {
      return spawned;
    }
  }
  // The coordinator accepts a job only once a worker that runs it has
  // registered.
  if (absl::Status registered = cluster->AwaitWorkers(); !registered.ok()) {
    return registered;
  }
  LocalCluster* supervised = cluster.get();
  cluster->supervisor_ =
      std::thread([supervised] { supervised->SuperviseWorkers(); });
  return cluster;
}

void LocalCluster::SuperviseWorkers() {
  while (!stopping_.WaitForNotificationWithTimeout(absl::Seconds(1))) {
    for (int i = 0; i < options_.workers; ++i) {
      pid_t pid = 0;
      {
        absl::MutexLock lock(&mutex_);
        pid = worker_pids_[i];
      }
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) != pid) continue;
      const std::string how =
          WIFSIGNALED(status)
              ? absl::StrCat("killed by signal ", WTERMSIG(status))
              : absl::StrCat("exit status ", WEXITSTATUS(status));
      std::cout << "worker " << i << " (pid " << pid << ") ended (" << how
                << "); starting a new one, log " << WorkerLog(i) << std::endl;
      if (absl::Status spawned = SpawnWorker(i, true); !spawned.ok()) {
        std::cout << "worker " << i << " not replaced: " << spawned.message()
                  << std::endl;
      }
    }
  }
}

std::vector<pid_t> LocalCluster::worker_pids() const {
  absl::MutexLock lock(&mutex_);
  return worker_pids_;
}

absl::Status LocalCluster::AwaitWorkers() {
  const absl::Time deadline = absl::Now() + kWorkerStartTimeout;
  while (coordinator_->AliveWorkers() < options_.workers) {
    absl::MutexLock lock(&mutex_);
    for (size_t i = 0; i < worker_pids_.size(); ++i) {
      if (waitpid(worker_pids_[i], nullptr, WNOHANG) == worker_pids_[i]) {
        worker_pids_.erase(worker_pids_.begin() + i);
        return absl::InternalError(absl::StrCat(
            "worker ", i, " exited before it registered; see ", WorkerLog(i)));
      }
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          coordinator_->AliveWorkers(), " of ", options_.workers,
          " workers registered within ",
          absl::FormatDuration(kWorkerStartTimeout), "; see ", WorkerLog(0)));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::OkStatus();
}

std::string LocalCluster::WorkerLog(int worker) const {
  return absl::StrCat(options_.state_dir, "/logs/worker-", worker, ".log");
}

absl::Status LocalCluster::SpawnWorker(int index, bool replacement) {
  const std::string log = WorkerLog(index);
  std::vector<std::string> args = {
      options_.worker_binary,
      "--coordinator=" + connection_.target,
      "--token-file=" + worker_token_file_,
      "--path-roots=" + FormatPathRoots(options_.path_roots),
      options_.gpus == 0
          ? std::string("--device=cpu")
          : absl::StrCat("--device=cuda:", index % options_.gpus),
      "--exit-with-parent"};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  // GPU workers run with NVLink multicast off unless the caller chose
  // otherwise (deploy/README.md, "Networking").
  if (options_.gpus > 0) setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(
      &actions, STDOUT_FILENO, log.c_str(),
      O_WRONLY | O_CREAT | (replacement ? O_APPEND : O_TRUNC), 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  const int error = posix_spawn(&pid, options_.worker_binary.c_str(), &actions,
                                nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    return absl::InternalError(absl::StrCat(
        "cannot start ", options_.worker_binary, ": ", strerror(error)));
  }
  absl::MutexLock lock(&mutex_);
  if (replacement) {
    worker_pids_[index] = pid;
  } else {
    worker_pids_.push_back(pid);
  }
  return absl::OkStatus();
}

LocalCluster::~LocalCluster() {
  stopping_.Notify();
  if (supervisor_.joinable()) supervisor_.join();
  const std::vector<pid_t> pids = worker_pids();
  for (pid_t pid : pids) kill(pid, SIGTERM);
  for (pid_t pid : pids) waitpid(pid, nullptr, 0);
  if (coordinator_) coordinator_->Shutdown();
}

}  // namespace glm
