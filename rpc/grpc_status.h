// absl::Status <-> grpc::Status: the codes are the same numbers in both.
#ifndef GLM_RPC_GRPC_STATUS_H_
#define GLM_RPC_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace glm {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// "NOT_FOUND", "INVALID_ARGUMENT", ... as logs, metrics and glmctl name codes.
std::string StatusCodeName(int code);

}  // namespace glm

#endif  // GLM_RPC_GRPC_STATUS_H_
