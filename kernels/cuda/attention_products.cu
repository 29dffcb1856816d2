#include <cuda_bf16.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "kernels/cuda/attention_products.cuh"
#include "kernels/cuda/causal_tile_scheduler.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cutlass_gemm_run.cuh"
#include "kernels/cuda/device_math.cuh"

namespace glm::cuda {
namespace {

using Bf16 = cutlass::bfloat16_t;
using cute::_0;
using cute::_1;
using RowMajor = cutlass::layout::RowMajor;
using ColumnMajor = cutlass::layout::ColumnMajor;
namespace fusion = cutlass::epilogue::fusion;
constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

// (M or N, K, head) strides of a CUTLASS operand: rows `ld` apart with the
// other mode contiguous (RowStride), or the transpose (ColStride).
using RowStride = cute::Stride<int64_t, _1, int64_t>;
using ColStride = cute::Stride<_1, int64_t, int64_t>;
// The bias: one [queries, keys] matrix that every head reads.
using SharedRowStride = cute::Stride<int64_t, _1, _0>;
// (M, N, K, heads).
using ProblemShape = cute::Shape<int, int, int, int>;
using Cluster = cute::Shape<_1, _1, _1>;
constexpr int kAlign = 8;  // bf16 elements in 16 bytes

// exp of each element (ex2.approx of x log2 e: about 2 ulp in the range
// softmax weights live in).
template <typename T>
struct Exp {
  CUTLASS_DEVICE T operator()(T const& x) const { return __expf(x); }
};
template <typename T, int N>
struct Exp<cutlass::Array<T, N>> {
  CUTLASS_DEVICE cutlass::Array<T, N> operator()(
      cutlass::Array<T, N> const& x) const {
    cutlass::Array<T, N> y;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) y[i] = __expf(x[i]);
    return y;
  }
};

template <template <class> class Fn, typename Out = float>
using Compute = fusion::Sm90Compute<Fn, Out, float, kRound>;
using Scale = fusion::Sm90ScalarBroadcast<float>;
// A per-query value of each head ([heads, ld] floats): broadcast along keys.
template <typename Tile>
using QueryColumn = fusion::Sm90ColBroadcast<0, Tile, float, float,
                                             cute::Stride<_1, _0, int64_t>>;

// P = exp(scale acc + C - stats), C the bias.
template <typename Tile>
using ProbsFusion = fusion::Sm90EVT<
    Compute<Exp, Bf16>,
    fusion::Sm90EVT<
        Compute<cutlass::minus>,
        fusion::Sm90EVT<Compute<cutlass::homogeneous_multiply_add>, Scale,
                        fusion::Sm90AccFetch, fusion::Sm90SrcFetch<Bf16>>,
        QueryColumn<Tile>>>;

// dS = (scale C) (acc - delta), C the probabilities.
template <typename Tile>
using GradsFusion =
    fusion::Sm90EVT<Compute<cutlass::multiplies, Bf16>,
                    fusion::Sm90EVT<Compute<cutlass::multiplies>, Scale,
                                    fusion::Sm90SrcFetch<Bf16>>,
                    fusion::Sm90EVT<Compute<cutlass::minus>,
                                    fusion::Sm90AccFetch, QueryColumn<Tile>>>;

// The gradient products write D = acc (beta 0: their epilogue reads no C).
using Sum = fusion::LinearCombination<Bf16, float, Bf16, float>;

// Pingpong for the softmax products (K = a head's width, 4 k-tiles at 256:
// each warpgroup's exp epilogue runs while the other's mainloop does);
// cooperative 128x256 tiles for the gradient products (long K, N = the
// head's width).
struct Pingpong {
  using Tile = cute::Shape<cute::_128, cute::_128, cute::_64>;
  using Mainloop = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using Epilogue = cutlass::epilogue::TmaWarpSpecialized;
};
struct Cooperative {
  using Tile = cute::Shape<cute::_128, cute::_256, cute::_64>;
  using Mainloop = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using Epilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
};

// CUTLASS's epilogue for a schedule (its stages CUTLASS's choice).
template <typename Schedule, typename StrideC, typename Fusion,
          typename EpilogueTile =
              cutlass::epilogue::collective::EpilogueTileAuto>
using BuiltEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    typename Schedule::Tile, Cluster, EpilogueTile, float, float, Bf16, StrideC,
    kAlign, Bf16, RowStride, kAlign, typename Schedule::Epilogue,
    Fusion>::CollectiveOp;

// The softmax products' epilogue works on whole 64x128 halves of a
// warpgroup's tile: at glm5.2-mini (H200) 59-61 us a call against 69 with
// 64x64 and 63-69 for cooperative 128x256 tiles with 128x64 subtiles
// (bench/NOTES.md, 2026-12-04, seventeenth session).
using SoftmaxEpilogueTile = cute::Shape<cute::_64, cute::_128>;
template <typename StrideC, typename Fusion>
using SoftmaxEpilogue =
    BuiltEpilogue<Pingpong, StrideC, Fusion, SoftmaxEpilogueTile>;

template <typename Schedule, CausalTiles kTiles, typename LayoutA,
          typename LayoutB, typename Epilogue>
struct HeadGemm {
  using Tile = typename Schedule::Tile;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Bf16, LayoutA,
      kAlign, Bf16, LayoutB, kAlign, float, Tile, Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename Epilogue::SharedStorage))>,
      typename Schedule::Mainloop>::CollectiveOp;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<
      cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue,
                                           CausalScheduler<kTiles>>>;
};

// CUTLASS's A is [M, K], B is [N, K], D is [M, N]; per head h, over the
// causal tiles (the square 128x128 ones with key tile <= query tile):
// P = Q K^T: A = Q_h (K-major), B = K_h (K-major), C = the bias.
using ProbsGemm = HeadGemm<
    Pingpong, CausalTiles::kLowerTriangle, RowMajor, ColumnMajor,
    SoftmaxEpilogue<SharedRowStride, ProbsFusion<Pingpong::Tile>>>::Gemm;
// dS from dO V^T: A = dO_h, B = V_h (both K-major), C = P_h.
using GradsGemm =
    HeadGemm<Pingpong, CausalTiles::kLowerTriangle, RowMajor, ColumnMajor,
             SoftmaxEpilogue<RowStride, GradsFusion<Pingpong::Tile>>>::Gemm;
// dV = P^T dO, dK = dS^T Q over the queries from the key tile's first:
// A(key, query) = P_h or dS_h (M-major), B(dim, query) = dO_h or Q_h
// (N-major).
using KeyGradGemm =
    HeadGemm<Cooperative, CausalTiles::kQueriesFromKey, ColumnMajor, RowMajor,
             BuiltEpilogue<Cooperative, RowStride, Sum>>::Gemm;
// dQ = dS K over the keys up to the query tile's last: A = dS_h (K-major),
// B(dim, key) = K_h (N-major).
using QueryGradGemm =
    HeadGemm<Cooperative, CausalTiles::kKeysToQuery, RowMajor, RowMajor,
             BuiltEpilogue<Cooperative, RowStride, Sum>>::Gemm;
static_assert(cute::size<0>(Pingpong::Tile{}) ==
                  cute::size<0>(Cooperative::Tile{}),
              "the gradient products read the softmax products' tiles whole");

template <typename Gemm>
void Run(CudaContext& ctx, const char* name, typename Gemm::Arguments& args,
         void* workspace) {
  int device = 0;
  GLM_CUDA_CHECK(cudaGetDevice(&device));
  args.mode = cutlass::gemm::GemmUniversalMode::kBatched;
  args.hw_info.device_id = device;
  args.hw_info.sm_count =
      cutlass::KernelHardwareInfo::query_device_multiprocessor_count(device);
  if (Gemm::get_workspace_size(args) > kAttentionProductsWorkspaceBytes) {
    std::fprintf(stderr, "attention products: %s wants %zu workspace bytes\n",
                 name, Gemm::get_workspace_size(args));
    std::abort();
  }
  RunCutlassGemm<Gemm>(name, args, workspace, ctx.stream());
}

const Bf16* In(const __nv_bfloat16* p) {
  return reinterpret_cast<const Bf16*>(p);
}
Bf16* Out(__nv_bfloat16* p) { return reinterpret_cast<Bf16*>(p); }

// Head h's [rows, cols] matrix of a token-major, head-minor operand: rows
// heads * stride apart, heads stride apart.
RowStride HeadRowStride(int64_t heads, int64_t stride) {
  return {heads * stride, _1{}, stride};
}
ColStride HeadColStride(int64_t heads, int64_t stride) {
  return {_1{}, heads * stride, stride};
}

// The scales CUTLASS's scalar broadcast takes: {value}, no pointer.
typename Scale::Arguments ScaleArgs(float scale) { return {{scale}, {}, {}}; }

template <typename Column>
typename Column::Arguments ColumnArgs(const float* column, int64_t ld) {
  return {column, 0.f, {_1{}, _0{}, ld}};
}

// Head h's [tokens, tokens] matrix of P or dS.
RowStride PairRows(const AttentionProducts& c) {
  return {c.tokens, _1{}, c.tokens * c.tokens};
}

// (M, N, K, heads) of a product; the pair grid's sides are ints (checked).
ProblemShape Extents(const AttentionProducts& c, int64_t m, int64_t n,
                     int64_t k) {
  return {static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
          static_cast<int>(c.heads)};
}

void Probabilities(CudaContext& ctx, const AttentionProducts& c) {
  using Tile = Pingpong::Tile;
  typename ProbsGemm::Arguments args{};
  args.problem_shape = Extents(c, c.tokens, c.tokens, c.dqk);
  args.mainloop = {In(c.q.data), HeadRowStride(c.heads, c.q.stride),
                   In(c.k.data), HeadRowStride(c.heads, c.k.stride)};
  args.epilogue.thread = {{{ScaleArgs(c.scale), {}, {}, {}},
                           ColumnArgs<QueryColumn<Tile>>(c.stats, c.tokens),
                           {}},
                          {}};
  args.epilogue.ptr_C = In(c.bias);
  args.epilogue.dC = {c.tokens, _1{}, _0{}};
  args.epilogue.ptr_D = Out(c.probs);
  args.epilogue.dD = PairRows(c);
  Run<ProbsGemm>(ctx, "P = exp(scale Q K^T + bias - lse)", args, c.workspace);
}

void ScoreGradients(CudaContext& ctx, const AttentionProducts& c) {
  using Tile = Pingpong::Tile;
  typename GradsGemm::Arguments args{};
  args.problem_shape = Extents(c, c.tokens, c.tokens, c.dv);
  args.mainloop = {In(c.dout.data), HeadRowStride(c.heads, c.dout.stride),
                   In(c.v.data), HeadRowStride(c.heads, c.v.stride)};
  args.epilogue.thread = {
      {ScaleArgs(c.scale), {}, {}},
      {{}, ColumnArgs<QueryColumn<Tile>>(c.delta, c.tokens), {}},
      {}};
  args.epilogue.ptr_C = In(c.probs);
  args.epilogue.dC = PairRows(c);
  args.epilogue.ptr_D = Out(c.grads);
  args.epilogue.dD = PairRows(c);
  Run<GradsGemm>(ctx, "dS = scale P (dO V^T - delta)", args, c.workspace);
}

// A gradient product's epilogue: D = acc into the gradient's head rows (C
// names the same rows; beta 0 reads none).
template <typename Arguments>
void WriteGradient(Arguments& args, HeadGradient d, int64_t heads) {
  args.epilogue.thread.alpha = 1.f;
  args.epilogue.thread.beta = 0.f;
  args.epilogue.ptr_C = Out(d.data);
  args.epilogue.dC = HeadRowStride(heads, d.stride);
  args.epilogue.ptr_D = Out(d.data);
  args.epilogue.dD = HeadRowStride(heads, d.stride);
}

// d = pairs^T x: d [tokens, cols] per head, pairs [tokens, tokens] per
// head, x the queries' rows (dO for dV, Q for dK).
void KeyGradient(CudaContext& ctx, const AttentionProducts& c,
                 const __nv_bfloat16* pairs, HeadRows x, int64_t cols,
                 HeadGradient d, const char* name) {
  typename KeyGradGemm::Arguments args{};
  args.problem_shape = Extents(c, c.tokens, cols, c.tokens);
  args.mainloop = {In(pairs), ColStride{_1{}, c.tokens, c.tokens * c.tokens},
                   In(x.data), HeadColStride(c.heads, x.stride)};
  WriteGradient(args, d, c.heads);
  Run<KeyGradGemm>(ctx, name, args, c.workspace);
}

void QueryGradient(CudaContext& ctx, const AttentionProducts& c) {
  typename QueryGradGemm::Arguments args{};
  args.problem_shape = Extents(c, c.tokens, c.dqk, c.tokens);
  args.mainloop = {In(c.grads), PairRows(c), In(c.k.data),
                   HeadColStride(c.heads, c.k.stride)};
  WriteGradient(args, c.dq, c.heads);
  Run<QueryGradGemm>(ctx, "dQ = dS K", args, c.workspace);
}

void RequireSupport(const AttentionProducts& c) {
  if (AttentionProductsSupport(c)) return;
  std::fprintf(stderr,
               "attention products: unsupported call (tokens %lld h%lld "
               "dqk%lld dv%lld)\n",
               static_cast<long long>(c.tokens),
               static_cast<long long>(c.heads), static_cast<long long>(c.dqk),
               static_cast<long long>(c.dv));
  std::abort();
}

// One warp a row: lanes read 8 elements (16 bytes) a step, partial sums
// joined by shuffles (a fixed order).
__global__ void HeadRowDotsKernel(const __nv_bfloat16* out, int64_t out_stride,
                                  const __nv_bfloat16* dout,
                                  int64_t dout_stride, int64_t nq,
                                  int64_t heads, int64_t dv, float* delta,
                                  int64_t ld) {
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x / 32);
  const int lane = threadIdx.x % 32;
  for (int64_t row = int64_t{blockIdx.x} * (blockDim.x / 32) + threadIdx.x / 32;
       row < nq * heads; row += warps) {
    const auto* o = reinterpret_cast<const uint4*>(out + row * out_stride);
    const auto* g = reinterpret_cast<const uint4*>(dout + row * dout_stride);
    float sum = 0.f;
    for (int64_t c = lane; c < dv / 8; c += 32) {
      const uint4 a = o[c], b = g[c];
      const auto* a2 = reinterpret_cast<const __nv_bfloat162*>(&a);
      const auto* b2 = reinterpret_cast<const __nv_bfloat162*>(&b);
      for (int i = 0; i < 4; ++i) {
        const float2 x = __bfloat1622float2(a2[i]),
                     y = __bfloat1622float2(b2[i]);
        sum += x.x * y.x + x.y * y.y;
      }
    }
    for (int offset = 16; offset > 0; offset /= 2) {
      sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    }
    if (lane == 0) delta[(row % heads) * ld + row / heads] = sum;
  }
}

}  // namespace

bool AttentionProductsSupport(const AttentionProducts& c) {
  constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
  auto multiple = [](int64_t x) { return x > 0 && x % kAlign == 0; };
  auto rows = [&](const void* data, int64_t stride) {
    return data != nullptr && AlignedTo(data, 16) && stride % kAlign == 0;
  };
  auto gradient = [&](const HeadGradient& g) {
    return g.data == nullptr || rows(g.data, g.stride);
  };
  return multiple(c.tokens) && multiple(c.dqk) && multiple(c.dv) &&
         c.heads > 0 && c.tokens <= kIntMax && c.heads <= kIntMax &&
         rows(c.q.data, c.q.stride) && rows(c.k.data, c.k.stride) &&
         rows(c.v.data, c.v.stride) && rows(c.dout.data, c.dout.stride) &&
         rows(c.bias, c.tokens) && rows(c.probs, c.tokens) &&
         rows(c.grads, c.tokens) && c.stats != nullptr && c.delta != nullptr &&
         c.workspace != nullptr && gradient(c.dq) && gradient(c.dk) &&
         gradient(c.dv_grad);
}

void RunAttentionProducts(CudaContext& ctx, const AttentionProducts& c) {
  RequireSupport(c);
  Probabilities(ctx, c);
  ScoreGradients(ctx, c);
  if (c.dq.data != nullptr) QueryGradient(ctx, c);
  if (c.dv_grad.data != nullptr) {
    KeyGradient(ctx, c, c.probs, c.dout, c.dv, c.dv_grad, "dV = P^T dO");
  }
  if (c.dk.data != nullptr) {
    KeyGradient(ctx, c, c.grads, c.q, c.dqk, c.dk, "dK = dS^T Q");
  }
}

void HeadRowDots(CudaContext& ctx, HeadRows out, HeadRows dout, int64_t nq,
                 int64_t heads, int64_t dv, float* delta, int64_t ld) {
  if (dv % kAlign != 0 || !AlignedTo(out.data, 16) ||
      !AlignedTo(dout.data, 16) || out.stride % kAlign != 0 ||
      dout.stride % kAlign != 0) {
    std::fprintf(stderr, "HeadRowDots: rows not in 16-byte chunks\n");
    std::abort();
  }
  const int64_t rows = nq * heads;
  if (rows == 0) return;
  constexpr int kWarps = kBlockThreads / 32;
  const auto blocks = static_cast<unsigned int>(
      std::min<int64_t>((rows + kWarps - 1) / kWarps, 65535));
  HeadRowDotsKernel<<<blocks, kBlockThreads, 0, ctx.stream()>>>(
      out.data, out.stride, dout.data, dout.stride, nq, heads, dv, delta, ld);
  GLM_CUDA_CHECK_LAUNCH();
}

}  // namespace glm::cuda
