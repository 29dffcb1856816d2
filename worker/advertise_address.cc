#include "worker/advertise_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace glm {

absl::StatusOr<std::pair<std::string, std::string>> SplitHostPort(
    const std::string& address) {
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", address, "': '[' without ']'"));
    }
    std::string port;
    if (close + 1 < address.size() && address[close + 1] == ':') {
      port = address.substr(close + 2);
    }
    return std::make_pair(address.substr(1, close - 1), port);
  }
  const size_t colon = address.rfind(':');
  // More than one colon without brackets: a bare IPv6 address.
  if (colon == std::string::npos || address.find(':') != colon) {
    return std::make_pair(address, std::string());
  }
  return std::make_pair(address.substr(0, colon), address.substr(colon + 1));
}

absl::StatusOr<std::string> RouteSourceAddress(const std::string& coordinator) {
  absl::StatusOr<std::pair<std::string, std::string>> parts =
      SplitHostPort(coordinator);
  if (!parts.ok()) return parts.status();
  const std::string& port = parts->second.empty() ? "7070" : parts->second;
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (int error =
          getaddrinfo(parts->first.c_str(), port.c_str(), &hints, &found);
      error != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve '", parts->first,
                                               "': ", gai_strerror(error)));
  }
  std::string last_error = "no address";
  for (addrinfo* at = found; at != nullptr; at = at->ai_next) {
    const int fd = socket(at->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) {
      last_error = strerror(errno);
      continue;
    }
    // Connecting a UDP socket only picks the route and the source address.
    sockaddr_storage local = {};
    socklen_t length = sizeof(local);
    const bool routed =
        connect(fd, at->ai_addr, at->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
    if (!routed) last_error = strerror(errno);
    close(fd);
    if (!routed) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const void* raw =
        local.ss_family == AF_INET
            ? static_cast<const void*>(
                  &reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
            : static_cast<const void*>(
                  &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
    if (inet_ntop(local.ss_family, raw, text, sizeof(text)) == nullptr) {
      last_error = strerror(errno);
      continue;
    }
    freeaddrinfo(found);
    return std::string(text);
  }
  freeaddrinfo(found);
  return absl::UnavailableError(
      absl::StrCat("no route to '", parts->first, "': ", last_error));
}

absl::StatusOr<std::string> ChooseAdvertiseAddress(
    const std::string& configured, const std::string& coordinator) {
  if (!configured.empty()) return configured;
  return RouteSourceAddress(coordinator);
}

}  // namespace glm
