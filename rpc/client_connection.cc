#include "rpc/client_connection.h"

#include <chrono>

#include "base/file_util.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "rpc/bearer_token.h"

namespace glm {

absl::StatusOr<ConnectionOptions> LoadConnectionOptions(
    const std::string& target, const std::string& token_file,
    const std::string& tls_ca_file) {
  ConnectionOptions options;
  options.target = target;
  if (token_file.empty()) {
    return absl::InvalidArgumentError(
        "no token file: give --token-file or set GLM_TOKEN_FILE");
  }
  absl::StatusOr<std::string> token = ReadTokenFile(token_file);
  if (!token.ok()) return token.status();
  options.token = *token;
  if (!tls_ca_file.empty()) {
    absl::StatusOr<std::string> pem = ReadFile(tls_ca_file);
    if (!pem.ok()) return pem.status();
    options.tls_root_pem = *pem;
  }
  return options;
}

absl::Status LoadClientCertificate(const std::string& cert_file,
                                   const std::string& key_file,
                                   ConnectionOptions* options) {
  if (cert_file.empty() != key_file.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate needs both --tls-cert and --tls-key");
  }
  if (cert_file.empty()) return absl::OkStatus();
  if (options->tls_root_pem.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate needs TLS: give --tls-ca too");
  }
  absl::StatusOr<std::string> cert = ReadFile(cert_file);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadFile(key_file);
  if (!key.ok()) return key.status();
  options->tls_cert_pem = *std::move(cert);
  options->tls_key_pem = *std::move(key);
  return absl::OkStatus();
}

ClientConnection::ClientConnection(const ConnectionOptions& options)
    : target_(options.target), token_(options.token) {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (options.tls_root_pem.empty()) {
    credentials = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls_root_pem;
    ssl.pem_cert_chain = options.tls_cert_pem;
    ssl.pem_private_key = options.tls_key_pem;
    credentials = grpc::SslCredentials(ssl);
  }
  channel_ = grpc::CreateChannel(options.target, credentials);
}

std::unique_ptr<grpc::ClientContext> ClientConnection::NewContext(
    absl::Duration timeout) const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->AddMetadata(kAuthorizationHeader, AuthorizationValue(token_));
  {
    absl::MutexLock lock(&mu_);
    if (!identity_.id.empty()) {
      context->AddMetadata(kWorkerIdHeader, identity_.id);
      context->AddMetadata(kWorkerSecretHeader, identity_.secret);
    }
  }
  if (timeout != absl::InfiniteDuration()) {
    context->set_deadline(std::chrono::system_clock::now() +
                          absl::ToChronoMilliseconds(timeout));
  }
  return context;
}

void ClientConnection::SetWorkerIdentity(const WorkerIdentity& identity) {
  absl::MutexLock lock(&mu_);
  identity_ = identity;
}

std::shared_ptr<ClientConnection> PlaintextConnection(
    const std::string& target, const std::string& token) {
  ConnectionOptions options;
  options.target = target;
  options.token = token;
  return std::make_shared<ClientConnection>(options);
}

}  // namespace glm
