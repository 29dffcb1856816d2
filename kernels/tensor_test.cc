#include "kernels/tensor.h"

#include <cmath>
#include <cstdint>
#include <cstring>
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

TEST(TensorTest, Bf16TensorsHoldTwoBytesAnElementAndTheirViewsStepByThem) {
  SeparateMemoryAllocator device;
  Tensor t({3, 5, 6}, &device, ElementType::kBF16);
  EXPECT_EQ(t.dtype(), ElementType::kBF16);
  EXPECT_EQ(t.numel(), 90);
  EXPECT_EQ(device.bytes_in_use(), 90 * 2);
  const MatrixView m = t.Matrix();
  EXPECT_EQ(m.dtype, ElementType::kBF16);
  EXPECT_EQ(m.rows, 15);
  EXPECT_EQ(m.cols, 6);
  const char* base = reinterpret_cast<const char*>(m.data);
  // Row 4, column 2: element 4 * 6 + 2, two bytes each.
  const MatrixView part = m.Rows(4, 3).Columns(2, 3);
  EXPECT_EQ(reinterpret_cast<const char*>(part.data) - base, (4 * 6 + 2) * 2);
  EXPECT_EQ(part.dtype, ElementType::kBF16);
  EXPECT_EQ(reinterpret_cast<const char*>(t.Slab(2).data) - base, 2 * 30 * 2);
  const ConstMatrixView heads = ConstMatrixView(m).SplitRows(2);
  EXPECT_EQ(heads.dtype, ElementType::kBF16);
  EXPECT_EQ(heads.rows, 30);
  EXPECT_EQ(heads.cols, 3);
  // JoinRows undoes SplitRows: the same memory, rows of every head again.
  const MatrixView tokens = m.SplitRows(2).JoinRows(2);
  EXPECT_EQ(tokens.data, m.data);
  EXPECT_EQ(tokens.rows, m.rows);
  EXPECT_EQ(tokens.cols, m.cols);
  EXPECT_EQ(tokens.stride, m.cols);
  EXPECT_EQ(tokens.dtype, ElementType::kBF16);
  // An odd count still gets whole bytes for its last element.
  EXPECT_EQ(Tensor({3}, nullptr, ElementType::kBF16).Matrix().cols, 3);
}

TEST(TensorTest, Bf16CopiesKeepTheirDtypeAndBytes) {
  SeparateMemoryAllocator device;
  Tensor t({2, 3}, &device, ElementType::kBF16);
  const uint16_t bits[6] = {1, 2, 3, 0x3f80, 0xffff, 7};
  device.CopyFromHost(t.Matrix().data, bits, sizeof(bits));
  const Tensor host = t.CopyTo(nullptr);
  EXPECT_EQ(host.dtype(), ElementType::kBF16);
  EXPECT_EQ(host.Matrix().dtype, ElementType::kBF16);
  EXPECT_EQ(std::memcmp(host.Matrix().data, bits, sizeof(bits)), 0);
}

TEST(TensorTest, F32ViewsStayF32) {
  Tensor t({4, 4});
  EXPECT_EQ(t.Matrix().dtype, ElementType::kF32);
  EXPECT_EQ(t.Matrix().Rows(1, 2).Columns(1, 2).Row(1), t.data() + 2 * 4 + 1);
}

}  // namespace
}  // namespace glm
