#include "coordinator/rendezvous_service.h"

#include <string>
#include <vector>

namespace glm {

RendezvousServiceImpl::RendezvousServiceImpl(const RpcEnv& env,
                                             RendezvousTable* table,
                                             Scheduler* scheduler)
    : env_(env), table_(table), scheduler_(scheduler) {}

grpc::Status RendezvousServiceImpl::CheckScope(const Caller& caller,
                                               const std::string& scope) {
  if (scope.empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "scope: must name the job attempt");
  }
  return ToGrpcStatus(
      scheduler_->CheckRendezvousMember(caller.worker_id, scope));
}

grpc::Status RendezvousServiceImpl::Set(grpc::ServerContext* context,
                                        const v1::RendezvousSetRequest* request,
                                        v1::RendezvousSetResponse* response) {
  return GuardRpc(
      env_, *context, {"RendezvousService/Set", Access::kRegisteredWorker},
      [&](const Caller& caller) {
        grpc::Status scope = CheckScope(caller, request->scope());
        if (scope.ok())
          table_->Set(request->scope(), request->key(), request->value());
        return scope;
      });
}

grpc::Status RendezvousServiceImpl::Get(grpc::ServerContext* context,
                                        const v1::RendezvousGetRequest* request,
                                        v1::RendezvousGetResponse* response) {
  return GuardRpc(env_, *context,
                  {"RendezvousService/Get", Access::kRegisteredWorker},
                  [&](const Caller& caller) {
                    grpc::Status scope = CheckScope(caller, request->scope());
                    if (!scope.ok()) return scope;
                    std::optional<std::string> value =
                        table_->Get(request->scope(), request->key());
                    response->set_found(value.has_value());
                    if (value) response->set_value(*value);
                    return grpc::Status::OK;
                  });
}

grpc::Status RendezvousServiceImpl::Wait(
    grpc::ServerContext* context, const v1::RendezvousWaitRequest* request,
    v1::RendezvousWaitResponse* response) {
  return GuardRpc(
      env_, *context, {"RendezvousService/Wait", Access::kRegisteredWorker},
      [&](const Caller& caller) {
        grpc::Status scope = CheckScope(caller, request->scope());
        if (!scope.ok()) return scope;
        if (request->timeout_ms() <= 0) {
          return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                              "timeout_ms: must be positive");
        }
        std::vector<std::string> keys(request->keys().begin(),
                                      request->keys().end());
        absl::StatusOr<std::vector<std::string>> values = table_->Wait(
            request->scope(), keys, absl::Milliseconds(request->timeout_ms()));
        if (!values.ok()) return ToGrpcStatus(values.status());
        for (std::string& value : *values)
          response->add_values(std::move(value));
        return grpc::Status::OK;
      });
}

grpc::Status RendezvousServiceImpl::Add(grpc::ServerContext* context,
                                        const v1::RendezvousAddRequest* request,
                                        v1::RendezvousAddResponse* response) {
  return GuardRpc(
      env_, *context, {"RendezvousService/Add", Access::kRegisteredWorker},
      [&](const Caller& caller) {
        grpc::Status scope = CheckScope(caller, request->scope());
        if (!scope.ok()) return scope;
        absl::StatusOr<int64_t> sum =
            table_->Add(request->scope(), request->key(), request->delta());
        if (!sum.ok()) return ToGrpcStatus(sum.status());
        response->set_value(*sum);
        return grpc::Status::OK;
      });
}

}  // namespace glm
