// RendezvousService: the per-attempt key-value store, over gRPC, for
// registered workers; an attempt's scope only for its ranks.
#ifndef GLM_COORDINATOR_RENDEZVOUS_SERVICE_H_
#define GLM_COORDINATOR_RENDEZVOUS_SERVICE_H_

#include "coordinator/rendezvous_table.h"
#include "coordinator/rpc_guard.h"
#include "coordinator/scheduler.h"
#include "proto/rendezvous_service.grpc.pb.h"

namespace glm {

class RendezvousServiceImpl final : public v1::RendezvousService::Service {
 public:
  RendezvousServiceImpl(const RpcEnv& env, RendezvousTable* table,
                        Scheduler* scheduler);

  grpc::Status Set(grpc::ServerContext* context,
                   const v1::RendezvousSetRequest* request,
                   v1::RendezvousSetResponse* response) override;
  grpc::Status Get(grpc::ServerContext* context,
                   const v1::RendezvousGetRequest* request,
                   v1::RendezvousGetResponse* response) override;
  grpc::Status Wait(grpc::ServerContext* context,
                    const v1::RendezvousWaitRequest* request,
                    v1::RendezvousWaitResponse* response) override;
  grpc::Status Add(grpc::ServerContext* context,
                   const v1::RendezvousAddRequest* request,
                   v1::RendezvousAddResponse* response) override;

 private:
  // The scope must be named, and be one the caller may use.
  grpc::Status CheckScope(const Caller& caller, const std::string& scope);

  const RpcEnv env_;
  RendezvousTable* const table_;
  Scheduler* const scheduler_;
};

}  // namespace glm

#endif  // GLM_COORDINATOR_RENDEZVOUS_SERVICE_H_
