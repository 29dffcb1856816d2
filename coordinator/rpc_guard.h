// What every coordinator RPC handler does around its work: authenticate the
// caller and check that its credential may make the call, then count the call
// and its latency by method and status code. Long-lived streams (a WatchJob
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

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
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
  WorkerRegistry* workers = nullptr;
  // Null when metrics are not served.
  CoordinatorMetrics* metrics = nullptr;
};

// Who an authenticated call comes from.
struct Caller {
  bool is_operator = false;
  // The registered worker making a kRegisteredWorker call; empty otherwise.
  std::string worker_id;
};

// UNAUTHENTICATED without a valid token (or, for kRegisteredWorker, a valid
// registration); PERMISSION_DENIED when the token is the other role's.
absl::StatusOr<Caller> Authenticate(const RpcEnv& env,
                                    const grpc::ServerContext& context,
                                    const char* method, Access access);

// PERMISSION_DENIED unless `worker_id`, named by a request, is the caller.
grpc::Status CheckCallerIs(const Caller& caller, const std::string& worker_id);

// Runs `handler` (taking the Caller, returning grpc::Status) for a caller of
// `method` with `access`.
template <typename Handler>
grpc::Status GuardRpc(const RpcEnv& env, const grpc::ServerContext& context,
                      const char* method, Access access, Handler&& handler) {
  const absl::Time start = absl::Now();
  absl::StatusOr<Caller> caller = Authenticate(env, context, method, access);
  grpc::Status status =
      caller.ok() ? handler(*caller) : ToGrpcStatus(caller.status());
  if (env.metrics) {
    env.metrics->RecordRpc(method, StatusCodeName(status.error_code()),
                           absl::ToDoubleSeconds(absl::Now() - start));
  }
  return status;
}

// GuardRpc for a server stream that lives as long as what it follows: counted,
// but kept out of the latency histogram.
template <typename Handler>
grpc::Status GuardStream(const RpcEnv& env, const grpc::ServerContext& context,
                         const char* method, Access access, Handler&& handler) {
  absl::StatusOr<Caller> caller = Authenticate(env, context, method, access);
  grpc::Status status =
      caller.ok() ? handler(*caller) : ToGrpcStatus(caller.status());
  if (env.metrics) {
    env.metrics->CountRpc(method, StatusCodeName(status.error_code()));
  }
  return status;
}

}  // namespace glm

#endif  // GLM_COORDINATOR_RPC_GUARD_H_
