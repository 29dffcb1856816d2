#include <cublasLt.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "kernels/cuda/bf16_copy.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/timed_choice.h"

namespace glm::cuda {
namespace {

// cuBLASLt workspace (lets the heuristic choose split-K algorithms).
constexpr size_t kWorkspaceBytes = size_t{32} << 20;
// After it, the fp32 partial products of a product split over its inner
// dimension (KSlices).
constexpr size_t kPartialBytes = size_t{16} << 20;

// A row-major [rows, cols] matrix as a product reads it: leading dimension
// `ld` in elements of `type`.
struct Operand {
  const void* data;
  int64_t rows;
  int64_t cols;
  int64_t ld;
  cudaDataType_t type;
  int64_t batch_stride = 0;  // elements between batched products' operands
};

// cuBLASLt wants ld >= cols even for a single row, whose stride is free.
int64_t LeadingDim(ConstMatrixView v) {
  assert(v.rows <= 1 || v.stride >= v.cols);
  return std::max(v.stride, v.cols);
}

// bf16 copies pad their rows to 16 bytes, as tensor-core kernels prefer.
int64_t Bf16LeadingDim(int64_t cols) { return (cols + 7) / 8 * 8; }

size_t Bf16Bytes(ConstMatrixView v) {
  return ScratchAlignUp(sizeof(__nv_bfloat16) * v.rows *
                        Bf16LeadingDim(v.cols));
}

// Scratch for one call: the workspace, the partial products, then a bf16 copy
// of each F32 view when products run in bf16.
size_t ScratchBytes(Precision precision,
                    std::initializer_list<ConstMatrixView> views) {
  size_t bytes = kWorkspaceBytes + kPartialBytes;
  if (precision == Precision::kBf16) {
    for (const ConstMatrixView& v : views) {
      if (v.dtype == ElementType::kF32) bytes += Bf16Bytes(v);
    }
  }
  return bytes;
}

// Turns views into operands: the views themselves in fp32 and tf32 modes and
// for BF16 views; in bf16 mode the weights' kept copies, or bf16 copies of
// F32 views made here, each carved out of the scratch after the workspace
// and the partial products.
class OperandMaker {
 public:
  OperandMaker(CudaContext& ctx, void* scratch)
      : ctx_(ctx),
        next_(static_cast<char*>(scratch) + kWorkspaceBytes + kPartialBytes) {}

  Operand Make(ConstMatrixView v) {
    if (v.dtype == ElementType::kBF16) {
      return {v.data, v.rows, v.cols, LeadingDim(v), CUDA_R_16BF};
    }
    if (ctx_.precision() != Precision::kBf16) {
      return {v.data, v.rows, v.cols, LeadingDim(v), CUDA_R_32F};
    }
    if (const __nv_bfloat16* copy = ctx_.Bf16WeightCopy(v)) {
      return {copy, v.rows, v.cols, LeadingDim(v), CUDA_R_16BF};
    }
    auto* out = reinterpret_cast<__nv_bfloat16*>(next_);
    next_ += Bf16Bytes(v);
    const int64_t ld = Bf16LeadingDim(v.cols);
    PackBf16(ctx_, v, nullptr, 1, out, ld);
    return {out, v.rows, v.cols, ld, CUDA_R_16BF};
  }

 private:
  CudaContext& ctx_;
  char* next_;
};

// Largest power of two (up to 256) dividing the address: cuBLASLt's
// heuristic assumes 256-byte alignment unless told otherwise.
uint32_t Alignment(const void* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  return static_cast<uint32_t>(
      std::min<uintptr_t>(256, address & (~address + 1)));
}

// The alignment every batched operand keeps: its first one's, and no more
// than its batch stride in bytes allows.
uint32_t OperandAlignment(const void* data, int64_t batch_stride,
                          size_t element_bytes) {
  const uint32_t first = Alignment(data);
  if (batch_stride == 0) return first;
  const uintptr_t step = static_cast<uintptr_t>(batch_stride) * element_bytes;
  return std::min(first, Alignment(reinterpret_cast<const void*>(step)));
}
uint32_t OperandAlignment(const Operand& o) {
  return OperandAlignment(
      o.data, o.batch_stride,
      o.type == CUDA_R_16BF ? sizeof(__nv_bfloat16) : sizeof(float));
}

// Everything the algorithm choice depends on, in cuBLASLt's column-major
// terms: D [m, n] = op(A) op(B) (+ C), op(A) [m, k], op(B) [k, n].
struct PlanKey {
  cublasLtHandle_t handle;
  cudaDataType_t input_type;
  cudaDataType_t output_type;
  bool tf32;
  bool trans_a;
  bool trans_b;
  int64_t m;
  int64_t n;
  int64_t k;
  int64_t lda;
  int64_t ldb;
  int64_t ldc;
  uint32_t align_a;
  uint32_t align_b;
  uint32_t align_c;
  bool accumulate;
  int64_t batches;
  int64_t stride_a;
  int64_t stride_b;
  int64_t stride_c;

  auto Tie() const {
    return std::tie(handle, input_type, output_type, tf32, trans_a, trans_b, m,
                    n, k, lda, ldb, ldc, align_a, align_b, align_c, accumulate,
                    batches, stride_a, stride_b, stride_c);
  }
  bool operator<(const PlanKey& other) const { return Tie() < other.Tie(); }
};

// Descriptors and the algorithm for one PlanKey: the heuristic's first
// choice until a call has timed the others it lists (`untried`, for the
// products TimedProduct admits). Plans live for the whole process, in the
// cache below.
struct Plan {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a;
  cublasLtMatrixLayout_t b;
  cublasLtMatrixLayout_t c;
  cublasLtMatmulAlgo_t algo;
  std::vector<cublasLtMatmulAlgo_t> untried;
};

// Algorithms of the heuristic's list a timed product tries, its first choice
// among them; one is kept where it beats the first by kTunedMargin.
constexpr int kAlgorithmsListed = 8;
constexpr float kTunedMargin = 0.95f;
// Products of this many FLOPs and more are timed: a few hundred microseconds
// each, where a better tile or schedule pays back the timing within a step.
constexpr double kTimedFlops = 1e10;

template <typename T>
void SetDescAttribute(cublasLtMatmulDesc_t desc,
                      cublasLtMatmulDescAttributes_t attribute,
                      const T& value) {
  GLM_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
}

template <typename T>
void SetPreference(cublasLtMatmulPreference_t preference,
                   cublasLtMatmulPreferenceAttributes_t attribute,
                   const T& value) {
  GLM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, attribute,
                                                        &value, sizeof(value)));
}

// One matrix of `batches` (at `batch_stride` elements from each other).
cublasLtMatrixLayout_t MakeLayout(cudaDataType_t type, int64_t rows,
                                  int64_t cols, int64_t ld, int64_t batches,
                                  int64_t batch_stride) {
  cublasLtMatrixLayout_t layout;
  GLM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type,
                                              static_cast<uint64_t>(rows),
                                              static_cast<uint64_t>(cols), ld));
  if (batches > 1) {
    const int32_t count = static_cast<int32_t>(batches);
    GLM_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    GLM_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride,
        sizeof(batch_stride)));
  }
  return layout;
}

// cuBLASLt's algorithms for the plan, its first choice first: one, or up to
// kAlgorithmsListed where `more`.
std::vector<cublasLtMatmulAlgo_t> ChooseAlgorithms(const PlanKey& key,
                                                   const Plan& plan,
                                                   bool more) {
  cublasLtMatmulPreference_t preference;
  GLM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  SetPreference(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                uint64_t{kWorkspaceBytes});
  SetPreference(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                key.align_a);
  SetPreference(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                key.align_b);
  SetPreference(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                key.align_c);
  SetPreference(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                key.align_c);
  cublasLtMatmulHeuristicResult_t results[kAlgorithmsListed];
  int found = 0;
  GLM_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(
      key.handle, plan.desc, plan.a, plan.b, plan.c, plan.c, preference,
      more ? kAlgorithmsListed : 1, results, &found));
  GLM_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(preference));
  if (found == 0) {
    std::fprintf(stderr,
                 "cuBLASLt has no algorithm for m=%lld n=%lld k=%lld "
                 "(lda=%lld ldb=%lld ldc=%lld)\n",
                 static_cast<long long>(key.m), static_cast<long long>(key.n),
                 static_cast<long long>(key.k), static_cast<long long>(key.lda),
                 static_cast<long long>(key.ldb),
                 static_cast<long long>(key.ldc));
    std::abort();
  }
  std::vector<cublasLtMatmulAlgo_t> algorithms;
  for (int i = 0; i < found; ++i) algorithms.push_back(results[i].algo);
  return algorithms;
}

// Whether a product's first call times the algorithms cuBLASLt lists: a
// large one that writes its output (an accumulating product would add its
// result again on every timed run), where the context allows the choice.
bool TimedProduct(const CudaContext& ctx, const PlanKey& key) {
  return ctx.time_products() && !key.accumulate &&
         2.0 * key.m * key.n * key.k * key.batches >= kTimedFlops;
}

// fp32 accumulation and scale type in every precision: CUBLAS_COMPUTE_32F
// never uses TF32 (unless asked with the FAST_TF32 compute type), and bf16
// inputs accumulate in fp32 into fp32 outputs (or bf16 ones, rounded once).
Plan MakePlan(const PlanKey& key, bool timed) {
  Plan plan;
  GLM_CUBLAS_CHECK(cublasLtMatmulDescCreate(
      &plan.desc, key.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
      CUDA_R_32F));
  SetDescAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA,
                   key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
  SetDescAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB,
                   key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
  const int64_t batches = key.batches;
  plan.a = key.trans_a ? MakeLayout(key.input_type, key.k, key.m, key.lda,
                                    batches, key.stride_a)
                       : MakeLayout(key.input_type, key.m, key.k, key.lda,
                                    batches, key.stride_a);
  plan.b = key.trans_b ? MakeLayout(key.input_type, key.n, key.k, key.ldb,
                                    batches, key.stride_b)
                       : MakeLayout(key.input_type, key.k, key.n, key.ldb,
                                    batches, key.stride_b);
  plan.c =
      MakeLayout(key.output_type, key.m, key.n, key.ldc, batches, key.stride_c);
  std::vector<cublasLtMatmulAlgo_t> algorithms =
      ChooseAlgorithms(key, plan, timed);
  plan.algo = algorithms.front();
  plan.untried.assign(algorithms.begin() + 1, algorithms.end());
  return plan;
}

// The plan for `key`, made on first use. A process-wide cache (never
// destroyed: plans may be used until exit); the mutex lets several threads,
// each with its own context, share it.
// A plan is used by its handle's thread only (the key holds the handle), so
// the call that times it may change it outside the lock.
Plan& CachedPlan(const PlanKey& key, bool timed) {
  static std::mutex mutex;
  static auto* plans = new std::map<PlanKey, Plan>();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = plans->find(key);
  if (it == plans->end()) it = plans->emplace(key, MakePlan(key, timed)).first;
  return it->second;
}

// Times the plan's first choice and each untried algorithm on the call's own
// operands (`run` issues the product with an algorithm; each run writes the
// same output, which the call then writes again), keeps the fastest where it
// beats the first choice by kTunedMargin, and prints the table. Runs only
// outside a capture: the timing waits for the device.
template <typename Run>
void TimeAlgorithms(CudaContext& ctx, const PlanKey& key, Plan& plan,
                    const Run& run) {
  if (StreamCapturing(ctx.stream())) return;
  std::vector<cublasLtMatmulAlgo_t> algorithms = {plan.algo};
  algorithms.insert(algorithms.end(), plan.untried.begin(), plan.untried.end());
  plan.untried.clear();
  const std::vector<float> ms = TimeCandidates(
      ctx.stream(), algorithms.size(),
      [&](size_t i) { return run(algorithms[i]) == CUBLAS_STATUS_SUCCESS; },
      [&](size_t i) { GLM_CUBLAS_CHECK(run(algorithms[i])); });
  const size_t pick = PickCandidate(ms, kTunedMargin);
  plan.algo = algorithms[pick];
  std::fprintf(
      stderr,
      "cuBLASLt: %zu algorithms for m=%lld n=%lld k=%lld batches=%lld, "
      "ms each:",
      algorithms.size(), static_cast<long long>(key.m),
      static_cast<long long>(key.n), static_cast<long long>(key.k),
      static_cast<long long>(key.batches));
  for (size_t i = 0; i < algorithms.size(); ++i) {
    std::fprintf(stderr, " %s%.3f", i == pick ? "*" : "", ms[i]);
  }
  std::fprintf(stderr, "\n");
}

// Row-major C = op(A) op(B) (+ C when accumulate; + addend instead where
// given, an F32 matrix of C's layout that the epilogue reads), op
// transposing where the flag says so; `batches` such products when more
// than one, operand i of each at i times its batch stride (c_stride for C).
// cuBLASLt is column-major, where a row-major matrix is its transpose: it
// computes C^T = op(B)^T op(A)^T, B as its first operand.
void CublasMatmul(CudaContext& ctx, const Operand& a, bool trans_a,
                  const Operand& b, bool trans_b, MatrixView c, bool accumulate,
                  void* workspace, int64_t batches = 1, int64_t c_stride = 0,
                  const float* addend = nullptr) {
  const int64_t k = trans_a ? a.rows : a.cols;
  assert((trans_a ? a.cols : a.rows) == c.rows);
  assert((trans_b ? b.cols : b.rows) == k);
  assert((trans_b ? b.rows : b.cols) == c.cols);
  assert(a.type == b.type);
  // A BF16 output (the activation type) is the fp32 result rounded once.
  const bool bf16_out = c.dtype == ElementType::kBF16;
  assert(!(bf16_out && (accumulate || addend != nullptr)));
  const PlanKey key{
      ctx.cublas_lt(),
      a.type,
      bf16_out ? CUDA_R_16BF : CUDA_R_32F,
      ctx.precision() == Precision::kTf32,
      trans_b,
      trans_a,
      c.cols,
      c.rows,
      k,
      b.ld,
      a.ld,
      LeadingDim(c),
      OperandAlignment(b),
      OperandAlignment(a),
      std::min(OperandAlignment(c.data, c_stride, ElementBytes(c.dtype)),
               addend != nullptr
                   ? OperandAlignment(addend, c_stride, ElementBytes(c.dtype))
                   : uint32_t{256}),
      accumulate || addend != nullptr,
      batches,
      b.batch_stride,
      a.batch_stride,
      c_stride};
  const bool timed = TimedProduct(ctx, key);
  Plan& plan = CachedPlan(key, timed);
  const float alpha = 1.f;
  const float beta = accumulate || addend != nullptr ? 1.f : 0.f;
  const void* c_in = addend != nullptr ? addend : c.data;
  auto run = [&](const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(key.handle, plan.desc, &alpha, b.data, plan.a, a.data,
                          plan.b, &beta, c_in, plan.c, c.data, plan.c, &algo,
                          workspace, kWorkspaceBytes, ctx.stream());
  };
  if (timed && !plan.untried.empty()) TimeAlgorithms(ctx, key, plan, run);
  GLM_CUBLAS_CHECK(run(plan.algo));
}

// How many slices of its inner dimension k a product with an fp32 output
// [m, n] runs as. One whose output is a few tiles over a long k can leave
// most SMs idle: the indexer KL loss's key gradients ([key_end, 128] summed
// over count * 32 rows) and narrow weight gradients ([32, 2048] over 4,096
// tokens) are a few dozen 128x128 tiles on an H200's 132 SMs. Such a
// product runs as one batched product over equal slices of k, about two
// waves of 128x128 tiles in all, each slice at least kMinSlice deep and a
// multiple of 8 (16-byte aligned batches), its partials within
// kPartialBytes. A function of the shapes alone: every product here stays
// deterministic.
int64_t KSlices(int64_t m, int64_t n, int64_t k) {
  constexpr int64_t kTile = 128, kTargetTiles = 256, kMaxSlices = 16,
                    kMinSlice = 512;
  const int64_t tiles = ((m + kTile - 1) / kTile) * ((n + kTile - 1) / kTile);
  int64_t slices = 1;
  while (2 * slices <= kMaxSlices && 2 * slices * tiles <= kTargetTiles &&
         k % (2 * slices * 8) == 0 && k / (2 * slices) >= kMinSlice &&
         2 * slices * m * n * sizeof(float) <= kPartialBytes) {
    slices *= 2;
  }
  return slices;
}

// Slice 0 of `slices` equal slices of an operand's k (its rows when
// k_in_rows, else its columns); the batch stride steps to the next slice.
Operand KSlice(Operand o, bool k_in_rows, int64_t slices) {
  if (k_in_rows) {
    o.rows /= slices;
    o.batch_stride = o.rows * o.ld;
  } else {
    o.cols /= slices;
    o.batch_stride = o.cols;
  }
  return o;
}

// Row-major C = op(A) op(B) (+ C when accumulate, + addend where given), as
// CublasMatmul; a single product with an fp32 C that KSlices splits runs as
// its slices' products into partials in the scratch after the workspace
// (slice s's row i at row i * slices + s), summed into C in slice order.
void Matmul(CudaContext& ctx, const Operand& a, bool trans_a, const Operand& b,
            bool trans_b, MatrixView c, bool accumulate, void* workspace,
            int64_t batches = 1, int64_t c_stride = 0,
            const float* addend = nullptr) {
  const int64_t k = trans_a ? a.rows : a.cols;
  const int64_t slices = batches == 1 && c.dtype == ElementType::kF32
                             ? KSlices(c.rows, c.cols, k)
                             : 1;
  if (slices == 1) {
    CublasMatmul(ctx, a, trans_a, b, trans_b, c, accumulate, workspace, batches,
                 c_stride, addend);
    return;
  }
  auto* partials =
      reinterpret_cast<float*>(static_cast<char*>(workspace) + kWorkspaceBytes);
  CublasMatmul(ctx, KSlice(a, trans_a, slices), trans_a,
               KSlice(b, !trans_b, slices), trans_b,
               MatrixView{partials, c.rows, c.cols, slices * c.cols},
               /*accumulate=*/false, workspace, slices, c.cols);
  if (addend != nullptr) {
    Copy(ctx, ConstMatrixView{addend, c.rows, c.cols, c.stride}, c);
  } else if (!accumulate) {
    Zero(ctx, c);
  }
  SumRowGroups(ctx, ConstMatrixView{partials, c.rows * slices, c.cols, c.cols},
               slices, c);
}

}  // namespace

void Linear(CudaContext& ctx, ConstMatrixView x, ConstMatrixView w,
            MatrixView y, bool accumulate) {
  assert(x.cols == w.cols && y.rows == x.rows && y.cols == w.rows);
  if (x.rows == 0 || w.rows == 0) return;
  if (x.cols == 0) {
    if (!accumulate) Zero(ctx, y);
    return;
  }
  void* scratch = ctx.Scratch(ScratchBytes(ctx.precision(), {x, w}));
  OperandMaker operands(ctx, scratch);
  const Operand x_op = operands.Make(x);
  const Operand w_op = operands.Make(w);
  Matmul(ctx, x_op, /*trans_a=*/false, w_op, /*trans_b=*/true, y, accumulate,
         scratch);
}

void LinearAdd(CudaContext& ctx, ConstMatrixView x, ConstMatrixView w,
               ConstMatrixView addend, MatrixView y) {
  assert(x.cols == w.cols && y.rows == x.rows && y.cols == w.rows);
  assert(addend.rows == y.rows && addend.cols == y.cols);
  assert(addend.stride == y.stride && y.dtype == ElementType::kF32);
  if (x.rows == 0 || w.rows == 0) return;
  const auto* add = static_cast<const float*>(addend.data);
  if (x.cols == 0) {
    if (add != y.data) Copy(ctx, addend, y);
    return;
  }
  void* scratch = ctx.Scratch(ScratchBytes(ctx.precision(), {x, w}));
  OperandMaker operands(ctx, scratch);
  const Operand x_op = operands.Make(x);
  const Operand w_op = operands.Make(w);
  Matmul(ctx, x_op, /*trans_a=*/false, w_op, /*trans_b=*/true, y,
         /*accumulate=*/false, scratch, 1, 0, add);
}

void InterleavedLinear(CudaContext& ctx, ConstMatrixView x, ConstMatrixView w,
                       int64_t groups, float* y) {
  assert(x.cols == w.cols && groups > 0);
  assert(x.rows % groups == 0 && w.rows % groups == 0);
  const int64_t n = x.rows / groups, m = w.rows / groups;
  if (n == 0 || m == 0) return;
  assert(x.cols > 0);
  void* scratch = ctx.Scratch(ScratchBytes(ctx.precision(), {x, w}));
  OperandMaker operands(ctx, scratch);
  // Group h's rows of a made operand: every groups-th row from row h.
  auto group_rows = [&](Operand o, int64_t rows) {
    o.batch_stride = o.ld;
    o.ld *= groups;
    o.rows = rows;
    return o;
  };
  const Operand x_op = group_rows(operands.Make(x), n);
  const Operand w_op = group_rows(operands.Make(w), m);
  Matmul(ctx, x_op, /*trans_a=*/false, w_op, /*trans_b=*/true,
         MatrixView{y, n, m, m}, /*accumulate=*/false, scratch, groups, n * m);
}

namespace {

// dx += dy w (dx = dy w for a BF16 dx); dw += dy^T x for dy already an
// operand; scratch holds the workspace (and the operand copies `operands`
// makes).
void BackwardProducts(CudaContext& ctx, const Operand& dy, ConstMatrixView x,
                      ConstMatrixView w, MatrixView dx, MatrixView dw,
                      OperandMaker& operands, void* scratch) {
  if (!dx.empty()) {
    Matmul(ctx, dy, /*trans_a=*/false, operands.Make(w), /*trans_b=*/false, dx,
           /*accumulate=*/dx.dtype == ElementType::kF32, scratch);
  }
  if (!dw.empty()) {
    Matmul(ctx, dy, /*trans_a=*/true, operands.Make(x), /*trans_b=*/false, dw,
           /*accumulate=*/true, scratch);
  }
}

bool NothingToDo(ConstMatrixView x, ConstMatrixView w, MatrixView dx,
                 MatrixView dw) {
  assert(dx.empty() || (dx.rows == x.rows && dx.cols == x.cols));
  assert(dw.empty() || (dw.rows == w.rows && dw.cols == w.cols));
  return x.rows == 0 || w.rows == 0 || x.cols == 0 ||
         (dx.empty() && dw.empty());
}

}  // namespace

void LinearBackward(CudaContext& ctx, ConstMatrixView x, ConstMatrixView w,
                    ConstMatrixView dy, MatrixView dx, MatrixView dw) {
  assert(x.cols == w.cols && dy.rows == x.rows && dy.cols == w.rows);
  if (NothingToDo(x, w, dx, dw)) return;
  // Only the operands a wanted gradient reads get bf16 copies.
  const ConstMatrixView none;
  void* scratch = ctx.Scratch(ScratchBytes(
      ctx.precision(), {dy, dx.empty() ? none : w, dw.empty() ? none : x}));
  OperandMaker operands(ctx, scratch);
  BackwardProducts(ctx, operands.Make(dy), x, w, dx, dw, operands, scratch);
}

void LinearBackwardBf16(CudaContext& ctx, ConstMatrixView x, ConstMatrixView w,
                        const __nv_bfloat16* dy, int64_t dy_ld, MatrixView dx,
                        MatrixView dw) {
  assert(ctx.precision() == Precision::kBf16 && x.cols == w.cols);
  assert(dy_ld >= w.rows);
  if (NothingToDo(x, w, dx, dw)) return;
  const ConstMatrixView none;
  void* scratch = ctx.Scratch(ScratchBytes(
      ctx.precision(), {dx.empty() ? none : w, dw.empty() ? none : x}));
  OperandMaker operands(ctx, scratch);
  const Operand dy_op{dy, x.rows, w.rows, dy_ld, CUDA_R_16BF};
  BackwardProducts(ctx, dy_op, x, w, dx, dw, operands, scratch);
}

}  // namespace glm::cuda
