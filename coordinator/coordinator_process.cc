#include "coordinator/coordinator_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

extern char** environ;

namespace glm {
namespace {

std::string ReadWholeFile(const std::string& path) {
  std::ostringstream text;
  text << std::ifstream(path).rdbuf();
  return text.str();
}

// The port of "serving on port N," in the coordinator's log; 0 before it.
int ServingPort(const std::string& log) {
  const std::string text = ReadWholeFile(log);
  const std::string marker = "serving on port ";
  const size_t at = text.find(marker);
  if (at == std::string::npos) return 0;
  const size_t begin = at + marker.size();
  int port = 0;
  if (!absl::SimpleAtoi(text.substr(begin, text.find(',', begin) - begin),
                        &port)) {
    return 0;
  }
  return port;
}

std::vector<std::string> Arguments(const CoordinatorProcessOptions& options) {
  std::vector<std::string> args = {
      options.binary,
      absl::StrCat("--listen=127.0.0.1:", options.port),
      "--metrics-listen=127.0.0.1:0",
      "--state-dir=" + options.state_dir,
      "--operator-token-file=" + options.operator_token_file,
      "--worker-token-file=" + options.worker_token_file,
      "--path-roots=" + options.path_roots};
  args.insert(args.end(), options.extra_flags.begin(),
              options.extra_flags.end());
  return args;
}

absl::StatusOr<pid_t> Spawn(std::vector<std::string> args,
                            const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int error =
      posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) {
    return absl::InternalError(
        absl::StrCat("cannot start ", args[0], ": ", strerror(error)));
  }
  return pid;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorProcess>> CoordinatorProcess::Start(
    const CoordinatorProcessOptions& options) {
  absl::StatusOr<pid_t> pid = Spawn(Arguments(options), options.log);
  if (!pid.ok()) return pid.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    if (const int port = ServingPort(options.log); port != 0) {
      return std::unique_ptr<CoordinatorProcess>(
          new CoordinatorProcess(*pid, port));
    }
    if (waitpid(*pid, nullptr, WNOHANG) == *pid) {
      return absl::InternalError(
          absl::StrCat("glm-coordinator exited before serving: ",
                       ReadWholeFile(options.log)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(*pid, SIGKILL);
  waitpid(*pid, nullptr, 0);
  return absl::DeadlineExceededError(
      absl::StrCat("glm-coordinator did not serve within 30 s: ",
                   ReadWholeFile(options.log)));
}

CoordinatorProcess::~CoordinatorProcess() {
  if (running_) Kill(SIGTERM);
}

std::string CoordinatorProcess::target() const {
  return absl::StrCat("127.0.0.1:", port_);
}

int CoordinatorProcess::Kill(int signal) {
  kill(pid_, signal);
  int status = 0;
  waitpid(pid_, &status, 0);
  running_ = false;
  return status;
}

absl::StatusOr<int64_t> CoordinatorProcess::ResidentKib() const {
  std::ifstream status(absl::StrCat("/proc/", pid_, "/status"));
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) != 0) continue;
    int64_t kib = 0;
    std::istringstream(line.substr(6)) >> kib;
    return kib;
  }
  return absl::NotFoundError(
      absl::StrCat("no VmRSS in /proc/", pid_, "/status"));
}

}  // namespace glm
