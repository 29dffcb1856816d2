// Properties of PipelineOrder over many shapes (pipeline_test checks a few
// orders one by one): each rank runs every pass once, a backward after its
// forward, 1F1B bounds the micro batches in flight, the ranks together
// cannot deadlock when sends do not block, and on each of the two pipeline
// groups a rank receives its neighbour's messages in the order they were
// sent (Recv pairs with sends in order, so any other order would mix up
// micro batches).
#include "parallel/pipeline_order.h"

#include <algorithm>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace glm {
namespace {

struct Shape {
  int pp, chunks;
  int64_t micro_batches;
  int stages() const { return pp * chunks; }
};

std::vector<Shape> Shapes() {
  std::vector<Shape> shapes;
  for (int pp : {1, 2, 3, 4}) {
    for (int chunks : {1, 2, 3}) {
      for (int64_t micro_batches : {1, 2, 3, 4, 6, 8, 12}) {
        if (chunks > 1 && micro_batches % pp != 0) continue;
        shapes.push_back({pp, chunks, micro_batches});
      }
    }
  }
  return shapes;
}

std::vector<std::vector<PipelineOp>> Orders(const Shape& shape) {
  std::vector<std::vector<PipelineOp>> orders;
  for (int rank = 0; rank < shape.pp; ++rank) {
    absl::StatusOr<std::vector<PipelineOp>> order =
        PipelineOrder(shape.pp, rank, shape.chunks, shape.micro_batches);
    EXPECT_TRUE(order.ok()) << order.status();
    orders.push_back(order.ok() ? *order : std::vector<PipelineOp>());
  }
  return orders;
}

int StageOf(const Shape& shape, int rank, const PipelineOp& op) {
  return op.chunk * shape.pp + rank;
}

std::string Describe(const Shape& shape) {
  return testing::PrintToString(
             std::make_tuple(shape.pp, shape.chunks, shape.micro_batches)) +
         " (pp, chunks, micro batches)";
}

TEST(PipelineOrderTest, EachPassOnceBackwardAfterForward) {
  for (const Shape& shape : Shapes()) {
    SCOPED_TRACE(Describe(shape));
    const std::vector<std::vector<PipelineOp>> orders = Orders(shape);
    for (int rank = 0; rank < shape.pp; ++rank) {
      const std::vector<PipelineOp>& order = orders[rank];
      ASSERT_EQ(order.size(), 2 * shape.micro_batches * shape.chunks);
      std::set<std::tuple<bool, int64_t, int>> seen;
      int64_t in_flight = 0, most_in_flight = 0;
      for (const PipelineOp& op : order) {
        ASSERT_GE(op.micro_batch, 0);
        ASSERT_LT(op.micro_batch, shape.micro_batches);
        ASSERT_GE(op.chunk, 0);
        ASSERT_LT(op.chunk, shape.chunks);
        EXPECT_TRUE(seen.insert({op.forward, op.micro_batch, op.chunk}).second);
        if (!op.forward) {
          EXPECT_EQ(seen.count({true, op.micro_batch, op.chunk}), 1u);
        }
        in_flight += op.forward ? 1 : -1;
        most_in_flight = std::max(most_in_flight, in_flight);
      }
      // 1F1B holds at most pp - rank micro batches' activations.
      if (shape.chunks == 1) {
        EXPECT_LE(most_in_flight, shape.pp - rank);
      }
    }
  }
}

// Runs every rank's order as far as the passes it depends on allow: a
// forward needs the previous stage's forward of its micro batch, a backward
// the next stage's backward (sends never block). Every pass must run.
TEST(PipelineOrderTest, RanksTogetherNeverDeadlock) {
  for (const Shape& shape : Shapes()) {
    SCOPED_TRACE(Describe(shape));
    const std::vector<std::vector<PipelineOp>> orders = Orders(shape);
    std::set<std::tuple<bool, int64_t, int>> done;  // forward, micro, stage
    std::vector<size_t> next(shape.pp, 0);
    for (bool progress = true; progress;) {
      progress = false;
      for (int rank = 0; rank < shape.pp; ++rank) {
        if (next[rank] == orders[rank].size()) continue;
        const PipelineOp& op = orders[rank][next[rank]];
        const int stage = StageOf(shape, rank, op);
        const bool ready =
            op.forward ? stage == 0 ||
                             done.count({true, op.micro_batch, stage - 1}) > 0
                       : stage == shape.stages() - 1 ||
                             done.count({false, op.micro_batch, stage + 1}) > 0;
        if (!ready) continue;
        done.insert({op.forward, op.micro_batch, stage});
        ++next[rank];
        progress = true;
      }
    }
    for (int rank = 0; rank < shape.pp; ++rank) {
      EXPECT_EQ(next[rank], orders[rank].size()) << "rank " << rank;
    }
  }
}

// Messages (micro batch, receiving stage) from `rank` to its neighbour in one
// direction, in the order `rank` sends them / the neighbour receives them.
using Messages = std::vector<std::pair<int64_t, int>>;

Messages Sent(const Shape& shape, const std::vector<PipelineOp>& order,
              int rank, bool forward) {
  Messages sent;
  for (const PipelineOp& op : order) {
    const int stage = StageOf(shape, rank, op);
    if (op.forward != forward) continue;
    if (forward && stage + 1 < shape.stages()) {
      sent.push_back({op.micro_batch, stage + 1});
    }
    if (!forward && stage > 0) sent.push_back({op.micro_batch, stage - 1});
  }
  return sent;
}

Messages Received(const Shape& shape, const std::vector<PipelineOp>& order,
                  int rank, bool forward) {
  Messages received;
  for (const PipelineOp& op : order) {
    const int stage = StageOf(shape, rank, op);
    if (op.forward != forward) continue;
    if (forward ? stage > 0 : stage + 1 < shape.stages()) {
      received.push_back({op.micro_batch, stage});
    }
  }
  return received;
}

TEST(PipelineOrderTest, EachGroupReceivesInTheOrderSent) {
  for (const Shape& shape : Shapes()) {
    if (shape.pp == 1) continue;  // a single rank sends nothing
    SCOPED_TRACE(Describe(shape));
    const std::vector<std::vector<PipelineOp>> orders = Orders(shape);
    for (int rank = 0; rank < shape.pp; ++rank) {
      const int next = (rank + 1) % shape.pp;
      EXPECT_EQ(Sent(shape, orders[rank], rank, true),
                Received(shape, orders[next], next, true))
          << "forward group, rank " << rank << " to " << next;
      EXPECT_EQ(Sent(shape, orders[next], next, false),
                Received(shape, orders[rank], rank, false))
          << "backward group, rank " << next << " to " << rank;
    }
  }
}

}  // namespace
}  // namespace glm
