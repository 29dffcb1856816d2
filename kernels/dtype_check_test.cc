#include "kernels/dtype_check.h"

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace glm {
namespace {

TEST(DtypeCheckTest, F32ViewsAndEmptyViewsPass) {
  Tensor a({2, 3});
  CheckF32("Op", {a.Matrix(), ConstMatrixView()});
  CheckActivation("Op", "x", a.Matrix(), ElementType::kBF16);
  Tensor b({2, 3}, nullptr, ElementType::kBF16);
  CheckActivation("Op", "x", b.Matrix(), ElementType::kBF16);
}

TEST(DtypeCheckDeathTest, ABf16ViewWhereOnlyF32IsTakenNamesTheOpAndOperand) {
  Tensor a({2, 3}), b({2, 3}, nullptr, ElementType::kBF16);
  EXPECT_DEATH(CheckF32("CudaBackend::Copy", {a.Matrix(), b.Matrix()}),
               "CudaBackend::Copy: operand #2 is bf16; the op takes f32 only");
  EXPECT_DEATH(CheckActivation("Op", "x", b.Matrix(), ElementType::kF32),
               "Op: operand x is bf16; the op takes f32 only");
}

// The CPU backend computes in F32 only: its activation type is F32, and a
// BF16 operand, even where a device backend would take one, stops the op
// before it reads anything.
TEST(DtypeCheckDeathTest, TheCpuBackendRefusesBf16Operands) {
  CpuBackend cpu;
  EXPECT_EQ(cpu.ActivationType(), ElementType::kF32);
  Tensor x({2, 3}, nullptr, ElementType::kBF16), w({4, 3}), y({2, 4});
  EXPECT_DEATH(cpu.Linear(x.Matrix(), w.Matrix(), y.Matrix(), false),
               "CpuBackend::Linear: operand #1 is bf16");
  Tensor rstd({2});
  EXPECT_DEATH(
      cpu.RmsNormForward(y.Matrix(), w.data(), 1e-6f, x.Matrix(), rstd.data()),
      "CpuBackend::RmsNormForward: operand #2 is bf16");
}

}  // namespace
}  // namespace glm
