#include "parallel/distinct_device_groups.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "parallel/gloo_collectives.h"
#include "parallel/gloo_store.h"
#include "parallel/in_memory_store.h"

namespace glm {
namespace {

TEST(DistinctDevicesTest, EveryMemberNeedsADeviceOfItsOwn) {
  EXPECT_TRUE(DistinctDevices({"GPU-a", "GPU-b", "GPU-c"}));
  EXPECT_TRUE(DistinctDevices({"GPU-a"}));
  EXPECT_FALSE(DistinctDevices({"GPU-a", "GPU-a"}));
  EXPECT_FALSE(DistinctDevices({"GPU-a", ""}));
  EXPECT_FALSE(DistinctDevices({"", ""}));
}

// Which factory connected each member: the members of a group, on threads,
// publish `device_ids` and report the choice they made.
std::vector<std::string> Choices(const std::vector<std::string>& device_ids) {
  InMemoryStore store;
  const int size = static_cast<int>(device_ids.size());
  std::vector<std::string> chosen(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      // Both choices connect a Gloo group (the test's stand-in for NCCL),
      // each under its own key.
      GlooStore gloo_store(&store, absl::Seconds(20));
      auto gloo = [&](const std::string& name) -> CollectivesFactory {
        return
            [&, name](const std::string& key, int r,
                      int n) -> absl::StatusOr<std::unique_ptr<Collectives>> {
              chosen[rank] = name;
              absl::StatusOr<std::unique_ptr<GlooCollectives>> group =
                  GlooCollectives::Connect(gloo_store, key + name, r, n,
                                           GlooOptions());
              if (!group.ok()) return group.status();
              return std::unique_ptr<Collectives>(*std::move(group));
            };
      };
      CollectivesFactory connect =
          OnDistinctDevices(&store, device_ids[rank], absl::Seconds(20),
                            gloo("devices"), gloo("host"));
      absl::StatusOr<std::unique_ptr<Collectives>> group =
          connect("dp/0-1", rank, size);
      ASSERT_TRUE(group.ok()) << group.status();
      // The members connected one group together.
      float one = 1.f;
      ASSERT_TRUE((*group)->AllReduce(&one, 1, ReduceOp::kSum).ok());
      EXPECT_EQ(one, static_cast<float>(size));
    });
  }
  for (std::thread& t : threads) t.join();
  return chosen;
}

TEST(DistinctDevicesTest, AllMembersChooseAlike) {
  EXPECT_EQ(Choices({"GPU-a", "GPU-b"}),
            (std::vector<std::string>{"devices", "devices"}));
  EXPECT_EQ(Choices({"GPU-a", "GPU-a"}),
            (std::vector<std::string>{"host", "host"}));
  EXPECT_EQ(Choices({"", ""}), (std::vector<std::string>{"host", "host"}));
  EXPECT_EQ(Choices({"GPU-a", "GPU-b", "GPU-a"}),
            (std::vector<std::string>{"host", "host", "host"}));
  EXPECT_EQ(Choices({"GPU-a"}), std::vector<std::string>{"host"});
}

// A member that never publishes its device: the others fail, naming the
// group, instead of waiting for ever.
TEST(DistinctDevicesTest, AMissingMemberIsAClearError) {
  InMemoryStore store;
  auto never = [](const std::string&, int,
                  int) -> absl::StatusOr<std::unique_ptr<Collectives>> {
    ADD_FAILURE() << "no group may connect";
    return absl::InternalError("unreachable");
  };
  CollectivesFactory connect =
      OnDistinctDevices(&store, "GPU-a", absl::Milliseconds(200), never, never);
  absl::StatusOr<std::unique_ptr<Collectives>> group = connect("dp/0-1", 0, 2);
  EXPECT_EQ(group.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(group.status().message().find("group dp/0-1"), std::string::npos)
      << group.status();
}

}  // namespace
}  // namespace glm
