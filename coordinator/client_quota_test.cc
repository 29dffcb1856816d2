#include "coordinator/client_quota.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace glm {
namespace {

TEST(ClientQuotaTest, EachClientHoldsAtMostTheLimit) {
  ClientQuota quota(2, "WatchJob streams", "--max-watches-per-client");
  std::vector<ClientQuota::Slot> held;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<ClientQuota::Slot> slot = quota.Acquire("ipv4:10.0.0.1");
    ASSERT_TRUE(slot.ok());
    held.push_back(*std::move(slot));
  }
  absl::StatusOr<ClientQuota::Slot> refused = quota.Acquire("ipv4:10.0.0.1");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.status().message(),
            "ipv4:10.0.0.1 already holds 2 open WatchJob streams, the most "
            "one client may (--max-watches-per-client); close one first");
  // Another client is not affected, and a released slot is free again.
  EXPECT_TRUE(quota.Acquire("ipv4:10.0.0.2").ok());
  held.pop_back();
  EXPECT_EQ(quota.Held("ipv4:10.0.0.1"), 1);
  EXPECT_TRUE(quota.Acquire("ipv4:10.0.0.1").ok());
  held.clear();
  EXPECT_EQ(quota.Held("ipv4:10.0.0.1"), 0);
}

TEST(ClientQuotaTest, ClientsAreHostsWithoutPorts) {
  EXPECT_EQ(ClientHost("ipv4:127.0.0.1:51234"), "ipv4:127.0.0.1");
  EXPECT_EQ(ClientHost("ipv6:[::1]:51234"), "ipv6:[::1]");
  EXPECT_EQ(ClientHost("unix:/run/glm.sock"), "unix:/run/glm.sock");
}

}  // namespace
}  // namespace glm
