#include "coordinator/client_quota.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace glm {

std::string ClientHost(const std::string& peer) {
  // Only the ip forms carry a port; "unix:PATH" and others stay whole.
  if (peer.rfind("ipv4:", 0) != 0 && peer.rfind("ipv6:", 0) != 0) return peer;
  const size_t colon = peer.rfind(':');
  return colon <= 4 ? peer : peer.substr(0, colon);
}

ClientQuota::ClientQuota(int limit, std::string what, std::string flag)
    : limit_(limit), what_(std::move(what)), flag_(std::move(flag)) {}

ClientQuota::Slot::Slot(ClientQuota* quota, std::string client)
    : quota_(quota), client_(std::move(client)) {}

ClientQuota::Slot::Slot(Slot&& other) noexcept
    : quota_(std::exchange(other.quota_, nullptr)),
      client_(std::move(other.client_)) {}

ClientQuota::Slot::~Slot() {
  if (quota_) quota_->Release(client_);
}

absl::StatusOr<ClientQuota::Slot> ClientQuota::Acquire(
    const std::string& client) {
  absl::MutexLock lock(&mu_);
  int& held = held_[client];
  if (held >= limit_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        client, " already holds ", held, " open ", what_,
        ", the most one client may (", flag_, "); close one first"));
  }
  ++held;
  return Slot(this, client);
}

int ClientQuota::Held(const std::string& client) {
  absl::MutexLock lock(&mu_);
  auto it = held_.find(client);
  return it == held_.end() ? 0 : it->second;
}

void ClientQuota::Release(const std::string& client) {
  absl::MutexLock lock(&mu_);
  auto it = held_.find(client);
  if (--it->second == 0) held_.erase(it);
}

}  // namespace glm
