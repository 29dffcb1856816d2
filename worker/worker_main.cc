// glm-worker: one process per GPU (or CPU rank). Registers with the
// coordinator, heartbeats, runs the assignments it is given, and reports
// metrics, checkpoints and results. Stops on SIGTERM or SIGINT after the
// current iteration and deregisters.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/command_flags.h"
#include "jobspec/path_roots.h"
#include "kernels/backend_factory.h"
#include "rpc/client_connection.h"
#include "version/version.h"
#include "worker/advertise_address.h"
#include "worker/assignment_runner.h"
#include "worker/coordinator_client.h"

namespace glm {
namespace {

std::string EnvOr(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

CommandFlags DeclareFlags() {
  CommandFlags flags(
      "glm-worker --coordinator=ADDR --token-file=FILE "
      "--path-roots=DIR[,DIR...] --device=cpu|cuda:N");
  flags.Add("coordinator", "host:port of glm-coordinator", "127.0.0.1:7070");
  flags.Add("token-file",
            "file holding the worker token (the coordinator's "
            "--worker-token-file)");
  flags.Add("path-roots",
            "comma-separated folders every path of an assignment's spec "
            "must lie under before this worker opens it (the coordinator's "
            "--path-roots); '/' allows any path");
  flags.Add("tls-ca", "PEM of the CA that signed the coordinator (TLS)");
  flags.Add("tls-cert",
            "PEM client certificate chain, for a coordinator that requires "
            "one (its --tls-client-ca)");
  flags.Add("tls-key", "PEM private key of --tls-cert");
  flags.Add("device", "cpu, or cuda:N for GPU N", "cpu");
  flags.Add("advertise-address",
            "IP address or host name peers reach this worker at for the "
            "job's collectives (env GLM_ADVERTISE_ADDRESS; default: this "
            "host's address on the route to the coordinator)",
            EnvOr("GLM_ADVERTISE_ADDRESS"));
  flags.AddBool("exit-with-parent",
                "stop (as on SIGTERM) when the process that started this "
                "worker exits (glmctl local uses it)");
  flags.Add("register-timeout-s",
            "how long to keep trying to reach the coordinator", "60");
  flags.AddBool("version", "print the version and exit");
  return flags;
}

absl::StatusOr<v1::DeviceKind> ParseDevice(const std::string& device) {
  if (device == "cpu") return v1::CPU;
  if (absl::StartsWith(device, "cuda:")) return v1::CUDA;
  return absl::InvalidArgumentError(
      absl::StrCat("--device must be cpu or cuda:N, got '", device, "'"));
}

// The stop signals reach AwaitStopSignal through a pipe (whichever thread the
// handler runs on); a second one ends the process at once.
int stop_pipe[2] = {-1, -1};
volatile sig_atomic_t stop_signalled = 0;

void OnStopSignal(int signal) {
  if (stop_signalled) _exit(128 + signal);
  stop_signalled = 1;
  const unsigned char number = static_cast<unsigned char>(signal);
  if (write(stop_pipe[1], &number, 1) < 0) _exit(128 + signal);
}

absl::Status HandleStopSignals() {
  if (pipe(stop_pipe) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot create the signal pipe: ", strerror(errno)));
  }
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (int signal : {SIGTERM, SIGINT}) {
    if (sigaction(signal, &action, nullptr) != 0) {
      return absl::InternalError(
          absl::StrCat("cannot handle signal ", signal, ": ", strerror(errno)));
    }
  }
  return absl::OkStatus();
}

// Blocks until a stop signal arrives; returns its number.
int AwaitStopSignal() {
  unsigned char number = 0;
  while (read(stop_pipe[0], &number, 1) < 0 && errno == EINTR) {
  }
  return number;
}

// Retries while the coordinator is not up yet (workers often start first).
absl::Status RegisterWithRetry(CoordinatorClient& client,
                               const v1::RegisterWorkerRequest& request,
                               int64_t timeout_s) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  absl::Status status;
  while (true) {
    status = client.Register(request);
    if (status.ok() || status.code() == absl::StatusCode::kUnauthenticated ||
        std::chrono::steady_clock::now() > deadline) {
      return status;
    }
    if (stop_signalled) {
      return absl::CancelledError(
          absl::StrCat("stopped by a signal (", status.ToString(), ")"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

// One write a line: workers sharing a log file (glm-workers) do not
// interleave within lines.
void Log(const std::string& line) { std::cerr << line + "\n" << std::flush; }

int Main(int argc, char** argv) {
  CommandFlags flags = DeclareFlags();
  if (absl::Status parsed =
          flags.Parse(std::vector<std::string>(argv + 1, argv + argc));
      !parsed.ok()) {
    std::cerr << "glm-worker: " << parsed.message() << "\n" << flags.Help();
    return kExitUsage;
  }
  if (flags.HelpRequested()) {
    std::cout << flags.Help();
    return kExitOk;
  }
  if (flags.GetBool("version")) {
    std::cout << "glm-worker " << kGlmVersion << "\n";
    return kExitOk;
  }
  absl::StatusOr<v1::DeviceKind> kind = ParseDevice(flags.Get("device"));
  int64_t register_timeout_s = 0;
  absl::Status usage = kind.status();
  if (usage.ok()) usage = flags.Require("token-file");
  if (usage.ok()) usage = flags.Require("path-roots");
  absl::StatusOr<PathRoots> path_roots =
      ParsePathRoots(flags.Get("path-roots"));
  if (usage.ok()) usage = path_roots.status();
  if (usage.ok())
    usage = flags.GetInt("register-timeout-s", &register_timeout_s);
  if (!usage.ok()) {
    std::cerr << "glm-worker: " << usage.message() << "\n";
    return kExitUsage;
  }
  absl::StatusOr<ConnectionOptions> options = LoadConnectionOptions(
      flags.Get("coordinator"), flags.Get("token-file"), flags.Get("tls-ca"));
  if (options.ok()) {
    if (absl::Status loaded = LoadClientCertificate(
            flags.Get("tls-cert"), flags.Get("tls-key"), &*options);
        !loaded.ok()) {
      options = loaded;
    }
  }
  if (!options.ok()) {
    std::cerr << "glm-worker: " << options.status().message() << "\n";
    return kExitFailure;
  }
  // Threads started before main (OpenBLAS's pool) would take a blocked
  // signal's default action and kill the process mid-step, so the stop
  // signals get a handler instead.
  if (absl::Status handled = HandleStopSignals(); !handled.ok()) {
    std::cerr << "glm-worker: " << handled.message() << "\n";
    return kExitFailure;
  }
  if (flags.GetBool("exit-with-parent")) {
    // The kernel sends SIGTERM when the parent dies; a parent that already
    // died before this call leaves us re-parented, so check that too.
    const pid_t parent = getppid();
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) return kExitFailure;
  }

  absl::StatusOr<std::string> address = ChooseAdvertiseAddress(
      flags.Get("advertise-address"), flags.Get("coordinator"));
  if (!address.ok()) {
    std::cerr << "glm-worker: no address to advertise ("
              << address.status().message() << "); pass --advertise-address\n";
    return kExitFailure;
  }
  CoordinatorClient client(std::make_shared<ClientConnection>(*options));
  v1::RegisterWorkerRequest request = DescribeThisHost(*kind, *address);
  if (*kind == v1::CUDA) {
    // The GPU must exist before the worker offers it.
    absl::StatusOr<DeviceDescription> gpu = DescribeDevice(flags.Get("device"));
    if (!gpu.ok()) {
      std::cerr << "glm-worker: --device=" << flags.Get("device") << ": "
                << gpu.status().message() << "\n";
      return kExitFailure;
    }
    request.set_gpu_count(1);
    request.set_gpu_name(gpu->name);
    request.set_gpu_memory_bytes(gpu->memory_bytes);
  }
  if (absl::Status registered =
          RegisterWithRetry(client, request, register_timeout_s);
      !registered.ok()) {
    std::cerr << "glm-worker: cannot register with " << flags.Get("coordinator")
              << ": " << registered.ToString() << "\n";
    return kExitFailure;
  }
  Log(absl::StrCat("glm-worker ", client.worker_id(), ": registered with ",
                   flags.Get("coordinator"), " (", flags.Get("device"),
                   ", peers reach it at ", *address, ")"));
  AssignmentRunner runner(&client, Log, flags.Get("device"), *address,
                          *std::move(path_roots));
  std::thread signals([&] {
    const int signal = AwaitStopSignal();
    Log(absl::StrCat(
        "glm-worker: signal ", signal,
        ", stopping after the current iteration (again: at once)"));
    runner.Shutdown();
  });
  signals.detach();
  runner.Serve();
  // The coordinator must not wait out the heartbeat timeout to learn that
  // this worker is gone, nor assign it a job meanwhile.
  if (absl::Status left = client.Deregister(); !left.ok()) {
    Log("glm-worker: deregistering failed: " + left.ToString());
  } else {
    Log(absl::StrCat("glm-worker ", client.worker_id(), ": deregistered"));
  }
  return kExitOk;
}

}  // namespace
}  // namespace glm

int main(int argc, char** argv) { return glm::Main(argc, argv); }
