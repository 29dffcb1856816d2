// The MoE grouped GEMMs (kernels/cuda/grouped_gemm.cuh) against a host
// reference, then their speed at glm5.2-mini's expert shapes.
//
//   grouped_gemm_check [--device=N]
//
// Each case draws bf16 inputs (never zero) and per-expert row counts, runs
// GroupedGemm, GroupedGemmDataGrad and GroupedGemmWeightGrad, and compares
// each output with a double-precision product of the same bf16 values:
// normalized MSE, sum (gpu - ref)^2 / sum ref^2, at most kMaxNmse. Each output
// view sits inside a larger buffer (a row above, a row below, padding columns);
// elements outside the view must come back bitwise unchanged. The forward
// output starts as NaN, so an element it skips shows; the accumulated
// gradients start random and the reference adds the start in double. The dw of
// an expert without rows must come back bitwise unchanged.
//
// Prints one line per case and output, then a timing table (TFLOP/s counts
// 2 * rows * in * out per GEMM); exits 1 when any check fails.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/grouped_gemm.cuh"
#include "kernels/tensor.h"

namespace glm {
namespace {

constexpr double kMaxNmse = 1e-6;
constexpr int kWarmupReps = 3;
constexpr int kTimedReps = 20;

// The context the ops need and nothing more: a stream and grow-only scratch
// buffers. The grouped GEMMs use no cuBLAS handle.
class CheckContext : public cuda::CudaContext {
 public:
  CheckContext() { GLM_CUDA_CHECK(cudaStreamCreate(&stream_)); }
  ~CheckContext() override {
    GLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    for (Buffer* b : {&scratch_, &composite_scratch_}) {
      GLM_CUDA_CHECK(cudaFree(b->data));
    }
    GLM_CUDA_CHECK(cudaStreamDestroy(stream_));
  }

  cudaStream_t stream() const override { return stream_; }
  cublasLtHandle_t cublas_lt() const override { return nullptr; }
  cuda::Precision precision() const override { return cuda::Precision::kBf16; }
  void* Scratch(size_t bytes) override { return Grow(&scratch_, bytes); }
  void* CompositeScratch(size_t bytes) override {
    return Grow(&composite_scratch_, bytes);
  }
  Allocator* allocator() override {
    std::abort();  // the grouped products leave nothing to their caller
  }
  const __nv_bfloat16* Bf16WeightCopy(ConstMatrixView) const override {
    return nullptr;
  }
  bool recording() const override { return false; }
  void FailRecording(const char*) override {}

 private:
  struct Buffer {
    void* data = nullptr;
    size_t bytes = 0;
  };

  // Work queued on the old buffer finishes before it is freed.
  void* Grow(Buffer* b, size_t bytes) {
    if (bytes > b->bytes) {
      GLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
      GLM_CUDA_CHECK(cudaFree(b->data));
      GLM_CUDA_CHECK(cudaMalloc(&b->data, bytes));
      b->bytes = bytes;
    }
    return b->data;
  }

  cudaStream_t stream_ = nullptr;
  Buffer scratch_;
  Buffer composite_scratch_;
};

// A device array with host copies in and out.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& host) : size_(host.size()) {
    GLM_CUDA_CHECK(cudaMalloc(&data_, Bytes()));
    GLM_CUDA_CHECK(
        cudaMemcpy(data_, host.data(), Bytes(), cudaMemcpyHostToDevice));
  }
  ~DeviceArray() { GLM_CUDA_CHECK(cudaFree(data_)); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* data() const { return data_; }
  std::vector<T> Download() const {
    std::vector<T> host(size_);
    GLM_CUDA_CHECK(
        cudaMemcpy(host.data(), data_, Bytes(), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  size_t Bytes() const { return size_ * sizeof(T); }

  T* data_ = nullptr;
  size_t size_;
};

// A bf16 matrix drawn at random, with its exact values as floats for the
// reference. Magnitudes in [0.25, 1] with random signs: never zero.
struct Bf16Matrix {
  std::vector<__nv_bfloat16> bits;
  std::vector<float> values;
};

Bf16Matrix RandomBf16(int64_t count, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> magnitude(0.25f, 1.0f);
  std::bernoulli_distribution negative(0.5);
  Bf16Matrix m;
  m.bits.resize(count);
  m.values.resize(count);
  for (int64_t i = 0; i < count; ++i) {
    const float v = negative(rng) ? -magnitude(rng) : magnitude(rng);
    m.bits[i] = __float2bfloat16(v);
    m.values[i] = __bfloat162float(m.bits[i]);
  }
  return m;
}

// An fp32 output view inside a buffer with one extra row above and below and
// kPad extra columns: the view's stride stays a multiple of 4 floats and its
// first element 16-byte aligned (row 1 of a cudaMalloc'd buffer).
struct OutputBuffer {
  static constexpr int64_t kPad = 4;

  int64_t rows;
  int64_t cols;
  int64_t stride;
  std::vector<float> start;  // The whole buffer before the op.

  OutputBuffer(int64_t r, int64_t c)
      : rows(r), cols(c), stride(c + kPad), start((r + 2) * (c + kPad)) {}
  bool InView(int64_t i) const {
    const int64_t r = i / stride - 1;
    return r >= 0 && r < rows && i % stride < cols;
  }
  int64_t Index(int64_t r, int64_t c) const { return (r + 1) * stride + c; }
  MatrixView View(float* buffer) const {
    return {buffer + stride, rows, cols, stride};
  }
};

// Random contents everywhere; the view is NaN when the op overwrites it.
void FillStart(OutputBuffer& out, bool poison_view, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (int64_t i = 0; i < static_cast<int64_t>(out.start.size()); ++i) {
    out.start[i] = poison_view && out.InView(i)
                       ? std::numeric_limits<float>::quiet_NaN()
                       : value(rng);
  }
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

struct Shape {
  int64_t experts;
  int64_t in;
  int64_t out;
  std::vector<int64_t> counts;  // Rows per expert.

  int64_t rows() const {
    return std::accumulate(counts.begin(), counts.end(), int64_t{0});
  }
  std::vector<int32_t> Offsets() const {
    std::vector<int32_t> offsets(experts + 1, 0);
    for (int64_t e = 0; e < experts; ++e) {
      offsets[e + 1] = offsets[e] + static_cast<int32_t>(counts[e]);
    }
    return offsets;
  }
};

// The host reference of one output: ref[r * cols + c] for the view's
// elements, start values included.
using Reference = std::vector<double>;

// Where a reference starts: the view's start for an op that accumulates,
// zeros for one that overwrites.
Reference InitialReference(const OutputBuffer& out, bool accumulates) {
  Reference ref(out.rows * out.cols, 0.0);
  if (accumulates) {
    for (int64_t r = 0; r < out.rows; ++r) {
      for (int64_t c = 0; c < out.cols; ++c) {
        ref[r * out.cols + c] = out.start[out.Index(r, c)];
      }
    }
  }
  return ref;
}

// The references work on blocks of up to kRefBlock rows of one expert (or
// kRefBlock dw rows), so each weight or x row read from memory serves the
// whole block: at the mini shapes a row-at-a-time loop would stream every
// expert's weight once per row.
constexpr int64_t kRefBlock = 16;

struct RowBlock {
  int64_t expert;
  int64_t first;
  int64_t count;
};

std::vector<RowBlock> RowBlocks(const Shape& s,
                                const std::vector<int32_t>& offsets) {
  std::vector<RowBlock> blocks;
  for (int64_t e = 0; e < s.experts; ++e) {
    for (int64_t r = offsets[e]; r < offsets[e + 1]; r += kRefBlock) {
      blocks.push_back({e, r, std::min(kRefBlock, offsets[e + 1] - r)});
    }
  }
  return blocks;
}

// y[r] = x[r] w_e^T.
void ForwardReference(const Shape& s, const std::vector<float>& x,
                      const std::vector<float>& w,
                      const std::vector<int32_t>& offsets, Reference& y) {
  const std::vector<RowBlock> blocks = RowBlocks(s, offsets);
  cpu::ParallelFor(
      blocks.size(), s.rows() * s.in * s.out, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          const RowBlock& block = blocks[b];
          for (int64_t o = 0; o < s.out; ++o) {
            const float* wo = &w[(block.expert * s.out + o) * s.in];
            for (int64_t r = block.first; r < block.first + block.count; ++r) {
              const float* xr = &x[r * s.in];
              double sum = 0.0;
              for (int64_t i = 0; i < s.in; ++i) sum += double{xr[i]} * wo[i];
              y[r * s.out + o] += sum;
            }
          }
        }
      });
}

// dx[r] += dy[r] w_e.
void DataGradReference(const Shape& s, const std::vector<float>& dy,
                       const std::vector<float>& w,
                       const std::vector<int32_t>& offsets, Reference& dx) {
  const std::vector<RowBlock> blocks = RowBlocks(s, offsets);
  cpu::ParallelFor(
      blocks.size(), s.rows() * s.in * s.out, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          const RowBlock& block = blocks[b];
          for (int64_t o = 0; o < s.out; ++o) {
            const float* wo = &w[(block.expert * s.out + o) * s.in];
            for (int64_t r = block.first; r < block.first + block.count; ++r) {
              const double g = dy[r * s.out + o];
              double* dxr = &dx[r * s.in];
              for (int64_t i = 0; i < s.in; ++i) dxr[i] += g * wo[i];
            }
          }
        }
      });
}

// dw_e += dy_e^T x_e, kRefBlock dw rows of one expert at a time.
void WeightGradReference(const Shape& s, const std::vector<float>& dy,
                         const std::vector<float>& x,
                         const std::vector<int32_t>& offsets, Reference& dw) {
  const int64_t blocks_per_expert = (s.out + kRefBlock - 1) / kRefBlock;
  cpu::ParallelFor(
      s.experts * blocks_per_expert, s.rows() * s.in * s.out,
      [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          const int64_t expert = b / blocks_per_expert;
          const int64_t first_o = b % blocks_per_expert * kRefBlock;
          const int64_t end_o = std::min(first_o + kRefBlock, s.out);
          for (int64_t r = offsets[expert]; r < offsets[expert + 1]; ++r) {
            const float* xr = &x[r * s.in];
            for (int64_t o = first_o; o < end_o; ++o) {
              const double g = dy[r * s.out + o];
              double* dwr = &dw[(expert * s.out + o) * s.in];
              for (int64_t i = 0; i < s.in; ++i) dwr[i] += g * xr[i];
            }
          }
        }
      });
}

// Compares an op's output buffer with its reference and its start; prints
// one line. `frozen_rows` (view rows that must keep their start bitwise) are
// the dw rows of experts without rows.
bool CheckOutput(const std::string& label, const OutputBuffer& out,
                 const std::vector<float>& got, const Reference& ref,
                 const std::vector<bool>& frozen_rows) {
  double err = 0.0;
  double norm = 0.0;
  int64_t outside_changed = 0;
  int64_t frozen_changed = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(got.size()); ++i) {
    if (!out.InView(i)) {
      outside_changed += !SameBits(got[i], out.start[i]);
      continue;
    }
    const int64_t r = i / out.stride - 1;
    const int64_t c = i % out.stride;
    const double want = ref[r * out.cols + c];
    err += (got[i] - want) * (got[i] - want);
    norm += want * want;
    if (!frozen_rows.empty() && frozen_rows[r]) {
      frozen_changed += !SameBits(got[i], out.start[i]);
    }
  }
  const double nmse = norm > 0.0 ? err / norm : err;
  const bool ok =
      nmse <= kMaxNmse && outside_changed == 0 && frozen_changed == 0;
  std::printf(
      "  %-40s nmse %.3e (limit %.0e)  outside view changed %lld  empty "
      "experts' rows changed %lld  %s\n",
      label.c_str(), nmse, kMaxNmse, static_cast<long long>(outside_changed),
      static_cast<long long>(frozen_changed), ok ? "OK" : "FAIL");
  return ok;
}

// The device copies of a case's inputs and offsets.
struct DeviceCase {
  DeviceArray<__nv_bfloat16> x;
  DeviceArray<__nv_bfloat16> w;
  DeviceArray<__nv_bfloat16> dy;
  DeviceArray<int32_t> offsets;
};

// Runs `op` on an output buffer started from `out.start`; returns the buffer.
template <typename Op>
std::vector<float> RunOp(CheckContext& ctx, const OutputBuffer& out,
                         const Op& op) {
  DeviceArray<float> buffer(out.start);
  op(out.View(buffer.data()));
  GLM_CUDA_CHECK(cudaStreamSynchronize(ctx.stream()));
  return buffer.Download();
}

bool RunCase(CheckContext& ctx, const std::string& name, const Shape& s,
             uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t rows = s.rows();
  std::printf(
      "case %s: experts %lld, rows %lld, in %lld, out %lld, rows per "
      "expert",
      name.c_str(), static_cast<long long>(s.experts),
      static_cast<long long>(rows), static_cast<long long>(s.in),
      static_cast<long long>(s.out));
  for (int64_t c : s.counts) std::printf(" %lld", static_cast<long long>(c));
  std::printf("\n");

  const Bf16Matrix x = RandomBf16(rows * s.in, rng);
  const Bf16Matrix w = RandomBf16(s.experts * s.out * s.in, rng);
  const Bf16Matrix dy = RandomBf16(rows * s.out, rng);
  const std::vector<int32_t> offsets = s.Offsets();
  DeviceCase d{
      DeviceArray<__nv_bfloat16>(x.bits), DeviceArray<__nv_bfloat16>(w.bits),
      DeviceArray<__nv_bfloat16>(dy.bits), DeviceArray<int32_t>(offsets)};
  bool ok = true;

  OutputBuffer y(rows, s.out);
  FillStart(y, /*poison_view=*/true, rng);
  const std::vector<float> y_got = RunOp(ctx, y, [&](MatrixView v) {
    cuda::GroupedGemm(ctx, d.x.data(), d.w.data(), d.offsets.data(), s.experts,
                      rows, s.in, s.out, v);
  });
  Reference y_ref = InitialReference(y, /*accumulates=*/false);
  ForwardReference(s, x.values, w.values, offsets, y_ref);
  ok &= CheckOutput("GroupedGemm y", y, y_got, y_ref, {});

  OutputBuffer dx(rows, s.in);
  FillStart(dx, /*poison_view=*/false, rng);
  const std::vector<float> dx_got = RunOp(ctx, dx, [&](MatrixView v) {
    cuda::GroupedGemmDataGrad(ctx, d.dy.data(), d.w.data(), d.offsets.data(),
                              s.experts, rows, s.in, s.out,
                              /*accumulate=*/true, v);
  });
  Reference dx_ref = InitialReference(dx, /*accumulates=*/true);
  DataGradReference(s, dy.values, w.values, offsets, dx_ref);
  ok &= CheckOutput("GroupedGemmDataGrad dx", dx, dx_got, dx_ref, {});

  OutputBuffer dw(s.experts * s.out, s.in);
  FillStart(dw, /*poison_view=*/false, rng);
  const std::vector<float> dw_got = RunOp(ctx, dw, [&](MatrixView v) {
    cuda::GroupedGemmWeightGrad(ctx, d.dy.data(), d.x.data(), d.offsets.data(),
                                s.experts, rows, s.in, s.out, v);
  });
  Reference dw_ref = InitialReference(dw, /*accumulates=*/true);
  WeightGradReference(s, dy.values, x.values, offsets, dw_ref);
  std::vector<bool> empty_rows(dw.rows, false);
  for (int64_t r = 0; r < dw.rows; ++r) {
    empty_rows[r] = s.counts[r / s.out] == 0;
  }
  ok &= CheckOutput("GroupedGemmWeightGrad dw", dw, dw_got, dw_ref, empty_rows);
  return ok;
}

// `rows` rows spread over `experts` by a skewed draw (expert e's weight
// 1 / (e + 1), so the first experts get several times the mean), expert
// `empty` none.
std::vector<int64_t> SkewedCounts(int64_t experts, int64_t rows, int64_t empty,
                                  uint64_t seed) {
  std::vector<double> weights(experts);
  for (int64_t e = 0; e < experts; ++e) weights[e] = 1.0 / (e + 1);
  weights[empty] = 0.0;
  std::mt19937_64 rng(seed);
  std::discrete_distribution<int64_t> pick(weights.begin(), weights.end());
  std::vector<int64_t> counts(experts, 0);
  for (int64_t r = 0; r < rows; ++r) ++counts[pick(rng)];
  return counts;
}

// Milliseconds per call of `op`, averaged over kTimedReps after warm-up.
template <typename Op>
double TimeMs(CheckContext& ctx, const Op& op) {
  for (int i = 0; i < kWarmupReps; ++i) op();
  cudaEvent_t start;
  cudaEvent_t stop;
  GLM_CUDA_CHECK(cudaEventCreate(&start));
  GLM_CUDA_CHECK(cudaEventCreate(&stop));
  GLM_CUDA_CHECK(cudaEventRecord(start, ctx.stream()));
  for (int i = 0; i < kTimedReps; ++i) op();
  GLM_CUDA_CHECK(cudaEventRecord(stop, ctx.stream()));
  GLM_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0.0f;
  GLM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  GLM_CUDA_CHECK(cudaEventDestroy(start));
  GLM_CUDA_CHECK(cudaEventDestroy(stop));
  return ms / kTimedReps;
}

void PrintTiming(const std::string& shape, const char* gemm, int64_t rows,
                 const Shape& s, double ms) {
  const double flops = 2.0 * rows * s.in * s.out;
  std::printf("| %-8s | %-10s | %6lld | %5lld | %5lld | %8.3f | %7.1f |\n",
              shape.c_str(), gemm, static_cast<long long>(rows),
              static_cast<long long>(s.in), static_cast<long long>(s.out), ms,
              flops / (ms * 1e-3) / 1e12);
}

// Times the three GEMMs at one shape (inputs random, outputs scratch).
void TimeShape(CheckContext& ctx, const std::string& name, const Shape& s) {
  std::mt19937_64 rng(7);
  const int64_t rows = s.rows();
  DeviceArray<__nv_bfloat16> x(RandomBf16(rows * s.in, rng).bits);
  DeviceArray<__nv_bfloat16> w(RandomBf16(s.experts * s.out * s.in, rng).bits);
  DeviceArray<__nv_bfloat16> dy(RandomBf16(rows * s.out, rng).bits);
  DeviceArray<int32_t> offsets(s.Offsets());
  DeviceArray<float> y(std::vector<float>(rows * s.out, 0.0f));
  DeviceArray<float> dx(std::vector<float>(rows * s.in, 0.0f));
  DeviceArray<float> dw(std::vector<float>(s.experts * s.out * s.in, 0.0f));
  const MatrixView yv{y.data(), rows, s.out, s.out};
  const MatrixView dxv{dx.data(), rows, s.in, s.in};
  const MatrixView dwv{dw.data(), s.experts * s.out, s.in, s.in};

  PrintTiming(name, "forward", rows, s, TimeMs(ctx, [&] {
                cuda::GroupedGemm(ctx, x.data(), w.data(), offsets.data(),
                                  s.experts, rows, s.in, s.out, yv);
              }));
  PrintTiming(name, "data grad", rows, s, TimeMs(ctx, [&] {
                cuda::GroupedGemmDataGrad(ctx, dy.data(), w.data(),
                                          offsets.data(), s.experts, rows, s.in,
                                          s.out, /*accumulate=*/true, dxv);
              }));
  PrintTiming(name, "wgt grad", rows, s, TimeMs(ctx, [&] {
                cuda::GroupedGemmWeightGrad(ctx, dy.data(), x.data(),
                                            offsets.data(), s.experts, rows,
                                            s.in, s.out, dwv);
              }));
}

int Main(int argc, char** argv) {
  int device = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--device=", 9) == 0) {
      device = std::atoi(argv[i] + 9);
    } else {
      std::fprintf(stderr, "usage: %s [--device=N]\n", argv[0]);
      return 2;
    }
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines survive a timeout
  GLM_CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop;
  GLM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  std::printf("device %d: %s, %d SMs\n", device, prop.name,
              prop.multiProcessorCount);

  // glm5.2-mini: 32 experts, hidden 2048, moe_intermediate 768; 4096 tokens
  // routed to 8 experts each.
  constexpr int64_t kExperts = 32;
  constexpr int64_t kHidden = 2048;
  constexpr int64_t kMoeIntermediate = 768;
  constexpr int64_t kRoutedRows = 4096 * 8;
  const std::vector<int64_t> mini_counts =
      SkewedCounts(kExperts, kRoutedRows, /*empty=*/5, /*seed=*/11);
  const Shape gate_up{kExperts, kHidden, 2 * kMoeIntermediate, mini_counts};
  const Shape down{kExperts, kMoeIntermediate, kHidden, mini_counts};
  // The host reference in double is checked at an eighth of the routed rows
  // (the same skew): at all of them it takes minutes. backend_ops_check runs
  // the full shapes through the backend against the CPU's BLAS.
  const std::vector<int64_t> checked_counts =
      SkewedCounts(kExperts, kRoutedRows / 8, /*empty=*/5, /*seed=*/11);
  const Shape checked_gate_up{kExperts, kHidden, 2 * kMoeIntermediate,
                              checked_counts};
  const Shape checked_down{kExperts, kMoeIntermediate, kHidden, checked_counts};

  CheckContext ctx;
  struct Case {
    std::string name;
    Shape shape;
  };
  const std::vector<Case> cases = {
      {"tiny ragged", {4, 72, 40, {0, 1, 17, 40}}},
      {"one expert holds every row", {8, 256, 136, {0, 0, 0, 300, 0, 0, 0, 0}}},
      {"mini gate_up, 4096 rows", checked_gate_up},
      {"mini down, 4096 rows", checked_down},
  };
  int failed = 0;
  uint64_t seed = 1;
  for (const Case& c : cases) failed += !RunCase(ctx, c.name, c.shape, seed++);
  std::printf("%zu cases, %d failed\n\n", cases.size(), failed);

  std::printf(
      "| shape    | GEMM       |   rows |    in |   out |       ms | TFLOP/s "
      "|\n");
  std::printf(
      "| -------- | ---------- | ------ | ----- | ----- | -------- | ------- "
      "|\n");
  TimeShape(ctx, "gate_up", gate_up);
  TimeShape(ctx, "down", down);
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace glm

int main(int argc, char** argv) { return glm::Main(argc, argv); }
