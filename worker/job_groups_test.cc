// A job's groups connected as a worker connects them, over a real in-process
// coordinator, one thread per rank.
#include "worker/job_groups.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "coordinator/test_coordinator.h"
#include "gtest/gtest.h"

namespace glm {
namespace {

v1::Assignment AssignmentOf(int rank, int world_size,
                            int collective_timeout_seconds) {
  v1::Assignment assignment;
  assignment.set_rank(rank);
  assignment.set_world_size(world_size);
  assignment.mutable_rendezvous()->set_scope("job-000001/attempt-1");
  assignment.mutable_rendezvous()->set_timeout_ms(20000);
  assignment.mutable_spec()->mutable_parallel()->set_collective_timeout_seconds(
      collective_timeout_seconds);
  return assignment;
}

TEST(JobGroupsTest, PeerThatStopsCallingCollectivesFailsAfterSpecTimeout) {
  TestCoordinator server("job_groups_hang");
  GridSpec spec;
  spec.world = 2;
  absl::StatusOr<RankGrid> grid = BuildRankGrid(spec);
  ASSERT_TRUE(grid.ok()) << grid.status();
  absl::Notification waiter_done;
  absl::Status waiter_status;
  absl::Duration waited;
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      RendezvousStore rendezvous(server.ConnectAsRegisteredWorker(),
                                 "job-000001/attempt-1");
      absl::StatusOr<ProcessGroups> groups = ConnectJobGroups(
          AssignmentOf(rank, 2, 1), *grid, &rendezvous, "127.0.0.1", "cpu");
      ASSERT_TRUE(groups.ok()) << groups.status();
      if (rank == 1) {
        // Hangs: alive and connected, but never joins the all-reduce.
        waiter_done.WaitForNotificationWithTimeout(absl::Seconds(30));
        return;
      }
      float value = 1.f;
      const absl::Time start = absl::Now();
      waiter_status =
          groups->group(GroupKind::kWorld).AllReduce(&value, 1, ReduceOp::kSum);
      waited = absl::Now() - start;
      waiter_done.Notify();
    });
  }
  for (std::thread& rank : ranks) rank.join();
  ASSERT_FALSE(waiter_status.ok());
  EXPECT_GE(waited, absl::Milliseconds(900));
  EXPECT_LT(waited, absl::Seconds(10));
  EXPECT_NE(waiter_status.message().find("group world/0-1"), std::string::npos)
      << waiter_status;
  EXPECT_NE(waiter_status.message().find("all-reduce"), std::string::npos)
      << waiter_status;
  EXPECT_NE(waiter_status.message().find("Timed out"), std::string::npos)
      << waiter_status;
}

}  // namespace
}  // namespace glm
