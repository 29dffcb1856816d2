#include <cuda_bf16.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cutlass_gemm_run.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/grouped_gemm.cuh"

namespace glm::cuda {
namespace {

using Bf16 = cutlass::bfloat16_t;
using RowMajor = cutlass::layout::RowMajor;
using ColumnMajor = cutlass::layout::ColumnMajor;
using ProblemShape =
    cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
using GroupShape = ProblemShape::UnderlyingProblemShape;

// How a kernel's two consumer warpgroups share its tiles.
// Cooperative: both on one 128x256x64 tile (64 rows each), the largest tile
// whose fp32 accumulators fit the registers, so each loaded operand byte
// feeds the most MMAs; CUTLASS's fastest bf16 configuration on Hopper. M is
// the ragged side (a group's rows) in the forward and data-grad GEMMs, where
// 128 rows keep the partial last tile of a small group cheap; N (out or in,
// 768 to 2048 here) is a multiple of 256 or close to one.
struct Cooperative {
  using Tile = cute::Shape<cute::_128, cute::_256, cute::_64>;
  using Mainloop = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using Epilogue = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
};
// Pingpong: each warpgroup its own 128x128x64 tile, one's epilogue running
// while the other's mainloop does. For the weight grad, whose epilogue reads
// and writes fp32 gradients (8 bytes an output) after a mainloop over one
// expert's ~1,000 rows, the two phases take about as long as each other on
// a 128x256 tile: overlapped rather than in turn.
struct Pingpong {
  using Tile = cute::Shape<cute::_128, cute::_128, cute::_64>;
  using Mainloop = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong;
  using Epilogue = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
};
// Clusters of two CTAs along M: both need the same B tile (a slab of the
// expert's weight in the forward and data grad), which TMA multicasts to the
// pair, halving its L2 traffic. A group with an odd number of M tiles leaves
// one CTA of its last cluster idle, a small loss at ~1000 rows per expert.
using ClusterShape = cute::Shape<cute::_2, cute::_1, cute::_1>;

// The grouped GEMM for one operand layout pair. ElementC void: no source,
// D = A B; float: D = A B + C with C = D (the accumulating calls). ElementD:
// float, or bf16 (the products' outputs the activation type holds, rounded
// to nearest even from the fp32 accumulators).
template <typename LayoutA, typename LayoutB, typename ElementC,
          typename ElementD = float, typename Schedule = Cooperative>
struct GroupedKernel {
  using TileShape = typename Schedule::Tile;
  // 16 bytes of D (and of C) a TMA store or load.
  static constexpr int kAlignD = 16 / sizeof(ElementD);
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape,
      ClusterShape, cutlass::epilogue::collective::EpilogueTileAuto, float,
      float, ElementC, RowMajor*, kAlignD, ElementD, RowMajor*, kAlignD,
      typename Schedule::Epilogue,
      cutlass::epilogue::fusion::LinearCombination<ElementD,
                                                   float>>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Bf16, LayoutA*,
      kGroupedGemmAlign, Bf16, LayoutB*, kGroupedGemmAlign, float, TileShape,
      ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      typename Schedule::Mainloop>::CollectiveOp;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<
      cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>>;
};

// CUTLASS's A is [M, K], B is [N, K], D is [M, N].
// Forward: A = x_e (K-major), B = w_e (K-major, i.e. column-major w_e^T).
using ForwardGemm = GroupedKernel<RowMajor, ColumnMajor, void>::Gemm;
using ForwardBf16Gemm = GroupedKernel<RowMajor, ColumnMajor, void, Bf16>::Gemm;
// Data grad: A = dy_e (K-major), B(n, k) = w_e[k, n] (N-major); written in
// bf16 only (nothing accumulates into a bf16 gradient).
using DataGradGemm = GroupedKernel<RowMajor, RowMajor, float>::Gemm;
using DataGradBf16Gemm = GroupedKernel<RowMajor, RowMajor, void, Bf16>::Gemm;
// Weight grad: A(m, k) = dy_e[k, m] (M-major), B(n, k) = x_e[k, n] (N-major).
using WeightGradGemm =
    GroupedKernel<ColumnMajor, RowMajor, float, float, Pingpong>::Gemm;

// A CUTLASS stride (M or N mode, K mode, batch mode) with its one dynamic
// mode, the leading dimension, set to `ld` elements.
template <typename Stride>
__device__ Stride LeadingStride(int64_t ld) {
  Stride stride{};
  if constexpr (cute::is_static_v<decltype(cute::get<0>(stride))>) {
    cute::get<1>(stride) = ld;
  } else {
    cute::get<0>(stride) = ld;
  }
  return stride;
}

// Where group e's part of an operand starts: at row offsets[e] of a row-side
// operand (x, dy, y, dx), or at row e * expert_rows of a per-expert one (w,
// dw); rows are ld elements apart.
template <typename T>
struct GroupedOperand {
  T* data;
  int64_t ld;
  int64_t expert_rows;  // 0 for row-side operands.

  __device__ T* Start(int64_t e, int64_t first_row) const {
    return data + (expert_rows > 0 ? e * expert_rows : first_row) * ld;
  }
};

// One call's operands and extents. The group's row count is M (forward, data
// grad) or K (weight grad, ragged_k); m, n, k give the other two (the field
// of the ragged one is unused).
template <typename ElementD>
struct GroupedProblem {
  GroupedOperand<const Bf16> a;
  GroupedOperand<const Bf16> b;
  GroupedOperand<ElementD> d;
  int64_t m;
  int64_t n;
  int64_t k;
  bool ragged_k;
};

// The per-group argument arrays CUTLASS reads on the device, in scratch.
template <typename Gemm>
struct GroupArrays {
  using Kernel = typename Gemm::GemmKernel;
  static constexpr bool kAccumulates =
      !std::is_void_v<typename Kernel::ElementC>;

  GroupShape* shapes = nullptr;
  const typename Kernel::ElementA** a = nullptr;
  typename Kernel::InternalStrideA* stride_a = nullptr;
  const typename Kernel::ElementB** b = nullptr;
  typename Kernel::InternalStrideB* stride_b = nullptr;
  const typename Kernel::ElementC** c = nullptr;
  typename Kernel::InternalStrideC* stride_c = nullptr;
  typename Kernel::ElementD** d = nullptr;
  typename Kernel::InternalStrideD* stride_d = nullptr;

  // Lays the arrays out one after another from address `base` and returns
  // the bytes they take (so a first call with base 0 sizes the scratch).
  size_t Place(uintptr_t base, int64_t experts) {
    size_t used = 0;
    auto take = [&](auto*& array) {
      array = reinterpret_cast<std::remove_reference_t<decltype(array)>>(base +
                                                                         used);
      used += ScratchAlignUp(experts * sizeof(*array));
    };
    take(shapes);
    take(a);
    take(stride_a);
    take(b);
    take(stride_b);
    if constexpr (kAccumulates) {
      take(c);
      take(stride_c);
    }
    take(d);
    take(stride_d);
    return used;
  }
};

// Fills group e's shape, pointers and strides from offsets. A group without
// rows gets the empty problem (0, 0, 0): the tile scheduler gives it no tiles,
// so nothing of it is read or written (its dw stays as it was).
template <typename Gemm>
using ProblemOf = GroupedProblem<typename Gemm::GemmKernel::ElementD>;

template <typename Gemm>
__global__ void SetupGroupsKernel(const int32_t* offsets, int64_t experts,
                                  int64_t rows, ProblemOf<Gemm> problem,
                                  GroupArrays<Gemm> arrays) {
  using Kernel = typename Gemm::GemmKernel;
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t e = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < experts;
       e += step) {
    const int64_t first = offsets[e];
    const int64_t end = offsets[e + 1];
    if ((e == 0 && first != 0) || first > end || end > rows ||
        (e + 1 == experts && end != rows)) {
      printf(
          "GroupedGemm: bad offsets at group %lld: [%lld, %lld), rows %lld\n",
          static_cast<long long>(e), static_cast<long long>(first),
          static_cast<long long>(end), static_cast<long long>(rows));
      __trap();
    }
    const int count = static_cast<int>(end - first);
    if (count == 0) {
      arrays.shapes[e] = GroupShape(0, 0, 0);
    } else if (problem.ragged_k) {
      arrays.shapes[e] = GroupShape(static_cast<int>(problem.m),
                                    static_cast<int>(problem.n), count);
    } else {
      arrays.shapes[e] = GroupShape(count, static_cast<int>(problem.n),
                                    static_cast<int>(problem.k));
    }
    arrays.a[e] = problem.a.Start(e, first);
    arrays.stride_a[e] =
        LeadingStride<typename Kernel::InternalStrideA>(problem.a.ld);
    arrays.b[e] = problem.b.Start(e, first);
    arrays.stride_b[e] =
        LeadingStride<typename Kernel::InternalStrideB>(problem.b.ld);
    arrays.d[e] = problem.d.Start(e, first);
    arrays.stride_d[e] =
        LeadingStride<typename Kernel::InternalStrideD>(problem.d.ld);
    if constexpr (GroupArrays<Gemm>::kAccumulates) {
      arrays.c[e] = arrays.d[e];
      arrays.stride_c[e] =
          LeadingStride<typename Kernel::InternalStrideC>(problem.d.ld);
    }
  }
}

// Builds the group arrays on the device, then runs the grouped GEMM, both on
// the context's stream. Scratch: CUTLASS's workspace (per-SM TMA descriptors
// it rewrites per group), then the arrays. An accumulating kernel called
// without `accumulate` runs with beta 0, where its epilogue reads no source.
template <typename Gemm>
void RunGrouped(CudaContext& ctx, const int32_t* offsets, int64_t experts,
                int64_t rows, const ProblemOf<Gemm>& problem,
                bool accumulate = true) {
  using Arrays = GroupArrays<Gemm>;
  int device = 0;
  int sm_count = 0;
  GLM_CUDA_CHECK(cudaGetDevice(&device));
  GLM_CUDA_CHECK(cudaDeviceGetAttribute(
      &sm_count, cudaDevAttrMultiProcessorCount, device));

  typename Gemm::Arguments args;
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  // Device problem shapes only (host shapes nullptr): no host sync.
  args.problem_shape = {static_cast<int>(experts), nullptr, nullptr};
  args.hw_info.device_id = device;
  args.hw_info.sm_count = sm_count;

  const size_t workspace_bytes = ScratchAlignUp(Gemm::get_workspace_size(args));
  Arrays arrays;
  const size_t array_bytes = arrays.Place(0, experts);
  char* scratch =
      static_cast<char*>(ctx.Scratch(workspace_bytes + array_bytes));
  arrays.Place(reinterpret_cast<uintptr_t>(scratch + workspace_bytes), experts);

  SetupGroupsKernel<Gemm>
      <<<GridStrideBlocks(experts), kBlockThreads, 0, ctx.stream()>>>(
          offsets, experts, rows, problem, arrays);
  GLM_CUDA_CHECK_LAUNCH();

  args.problem_shape.problem_shapes = arrays.shapes;
  args.mainloop = {arrays.a, arrays.stride_a, arrays.b, arrays.stride_b};
  args.epilogue.ptr_C = arrays.c;
  args.epilogue.dC = arrays.stride_c;
  args.epilogue.ptr_D = arrays.d;
  args.epilogue.dD = arrays.stride_d;
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = Arrays::kAccumulates && accumulate ? 1.0f : 0.0f;

  RunCutlassGemm<Gemm>("grouped GEMM", args, scratch, ctx.stream());
}

// The calling contract's checks, on in every build: this file compiles with
// NDEBUG (see BUILD), so they cannot be asserts.
#define GLM_GROUPED_GEMM_REQUIRE(cond) Require((cond), #cond, __LINE__)

void Require(bool ok, const char* condition, int line) {
  if (!ok) {
    std::fprintf(stderr, "grouped_gemm.cu:%d: GroupedGemm needs %s\n", line,
                 condition);
    std::abort();
  }
}

bool Aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

void RequireShapes(int64_t experts, int64_t rows, int64_t in, int64_t out) {
  constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
  GLM_GROUPED_GEMM_REQUIRE(experts >= 1 && experts <= kIntMax);
  GLM_GROUPED_GEMM_REQUIRE(rows >= 0 && rows <= kIntMax);
  GLM_GROUPED_GEMM_REQUIRE(in > 0 && in % kGroupedGemmAlign == 0);
  GLM_GROUPED_GEMM_REQUIRE(out > 0 && out % kGroupedGemmAlign == 0);
  GLM_GROUPED_GEMM_REQUIRE(in <= kIntMax && out <= kIntMax);
}

// The bf16 operand as CUTLASS's type (same bits).
const Bf16* Input(const __nv_bfloat16* p) {
  GLM_GROUPED_GEMM_REQUIRE(p != nullptr && Aligned16(p));
  return reinterpret_cast<const Bf16*>(p);
}

void RequireOutput(const MatrixView& v, int64_t rows, int64_t cols) {
  GLM_GROUPED_GEMM_REQUIRE(v.rows == rows && v.cols == cols);
  GLM_GROUPED_GEMM_REQUIRE(v.stride >= cols && GroupedGemmStores(v));
}

// A product whose groups are row ranges of A and D (the forward and the data
// grad): A [rows, k] (rows k apart), B per expert (b_rows rows each, ldb
// apart), D [rows, n] in its view's element type.
template <typename Gemm>
void RunRowGroups(CudaContext& ctx, const Bf16* a, int64_t k, const Bf16* b,
                  int64_t ldb, int64_t b_rows, const int32_t* offsets,
                  int64_t experts, MatrixView d, bool accumulate) {
  using ElementD = typename Gemm::GemmKernel::ElementD;
  ProblemOf<Gemm> problem;
  problem.a = {a, k, 0};
  problem.b = {b, ldb, b_rows};
  problem.d = {reinterpret_cast<ElementD*>(d.data), d.stride, 0};
  problem.m = 0;
  problem.n = d.cols;
  problem.k = k;
  problem.ragged_k = false;
  RunGrouped<Gemm>(ctx, offsets, experts, d.rows, problem, accumulate);
}

}  // namespace

void GroupedGemm(CudaContext& ctx, const __nv_bfloat16* x,
                 const __nv_bfloat16* w, const int32_t* offsets,
                 int64_t experts, int64_t rows, int64_t in, int64_t out,
                 MatrixView y) {
  RequireShapes(experts, rows, in, out);
  RequireOutput(y, rows, out);
  if (y.dtype == ElementType::kBF16) {
    RunRowGroups<ForwardBf16Gemm>(ctx, Input(x), in, Input(w), in, out, offsets,
                                  experts, y, false);
  } else {
    RunRowGroups<ForwardGemm>(ctx, Input(x), in, Input(w), in, out, offsets,
                              experts, y, false);
  }
}

void GroupedGemmDataGrad(CudaContext& ctx, const __nv_bfloat16* dy,
                         const __nv_bfloat16* w, const int32_t* offsets,
                         int64_t experts, int64_t rows, int64_t in, int64_t out,
                         bool accumulate, MatrixView dx) {
  RequireShapes(experts, rows, in, out);
  RequireOutput(dx, rows, in);
  if (dx.dtype == ElementType::kBF16) {
    GLM_GROUPED_GEMM_REQUIRE(!accumulate);
    RunRowGroups<DataGradBf16Gemm>(ctx, Input(dy), out, Input(w), in, out,
                                   offsets, experts, dx, false);
  } else {
    RunRowGroups<DataGradGemm>(ctx, Input(dy), out, Input(w), in, out, offsets,
                               experts, dx, accumulate);
  }
}

void GroupedGemmWeightGrad(CudaContext& ctx, const __nv_bfloat16* dy,
                           const __nv_bfloat16* x, const int32_t* offsets,
                           int64_t experts, int64_t rows, int64_t in,
                           int64_t out, MatrixView dw) {
  RequireShapes(experts, rows, in, out);
  RequireOutput(dw, experts * out, in);
  GLM_GROUPED_GEMM_REQUIRE(dw.dtype == ElementType::kF32);
  ProblemOf<WeightGradGemm> problem;
  problem.a = {Input(dy), out, 0};
  problem.b = {Input(x), in, 0};
  problem.d = {dw.data, dw.stride, out};
  problem.m = out;
  problem.n = in;
  problem.k = 0;
  problem.ragged_k = true;
  RunGrouped<WeightGradGemm>(ctx, offsets, experts, rows, problem);
}

}  // namespace glm::cuda
