// The pipeline's edge groups between threads standing in for pp ranks: each
// rank's four links reach the right neighbour in the right direction, sends
// pending on every link at once do not hold back the receives, and every
// rank connects its edges in one global order.
#include "parallel/pipeline_edges.h"

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "parallel/gloo_collectives.h"
#include "parallel/gloo_store.h"
#include "parallel/in_memory_store.h"

namespace glm {
namespace {

// A value that names who sent it, in which direction: the receiver checks
// it came from the neighbour it expects.
float Tag(int from, int direction) { return 10.f * from + direction; }

// Sends on both outgoing links before receiving on either: links that share
// a group with a receive, or reach the wrong peer, would hang or mismatch.
void ExchangeWithBothNeighbours(int rank, int pp, const PipelineLinks& links) {
  EXPECT_EQ(links.size, pp);
  EXPECT_EQ(links.rank, rank);
  float hidden = Tag(rank, 0), gradient = Tag(rank, 1);
  auto to_next = links.to_next.group->StartSend(&hidden, 1, links.to_next.peer);
  auto to_previous =
      links.to_previous.group->StartSend(&gradient, 1, links.to_previous.peer);
  ASSERT_TRUE(to_next.ok() && to_previous.ok());
  float from_previous = -1, from_next = -1;
  ASSERT_TRUE(links.from_previous.group
                  ->Recv(&from_previous, 1, links.from_previous.peer)
                  .ok());
  ASSERT_TRUE(
      links.from_next.group->Recv(&from_next, 1, links.from_next.peer).ok());
  EXPECT_TRUE((*to_next)->Wait().ok());
  EXPECT_TRUE((*to_previous)->Wait().ok());
  EXPECT_EQ(from_previous, Tag((rank + pp - 1) % pp, 0)) << "rank " << rank;
  EXPECT_EQ(from_next, Tag((rank + 1) % pp, 1)) << "rank " << rank;
}

TEST(PipelineEdgesTest, EveryRankReachesItsNeighboursBothWays) {
  for (int pp : {2, 3, 4}) {
    InMemoryStore rendezvous;
    std::vector<std::thread> threads;
    // Global ranks 10, 11, ... so that member and group ranks differ.
    std::vector<int> members;
    for (int r = 0; r < pp; ++r) members.push_back(10 + r);
    for (int rank = 0; rank < pp; ++rank) {
      threads.emplace_back([&, rank] {
        GlooStore store(&rendezvous, absl::Seconds(20));
        absl::StatusOr<std::unique_ptr<PipelineEdges>> edges =
            PipelineEdges::Connect(
                members, rank,
                [&](const std::string& key, int member,
                    int size) -> absl::StatusOr<std::unique_ptr<Collectives>> {
                  auto group = GlooCollectives::Connect(store, key, member,
                                                        size, GlooOptions());
                  if (!group.ok()) return group.status();
                  return std::unique_ptr<Collectives>(*std::move(group));
                });
        ASSERT_TRUE(edges.ok()) << edges.status();
        const PipelineLinks links = (*edges)->Links();
        for (const PipelineLink* link :
             {&links.to_next, &links.from_previous, &links.to_previous,
              &links.from_next}) {
          ASSERT_NE(link->group, nullptr);
          EXPECT_EQ(link->group->size(), 2);
          EXPECT_EQ(link->peer, 1 - link->group->rank());
        }
        ExchangeWithBothNeighbours(rank, pp, links);
        // Twice: the links keep their order.
        ExchangeWithBothNeighbours(rank, pp, links);
      });
    }
    for (std::thread& t : threads) t.join();
  }
}

// A group that only says who it is.
class NamedGroup : public Collectives {
 public:
  NamedGroup(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status AllReduce(float*, int64_t, ReduceOp) override { return {}; }
  absl::Status AllReduceSum(int64_t*, int64_t) override { return {}; }
  absl::Status Broadcast(float*, int64_t, int) override { return {}; }
  absl::Status AllGather(const float*, int64_t, float*) override { return {}; }
  absl::Status ReduceScatter(const float*, int64_t, float*, ReduceOp) override {
    return {};
  }
  absl::Status AllToAllV(const float*, const std::vector<int64_t>&, float*,
                         const std::vector<int64_t>&) override {
    return {};
  }
  absl::StatusOr<std::unique_ptr<PendingSend>> StartSend(const float*, int64_t,
                                                         int) override {
    return absl::UnimplementedError("named only");
  }
  absl::Status Recv(float*, int64_t, int) override { return {}; }
  absl::Status Barrier() override { return {}; }

 private:
  int rank_, size_;
};

TEST(PipelineEdgesTest, RanksConnectSharedEdgesInOneOrder) {
  // Each rank's connection order, by key; member 0 is always the sender.
  for (int pp : {2, 3, 5}) {
    std::vector<int> members;
    for (int r = 0; r < pp; ++r) members.push_back(r);
    std::map<int, std::vector<std::string>> order;
    for (int rank = 0; rank < pp; ++rank) {
      absl::StatusOr<std::unique_ptr<PipelineEdges>> edges =
          PipelineEdges::Connect(
              members, rank,
              [&](const std::string& key, int member,
                  int size) -> absl::StatusOr<std::unique_ptr<Collectives>> {
                order[rank].push_back(key);
                EXPECT_EQ(size, 2);
                return std::make_unique<NamedGroup>(member, size);
              });
      ASSERT_TRUE(edges.ok()) << edges.status();
      EXPECT_EQ(order[rank].size(), 4u);
    }
    // Connecting as the ranks would: an edge connects once both its members
    // have reached it; every rank must get through all four.
    std::map<int, size_t> done;
    for (bool progress = true; progress;) {
      progress = false;
      for (int a = 0; a < pp; ++a) {
        if (done[a] == order[a].size()) continue;
        for (int b = 0; b < pp; ++b) {
          if (b == a || done[b] == order[b].size()) continue;
          if (order[b][done[b]] != order[a][done[a]]) continue;
          ++done[a];
          ++done[b];
          progress = true;
          break;
        }
      }
    }
    for (int rank = 0; rank < pp; ++rank) {
      EXPECT_EQ(done[rank], order[rank].size())
          << "pp " << pp << ": rank " << rank << " waits on "
          << order[rank][done[rank]];
    }
  }
}

TEST(PipelineEdgesTest, NeedsTwoOrMoreMembers) {
  const absl::StatusOr<std::unique_ptr<PipelineEdges>> edges =
      PipelineEdges::Connect(
          {3}, 0,
          [](const std::string&, int,
             int) -> absl::StatusOr<std::unique_ptr<Collectives>> {
            return absl::InternalError("not called");
          });
  EXPECT_EQ(edges.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(edges.status().message().find("two or more"), std::string::npos)
      << edges.status();
}

}  // namespace
}  // namespace glm
