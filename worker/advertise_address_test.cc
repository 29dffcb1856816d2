#include "worker/advertise_address.h"

#include "gtest/gtest.h"

namespace glm {
namespace {

TEST(SplitHostPortTest, SplitsNamesAndBothIpFamilies) {
  using Parts = std::pair<std::string, std::string>;
  EXPECT_EQ(*SplitHostPort("head-node:7070"), Parts("head-node", "7070"));
  EXPECT_EQ(*SplitHostPort("[fd00::1]:7070"), Parts("fd00::1", "7070"));
  EXPECT_EQ(*SplitHostPort("fd00::1"), Parts("fd00::1", ""));
  EXPECT_EQ(*SplitHostPort("head-node"), Parts("head-node", ""));
  EXPECT_FALSE(SplitHostPort("[fd00::1:7070").ok());
}

TEST(RouteSourceAddressTest, LoopbackCoordinatorIsReachedFromLoopback) {
  EXPECT_EQ(*RouteSourceAddress("127.0.0.1:7070"), "127.0.0.1");
}

TEST(RouteSourceAddressTest, UnresolvableHostIsUnavailable) {
  absl::StatusOr<std::string> address =
      RouteSourceAddress("no-such-host.invalid:7070");
  ASSERT_FALSE(address.ok());
  EXPECT_EQ(address.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(address.status().message().find("no-such-host.invalid"),
            std::string::npos);
}

TEST(ChooseAdvertiseAddressTest, ConfiguredAddressWins) {
  EXPECT_EQ(*ChooseAdvertiseAddress("198.18.0.2", "127.0.0.1:7070"),
            "198.18.0.2");
  EXPECT_EQ(*ChooseAdvertiseAddress("", "127.0.0.1:7070"), "127.0.0.1");
}

}  // namespace
}  // namespace glm
