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

Tensor OnDevice(std::vector<int64_t> shape, float first, Allocator* device) {
  Tensor host(shape, nullptr);
  host.values() = Counting(host.numel(), first);
  return host.CopyTo(device);
}

TEST(TensorArenaTest, PlacedTensorsKeepContentsInOneAlignedAllocation) {
  SeparateMemoryAllocator device;
  {
    Tensor a = OnDevice({3, 5}, 1.f, &device),
           b = OnDevice({7}, 100.f, &device), none,
           c = OnDevice({2, 2, 2}, -4.f, &device);
    ASSERT_EQ(device.allocations(), 3);
    const ArenaRange range = PlaceInOneAllocation(&device, {&a, &b, &none, &c});
    EXPECT_EQ(device.allocations(), 1);
    EXPECT_EQ(a.shape(), (std::vector<int64_t>{3, 5}));
    EXPECT_EQ(c.shape(), (std::vector<int64_t>{2, 2, 2}));
    EXPECT_TRUE(none.empty());
    EXPECT_EQ(a.CopyTo(nullptr).values(), Counting(15, 1.f));
    EXPECT_EQ(b.CopyTo(nullptr).values(), Counting(7, 100.f));
    EXPECT_EQ(c.CopyTo(nullptr).values(), Counting(8, -4.f));
    for (const Tensor* t : {&a, &b, &c}) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data()) % 256, 0u);
      EXPECT_GE(t->data(), range.data);
      EXPECT_LE(t->data() + t->numel(), range.data + range.size);
    }
    EXPECT_EQ(b.data(), a.data() + 64);  // 15 floats padded to 256 bytes
    // A copy of a view owns its own allocation.
    Tensor copy = b;
    EXPECT_EQ(device.allocations(), 2);
    EXPECT_EQ(copy.CopyTo(nullptr).values(), Counting(7, 100.f));
    range.SetZero();
    EXPECT_EQ(a.CopyTo(nullptr).values(), std::vector<float>(15, 0.f));
    EXPECT_EQ(copy.CopyTo(nullptr).values(), Counting(7, 100.f));
  }
  EXPECT_EQ(device.allocations(), 0);
  EXPECT_EQ(device.bytes_in_use(), 0);
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

TEST(TensorArenaTest, NothingToPlaceAllocatesNothing) {
  SeparateMemoryAllocator device;
  Tensor none;
  EXPECT_TRUE(PlaceInOneAllocation(&device, {&none}).empty());
  EXPECT_EQ(device.allocations(), 0);
  EXPECT_EQ(ArenaShape(none), (std::vector<int64_t>{0}));
}

}  // namespace
}  // namespace glm
