#include "worker/rendezvous_store.h"

#include <utility>

#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "rpc/grpc_status.h"

namespace glm {
namespace {

constexpr absl::Duration kCallTimeout = absl::Seconds(10);

}  // namespace

RendezvousStore::RendezvousStore(std::shared_ptr<ClientConnection> connection,
                                 std::string scope)
    : connection_(std::move(connection)),
      stub_(v1::RendezvousService::NewStub(connection_->channel())),
      scope_(std::move(scope)) {}

absl::Status RendezvousStore::Set(const std::string& key,
                                  const std::string& value) {
  v1::RendezvousSetRequest request;
  request.set_scope(scope_);
  request.set_key(key);
  request.set_value(value);
  v1::RendezvousSetResponse response;
  return FromGrpcStatus(stub_->Set(connection_->NewContext(kCallTimeout).get(),
                                   request, &response));
}

absl::StatusOr<std::optional<std::string>> RendezvousStore::Get(
    const std::string& key) {
  v1::RendezvousGetRequest request;
  request.set_scope(scope_);
  request.set_key(key);
  v1::RendezvousGetResponse response;
  grpc::Status status = stub_->Get(connection_->NewContext(kCallTimeout).get(),
                                   request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  if (!response.found()) return std::optional<std::string>();
  return std::optional<std::string>(response.value());
}

absl::StatusOr<std::vector<std::string>> RendezvousStore::Wait(
    const std::vector<std::string>& keys, absl::Duration timeout) {
  v1::RendezvousWaitRequest request;
  request.set_scope(scope_);
  for (const std::string& key : keys) request.add_keys(key);
  request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
  v1::RendezvousWaitResponse response;
  // The server answers DEADLINE_EXCEEDED itself at `timeout`; the call's own
  // deadline only guards against an unreachable coordinator.
  grpc::Status status =
      stub_->Wait(connection_->NewContext(timeout + kCallTimeout).get(),
                  request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return std::vector<std::string>(response.values().begin(),
                                  response.values().end());
}

absl::StatusOr<int64_t> RendezvousStore::Add(const std::string& key,
                                             int64_t delta) {
  v1::RendezvousAddRequest request;
  request.set_scope(scope_);
  request.set_key(key);
  request.set_delta(delta);
  v1::RendezvousAddResponse response;
  grpc::Status status = stub_->Add(connection_->NewContext(kCallTimeout).get(),
                                   request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response.value();
}

}  // namespace glm
