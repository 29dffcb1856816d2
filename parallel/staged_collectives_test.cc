// StagedCollectives between threads over Gloo, each rank's "device" a
// separate host allocator (kernels/cpu/separate_memory_allocator.h): a group
// that checks where every buffer it is handed lives stands in for Gloo (host
// buffers only) and for NCCL (device buffers only), so each call is seen to
// stage its buffers into the group's place and back.
#include "parallel/staged_collectives.h"

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/separate_memory_allocator.h"
#include "parallel/gloo_collectives.h"
#include "parallel/gloo_store.h"
#include "parallel/in_memory_store.h"
#include "parallel/place_checking_group.h"

namespace glm {
namespace {

// Values in the caller's place: the device's memory, or the host's.
template <typename T>
class CallerBuffer {
 public:
  CallerBuffer(BufferPlace place, Allocator* device, std::vector<T> values)
      : place_(place), device_(device), host_(std::move(values)) {
    if (place_ == BufferPlace::kDevice) {
      on_device_ = DeviceBuffer(device_, bytes());
      device_->CopyFromHost(on_device_.data(), host_.data(), bytes());
    }
  }
  T* data() {
    return place_ == BufferPlace::kDevice ? static_cast<T*>(on_device_.data())
                                          : host_.data();
  }
  std::vector<T> values() {
    if (place_ == BufferPlace::kDevice) {
      device_->CopyToHost(host_.data(), on_device_.data(), bytes());
    }
    return host_;
  }

 private:
  size_t bytes() const { return host_.size() * sizeof(T); }

  BufferPlace place_;
  Allocator* device_;
  std::vector<T> host_;
  DeviceBuffer on_device_;
};

constexpr int kSize = 2;

// Every call of a rank whose buffers are in `caller` through a group whose
// buffers are in `group`.
void RunEveryCall(BufferPlace caller, BufferPlace group) {
  InMemoryStore rendezvous;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kSize; ++rank) {
    threads.emplace_back([&, rank] {
      GlooStore store(&rendezvous, absl::Seconds(20));
      absl::StatusOr<std::unique_ptr<GlooCollectives>> gloo =
          GlooCollectives::Connect(store, "g", rank, kSize, GlooOptions());
      ASSERT_TRUE(gloo.ok()) << gloo.status();
      SeparateMemoryAllocator device;
      PlaceCheckingGroup checked(*std::move(gloo), group, &device);
      StagedCollectives staged(checked, caller, &device);
      EXPECT_EQ(staged.buffer_place(), caller);
      const float r = rank;
      auto buffer = [&](std::vector<float> values) {
        return CallerBuffer<float>(caller, &device, std::move(values));
      };

      CallerBuffer sum = buffer({r, 1.f});
      ASSERT_TRUE(staged.AllReduce(sum.data(), 2, ReduceOp::kSum).ok());
      EXPECT_EQ(sum.values(), (std::vector<float>{1.f, 2.f}));

      CallerBuffer<int64_t> counts(caller, &device, {rank, int64_t{1} << 40});
      ASSERT_TRUE(staged.AllReduceSum(counts.data(), 2).ok());
      EXPECT_EQ(counts.values(), (std::vector<int64_t>{1, int64_t{2} << 40}));

      CallerBuffer root = buffer({r * 10});
      ASSERT_TRUE(staged.Broadcast(root.data(), 1, /*root=*/1).ok());
      EXPECT_EQ(root.values(), std::vector<float>{10.f});

      CallerBuffer mine = buffer({r, -r}),
                   gathered = buffer(std::vector<float>(4));
      ASSERT_TRUE(staged.AllGather(mine.data(), 2, gathered.data()).ok());
      EXPECT_EQ(gathered.values(), (std::vector<float>{0, 0, 1, -1}));

      // Member r contributes r + 1 to both blocks; block b is scaled by b + 1.
      CallerBuffer blocks = buffer({r + 1, 2 * (r + 1)}), block = buffer({-1});
      ASSERT_TRUE(
          staged.ReduceScatter(blocks.data(), 1, block.data(), ReduceOp::kSum)
              .ok());
      EXPECT_EQ(block.values(), std::vector<float>{3.f * (rank + 1)});

      // Member r sends r + 1 values to each peer p, valued 100 r + p.
      std::vector<float> send;
      std::vector<int64_t> send_counts, recv_counts;
      for (int p = 0; p < kSize; ++p) {
        send_counts.push_back(rank + 1);
        recv_counts.push_back(p + 1);
        for (int i = 0; i <= rank; ++i) send.push_back(100.f * rank + p);
      }
      CallerBuffer sent = buffer(send),
                   received = buffer(std::vector<float>(3));
      ASSERT_TRUE(
          staged
              .AllToAllV(sent.data(), send_counts, received.data(), recv_counts)
              .ok());
      EXPECT_EQ(received.values(), (std::vector<float>{r, 100 + r, 100 + r}));

      // Each member sends to the other and receives from it: the send's
      // staged buffer lives until it is received.
      const int peer = 1 - rank;
      CallerBuffer outgoing = buffer({r + 0.5f}), incoming = buffer({-1});
      absl::StatusOr<std::unique_ptr<PendingSend>> pending =
          staged.StartSend(outgoing.data(), 1, peer);
      ASSERT_TRUE(pending.ok()) << pending.status();
      ASSERT_TRUE(staged.Recv(incoming.data(), 1, peer).ok());
      ASSERT_TRUE((*pending)->Wait().ok());
      EXPECT_EQ(incoming.values(), std::vector<float>{peer + 0.5f});
      EXPECT_TRUE(staged.Barrier().ok());
      EXPECT_EQ(checked.checked(), 11);  // every buffer of the calls above
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(StagedCollectivesTest, DeviceBuffersThroughAHostGroup) {
  RunEveryCall(BufferPlace::kDevice, BufferPlace::kHost);
}

TEST(StagedCollectivesTest, HostBuffersThroughADeviceGroup) {
  RunEveryCall(BufferPlace::kHost, BufferPlace::kDevice);
}

TEST(StagedCollectivesTest, BuffersInTheGroupsPlaceGoStraightThrough) {
  RunEveryCall(BufferPlace::kHost, BufferPlace::kHost);
  RunEveryCall(BufferPlace::kDevice, BufferPlace::kDevice);
}

}  // namespace
}  // namespace glm
