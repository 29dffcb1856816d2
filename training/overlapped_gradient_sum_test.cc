#include "training/overlapped_gradient_sum.h"

#include <cmath>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "kernels/cpu/separate_memory_allocator.h"
#include "kernels/tensor_arena.h"
#include "parallel/gloo_collectives.h"
#include "parallel/place_checking_group.h"

namespace glm {
namespace {

const std::vector<std::vector<int64_t>> kShapes = {{10},    {3}, {5},
                                                   {7, 10}, {2}, {2}};

// Rank r's value of element i of tensor t.
float Value(int rank, size_t t, int64_t i) {
  return std::sin(1.f + rank * 7.f + t * 3.f + i * 0.37f) * (t + 1);
}

// The tensors of kShapes in one arena of `memory` (null: host), holding
// rank `rank`'s values.
std::vector<Tensor> Gradients(int rank, Allocator* memory) {
  std::vector<Tensor> arena = ZerosInOneAllocation(memory, kShapes);
  for (size_t t = 0; t < arena.size(); ++t) {
    std::vector<float> values(arena[t].numel());
    for (int64_t i = 0; i < arena[t].numel(); ++i)
      values[i] = Value(rank, t, i);
    if (memory == nullptr) {
      std::copy(values.begin(), values.end(), arena[t].data());
    } else {
      memory->CopyFromHost(arena[t].data(), values.data(),
                           values.size() * sizeof(float));
    }
  }
  return arena;
}

std::vector<Tensor*> Pointers(std::vector<Tensor>& tensors) {
  std::vector<Tensor*> out;
  for (Tensor& t : tensors) out.push_back(&t);
  return out;
}

std::vector<std::vector<float>> HostValues(const std::vector<Tensor>& tensors) {
  std::vector<std::vector<float>> out;
  for (const Tensor& t : tensors) out.push_back(t.HostValues());
  return out;
}

TEST(OverlappedGradientSumTest, BucketsRunFromTheLastTensor) {
  gloo::rendezvous::HashStore store;
  auto group = GlooCollectives::Connect(store, "one", 0, 1, {});
  ASSERT_TRUE(group.ok()) << group.status();
  std::vector<Tensor> grads = Gradients(0, nullptr);
  // Sizes 10, 3, 5, 70, 2, 2 in buckets of 8 or more, from the end.
  auto sum = OverlappedGradientSum::Create(**group, Pointers(grads), nullptr,
                                           /*bucket_elements=*/8);
  ASSERT_TRUE(sum.ok()) << sum.status();
  const std::vector<OverlappedGradientSum::Bucket>& buckets = (*sum)->buckets();
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].first, 3u);
  EXPECT_EQ(buckets[0].end, 6u);
  EXPECT_EQ(buckets[1].first, 1u);
  EXPECT_EQ(buckets[1].end, 3u);
  EXPECT_EQ(buckets[2].first, 0u);
  EXPECT_EQ(buckets[2].end, 1u);
}

TEST(OverlappedGradientSumTest, RefusesWhatIsNotOneArenaInOrder) {
  gloo::rendezvous::HashStore store;
  auto group = GlooCollectives::Connect(store, "one", 0, 1, {});
  ASSERT_TRUE(group.ok()) << group.status();
  std::vector<Tensor> arena = Gradients(0, nullptr);
  Tensor own({4});
  for (const std::vector<Tensor*>& grads :
       {std::vector<Tensor*>{&arena[0], &own},
        std::vector<Tensor*>{&arena[1], &arena[0]}}) {
    auto sum = OverlappedGradientSum::Create(**group, grads, nullptr);
    EXPECT_EQ(sum.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(sum.status().message().find("gradient 1 of 2"), std::string::npos)
        << sum.status();
  }
  SeparateMemoryAllocator memory;
  PlaceCheckingGroup on_device(*std::move(group), BufferPlace::kDevice,
                               &memory);
  auto sum = OverlappedGradientSum::Create(on_device, Pointers(arena), nullptr);
  EXPECT_EQ(sum.status().code(), absl::StatusCode::kInvalidArgument);
}

// A group that counts its AllReduce calls, and fails call number `fail_at`
// (0: none).
class WatchedGroup : public PlaceCheckingGroup {
 public:
  WatchedGroup(std::unique_ptr<Collectives> inner, BufferPlace place,
               const Allocator* device, int fail_at)
      : PlaceCheckingGroup(std::move(inner), place, device),
        fail_at_(fail_at) {}
  absl::Status AllReduce(float* data, int64_t count, ReduceOp op) override {
    absl::Status status = calls() + 1 == fail_at_
                              ? absl::UnavailableError("peer went away")
                              : PlaceCheckingGroup::AllReduce(data, count, op);
    absl::MutexLock lock(&mutex_);
    ++calls_;
    return status;
  }
  int calls() {
    absl::MutexLock lock(&mutex_);
    return calls_;
  }
  // Whether `calls` calls have returned within 30 s.
  bool WaitForCalls(int calls) {
    absl::MutexLock lock(&mutex_);
    auto done = [&] {
      mutex_.AssertHeld();
      return calls_ >= calls;
    };
    return mutex_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(30));
  }

 private:
  const int fail_at_;
  absl::Mutex mutex_;
  int calls_ ABSL_GUARDED_BY(mutex_) = 0;
};

// Two ranks sum their gradients in buckets of 8 while "the backward" finishes
// them one by one from the last: each step's first bucket is summed before
// the backward finishes the rest, every bucket starts during the backward,
// and every step's sums are the two ranks' values added. Gradients in host
// memory with a host group, and on a stand-in device with a host group (staged)
// and a device group.
void SumOnTwoRanks(Allocator* memory, BufferPlace place) {
  gloo::rendezvous::HashStore store;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      auto gloo = GlooCollectives::Connect(store, "dp", rank, 2, {});
      ASSERT_TRUE(gloo.ok()) << gloo.status();
      WatchedGroup group(*std::move(gloo), place, memory, /*fail_at=*/0);
      std::vector<Tensor> grads = Gradients(rank, memory);
      // Two ranks' sum, then twice that (the ranks hold the same sums).
      std::vector<std::vector<float>> expected =
          HostValues(Gradients(0, nullptr));
      const std::vector<std::vector<float>> other =
          HostValues(Gradients(1, nullptr));
      for (size_t t = 0; t < expected.size(); ++t) {
        for (size_t i = 0; i < expected[t].size(); ++i) {
          expected[t][i] += other[t][i];
        }
      }
      auto sum = OverlappedGradientSum::Create(group, Pointers(grads), memory,
                                               /*bucket_elements=*/8);
      ASSERT_TRUE(sum.ok()) << sum.status();
      for (int step = 0; step < 2; ++step) {
        if (step == 1) {
          for (std::vector<float>& values : expected) {
            for (float& x : values) x *= 2;
          }
        }
        for (size_t t = grads.size(); t-- > 0;) {
          (*sum)->Finished({&grads[t]});
          // Tensors 5, 4 and 3 make the step's first bucket (one call of
          // the three a step): summed before the backward goes on.
          if (t == 3) {
            EXPECT_TRUE(group.WaitForCalls(3 * step + 1));
          }
        }
        ASSERT_TRUE((*sum)->Finish().ok());
        EXPECT_EQ((*sum)->started_during_last_backward(), 3u);
        EXPECT_EQ(HostValues(grads), expected) << "step " << step;
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(OverlappedGradientSumTest, SumsInHostMemory) {
  SumOnTwoRanks(nullptr, BufferPlace::kHost);
}

TEST(OverlappedGradientSumTest, SumsDeviceGradientsThroughHostCopies) {
  SeparateMemoryAllocator memory;
  SumOnTwoRanks(&memory, BufferPlace::kHost);
}

TEST(OverlappedGradientSumTest, SumsDeviceGradientsWhereTheyLie) {
  SeparateMemoryAllocator memory;
  SumOnTwoRanks(&memory, BufferPlace::kDevice);
}

// A stand-in device whose queued work is done only when the test says so:
// its marks block until Release.
class GatedDevice : public SeparateMemoryAllocator {
 public:
  class Gate : public DeviceMark {
   public:
    explicit Gate(GatedDevice* device) : device_(device) {}
    void Wait() override {
      absl::MutexLock lock(&device_->mutex_);
      device_->mutex_.Await(absl::Condition(&device_->released_));
    }

   private:
    GatedDevice* device_;
  };
  std::unique_ptr<DeviceMark> Mark() override {
    absl::MutexLock lock(&mutex_);
    ++marks_;
    return std::make_unique<Gate>(this);
  }
  void Release() {
    absl::MutexLock lock(&mutex_);
    released_ = true;
  }
  int marks() {
    absl::MutexLock lock(&mutex_);
    return marks_;
  }

 private:
  absl::Mutex mutex_;
  bool released_ ABSL_GUARDED_BY(mutex_) = false;
  int marks_ ABSL_GUARDED_BY(mutex_) = 0;
};

// With a device group, starting a bucket does not wait for the device: the
// summing thread waits for the mark taken when it started, and sums once the
// device has passed it.
TEST(OverlappedGradientSumTest, ADeviceBucketIsSummedOnceTheDeviceWroteIt) {
  gloo::rendezvous::HashStore store;
  auto gloo = GlooCollectives::Connect(store, "one", 0, 1, {});
  ASSERT_TRUE(gloo.ok()) << gloo.status();
  GatedDevice device;
  WatchedGroup group(*std::move(gloo), BufferPlace::kDevice, &device,
                     /*fail_at=*/0);
  std::vector<Tensor> grads = Gradients(0, &device);
  auto sum = OverlappedGradientSum::Create(group, Pointers(grads), &device,
                                           /*bucket_elements=*/8);
  ASSERT_TRUE(sum.ok()) << sum.status();
  (*sum)->Finished(Pointers(grads));  // returns with every bucket started
  EXPECT_EQ(device.marks(), 3);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(group.calls(), 0);  // the device has not passed the marks
  device.Release();
  ASSERT_TRUE((*sum)->Finish().ok());
  EXPECT_EQ(group.calls(), 3);
}

// A bucket whose sum fails: Finish names it and the buckets after it are
// skipped; the sum is ready for the next step. Buckets that were not
// finished start in Finish.
TEST(OverlappedGradientSumTest, AFailedBucketIsNamedAndTheRestSkipped) {
  gloo::rendezvous::HashStore store;
  auto gloo = GlooCollectives::Connect(store, "one", 0, 1, {});
  ASSERT_TRUE(gloo.ok()) << gloo.status();
  WatchedGroup group(*std::move(gloo), BufferPlace::kHost, nullptr,
                     /*fail_at=*/2);
  std::vector<Tensor> grads = Gradients(0, nullptr);
  const std::vector<std::vector<float>> before = HostValues(grads);
  auto sum = OverlappedGradientSum::Create(group, Pointers(grads), nullptr,
                                           /*bucket_elements=*/8);
  ASSERT_TRUE(sum.ok()) << sum.status();
  absl::Status status = (*sum)->Finish();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(status.message().find("gradient bucket 2 of 3 (tensors 1 to 2)"),
            std::string::npos)
      << status;
  EXPECT_EQ(group.calls(), 2);  // the third bucket skipped
  EXPECT_EQ((*sum)->started_during_last_backward(), 0u);
  // The next step sums every bucket (a group of one leaves the values).
  EXPECT_TRUE((*sum)->Finish().ok());
  EXPECT_EQ(group.calls(), 5);
  EXPECT_EQ(HostValues(grads), before);
}

}  // namespace
}  // namespace glm
