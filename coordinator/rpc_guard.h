// What every coordinator RPC handler does around its work: refuse callers
// without the bearer token (UNAUTHENTICATED), and count the call and its
// latency by method and status code. Long-lived streams (a WatchJob lasts as
// long as its job) are counted without a latency, which would only measure
// how long the caller listened.
#ifndef GLM_COORDINATOR_RPC_GUARD_H_
#define GLM_COORDINATOR_RPC_GUARD_H_

#include <string>

#include "absl/time/clock.h"
#include "coordinator/coordinator_metrics.h"
#include "grpcpp/server_context.h"
#include "rpc/bearer_token.h"
#include "rpc/grpc_status.h"

namespace glm {

struct RpcEnv {
  std::string token;
  // Null when metrics are not served.
  CoordinatorMetrics* metrics = nullptr;
};

inline grpc::Status Authenticate(const RpcEnv& env,
                                 const grpc::ServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kAuthorizationHeader);
  if (it == metadata.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing 'authorization: Bearer <token>' metadata");
  }
  if (!AuthorizationMatches(
          absl::string_view(it->second.data(), it->second.size()), env.token)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "wrong bearer token");
  }
  return grpc::Status::OK;
}

// Runs `handler` (returning grpc::Status) for an authenticated caller of
// `method`.
template <typename Handler>
grpc::Status GuardRpc(const RpcEnv& env, const grpc::ServerContext& context,
                      const char* method, Handler&& handler) {
  const absl::Time start = absl::Now();
  grpc::Status status = Authenticate(env, context);
  if (status.ok()) status = handler();
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
                         const char* method, Handler&& handler) {
  grpc::Status status = Authenticate(env, context);
  if (status.ok()) status = handler();
  if (env.metrics) {
    env.metrics->CountRpc(method, StatusCodeName(status.error_code()));
  }
  return status;
}

}  // namespace glm

#endif  // GLM_COORDINATOR_RPC_GUARD_H_
