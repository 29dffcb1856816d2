// Gloo collectives between threads that each hold their own Gloo context, as
// worker processes do, meeting through one in-memory store.
#include "parallel/gloo_collectives.h"

#include <functional>
#include <numeric>
#include <thread>

#include "gtest/gtest.h"
#include "parallel/gloo_store.h"
#include "parallel/in_memory_store.h"
#include "parallel/process_groups.h"

namespace glm {
namespace {

// Runs `body(rank)` on `n` threads, each with its own Gloo store.
void RunRanks(int n,
              const std::function<void(int, gloo::rendezvous::Store&)>& body) {
  InMemoryStore rendezvous;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      GlooStore store(&rendezvous, absl::Seconds(20));
      body(rank, store);
    });
  }
  for (std::thread& t : threads) t.join();
}

std::unique_ptr<GlooCollectives> Join(gloo::rendezvous::Store& store, int rank,
                                      int size) {
  absl::StatusOr<std::unique_ptr<GlooCollectives>> group =
      GlooCollectives::Connect(store, "g", rank, size, GlooOptions());
  EXPECT_TRUE(group.ok()) << group.status();
  return group.ok() ? *std::move(group) : nullptr;
}

TEST(GlooCollectivesTest, ThreeMembersAgreeOnEveryCollective) {
  static constexpr int kSize = 3;
  RunRanks(kSize, [](int rank, gloo::rendezvous::Store& store) {
    std::unique_ptr<GlooCollectives> group = Join(store, rank, kSize);
    ASSERT_NE(group, nullptr);
    EXPECT_EQ(group->rank(), rank);
    EXPECT_EQ(group->size(), kSize);

    std::vector<float> sum = {float(rank), 1.f};
    ASSERT_TRUE(group->AllReduce(sum.data(), 2, ReduceOp::kSum).ok());
    EXPECT_EQ(sum, (std::vector<float>{3.f, 3.f}));
    std::vector<float> avg = {float(rank)};
    ASSERT_TRUE(group->AllReduce(avg.data(), 1, ReduceOp::kAverage).ok());
    EXPECT_FLOAT_EQ(avg[0], 1.f);
    std::vector<int64_t> counts = {rank, int64_t{1} << 40};
    ASSERT_TRUE(group->AllReduceSum(counts.data(), 2).ok());
    EXPECT_EQ(counts, (std::vector<int64_t>{3, int64_t{3} << 40}));

    std::vector<float> root = {float(rank * 10)};
    ASSERT_TRUE(group->Broadcast(root.data(), 1, /*root=*/1).ok());
    EXPECT_EQ(root[0], 10.f);

    const std::vector<float> mine = {float(rank), float(-rank)};
    std::vector<float> gathered(2 * kSize);
    ASSERT_TRUE(group->AllGather(mine.data(), 2, gathered.data()).ok());
    EXPECT_EQ(gathered, (std::vector<float>{0, 0, 1, -1, 2, -2}));

    // Member r contributes r + 1 to every block; block b is scaled by b.
    std::vector<float> blocks = {0, 1 * float(rank + 1), 2 * float(rank + 1)};
    float block = -1;
    ASSERT_TRUE(
        group->ReduceScatter(blocks.data(), 1, &block, ReduceOp::kSum).ok());
    EXPECT_EQ(block, rank * 6.f);

    // Member r sends (r + 1) values to each peer p, valued 100 r + p.
    std::vector<float> send;
    std::vector<int64_t> send_counts, recv_counts;
    for (int p = 0; p < kSize; ++p) {
      send_counts.push_back(rank + 1);
      recv_counts.push_back(p + 1);
      for (int i = 0; i <= rank; ++i) send.push_back(100.f * rank + p);
    }
    std::vector<float> received(6);
    ASSERT_TRUE(
        group->AllToAllV(send.data(), send_counts, received.data(), recv_counts)
            .ok());
    const float r = rank;
    EXPECT_EQ(received, (std::vector<float>{r, 100 + r, 100 + r, 200 + r,
                                            200 + r, 200 + r}));

    std::vector<float> even(kSize, float(rank)), exchanged(kSize);
    ASSERT_TRUE(group->AllToAll(even.data(), 1, exchanged.data()).ok());
    EXPECT_EQ(exchanged, (std::vector<float>{0, 1, 2}));

    // A ring: each member sends twice to the next and receives from the
    // previous, in order.
    const int next = (rank + 1) % kSize, previous = (rank + kSize - 1) % kSize;
    std::thread sender([&] {
      for (int k = 0; k < 2; ++k) {
        const float value = rank * 10 + k;
        EXPECT_TRUE(group->Send(&value, 1, next).ok());
      }
    });
    for (int k = 0; k < 2; ++k) {
      float value = -1;
      ASSERT_TRUE(group->Recv(&value, 1, previous).ok());
      EXPECT_EQ(value, previous * 10 + k);
    }
    sender.join();
    EXPECT_TRUE(group->Barrier().ok());
    EXPECT_EQ(group->Send(sum.data(), 1, rank).code(),
              absl::StatusCode::kInvalidArgument);
  });
}

TEST(GlooCollectivesTest, MissingMemberIsAClearErrorNotAHang) {
  InMemoryStore rendezvous;
  GlooStore store(&rendezvous, absl::Seconds(20));
  GlooOptions options;
  options.connect_timeout = absl::Milliseconds(500);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<GlooCollectives>> group =
      GlooCollectives::Connect(store, "dp/0-1", 0, 2, options);
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
  ASSERT_FALSE(group.ok());
  EXPECT_NE(group.status().message().find("dp/0-1"), std::string::npos)
      << group.status();
}

TEST(ProcessGroupsTest, MembersFollowMegatronOrder) {
  GridSpec spec;
  spec.world = 8;
  spec.tp = 2;
  spec.pp = 2;
  spec.ep = 2;
  absl::StatusOr<RankGrid> grid = BuildRankGrid(spec);
  ASSERT_TRUE(grid.ok());
  // tp-cp-dp-pp: rank 5 = tp 1, dp 0, pp 1.
  EXPECT_EQ(GroupMembers(*grid, 5, GroupKind::kTp), (std::vector<int>{4, 5}));
  EXPECT_EQ(GroupMembers(*grid, 5, GroupKind::kDp), (std::vector<int>{5, 7}));
  EXPECT_EQ(GroupMembers(*grid, 5, GroupKind::kPp), (std::vector<int>{1, 5}));
  EXPECT_EQ(GroupMembers(*grid, 5, GroupKind::kCp), (std::vector<int>{5}));
  // etp-ep-edp-pp with etp 1: ep fastest, then edp.
  EXPECT_EQ(GroupMembers(*grid, 5, GroupKind::kEp), (std::vector<int>{4, 5}));
  EXPECT_EQ(GroupMembers(*grid, 5, GroupKind::kExpertDp),
            (std::vector<int>{5, 7}));
  EXPECT_EQ(GroupMembers(*grid, 5, GroupKind::kWorld).size(), 8u);
}

TEST(ProcessGroupsTest, FourRanksConnectEveryGroupAndAgree) {
  GridSpec spec;
  spec.world = 4;
  spec.pp = 2;
  spec.ep = 2;
  absl::StatusOr<RankGrid> grid = BuildRankGrid(spec);
  ASSERT_TRUE(grid.ok());
  RunRanks(spec.world, [&](int rank, gloo::rendezvous::Store& store) {
    auto shared = std::shared_ptr<gloo::rendezvous::Store>(
        &store, [](gloo::rendezvous::Store*) {});
    absl::StatusOr<ProcessGroups> groups =
        ProcessGroups::Create(*grid, rank, GlooFactory(shared, GlooOptions()));
    ASSERT_TRUE(groups.ok()) << groups.status();
    for (GroupKind kind : AllGroupKinds()) {
      const std::vector<int> members = GroupMembers(*grid, rank, kind);
      float total = rank;
      ASSERT_TRUE(
          groups->group(kind).AllReduce(&total, 1, ReduceOp::kSum).ok());
      EXPECT_EQ(total, std::accumulate(members.begin(), members.end(), 0))
          << GroupKindName(kind) << " on rank " << rank;
    }
  });
}

}  // namespace
}  // namespace glm
