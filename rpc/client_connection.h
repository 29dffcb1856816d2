// A client's connection to the coordinator: the channel (TLS when a CA is
// given) and contexts that carry the bearer token and, once a worker has
// registered over it, the worker's identity.
#ifndef GLM_RPC_CLIENT_CONNECTION_H_
#define GLM_RPC_CLIENT_CONNECTION_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "rpc/worker_identity.h"

namespace grpc {
class Channel;
class ClientContext;
}  // namespace grpc

namespace glm {

struct ConnectionOptions {
  std::string target;  // host:port
  std::string token;
  // PEM of the CA that signed the coordinator's certificate; empty: plaintext.
  std::string tls_root_pem;
  // A client certificate chain and its key, both PEM (mTLS: workers of a
  // coordinator with --tls-client-ca); empty: none.
  std::string tls_cert_pem;
  std::string tls_key_pem;
};

// Reads the token file and (when given) the CA file into options for `target`.
absl::StatusOr<ConnectionOptions> LoadConnectionOptions(
    const std::string& target, const std::string& token_file,
    const std::string& tls_ca_file);

// Reads a client certificate and its key into `options` (both files or
// neither; TLS, a CA file, must be on).
absl::Status LoadClientCertificate(const std::string& cert_file,
                                   const std::string& key_file,
                                   ConnectionOptions* options);

class ClientConnection {
 public:
  explicit ClientConnection(const ConnectionOptions& options);

  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  const std::string& target() const { return target_; }

  // A context with the bearer token (and the worker identity, when set), and
  // a deadline unless `timeout` is infinite.
  std::unique_ptr<grpc::ClientContext> NewContext(
      absl::Duration timeout = absl::InfiniteDuration()) const;

  // Later contexts carry `identity` (a worker's registration; replaced when
  // it registers again).
  void SetWorkerIdentity(const WorkerIdentity& identity);

 private:
  std::string target_;
  std::string token_;
  std::shared_ptr<grpc::Channel> channel_;
  mutable absl::Mutex mu_;
  WorkerIdentity identity_ ABSL_GUARDED_BY(mu_);
};

// A plaintext connection to `target` with a bearer token (tests, benchmarks
// and local clusters on one host).
std::shared_ptr<ClientConnection> PlaintextConnection(const std::string& target,
                                                      const std::string& token);

}  // namespace glm

#endif  // GLM_RPC_CLIENT_CONNECTION_H_
