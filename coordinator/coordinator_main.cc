// glm-coordinator: the daemon that holds jobs, assigns ranks to workers, runs
// rendezvous and serves metrics. Stops gracefully on SIGTERM or SIGINT.
#include <signal.h>

#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "base/command_flags.h"
#include "base/file_util.h"
#include "coordinator/coordinator.h"
#include "rpc/bearer_token.h"
#include "version/version.h"

namespace glm {
namespace {

CommandFlags DeclareFlags() {
  CommandFlags flags(
      "glm-coordinator --listen=ADDR --state-dir=DIR "
      "--metrics-listen=ADDR --operator-token-file=FILE "
      "--worker-token-file=FILE --path-roots=DIR[,DIR...] [flags]");
  flags.Add("listen", "host:port to serve gRPC on", "127.0.0.1:7070");
  flags.Add("state-dir", "directory of the RocksDB job store");
  flags.Add("metrics-listen", "host:port to serve Prometheus /metrics on",
            "127.0.0.1:9464");
  flags.Add("metrics-token-file",
            "file holding a token /metrics then requires as the password of "
            "HTTP Basic authentication (Prometheus's basic_auth."
            "password_file); without it /metrics is open to whoever reaches "
            "--metrics-listen, so keep that on 127.0.0.1 or a private network");
  flags.Add("metrics-retention-s",
            "how long a finished job's series stay on /metrics after its "
            "last step",
            "600");
  flags.Add("operator-token-file",
            "file holding the operator token: submit, cancel, list, get, "
            "watch jobs (glmctl)");
  flags.Add("worker-token-file",
            "file holding the worker token: register, heartbeat, report, "
            "rendezvous (glm-worker); must differ from the operator token");
  flags.Add("auth-token-file",
            "no longer accepted: the single token was split into "
            "--operator-token-file and --worker-token-file");
  flags.Add("path-roots",
            "comma-separated folders every path of a job spec must lie "
            "under (data, tokenizer, checkpoints, exports, HF folders); "
            "'/' allows any path");
  flags.Add("max-watches-per-client",
            "open `glmctl watch` streams one client host may hold", "64");
  flags.Add("audit-max-entries",
            "how many of the newest audit log entries the store keeps",
            "100000");
  flags.Add("tls-cert",
            "PEM certificate chain (TLS when given with --tls-key)");
  flags.Add("tls-key", "PEM private key of --tls-cert");
  flags.Add("tls-client-ca",
            "PEM of the CA that signs workers' client certificates: worker "
            "calls then need one (mTLS) as well as the worker token");
  flags.Add("heartbeat-interval-ms", "how often workers are told to heartbeat",
            "1000");
  flags.Add("heartbeat-timeout-ms",
            "a worker silent this long is declared dead", "10000");
  flags.AddBool("version", "print the version and exit");
  return flags;
}

absl::StatusOr<CoordinatorOptions> OptionsFrom(const CommandFlags& flags) {
  if (flags.Has("auth-token-file")) {
    return absl::InvalidArgumentError(
        "--auth-token-file was split in two: give --operator-token-file "
        "(glmctl's token) and --worker-token-file (glm-worker's token), two "
        "different tokens; see docs/security.md");
  }
  for (const char* required : {"state-dir", "operator-token-file",
                               "worker-token-file", "path-roots"}) {
    if (absl::Status given = flags.Require(required); !given.ok()) return given;
  }
  if (flags.Has("tls-cert") != flags.Has("tls-key")) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  CoordinatorOptions options;
  options.listen = flags.Get("listen");
  options.state_dir = flags.Get("state-dir");
  options.metrics_listen = flags.Get("metrics-listen");
  for (const auto& [flag, out] :
       {std::pair<const char*, int64_t*>{"heartbeat-interval-ms",
                                         &options.heartbeat_interval_ms},
        {"heartbeat-timeout-ms", &options.heartbeat_timeout_ms}}) {
    if (absl::Status parsed = flags.GetInt(flag, out); !parsed.ok()) {
      return parsed;
    }
    if (*out <= 0) {
      return absl::InvalidArgumentError(std::string("--") + flag +
                                        " must be positive");
    }
  }
  int64_t retention_s = 0;
  if (absl::Status parsed = flags.GetInt("metrics-retention-s", &retention_s);
      !parsed.ok()) {
    return parsed;
  }
  if (retention_s < 0) {
    return absl::InvalidArgumentError(
        "--metrics-retention-s must not be negative");
  }
  options.metrics_retention_ms = retention_s * 1000;
  int64_t max_watches = 0;
  if (absl::Status parsed =
          flags.GetInt("max-watches-per-client", &max_watches);
      !parsed.ok()) {
    return parsed;
  }
  if (max_watches <= 0 || max_watches > 100000) {
    return absl::InvalidArgumentError(
        "--max-watches-per-client must be between 1 and 100000");
  }
  options.max_watches_per_client = static_cast<int>(max_watches);
  if (absl::Status parsed =
          flags.GetInt("audit-max-entries", &options.audit_max_entries);
      !parsed.ok()) {
    return parsed;
  }
  if (options.audit_max_entries <= 0) {
    return absl::InvalidArgumentError("--audit-max-entries must be positive");
  }
  if (flags.Has("metrics-token-file")) {
    absl::StatusOr<std::string> token =
        ReadTokenFile(flags.Get("metrics-token-file"));
    if (!token.ok()) return token.status();
    options.metrics_token = *std::move(token);
  }
  absl::StatusOr<PathRoots> roots = ParsePathRoots(flags.Get("path-roots"));
  if (!roots.ok()) return roots.status();
  options.path_roots = *std::move(roots);
  for (const auto& [flag, out] :
       {std::pair<const char*, std::string*>{"operator-token-file",
                                             &options.operator_token},
        {"worker-token-file", &options.worker_token}}) {
    absl::StatusOr<std::string> token = ReadTokenFile(flags.Get(flag));
    if (!token.ok()) return token.status();
    *out = *std::move(token);
  }
  if (flags.Has("tls-cert")) {
    absl::StatusOr<std::string> cert = ReadFile(flags.Get("tls-cert"));
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadFile(flags.Get("tls-key"));
    if (!key.ok()) return key.status();
    options.tls_cert_pem = *cert;
    options.tls_key_pem = *key;
  }
  if (flags.Has("tls-client-ca")) {
    if (!flags.Has("tls-cert")) {
      return absl::InvalidArgumentError(
          "--tls-client-ca needs TLS: give --tls-cert and --tls-key");
    }
    absl::StatusOr<std::string> ca = ReadFile(flags.Get("tls-client-ca"));
    if (!ca.ok()) return ca.status();
    options.tls_client_ca_pem = *std::move(ca);
  }
  return options;
}

int Main(int argc, char** argv) {
  CommandFlags flags = DeclareFlags();
  if (absl::Status parsed =
          flags.Parse(std::vector<std::string>(argv + 1, argv + argc));
      !parsed.ok()) {
    std::cerr << "glm-coordinator: " << parsed.message() << "\n"
              << flags.Help();
    return kExitUsage;
  }
  if (flags.HelpRequested()) {
    std::cout << flags.Help();
    return kExitOk;
  }
  if (flags.GetBool("version")) {
    std::cout << "glm-coordinator " << kGlmVersion << "\n";
    return kExitOk;
  }
  absl::StatusOr<CoordinatorOptions> options = OptionsFrom(flags);
  if (!options.ok()) {
    std::cerr << "glm-coordinator: " << options.status().message() << "\n";
    return options.status().code() == absl::StatusCode::kInvalidArgument
               ? kExitUsage
               : kExitFailure;
  }
  // Block the stop signals before any thread starts, so every thread inherits
  // the mask and only sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  absl::StatusOr<std::unique_ptr<Coordinator>> coordinator =
      Coordinator::Start(*options);
  if (!coordinator.ok()) {
    std::cerr << "glm-coordinator: " << coordinator.status().message() << "\n";
    return kExitFailure;
  }
  std::cerr << "glm-coordinator: serving on port " << (*coordinator)->port()
            << ", metrics on port " << (*coordinator)->metrics_port()
            << ", state in " << options->state_dir << std::endl;
  int signal = 0;
  sigwait(&stop_signals, &signal);
  std::cerr << "glm-coordinator: signal " << signal << ", shutting down"
            << std::endl;
  (*coordinator)->Shutdown();
  return kExitOk;
}

}  // namespace
}  // namespace glm

int main(int argc, char** argv) { return glm::Main(argc, argv); }
