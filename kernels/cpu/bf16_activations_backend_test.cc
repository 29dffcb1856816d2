#include "kernels/cpu/bf16_activations_backend.h"

#include <cstdint>
#include <random>
#include <vector>

#include "base/bf16.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace glm {
namespace {

std::vector<float> Random(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> values(n);
  for (float& v : values) v = normal(rng);
  return values;
}

// A host tensor of `dtype` holding `values` (rounded to bf16 for BF16).
Tensor Holding(int64_t rows, int64_t cols, const std::vector<float>& values,
               ElementType dtype) {
  Tensor t({rows, cols}, nullptr, dtype);
  MatrixView m = t.Matrix();
  if (dtype == ElementType::kF32) {
    std::copy(values.begin(), values.end(), m.data);
    return t;
  }
  auto* bits = reinterpret_cast<uint16_t*>(m.data);
  for (size_t i = 0; i < values.size(); ++i) {
    bits[i] = Float32ToBfloat16(values[i]);
  }
  return t;
}

// A tensor's elements as floats (bf16 widened).
std::vector<float> Values(const Tensor& t) {
  const ConstMatrixView m = t.Matrix();
  std::vector<float> values(m.rows * m.cols);
  if (m.dtype == ElementType::kF32) {
    std::copy(m.data, m.data + values.size(), values.begin());
    return values;
  }
  const auto* bits = reinterpret_cast<const uint16_t*>(m.data);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = Bfloat16ToFloat32(bits[i]);
  }
  return values;
}

std::vector<float> RoundedToBf16(std::vector<float> values) {
  for (float& v : values) v = Bfloat16ToFloat32(Float32ToBfloat16(v));
  return values;
}

// A product reads x (bf16), w and dy rounded to bf16 and writes y rounded to
// bf16: the CPU backend's fp32 product of the rounded operands, rounded.
TEST(Bf16ActivationsCpuBackendTest, ProductsReadAndWriteBf16) {
  std::mt19937 rng(5);
  const int64_t n = 6, in = 10, out = 7;
  const std::vector<float> x = Random(n * in, rng), w = Random(out * in, rng),
                           dy = Random(n * out, rng);
  Bf16ActivationsCpuBackend bf16;
  CpuBackend cpu;

  const Tensor xb = Holding(n, in, x, ElementType::kBF16),
               wf = Holding(out, in, w, ElementType::kF32);
  Tensor y =
      Holding(n, out, std::vector<float>(n * out, 9.f), ElementType::kBF16);
  bf16.Linear(xb.Matrix(), wf.Matrix(), y.Matrix(), false);
  const Tensor xr = Holding(n, in, RoundedToBf16(x), ElementType::kF32),
               wr = Holding(out, in, RoundedToBf16(w), ElementType::kF32);
  Tensor want({n, out}, nullptr);
  cpu.Linear(xr.Matrix(), wr.Matrix(), want.Matrix(), false);
  EXPECT_EQ(Values(y), RoundedToBf16(Values(want)));

  // dx in bf16 is written (dy w), not added to what it held.
  Tensor dx =
      Holding(n, in, std::vector<float>(n * in, 5.f), ElementType::kBF16);
  Tensor dw({out, in}, nullptr), want_dx({n, in}, nullptr),
      want_dw({out, in}, nullptr);
  const Tensor dyf = Holding(n, out, dy, ElementType::kF32),
               dyr = Holding(n, out, RoundedToBf16(dy), ElementType::kF32);
  bf16.LinearBackward(xb.Matrix(), wf.Matrix(), dyf.Matrix(), dx.Matrix(),
                      dw.Matrix());
  cpu.LinearBackward(xr.Matrix(), wr.Matrix(), dyr.Matrix(), want_dx.Matrix(),
                     want_dw.Matrix());
  EXPECT_EQ(Values(dx), RoundedToBf16(Values(want_dx)));
  EXPECT_EQ(Values(dw), Values(want_dw));
}

// Strided bf16 views (a column range of each row) are read and written in
// place; the rest of the row is untouched.
TEST(Bf16ActivationsCpuBackendTest, StridedViewsKeepTheirNeighbours) {
  std::mt19937 rng(7);
  const int64_t rows = 4, cols = 12, width = 5, start = 3;
  const std::vector<float> gate = Random(rows * cols, rng),
                           up = Random(rows * width, rng);
  const Tensor g = Holding(rows, cols, gate, ElementType::kBF16),
               u = Holding(rows, width, up, ElementType::kF32);
  Tensor out = Holding(rows, cols, std::vector<float>(rows * cols, 2.f),
                       ElementType::kBF16);
  Bf16ActivationsCpuBackend bf16;
  bf16.SwiGluForward(g.Matrix().Columns(start, width), u.Matrix(),
                     out.Matrix().Columns(start, width));

  std::vector<float> gate_part(rows * width);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < width; ++c) {
      gate_part[r * width + c] = gate[r * cols + start + c];
    }
  }
  const Tensor gr =
      Holding(rows, width, RoundedToBf16(gate_part), ElementType::kF32);
  Tensor want({rows, width}, nullptr);
  CpuBackend().SwiGluForward(gr.Matrix(), u.Matrix(), want.Matrix());
  const std::vector<float> got = Values(out), want_values = Values(want);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const bool inside = c >= start && c < start + width;
      EXPECT_EQ(got[r * cols + c],
                inside ? Bfloat16ToFloat32(Float32ToBfloat16(
                             want_values[r * width + c - start]))
                       : 2.f)
          << r << "," << c;
    }
  }
}

// A bf16 operand where kernels/backend.h allows only F32 is refused, naming
// the op, as the CUDA backend refuses it.
TEST(Bf16ActivationsCpuBackendDeathTest, RefusesBf16WhereOnlyF32IsTaken) {
  const Tensor x =
      Holding(2, 3, std::vector<float>(6, 1.f), ElementType::kBF16);
  Tensor y({2, 3}, nullptr);
  Bf16ActivationsCpuBackend bf16;
  EXPECT_DEATH(bf16.Axpy(1.f, x.Matrix(), y.Matrix()), "CpuBackend::Axpy");
  // An F32 row gathered from a bf16 table: the CUDA backend refuses it too.
  const int32_t ids[] = {1, 0};
  EXPECT_DEATH(bf16.EmbeddingForward(x.Matrix(), ids, y.Matrix()),
               "EmbeddingForward");
}

}  // namespace
}  // namespace glm
