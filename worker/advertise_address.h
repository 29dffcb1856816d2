// The address a worker's peers dial for its collectives. On a cluster it must
// be one the other hosts reach: by default the local end of the route to the
// coordinator, the one interface known to face the rest of the job (loopback
// only when the coordinator itself is on loopback, i.e. everything is local).
#ifndef GLM_WORKER_ADVERTISE_ADDRESS_H_
#define GLM_WORKER_ADVERTISE_ADDRESS_H_

#include <string>

#include "absl/status/statusor.h"

namespace glm {

// Splits "host:port", "[v6]:port" or "v6" into host and port (port empty
// when absent); INVALID_ARGUMENT when the brackets do not close.
absl::StatusOr<std::pair<std::string, std::string>> SplitHostPort(
    const std::string& address);

// The local IP address (numeric, IPv4 or IPv6) this host sends from to reach
// `coordinator` ("host:port"), as the kernel's routing table picks it. No
// packet is sent. UNAVAILABLE when the host does not resolve or no route
// leads there.
absl::StatusOr<std::string> RouteSourceAddress(const std::string& coordinator);

// `configured` when given (a flag or GLM_ADVERTISE_ADDRESS), else
// RouteSourceAddress(coordinator).
absl::StatusOr<std::string> ChooseAdvertiseAddress(
    const std::string& configured, const std::string& coordinator);

}  // namespace glm

#endif  // GLM_WORKER_ADVERTISE_ADDRESS_H_
