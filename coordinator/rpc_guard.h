// What every coordinator RPC handler does around its work: authenticate the
// caller and check that its credential may make the call, then record it in
// the audit log (state-changing and refused calls) and count the call and its
// latency by method and status code. Long-lived streams (a WatchJob
// lasts as long as its job) are counted without a latency, which would only
// measure how long the caller listened.
//
// Two bearer tokens split the control plane (docs/security.md): the operator
// token submits, cancels and reads jobs; the worker token registers workers,
// and a registered worker's later calls also carry the id and secret its
// registration returned, so that one token holder cannot act as another
// worker. Neither token can make the other's calls.
#ifndef GLM_COORDINATOR_RPC_GUARD_H_
#define GLM_COORDINATOR_RPC_GUARD_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "coordinator/audit_log.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/worker_registry.h"
#include "grpcpp/server_context.h"
#include "rpc/grpc_status.h"

namespace glm {

// The credential an RPC needs.
enum class Access {
  kOperator,
  // The worker token alone: RegisterWorker.
  kWorkerToken,
  // The worker token and a registration's id and secret.
  kRegisteredWorker,
};

struct RpcEnv {
  std::string operator_token;
  std::string worker_token;
  // Worker calls must come with a verified client certificate (mTLS).
  bool worker_certificates = false;
  WorkerRegistry* workers = nullptr;
  AuditLog* audit = nullptr;
  // Null when metrics are not served.
  CoordinatorMetrics* metrics = nullptr;
};

// One RPC method as the guard sees it.
struct RpcCall {
  const char* method;
  Access access;
  // Set for state-changing calls, which the audit log records whatever their
  // outcome: what the call acted on (a job or worker id), read once the
  // handler has run (so a new job's id). Calls without it are recorded only
  // when refused (UNAUTHENTICATED, PERMISSION_DENIED): heartbeats, metrics
  // and rendezvous come too often to record each.
  std::function<std::string()> audit_subject;
};

// Who an authenticated call comes from.
struct Caller {
  bool is_operator = false;
  // The registered worker making a kRegisteredWorker call; empty otherwise.
  std::string worker_id;
};

// UNAUTHENTICATED without a valid token (or, for kRegisteredWorker, without
// the registration's secret or, under mTLS, a client certificate); NOT_FOUND
// for a worker id this coordinator does not know (it registers again);
// PERMISSION_DENIED when the token is the other role's.
absl::StatusOr<Caller> Authenticate(const RpcEnv& env,
                                    const grpc::ServerContext& context,
                                    const char* method, Access access);

// PERMISSION_DENIED unless `worker_id`, named by a request, is the caller.
grpc::Status CheckCallerIs(const Caller& caller, const std::string& worker_id);

// Records the call in env.audit when RpcCall says so.
void AuditCall(const RpcEnv& env, const grpc::ServerContext& context,
               const RpcCall& call, const absl::StatusOr<Caller>& caller,
               const grpc::Status& status);

// Runs `handler` (taking the Caller, returning grpc::Status) for a caller
// `call` allows.
template <typename Handler>
grpc::Status GuardRpc(const RpcEnv& env, const grpc::ServerContext& context,
                      const RpcCall& call, Handler&& handler) {
  const absl::Time start = absl::Now();
  absl::StatusOr<Caller> caller =
      Authenticate(env, context, call.method, call.access);
  grpc::Status status =
      caller.ok() ? handler(*caller) : ToGrpcStatus(caller.status());
  AuditCall(env, context, call, caller, status);
  if (env.metrics) {
    env.metrics->RecordRpc(call.method, StatusCodeName(status.error_code()),
                           absl::ToDoubleSeconds(absl::Now() - start));
  }
  return status;
}

// GuardRpc for a server stream that lives as long as what it follows: counted,
// but kept out of the latency histogram.
template <typename Handler>
grpc::Status GuardStream(const RpcEnv& env, const grpc::ServerContext& context,
                         const RpcCall& call, Handler&& handler) {
  absl::StatusOr<Caller> caller =
      Authenticate(env, context, call.method, call.access);
  grpc::Status status =
      caller.ok() ? handler(*caller) : ToGrpcStatus(caller.status());
  AuditCall(env, context, call, caller, status);
  if (env.metrics) {
    env.metrics->CountRpc(call.method, StatusCodeName(status.error_code()));
  }
  return status;
}

}  // namespace glm

#endif  // GLM_COORDINATOR_RPC_GUARD_H_
