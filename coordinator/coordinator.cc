#include "coordinator/coordinator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "coordinator/audit_log.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/job_service.h"
#include "coordinator/job_state_machine.h"
#include "coordinator/job_store.h"
#include "coordinator/job_table.h"
#include "coordinator/rendezvous_service.h"
#include "coordinator/rendezvous_table.h"
#include "coordinator/scheduler.h"
#include "coordinator/worker_registry.h"
#include "coordinator/worker_service.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"

namespace glm {

struct Coordinator::Parts {
  CoordinatorOptions options;
  std::unique_ptr<CoordinatorMetrics> metrics;
  std::unique_ptr<JobStore> store;
  std::unique_ptr<JobTable> jobs;
  std::unique_ptr<AuditLog> audit;
  std::unique_ptr<WorkerRegistry> workers;
  std::unique_ptr<RendezvousTable> rendezvous;
  std::unique_ptr<Scheduler> scheduler;
  std::atomic<bool> stopping{false};
  std::unique_ptr<JobServiceImpl> job_service;
  std::unique_ptr<WorkerServiceImpl> worker_service;
  std::unique_ptr<RendezvousServiceImpl> rendezvous_service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  absl::Notification stop_ticking;
  std::thread ticker;

  // Periodic work: declare silent workers dead, schedule what waits, fail the
  // jobs that waited too long for workers, refresh gauges, drop the series of
  // jobs finished longer than the retention ago.
  void Tick() {
    scheduler->ExpireSilentWorkers(UnixMillisNow());
    if (absl::Status scheduled = scheduler->ScheduleReady(); !scheduled.ok()) {
      std::cerr << "glm-coordinator: scheduling: " << scheduled << "\n";
    }
    if (absl::Status waited =
            scheduler->FailJobsWaitingTooLong(UnixMillisNow());
        !waited.ok()) {
      std::cerr << "glm-coordinator: failing jobs that waited too long: "
                << waited << "\n";
    }
    if (!metrics) return;
    absl::StatusOr<std::map<v1::JobState, int>> counts = jobs->CountByState();
    if (counts.ok()) metrics->SetJobsByState(*counts);
    metrics->SetWorkers(workers->RegisteredCount(), workers->AliveCount());
    for (const std::string& id : metrics->JobsQuietFor(
             absl::Milliseconds(options.metrics_retention_ms))) {
      absl::StatusOr<v1::Job> job = jobs->Get(id);
      if (!job.ok() || IsTerminalState(job->state())) metrics->ForgetJob(id);
    }
  }

  void RunTicker() {
    const absl::Duration period = absl::Milliseconds(
        std::clamp<int64_t>(options.heartbeat_timeout_ms / 4, 50, 1000));
    do {
      Tick();
    } while (!stop_ticking.WaitForNotificationWithTimeout(period));
  }
};

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Start(
    const CoordinatorOptions& options) {
  if (options.operator_token.empty() || options.worker_token.empty()) {
    return absl::InvalidArgumentError(
        "both an operator token and a worker token are required");
  }
  if (options.operator_token == options.worker_token) {
    return absl::InvalidArgumentError(
        "the operator and worker tokens must differ: a worker's token would "
        "otherwise submit and cancel jobs");
  }
  if (options.tls_cert_pem.empty() != options.tls_key_pem.empty()) {
    return absl::InvalidArgumentError("TLS needs both a certificate and a key");
  }
  if (!options.tls_client_ca_pem.empty() && options.tls_cert_pem.empty()) {
    return absl::InvalidArgumentError(
        "client certificates (mTLS) need TLS: a certificate and a key");
  }
  auto parts = std::make_unique<Parts>();
  parts->options = options;
  if (!options.metrics_listen.empty()) {
    absl::StatusOr<std::unique_ptr<CoordinatorMetrics>> metrics =
        CoordinatorMetrics::Serve(options.metrics_listen,
                                  options.metrics_token);
    if (!metrics.ok()) return metrics.status();
    parts->metrics = *std::move(metrics);
  }
  absl::StatusOr<std::unique_ptr<JobStore>> store =
      JobStore::Open(options.state_dir);
  if (!store.ok()) return store.status();
  parts->store = *std::move(store);
  parts->jobs = std::make_unique<JobTable>(parts->store.get());
  absl::StatusOr<std::unique_ptr<AuditLog>> audit =
      AuditLog::Open(parts->store.get(), options.audit_max_entries);
  if (!audit.ok()) return audit.status();
  parts->audit = *std::move(audit);
  parts->workers =
      std::make_unique<WorkerRegistry>(options.heartbeat_timeout_ms);
  parts->rendezvous = std::make_unique<RendezvousTable>();
  parts->scheduler = std::make_unique<Scheduler>(
      parts->jobs.get(), parts->workers.get(), parts->rendezvous.get(),
      options.rendezvous_timeout_ms);
  if (absl::Status recovered = parts->scheduler->RecoverAfterRestart();
      !recovered.ok()) {
    return recovered;
  }

  const RpcEnv env{options.operator_token,
                   options.worker_token,
                   !options.tls_client_ca_pem.empty(),
                   parts->workers.get(),
                   parts->audit.get(),
                   parts->metrics.get()};
  parts->job_service = std::make_unique<JobServiceImpl>(
      env,
      JobServiceOptions{options.path_roots, options.max_watches_per_client},
      parts->jobs.get(), parts->workers.get(), parts->scheduler.get(),
      &parts->stopping);
  parts->worker_service = std::make_unique<WorkerServiceImpl>(
      env, parts->workers.get(), parts->scheduler.get(), parts->jobs.get(),
      options.heartbeat_interval_ms, &parts->stopping);
  parts->rendezvous_service = std::make_unique<RendezvousServiceImpl>(
      env, parts->rendezvous.get(), parts->scheduler.get());

  std::shared_ptr<grpc::ServerCredentials> credentials;
  if (options.tls_cert_pem.empty()) {
    credentials = grpc::InsecureServerCredentials();
  } else {
    // A client certificate is verified when one is presented, and required
    // per call (workers) by the RPC guard: operators connect without one.
    grpc::SslServerCredentialsOptions ssl(
        options.tls_client_ca_pem.empty()
            ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
            : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = options.tls_client_ca_pem;
    ssl.pem_key_cert_pairs.push_back(
        {options.tls_key_pem, options.tls_cert_pem});
    credentials = grpc::SslServerCredentials(ssl);
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, credentials, &parts->port);
  builder.RegisterService(parts->job_service.get());
  builder.RegisterService(parts->worker_service.get());
  builder.RegisterService(parts->rendezvous_service.get());
  parts->server = builder.BuildAndStart();
  if (!parts->server || parts->port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve gRPC on ", options.listen));
  }
  Parts* raw = parts.get();
  parts->ticker = std::thread([raw] { raw->RunTicker(); });
  return std::unique_ptr<Coordinator>(new Coordinator(std::move(parts)));
}

Coordinator::Coordinator(std::unique_ptr<Parts> parts)
    : parts_(std::move(parts)) {}

Coordinator::~Coordinator() { Shutdown(); }

void Coordinator::Shutdown() {
  if (!parts_ || !parts_->server) return;
  parts_->stopping = true;
  parts_->server->Shutdown(std::chrono::system_clock::now() +
                           std::chrono::seconds(2));
  parts_->server->Wait();
  parts_->stop_ticking.Notify();
  parts_->ticker.join();
  parts_->server.reset();
  parts_->scheduler.reset();
  parts_->jobs.reset();
  parts_->audit.reset();
  parts_->store.reset();
}

int Coordinator::port() const { return parts_->port; }

int Coordinator::metrics_port() const {
  return parts_->metrics ? parts_->metrics->port() : 0;
}

int Coordinator::AliveWorkers() const { return parts_->workers->AliveCount(); }

}  // namespace glm
