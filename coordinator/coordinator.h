// The coordinator, embeddable: glm-coordinator runs one, and `glmctl local` and
// tests start one in-process. Start() opens the job store, recovers in-flight
// jobs, and serves JobService, WorkerService and RendezvousService (and
// Prometheus metrics).
#ifndef GLM_COORDINATOR_COORDINATOR_H_
#define GLM_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "jobspec/path_roots.h"

namespace glm {

struct CoordinatorOptions {
  // host:port to serve gRPC on; port 0 picks a free one (see
  // Coordinator::port()).
  std::string listen = "127.0.0.1:7070";
  std::string state_dir;
  // host:port for /metrics; empty serves no metrics.
  std::string metrics_listen;
  // Non-empty: /metrics asks for it as an HTTP Basic password.
  std::string metrics_token;
  // How long a finished job's series stay on /metrics after its last step
  // (long enough for a few scrapes to see its final values).
  int64_t metrics_retention_ms = 600000;
  // Every RPC carries `authorization: Bearer <token>`: JobService calls the
  // operator token, WorkerService and RendezvousService calls the worker
  // token. Both are required and must differ (rpc_guard.h).
  std::string operator_token;
  std::string worker_token;
  // PEM certificate chain and private key; both empty: plaintext.
  std::string tls_cert_pem;
  std::string tls_key_pem;
  // PEM of the CA that signs workers' client certificates (mTLS; needs TLS).
  // When set, WorkerService and RendezvousService calls must also come over
  // a connection with a client certificate it signed: a stolen worker token
  // alone no longer makes a worker. Operators need no certificate.
  std::string tls_client_ca_pem;
  // Every path a job spec names must lie under one of these
  // (jobspec/path_roots.h); empty: anywhere.
  PathRoots path_roots;
  // Open WatchJob streams one client host may hold.
  int max_watches_per_client = 64;
  // The audit log keeps this many newest entries.
  int64_t audit_max_entries = 100000;
  int64_t heartbeat_interval_ms = 1000;
  // A worker silent this long is dead.
  int64_t heartbeat_timeout_ms = 10000;
  // How long ranks of an attempt wait for each other at rendezvous.
  int64_t rendezvous_timeout_ms = 300000;
};

class Coordinator {
 public:
  static absl::StatusOr<std::unique_ptr<Coordinator>> Start(
      const CoordinatorOptions& options);
  // Shuts down when still serving.
  ~Coordinator();

  // Stops taking calls, ends open streams, waits for handlers, closes the
  // store.
  void Shutdown();

  int port() const;
  // 0 when metrics are not served.
  int metrics_port() const;
  // Registered workers not yet declared dead; a job is accepted only when one
  // of them runs its device.
  int AliveWorkers() const;

 private:
  struct Parts;
  explicit Coordinator(std::unique_ptr<Parts> parts);
  std::unique_ptr<Parts> parts_;
};

}  // namespace glm

#endif  // GLM_COORDINATOR_COORDINATOR_H_
