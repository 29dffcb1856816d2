#include "kernels/tensor_arena.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/separate_memory_allocator.h"

namespace glm {
namespace {

std::vector<float> Counting(int64_t n, float first) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = first + i;
  return v;
}

TEST(TensorArenaTest, TensorsShareOneAlignedAllocation) {
  SeparateMemoryAllocator device;
  {
    ArenaRange range;
    std::vector<Tensor> t =
        ZerosInOneAllocation(&device, {{3, 5}, {7}, {0, 4}, {2, 2, 2}}, &range);
    EXPECT_EQ(device.allocations(), 1);
    EXPECT_EQ(t[0].shape(), (std::vector<int64_t>{3, 5}));
    EXPECT_EQ(t[2].shape(), (std::vector<int64_t>{0, 4}));
    EXPECT_TRUE(t[2].empty());
    EXPECT_EQ(t[3].shape(), (std::vector<int64_t>{2, 2, 2}));
    for (int i : {0, 1, 3}) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t[i].data()) % 256, 0u);
      EXPECT_GE(t[i].data(), range.data);
      EXPECT_LE(t[i].data() + t[i].numel(), range.data + range.size);
    }
    EXPECT_EQ(t[1].data(), t[0].data() + 64);  // 15 floats padded to 256 bytes
    Tensor b({7}, nullptr);
    b.values() = Counting(7, 100.f);
    t[1].CopyFrom(b);
    EXPECT_EQ(t[1].CopyTo(nullptr).values(), Counting(7, 100.f));
    // A copy of a view owns its own allocation.
    Tensor copy = t[1];
    EXPECT_EQ(device.allocations(), 2);
    EXPECT_EQ(copy.CopyTo(nullptr).values(), Counting(7, 100.f));
    range.SetZero();
    EXPECT_EQ(t[1].CopyTo(nullptr).values(), std::vector<float>(7, 0.f));
    EXPECT_EQ(copy.CopyTo(nullptr).values(), Counting(7, 100.f));
  }
  EXPECT_EQ(device.allocations(), 0);
  EXPECT_EQ(device.bytes_in_use(), 0);
}

TEST(TensorArenaTest, ArenaBytesRoundUpTo256) {
  EXPECT_EQ(ArenaBytes(0), 0);
  EXPECT_EQ(ArenaBytes(1), 256);
  EXPECT_EQ(ArenaBytes(64), 256);
  EXPECT_EQ(ArenaBytes(65), 512);
  SeparateMemoryAllocator device;
  const std::vector<Tensor> t = ZerosInOneAllocation(&device, {{3, 5}, {65}});
  EXPECT_EQ(device.bytes_in_use(), ArenaBytes(15) + ArenaBytes(65));
}

TEST(TensorArenaTest, ZerosLiveWhileAnyViewDoes) {
  SeparateMemoryAllocator device;
  ArenaRange range;
  std::vector<Tensor> zeros =
      ZerosInOneAllocation(&device, {{4, 3}, {0}, {9}}, &range);
  ASSERT_EQ(zeros.size(), 3u);
  EXPECT_EQ(device.allocations(), 1);
  EXPECT_TRUE(zeros[1].empty());
  EXPECT_EQ(zeros[2].CopyTo(nullptr).values(), std::vector<float>(9, 0.f));
  EXPECT_EQ(range.size, 2 * 64);
  Tensor last = std::move(zeros[2]);
  zeros.clear();
  EXPECT_EQ(device.allocations(), 1);
  last = Tensor();
  EXPECT_EQ(device.allocations(), 0);
}

TEST(TensorArenaTest, IndicesGoUpInOneCopy) {
  SeparateMemoryAllocator device;
  const std::vector<std::vector<int32_t>> arrays = {
      {3, 1, 4}, {}, {1, 5, 9, 2, 6}, std::vector<int32_t>(70, -1)};
  const std::vector<IndexTensor> sent = UploadIndices(&device, arrays);
  EXPECT_EQ(device.uploads(), 1);
  EXPECT_EQ(device.allocations(), 1);
  ASSERT_EQ(sent.size(), arrays.size());
  for (size_t i = 0; i < arrays.size(); ++i) {
    EXPECT_FALSE(sent[i].on_host());
    EXPECT_EQ(sent[i].numel(), static_cast<int64_t>(arrays[i].size()));
    EXPECT_EQ(sent[i].HostValues(), arrays[i]) << i;
  }
  const std::vector<IndexTensor> host = UploadIndices(nullptr, arrays);
  EXPECT_TRUE(host[2].on_host());
  EXPECT_EQ(host[2].values(), arrays[2]);
}

// Arrays of the sizes sent last go where those went (work recorded over
// them reads the new values); other sizes get a new allocation.
TEST(TensorArenaTest, UploaderReusesItsAllocationWhenSizesRepeat) {
  SeparateMemoryAllocator device;
  IndexUploader uploader;
  const std::vector<IndexTensor> first =
      uploader.Send(&device, {{3, 1, 4}, {}, {1, 5}});
  const std::vector<IndexTensor> second =
      uploader.Send(&device, {{2, 7, 1}, {}, {8, 2}});
  EXPECT_EQ(device.allocations(), 1);
  EXPECT_EQ(device.uploads(), 2);
  EXPECT_EQ(second[0].data(), first[0].data());
  EXPECT_EQ(second[2].data(), first[2].data());
  EXPECT_EQ(second[0].HostValues(), (std::vector<int32_t>{2, 7, 1}));
  EXPECT_EQ(first[2].HostValues(), (std::vector<int32_t>{8, 2}));
  const std::vector<IndexTensor> third =
      uploader.Send(&device, {{2, 7}, {}, {8, 2, 5}});
  EXPECT_EQ(device.allocations(), 2);
  EXPECT_EQ(third[2].HostValues(), (std::vector<int32_t>{8, 2, 5}));
  EXPECT_EQ(second[0].HostValues(), (std::vector<int32_t>{2, 7, 1}));
}

TEST(TensorArenaTest, NoElementsAllocateNothing) {
  SeparateMemoryAllocator device;
  ArenaRange range;
  std::vector<Tensor> t = ZerosInOneAllocation(&device, {{0}, {2, 0}}, &range);
  EXPECT_TRUE(range.empty());
  EXPECT_EQ(device.allocations(), 0);
  EXPECT_EQ(t[1].shape(), (std::vector<int64_t>{2, 0}));
}

TEST(TensorArenaTest, SpansJoinNeighboursOfOneArena) {
  SeparateMemoryAllocator device;
  // 15 floats (padded to 64), 7 (to 64), none, 8, 10, 65.
  std::vector<Tensor> a = ZerosInOneAllocation(
      &device, {{3, 5}, {7}, {0, 4}, {2, 2, 2}, {10}, {65}});
  std::vector<Tensor> b = ZerosInOneAllocation(&device, {{6}, {5}});
  Tensor own({4}, nullptr);
  Tensor device_own({3}, &device);
  // a[4] is left out, so a[5] starts a span of its own; a[2] has no
  // elements; b's tensors follow a's, but in another allocation.
  const TensorSpans spans = SpansOf(
      {&a[0], &a[1], &a[2], &a[3], &own, &a[5], &b[0], &b[1], &device_own});
  ASSERT_EQ(spans.spans.size(), 3u);
  EXPECT_EQ(spans.spans[0].data, a[0].data());
  EXPECT_EQ(spans.spans[0].size, 64 + 64 + 8);
  EXPECT_EQ(spans.spans[1].data, a[5].data());
  EXPECT_EQ(spans.spans[1].size, 65);
  EXPECT_EQ(spans.spans[2].data, b[0].data());
  EXPECT_EQ(spans.spans[2].size, 64 + 5);
  EXPECT_EQ(spans.owning, (std::vector<Tensor*>{&own, &device_own}));
  // Out of arena order nothing joins.
  const TensorSpans reversed = SpansOf({&a[1], &a[0]});
  EXPECT_EQ(reversed.spans.size(), 2u);
  // A copy of a view owns its storage.
  Tensor copy = a[1];
  EXPECT_EQ(copy.arena(), nullptr);
  EXPECT_EQ(a[1].arena(), a[0].arena());
  EXPECT_NE(b[0].arena(), a[0].arena());
}

TEST(TensorArenaTest, HostTensorsAreViewsOfOneAllocation) {
  ArenaRange range;
  std::vector<Tensor> t =
      ZerosInOneAllocation(nullptr, {{3, 5}, {7}, {0, 4}, {65}}, &range);
  EXPECT_EQ(range.allocator, nullptr);
  EXPECT_EQ(range.size, 64 + 64 + 128);
  for (int i : {0, 1, 3}) {
    EXPECT_TRUE(t[i].on_host());
    EXPECT_EQ(t[i].arena(), range.data);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t[i].data()) % 256, 0u);
  }
  EXPECT_TRUE(t[2].empty());
  EXPECT_EQ(t[2].arena(), nullptr);
  EXPECT_EQ(t[1].data(), t[0].data() + 64);
  EXPECT_EQ(t[3].data(), t[1].data() + 64);
  EXPECT_EQ(std::vector<float>(range.data, range.data + range.size),
            std::vector<float>(range.size, 0.f));
  Tensor b({7}, nullptr);
  b.values() = Counting(7, 100.f);
  t[1].CopyFrom(b);
  EXPECT_EQ(t[1].CopyTo(nullptr).values(), Counting(7, 100.f));
  // A copy of a view owns its elements: writes to either stay apart.
  Tensor copy = t[1];
  EXPECT_EQ(copy.arena(), nullptr);
  EXPECT_EQ(copy.values(), Counting(7, 100.f));
  range.SetZero();
  EXPECT_EQ(t[1].CopyTo(nullptr).values(), std::vector<float>(7, 0.f));
  EXPECT_EQ(copy.values(), Counting(7, 100.f));
  t[1] = copy;
  EXPECT_EQ(t[1].arena(), nullptr);
}

TEST(TensorArenaTest, HostViewsKeepTheirArenaAlive) {
  std::vector<Tensor> t = ZerosInOneAllocation(nullptr, {{4}, {9}});
  t[1].data()[8] = 3.f;
  Tensor last = std::move(t[1]);
  t.clear();
  EXPECT_EQ(last.numel(), 9);
  EXPECT_EQ(last.CopyTo(nullptr).values().back(), 3.f);
}

TEST(TensorArenaTest, HostSpansJoinNeighbours) {
  std::vector<Tensor> a = ZerosInOneAllocation(nullptr, {{3, 5}, {7}, {10}});
  Tensor own({4}, nullptr);
  const TensorSpans spans = SpansOf({&a[0], &a[1], &own, &a[2]});
  ASSERT_EQ(spans.spans.size(), 1u);
  EXPECT_EQ(spans.spans[0].data, a[0].data());
  EXPECT_EQ(spans.spans[0].size, 64 + 64 + 10);
  EXPECT_EQ(spans.owning, (std::vector<Tensor*>{&own}));
}

}  // namespace
}  // namespace glm
