#include "kernels/tensor.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/separate_memory_allocator.h"

namespace glm {
namespace {

// Device memory that counts the fills tensors ask of it.
class FillCountingAllocator : public SeparateMemoryAllocator {
 public:
  void Fill(void* data, int byte, size_t bytes) override {
    ++fills_;
    SeparateMemoryAllocator::Fill(data, byte, bytes);
  }
  int fills() const { return fills_; }

 private:
  int fills_ = 0;
};

TEST(TensorTest, HostOutputTensorsStartAsNanSoThatEarlyReadsShow) {
  const Tensor t = Tensor::ForOutput({3, 4});
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{3, 4}));
  ASSERT_TRUE(t.on_host());
  for (float x : t.values()) EXPECT_TRUE(std::isnan(x));
  // Plain tensors stay zero-initialized.
  const Tensor zeroed({3, 4});
  for (float x : zeroed.values()) EXPECT_EQ(x, 0.f);
}

TEST(TensorTest, DeviceOutputTensorsAreNotFilled) {
  FillCountingAllocator device;
  AllocatorScope scope(&device);
  Tensor zeroed({5, 2});
  EXPECT_EQ(device.fills(), 1);
  Tensor output = Tensor::ForOutput({5, 2});
  EXPECT_FALSE(output.on_host());
  EXPECT_EQ(output.numel(), 10);
  EXPECT_EQ(device.fills(), PoisonOutputs() ? 2 : 1);
  EXPECT_EQ(device.allocations(), 2);
}

}  // namespace
}  // namespace glm
