#include "planner/hardware.h"

#include "gtest/gtest.h"

namespace glm {
namespace {

TEST(HardwareTest, PresetsCarryPublishedFigures) {
  const ClusterSpec h100 = *ClusterPreset("h100");
  EXPECT_EQ(h100.device.memory_bytes, int64_t{81559} << 20);
  EXPECT_DOUBLE_EQ(h100.device.matmul_flops, 989.4e12);
  EXPECT_DOUBLE_EQ(h100.device.memory_bandwidth, 3.35e12);
  EXPECT_EQ(h100.fast_domain, 8);
  const ClusterSpec h200 = *ClusterPreset("h200");
  EXPECT_EQ(h200.device.memory_bytes, int64_t{143771} << 20);
  EXPECT_DOUBLE_EQ(h200.device.memory_bandwidth, 4.8e12);
  const ClusterSpec gb200 = *ClusterPreset("gb200");
  EXPECT_DOUBLE_EQ(gb200.device.matmul_flops, 2.5e15);
  EXPECT_EQ(gb200.devices_per_node, 4);
  EXPECT_EQ(gb200.fast_domain, 72);
  for (const std::string& name : ClusterPresetNames()) {
    EXPECT_TRUE(ValidateCluster(*ClusterPreset(name)).ok()) << name;
  }
}

TEST(HardwareTest, UnknownPresetAndBadOverridesNameTheFlag) {
  EXPECT_NE(ClusterPreset("tpu").status().message().find("--cluster"),
            std::string::npos);
  ClusterSpec cluster = *ClusterPreset("h200");
  cluster.network_bandwidth = 0;
  EXPECT_NE(ValidateCluster(cluster).message().find("--network-gbs"),
            std::string::npos);
  cluster = *ClusterPreset("h200");
  cluster.device.runtime_bytes = cluster.device.memory_bytes;
  EXPECT_NE(ValidateCluster(cluster).message().find("--runtime-gib"),
            std::string::npos);
}

TEST(HardwareTest, FastDomainsAreConsecutiveRanks) {
  const ClusterSpec h100 = *ClusterPreset("h100");
  EXPECT_TRUE(SameFastDomain(h100, 0, 7));
  EXPECT_FALSE(SameFastDomain(h100, 7, 8));
  EXPECT_TRUE(SameFastDomain(*ClusterPreset("gb200"), 0, 71));
}

}  // namespace
}  // namespace glm
