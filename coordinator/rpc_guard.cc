#include "coordinator/rpc_guard.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/quote.h"
#include "coordinator/client_quota.h"
#include "rpc/bearer_token.h"
#include "rpc/worker_identity.h"

namespace glm {
namespace {

std::optional<absl::string_view> Metadata(const grpc::ServerContext& context,
                                          const char* key) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(key);
  if (it == metadata.end()) return std::nullopt;
  return absl::string_view(it->second.data(), it->second.size());
}

// Whether the header carries the operator token (true) or the worker token
// (false).
absl::StatusOr<bool> IsOperatorToken(const RpcEnv& env,
                                     const grpc::ServerContext& context) {
  std::optional<absl::string_view> header =
      Metadata(context, kAuthorizationHeader);
  if (!header) {
    return absl::UnauthenticatedError(
        "missing 'authorization: Bearer <token>' metadata");
  }
  // Both comparisons always run, so timing does not tell which token a
  // guess came closer to.
  const bool is_operator = AuthorizationMatches(*header, env.operator_token);
  const bool is_worker = AuthorizationMatches(*header, env.worker_token);
  if (!is_operator && !is_worker) {
    return absl::UnauthenticatedError("wrong bearer token");
  }
  return is_operator;
}

absl::StatusOr<std::string> AuthenticateWorker(
    const RpcEnv& env, const grpc::ServerContext& context) {
  std::optional<absl::string_view> id = Metadata(context, kWorkerIdHeader);
  std::optional<absl::string_view> secret =
      Metadata(context, kWorkerSecretHeader);
  if (!id || !secret) {
    return absl::UnauthenticatedError(absl::StrCat(
        "missing '", kWorkerIdHeader, "' and '", kWorkerSecretHeader,
        "' metadata: a worker presents what RegisterWorker returned"));
  }
  std::string worker_id(*id);
  if (absl::Status known =
          env.workers->Authenticate(worker_id, std::string(*secret));
      !known.ok()) {
    return known;
  }
  return worker_id;
}

}  // namespace

absl::StatusOr<Caller> Authenticate(const RpcEnv& env,
                                    const grpc::ServerContext& context,
                                    const char* method, Access access) {
  absl::StatusOr<bool> is_operator = IsOperatorToken(env, context);
  if (!is_operator.ok()) return is_operator.status();
  if (access == Access::kOperator && !*is_operator) {
    return absl::PermissionDeniedError(absl::StrCat(
        method,
        " needs the operator token; this call carries the worker token, "
        "which may only register workers, heartbeat, report and rendezvous"));
  }
  if (access != Access::kOperator && *is_operator) {
    return absl::PermissionDeniedError(absl::StrCat(
        method,
        " is for glm-worker processes and needs the worker token; this call "
        "carries the operator token"));
  }
  if (access != Access::kOperator && env.worker_certificates &&
      !context.auth_context()->IsPeerAuthenticated()) {
    return absl::UnauthenticatedError(absl::StrCat(
        method,
        " needs a client certificate signed by the coordinator's "
        "--tls-client-ca (mTLS for workers); this connection has none"));
  }
  Caller caller;
  caller.is_operator = *is_operator;
  if (access == Access::kRegisteredWorker) {
    absl::StatusOr<std::string> worker = AuthenticateWorker(env, context);
    if (!worker.ok()) return worker.status();
    caller.worker_id = *std::move(worker);
  }
  return caller;
}

void AuditCall(const RpcEnv& env, const grpc::ServerContext& context,
               const RpcCall& call, const absl::StatusOr<Caller>& caller,
               const grpc::Status& status) {
  const bool refused =
      status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
      status.error_code() == grpc::StatusCode::PERMISSION_DENIED;
  if (!call.audit_subject && !refused) return;
  v1::AuditEntry entry;
  if (caller.ok()) {
    entry.set_role(caller->is_operator ? "operator" : "worker");
    entry.set_worker_id(caller->worker_id);
  } else {
    absl::StatusOr<bool> is_operator = IsOperatorToken(env, context);
    entry.set_role(!is_operator.ok() ? "none"
                   : *is_operator    ? "operator"
                                     : "worker");
  }
  entry.set_client(ClientHost(context.peer()));
  entry.set_method(call.method);
  if (call.audit_subject) entry.set_subject(call.audit_subject());
  entry.set_outcome(StatusCodeName(status.error_code()));
  if (!status.ok()) entry.set_message(status.error_message());
  env.audit->Record(std::move(entry),
                    /*changed_state=*/call.audit_subject && status.ok());
}

grpc::Status CheckCallerIs(const Caller& caller, const std::string& worker_id) {
  if (worker_id == caller.worker_id) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      absl::StrCat("worker_id: ", Excerpt(worker_id),
                                   " is not the worker making this call (",
                                   caller.worker_id, ")"));
}

}  // namespace glm
