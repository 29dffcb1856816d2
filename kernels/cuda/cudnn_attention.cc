#include "kernels/cuda/cudnn_attention.h"

#include <cuda_bf16.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/attention_pairs.h"
#include "kernels/cuda/attention_mask.cuh"
#include "kernels/cuda/bf16_copy.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/timed_choice.h"

namespace glm::cuda {
namespace fe = cudnn_frontend;

namespace {

#define GLM_CUDNN_CHECK(expr)                                            \
  do {                                                                   \
    const cudnnStatus_t glm_cudnn_status = (expr);                       \
    if (glm_cudnn_status != CUDNN_STATUS_SUCCESS) {                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, \
                   cudnnGetErrorString(glm_cudnn_status));               \
      std::abort();                                                      \
    }                                                                    \
  } while (0)

// The graphs' tensors, by the uids their variant packs name.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kBias, kDO, kDQ, kDK, kDV };

// Token-major, head-minor rows [tokens*heads, dim] as cuDNN's [b=1, heads,
// tokens, dim] (the BSHD layout); consecutive rows `row_stride` elements
// apart (dim: dense).
fe::graph::Tensor_attributes Rows(const char* name, Uid uid, int64_t tokens,
                                  int64_t heads, int64_t dim,
                                  int64_t row_stride) {
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_dim({1, heads, tokens, dim})
      .set_stride(
          {tokens * heads * row_stride, row_stride, heads * row_stride, 1});
}
fe::graph::Tensor_attributes Rows(const char* name, Uid uid, int64_t tokens,
                                  int64_t heads, int64_t dim) {
  return Rows(name, uid, tokens, heads, dim, dim);
}

void SetRows(const std::shared_ptr<fe::graph::Tensor_attributes>& t, Uid uid,
             int64_t tokens, int64_t heads, int64_t dim, int64_t row_stride) {
  t->set_output(true)
      .set_uid(uid)
      .set_dim({1, heads, tokens, dim})
      .set_stride(
          {tokens * heads * row_stride, row_stride, heads * row_stride, 1});
}

fe::graph::Tensor_attributes Stats(int64_t nq, int64_t heads) {
  return fe::graph::Tensor_attributes()
      .set_name("stats")
      .set_uid(kStats)
      .set_dim({1, heads, nq, 1})
      .set_stride({heads * nq, nq, 1, 1})
      .set_data_type(fe::DataType_t::FLOAT);
}

fe::graph::Tensor_attributes Bias(int64_t nq, int64_t nk) {
  return fe::graph::Tensor_attributes()
      .set_name("bias")
      .set_uid(kBias)
      .set_dim({1, 1, nq, nk})
      .set_stride({nq * nk, nq * nk, nk, 1});
}

std::shared_ptr<fe::graph::Graph> NewGraph() {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return graph;
}

// The operands both graphs read: queries, keys, values and, for a masked
// graph, the mask (null otherwise).
struct Inputs {
  std::shared_ptr<fe::graph::Tensor_attributes> q, k, v, bias;
};

// v's rows `v_stride` elements apart (the activation-type values read where
// they lie, as columns of the kv projection's rows).
Inputs AddInputs(fe::graph::Graph& graph, int64_t nq, int64_t nk, int64_t heads,
                 int64_t dqk, int64_t dv, int64_t v_stride, bool masked) {
  return {graph.tensor(Rows("q", kQ, nq, heads, dqk)),
          graph.tensor(Rows("k", kK, nk, heads, dqk)),
          graph.tensor(Rows("v", kV, nk, heads, dv, v_stride)),
          masked ? graph.tensor(Bias(nq, nk)) : nullptr};
}

// kNotCausal, or the causal diagonal's offset: query row i sees keys <= i +
// offset (a chunk of self-attention's queries starting at token `offset`,
// over the keys up to its last query).
constexpr int64_t kNotCausal = -1;

template <typename Attributes>
void SetMask(Attributes& options, const Inputs& in, int64_t causal_offset) {
  if (in.bias != nullptr) options.set_bias(in.bias);
  if (causal_offset == 0) {
    options.set_causal_mask(true);
  } else if (causal_offset > 0) {
    options.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
        .set_diagonal_band_right_bound(static_cast<int>(causal_offset));
  }
}

std::shared_ptr<fe::graph::Graph> ForwardGraph(
    int64_t nq, int64_t nk, int64_t heads, int64_t dqk, int64_t dv,
    int64_t v_stride, float scale, int64_t causal_offset, bool masked) {
  auto graph = NewGraph();
  const Inputs in = AddInputs(*graph, nq, nk, heads, dqk, dv, v_stride, masked);
  auto options = fe::graph::SDPA_attributes()
                     .set_name("sparse_attention")
                     .set_generate_stats(true)
                     .set_attn_scale(scale);
  SetMask(options, in, causal_offset);
  auto [o, stats] = graph->sdpa(in.q, in.k, in.v, options);
  SetRows(o, kO, nq, heads, dv, dv);
  stats->set_output(true)
      .set_uid(kStats)
      .set_dim({1, heads, nq, 1})
      .set_stride({heads * nq, nq, 1, 1})
      .set_data_type(fe::DataType_t::FLOAT);
  return graph;
}

// Deterministic: dK and dV summed without atomics, so two runs are bitwise
// equal.
std::shared_ptr<fe::graph::Graph> BackwardGraph(
    int64_t nq, int64_t nk, int64_t heads, int64_t dqk, int64_t dv,
    int64_t v_stride, float scale, int64_t causal_offset, bool masked) {
  auto graph = NewGraph();
  const Inputs in = AddInputs(*graph, nq, nk, heads, dqk, dv, v_stride, masked);
  auto o = graph->tensor(Rows("o", kO, nq, heads, dv));
  auto dout = graph->tensor(Rows("dout", kDO, nq, heads, dv));
  auto stats = graph->tensor(Stats(nq, heads));
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("sparse_attention_backward")
                     .set_attn_scale(scale)
                     .set_deterministic_algorithm(true);
  SetMask(options, in, causal_offset);
  auto [dq, dk, dv_] =
      graph->sdpa_backward(in.q, in.k, in.v, o, dout, stats, options);
  // dV's rows lie as v's: the kv projection's gradient takes it in place.
  SetRows(dq, kDQ, nq, heads, dqk, dqk);
  SetRows(dk, kDK, nk, heads, dqk, dqk);
  SetRows(dv_, kDV, nk, heads, dv, v_stride);
  return graph;
}

// A call's bf16 operands, statistics, mask and workspace. Operands given in
// bf16 (views of the activation type) are read and written where they lie;
// the others get bf16 copies here.
struct Buffers {
  const __nv_bfloat16 *q, *k, *v;
  __nv_bfloat16 *o, *dout, *dq, *dk, *dv, *bias;
  float* stats;
  int32_t* has_key;
  void* workspace;
};

int64_t CopyElements(ConstMatrixView view) {
  return view.dtype == ElementType::kBF16 ? 0 : view.rows * view.cols;
}

// The rows apart that a plan reads v's rows at: its own stride when v is read
// where it lies (bf16), else the dense copy's.
int64_t VStride(ConstMatrixView v) {
  return v.dtype == ElementType::kBF16 ? v.stride : v.cols;
}

// Whether cuDNN writes a result (the forward's output, a gradient) where it
// lies: bf16 rows `ld` elements apart, as the graph writes them.
bool WrittenInPlace(MatrixView result, int64_t ld) {
  return result.dtype == ElementType::kBF16 && result.stride == ld;
}

// What a chunk's graph writes: the forward its output, the backward the
// gradients.
struct Results {
  MatrixView out, dq, dk, dv;
};

// A chunk without the selection (masked false) gets no mask and no has_key:
// every query there has keys. read_out: the output a backward chunk reads
// (empty: a forward chunk).
Buffers Carve(Carver& carve, ConstMatrixView q, ConstMatrixView k,
              ConstMatrixView v, ConstMatrixView read_out,
              const Results& written, int64_t heads, int64_t workspace_bytes,
              bool masked) {
  const int64_t nq = q.rows / heads, nk = k.rows / heads;
  const bool backward = !read_out.empty();
  // Where cuDNN writes a [rows, cols] result: in place, or a bf16 buffer
  // (also for a gradient nobody asked for: the graph writes it all the same).
  auto result = [&](MatrixView view, int64_t rows, int64_t ld) {
    return WrittenInPlace(view, ld)
               ? reinterpret_cast<__nv_bfloat16*>(view.data)
               : carve.Take<__nv_bfloat16>(rows * ld);
  };
  Buffers b{};
  b.q = carve.Take<__nv_bfloat16>(CopyElements(q));
  b.k = carve.Take<__nv_bfloat16>(CopyElements(k));
  b.v = carve.Take<__nv_bfloat16>(CopyElements(v));
  b.o = backward ? carve.Take<__nv_bfloat16>(CopyElements(read_out))
                 : result(written.out, q.rows, v.cols);
  if (backward) {
    b.dout = carve.Take<__nv_bfloat16>(q.rows * v.cols);
    b.dq = result(written.dq, q.rows, q.cols);
    b.dk = result(written.dk, k.rows, k.cols);
    b.dv = result(written.dv, v.rows, VStride(v));
  }
  b.stats = carve.Take<float>(nq * heads);
  if (masked) {
    b.bias = carve.Take<__nv_bfloat16>(nq * nk);
    b.has_key = carve.Take<int32_t>(nq);
  }
  b.workspace = carve.Take<char>(workspace_bytes);
  return b;
}

Buffers CarveScratch(CudaContext& ctx, ConstMatrixView q, ConstMatrixView k,
                     ConstMatrixView v, ConstMatrixView read_out,
                     const Results& written, int64_t heads,
                     int64_t workspace_bytes, bool masked) {
  Carver sizer;
  Carve(sizer, q, k, v, read_out, written, heads, workspace_bytes, masked);
  Carver carver(static_cast<char*>(ctx.Scratch(sizer.used())));
  return Carve(carver, q, k, v, read_out, written, heads, workspace_bytes,
               masked);
}

// A result from cuDNN's bf16 `buffer` (rows ld elements apart) into `view`:
// unpacked to F32 (added when `add`), or, for a bf16 view, copied unless
// cuDNN wrote it in place; rows r whose token r / rows_per_token has no key
// (keep, when given) get zeros.
void WriteResult(CudaContext& ctx, const __nv_bfloat16* buffer, int64_t ld,
                 const int32_t* keep, int64_t rows_per_token, bool add,
                 MatrixView view) {
  if (view.empty()) return;
  if (view.dtype != ElementType::kBF16) {
    UnpackBf16(ctx, buffer, ld, keep, rows_per_token, add, view);
    return;
  }
  assert(!add);
  if (!WrittenInPlace(view, ld)) {
    Copy(ctx,
         ConstMatrixView(reinterpret_cast<const float*>(buffer), view.rows,
                         view.cols, ld, ElementType::kBF16),
         view);
  }
  if (keep != nullptr) ClearRowsWithoutKeys(ctx, keep, rows_per_token, view);
}

// The view itself when it is bf16 (q, k and the output must be dense rows;
// v may be strided, as the plan says), else a bf16 copy at `copy`.
const __nv_bfloat16* Operand(CudaContext& ctx, ConstMatrixView view,
                             const __nv_bfloat16* copy) {
  if (view.dtype == ElementType::kBF16) {
    return reinterpret_cast<const __nv_bfloat16*>(view.data);
  }
  auto* out = const_cast<__nv_bfloat16*>(copy);
  PackBf16(ctx, view, nullptr, 1, out, view.cols);
  return out;
}

// The mask (of a masked chunk) and the bf16 queries, keys and values both
// passes read.
void PackInputs(CudaContext& ctx, ConstMatrixView q, ConstMatrixView k,
                ConstMatrixView v, const int32_t* keys, int64_t topk,
                int64_t heads, Buffers& b) {
  assert(q.dtype == ElementType::kF32 || q.stride == q.cols);
  assert(k.dtype == ElementType::kF32 || k.stride == k.cols);
  if (b.bias != nullptr) {
    SelectionBias(ctx, keys, q.rows / heads, topk, k.rows / heads, b.bias,
                  b.has_key);
  }
  b.q = Operand(ctx, q, b.q);
  b.k = Operand(ctx, k, b.k);
  b.v = Operand(ctx, v, b.v);
}

void Check(fe::error_t status, const char* what) {
  if (status.is_bad()) {
    std::fprintf(stderr, "cuDNN attention %s: %s\n", what,
                 status.get_message().c_str());
    std::abort();
  }
}

// Calls whose plans are timed against each other. cuDNN's heuristics list a
// few plans and their first is not always the fastest: for glm5.2-mini's
// masked forward (2,048 queries over 4,096 keys) it took 0.51 ms, another of
// the five 0.29 (bench/NOTES.md, 2026-12-04). Tuning builds every listed plan
// (runtime compilation) and runs each a few times, which pays only where a
// call's work dwarfs it (4k layers: 4,096 x 4,096 pairs x 16 heads).
constexpr int64_t kTunedPairs = int64_t{1} << 26;

// Plans whose workspace exceeds this are not tried: the activations'
// headroom goes to kept tensors, not to a scratch buffer.
constexpr int64_t kTunedWorkspaceBytes = int64_t{1} << 30;

// A plan replaces cuDNN's first choice only when this much faster, so that
// timing noise between processes does not pick different kernels (and
// different rounding) for the same job.
constexpr float kTunedMargin = 0.9f;

// One plan of a graph: what a call may run.
struct Candidate {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t index = 0;

  int64_t WorkspaceBytes() const {
    int64_t bytes = -1;
    if (graph->get_workspace_size_plan_at_index(index, bytes).is_bad()) {
      return -1;
    }
    return bytes;
  }
  std::string Name() const {
    std::string name;
    if (graph->get_plan_name_at_index(index, name).is_bad()) return "?";
    return name;
  }
};

// Each plan of `graph`, cuDNN's first choice first.
std::vector<Candidate> PlansOf(const std::shared_ptr<fe::graph::Graph>& graph) {
  std::vector<Candidate> plans;
  for (int64_t i = 0; i < graph->get_execution_plan_count(); ++i) {
    plans.push_back({graph, i});
  }
  return plans;
}

// The workspace a plan's calls carve: its first candidate's, with more to
// try the most any of them needs up to kTunedWorkspaceBytes; -1 when cuDNN
// cannot say for the first.
int64_t MostWorkspace(const std::vector<Candidate>& plans) {
  int64_t most = -1;
  for (size_t i = 0; i < plans.size(); ++i) {
    const int64_t bytes = plans[i].WorkspaceBytes();
    if (i == 0 && bytes < 0) return -1;
    if (i == 0 || bytes <= kTunedWorkspaceBytes) most = std::max(most, bytes);
  }
  return most;
}

}  // namespace

// The plan a call runs (cuDNN's first choice until tuned) and, until the
// first call outside a capture has timed them, the others to try.
struct CudnnAttention::Plan {
  Candidate chosen;
  std::vector<Candidate> untried;  // cuDNN's first choice first
  int64_t workspace_bytes = 0;     // the chosen plan's; before tuning, the most
  bool causal = false;  // skips the pairs after the (offset) diagonal
  std::string what;     // names the call in messages

  void Run(cudnnHandle_t handle, cudaStream_t stream,
           std::unordered_map<int64_t, void*>& pack, void* workspace);
  void Tune(cudnnHandle_t handle, cudaStream_t stream,
            std::unordered_map<int64_t, void*>& pack, void* workspace);
};

void CudnnAttention::Plan::Run(cudnnHandle_t handle, cudaStream_t stream,
                               std::unordered_map<int64_t, void*>& pack,
                               void* workspace) {
  if (!untried.empty() && !StreamCapturing(stream)) {
    Tune(handle, stream, pack, workspace);
  }
  Check(chosen.graph->execute_plan_at_index(handle, pack, workspace,
                                            chosen.index),
        what.c_str());
}

// Times every candidate on the call's own operands (each writes the same
// results, which the call's run then writes again) and keeps the fastest
// when it beats cuDNN's first choice by kTunedMargin; prints the table.
void CudnnAttention::Plan::Tune(cudnnHandle_t handle, cudaStream_t stream,
                                std::unordered_map<int64_t, void*>& pack,
                                void* workspace) {
  std::vector<Candidate> plans = std::move(untried);
  untried.clear();
  auto execute = [&](size_t i) {
    return plans[i].graph->execute_plan_at_index(handle, pack, workspace,
                                                 plans[i].index);
  };
  const std::vector<float> ms = TimeCandidates(
      stream, plans.size(),
      [&](size_t i) {
        const int64_t bytes = plans[i].WorkspaceBytes();
        // Not runnable here: left out of the choice.
        return bytes >= 0 && bytes <= workspace_bytes && !execute(i).is_bad();
      },
      [&](size_t i) { Check(execute(i), what.c_str()); });
  const size_t pick = PickCandidate(ms, kTunedMargin);
  chosen = plans[pick];
  workspace_bytes = chosen.WorkspaceBytes();
  std::fprintf(stderr,
               "cuDNN attention: %zu plans for %s, ms each:", plans.size(),
               what.c_str());
  for (size_t i = 0; i < plans.size(); ++i) {
    std::fprintf(stderr, " %s%s %.3f", i == pick ? "*" : "",
                 plans[i].Name().c_str(), ms[i]);
  }
  std::fprintf(stderr, "\n");
}

CudnnAttention::CudnnAttention(cudaStream_t stream, int64_t max_pairs_per_call,
                               bool time_plans)
    : max_pairs_per_call_(max_pairs_per_call), time_plans_(time_plans) {
  GLM_CUDNN_CHECK(cudnnCreate(&handle_));
  GLM_CUDNN_CHECK(cudnnSetStream(handle_, stream));
}

CudnnAttention::~CudnnAttention() {
  plans_.clear();
  cudnnDestroy(handle_);
}

// A chunk of self-attention's queries (query t is key token t, its keys
// <= t) also masks the pairs after the diagonal, which lets cuDNN skip the
// tiles there, half of the work; the bias masks them too, so a masked graph
// without the causal mask computes the same where cuDNN has no plan with it
// (Plan::causal says which). An unmasked graph must be causal.
CudnnAttention::Plan* CudnnAttention::PlanFor(const Shape& shape) {
  auto found = plans_.find(shape);
  if (found != plans_.end()) return found->second.get();
  const auto [nq, nk, heads, dqk, dv, v_stride, scale, backward, masked,
              causal] = shape;
  char what[160];
  std::snprintf(what, sizeof(what),
                "%s%s q%lld k%lld h%lld dqk%lld dv%lld v rows %lld apart",
                masked ? "" : "unmasked ", backward ? "backward" : "forward",
                static_cast<long long>(nq), static_cast<long long>(nk),
                static_cast<long long>(heads), static_cast<long long>(dqk),
                static_cast<long long>(dv), static_cast<long long>(v_stride));
  const bool tune = time_plans_ && nq * nk * heads >= kTunedPairs;
  std::shared_ptr<fe::graph::Graph> graph;
  fe::error_t status;
  bool built_causal = false, built_all = false;
  for (const bool try_causal : {true, false}) {
    if (try_causal && !causal) continue;
    if (!try_causal && !masked) break;
    const int64_t offset = try_causal ? nk - nq : kNotCausal;
    // Every plan for a tuned call; cuDNN's first alone where that fails.
    for (const bool all : {true, false}) {
      if (all && !tune) continue;
      graph = backward ? BackwardGraph(nq, nk, heads, dqk, dv, v_stride, scale,
                                       offset, masked)
                       : ForwardGraph(nq, nk, heads, dqk, dv, v_stride, scale,
                                      offset, masked);
      status =
          graph->build(handle_, {fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK},
                       all ? fe::BuildPlanPolicy_t::ALL
                           : fe::BuildPlanPolicy_t::HEURISTICS_CHOICE);
      built_all = all;
      if (status.is_good()) break;
    }
    built_causal = try_causal;
    if (status.is_good()) break;
  }
  std::unique_ptr<Plan> plan;
  if (graph != nullptr && status.is_good()) {
    std::vector<Candidate> plans = PlansOf(graph);
    plan = std::make_unique<Plan>();
    plan->chosen = plans.front();
    plan->causal = built_causal;
    plan->what = what;
    plan->workspace_bytes = MostWorkspace(plans);
    if (plans.size() > 1) {
      plan->untried = std::move(plans);
    } else if (built_all) {
      std::fprintf(stderr, "cuDNN attention: one plan for %s: %s\n", what,
                   plans.front().Name().c_str());
    }
    if (plan->workspace_bytes < 0) plan.reset();
  } else {
    // Said once per shape: the call falls back to the gather kernels.
    fe::error_t copy = status;
    std::fprintf(stderr,
                 "cuDNN attention: no plan for %s (%s); using the sparse "
                 "kernels\n",
                 what, copy.get_message().c_str());
  }
  return plans_.emplace(shape, std::move(plan)).first->second.get();
}

// The full queries first, unmasked (each over the keys up to its last query),
// then the rest, masked; each part cut at max_pairs_per_call_ pairs.
std::vector<CudnnAttention::Chunk> CudnnAttention::Chunks(
    int64_t nq, int64_t nk, int64_t full_queries) const {
  const bool self = nq == nk;
  std::vector<Chunk> chunks;
  auto cut = [&](int64_t begin, int64_t end, bool masked) {
    if (begin >= end) return;
    const int64_t rows =
        QueriesPerAttentionCall(max_pairs_per_call_, self ? end : nk);
    for (int64_t q0 = begin; q0 < end; q0 += rows) {
      const int64_t q1 = std::min(end, q0 + rows);
      chunks.push_back({q0, q1, self ? q1 : nk, masked, self});
    }
  };
  const int64_t full = self ? std::min(full_queries, nq) : 0;
  cut(0, full, false);
  cut(full, nq, true);
  return chunks;
}

CudnnAttention::Plan* CudnnAttention::PlanOf(const Chunk& c, const HeadDims& d,
                                             bool backward) {
  return PlanFor({c.q1 - c.q0, c.k_end, d.heads, d.qk, d.v, d.v_stride, d.scale,
                  backward, c.masked, c.causal});
}

// Splitting off the full queries pays only when the masked rest after them
// keeps its causal skip (a diagonal offset by their count); where cuDNN has
// no such plan, the call runs as one masked part from query 0. The backward
// always does: at glm5.2-mini (H200) its offset-diagonal plans took 2.69 ms a
// layer and a split of the rest by keys 2.37, against 1.98 for one masked
// call (bench/NOTES.md, 2026-12-03); its chunks after the first are not
// causal, as before.
std::vector<CudnnAttention::Chunk> CudnnAttention::CallChunks(
    int64_t nq, int64_t nk, int64_t full_queries, const HeadDims& d,
    bool backward) {
  if (backward) {
    std::vector<Chunk> chunks = Chunks(nq, nk, 0);
    for (Chunk& c : chunks) c.causal = c.causal && c.q0 == 0;
    return chunks;
  }
  std::vector<Chunk> chunks = Chunks(nq, nk, full_queries);
  for (const Chunk& c : chunks) {
    if (!c.masked || c.q0 == 0 || !c.causal) continue;
    const Plan* plan = PlanOf(c, d, backward);
    if (plan == nullptr || !plan->causal) return Chunks(nq, nk, 0);
  }
  return chunks;
}

CudnnAttention::HeadDims CudnnAttention::DimsOf(ConstMatrixView q,
                                                ConstMatrixView v,
                                                int64_t heads, float scale) {
  return {heads, q.cols, v.cols, VStride(v), scale};
}

bool CudnnAttention::Supports(ConstMatrixView q, ConstMatrixView k,
                              ConstMatrixView v, int64_t topk,
                              int64_t full_queries, int64_t heads, float scale,
                              bool backward) {
  const int64_t nq = q.rows / heads, nk = k.rows / heads;
  const HeadDims d = DimsOf(q, v, heads, scale);
  const bool dims = d.qk % 16 == 0 && d.v % 16 == 0 && d.qk <= 256 &&
                    d.v <= 256 && d.v_stride % 8 == 0;
  // bf16 operands are read where they lie: 16-byte aligned, q and k dense.
  auto readable = [](ConstMatrixView view, bool dense) {
    return view.dtype != ElementType::kBF16 ||
           (reinterpret_cast<uintptr_t>(view.data) % 16 == 0 &&
            (!dense || view.stride == view.cols));
  };
  if (!readable(q, true) || !readable(k, true) || !readable(v, false)) {
    return false;
  }
  if (!dims || nq == 0 || nk == 0 || topk == 0) return false;
  for (const Chunk& c : CallChunks(nq, nk, full_queries, d, backward)) {
    if (PlanOf(c, d, backward) == nullptr) return false;
  }
  return true;
}

void CudnnAttention::Forward(CudaContext& ctx, ConstMatrixView q,
                             ConstMatrixView k, ConstMatrixView v,
                             const int32_t* keys, int64_t topk,
                             int64_t full_queries, int64_t heads, float scale,
                             MatrixView out, float* lse) {
  const HeadDims d = DimsOf(q, v, heads, scale);
  for (const Chunk& c :
       CallChunks(q.rows / heads, k.rows / heads, full_queries, d, false)) {
    const int64_t rows = (c.q1 - c.q0) * heads, key_rows = c.k_end * heads;
    Plan& plan = *PlanOf(c, d, false);
    ForwardChunk(ctx, plan, q.Rows(c.q0 * heads, rows), k.Rows(0, key_rows),
                 v.Rows(0, key_rows), c.masked ? keys + c.q0 * topk : nullptr,
                 topk, heads, out.Rows(c.q0 * heads, rows), lse + c.q0 * heads);
  }
}

void CudnnAttention::Backward(CudaContext& ctx, ConstMatrixView q,
                              ConstMatrixView k, ConstMatrixView v,
                              const int32_t* keys, int64_t topk,
                              int64_t full_queries, int64_t heads, float scale,
                              ConstMatrixView out, const float* lse,
                              ConstMatrixView dout, MatrixView dq,
                              MatrixView dk, MatrixView dv) {
  // dq's rows are each one chunk's; one chunk writes dk and dv, several add
  // into them from zeros (later chunks see more keys than earlier ones).
  const HeadDims d = DimsOf(q, v, heads, scale);
  const std::vector<Chunk> chunks =
      CallChunks(q.rows / heads, k.rows / heads, full_queries, d, true);
  const bool add_keys = chunks.size() > 1;
  // Added over chunks: in F32 (stand-ins for bf16 ones), from zeros.
  const std::vector<MatrixView> sums =
      add_keys ? AsF32(ctx, {}, {dk, dv}) : std::vector<MatrixView>{dk, dv};
  if (add_keys) {
    Zero(ctx, sums[0]);
    Zero(ctx, sums[1]);
  }
  for (const Chunk& c : chunks) {
    const int64_t first = c.q0 * heads, rows = (c.q1 - c.q0) * heads,
                  key_rows = c.k_end * heads;
    Plan& plan = *PlanOf(c, d, true);
    BackwardChunk(ctx, plan, q.Rows(first, rows), k.Rows(0, key_rows),
                  v.Rows(0, key_rows), c.masked ? keys + c.q0 * topk : nullptr,
                  topk, heads, out.Rows(first, rows), lse + first,
                  dout.Rows(first, rows), RowsOrEmpty(dq, first, rows),
                  RowsOrEmpty(sums[0], 0, key_rows),
                  RowsOrEmpty(sums[1], 0, key_rows), add_keys);
  }
  if (add_keys) {
    FromF32(ctx, sums[0], dk);
    FromF32(ctx, sums[1], dv);
  }
}

// keys null: an unmasked chunk (causal over all its keys).
void CudnnAttention::ForwardChunk(CudaContext& ctx, Plan& plan,
                                  ConstMatrixView q, ConstMatrixView k,
                                  ConstMatrixView v, const int32_t* keys,
                                  int64_t topk, int64_t heads, MatrixView out,
                                  float* lse) {
  const int64_t nq = q.rows / heads;
  const bool masked = keys != nullptr;
  Buffers b = CarveScratch(ctx, q, k, v, {}, Results{out}, heads,
                           plan.workspace_bytes, masked);
  PackInputs(ctx, q, k, v, keys, topk, heads, b);
  std::unordered_map<int64_t, void*> pack = {
      {kQ, const_cast<__nv_bfloat16*>(b.q)},
      {kK, const_cast<__nv_bfloat16*>(b.k)},
      {kV, const_cast<__nv_bfloat16*>(b.v)},
      {kO, b.o},
      {kStats, b.stats}};
  if (masked) pack[kBias] = b.bias;
  plan.Run(handle_, ctx.stream(), pack, b.workspace);
  WriteResult(ctx, b.o, out.cols, b.has_key, heads, false, out);
  StatsToLse(ctx, b.stats, b.has_key, nq, heads, lse);
}

void CudnnAttention::BackwardChunk(
    CudaContext& ctx, Plan& plan, ConstMatrixView q, ConstMatrixView k,
    ConstMatrixView v, const int32_t* keys, int64_t topk, int64_t heads,
    ConstMatrixView out, const float* lse, ConstMatrixView dout, MatrixView dq,
    MatrixView dk, MatrixView dv, bool add_keys) {
  const int64_t nq = q.rows / heads;
  const bool masked = keys != nullptr;
  Buffers b = CarveScratch(ctx, q, k, v, out, Results{{}, dq, dk, dv}, heads,
                           plan.workspace_bytes, masked);
  PackInputs(ctx, q, k, v, keys, topk, heads, b);
  assert(out.dtype == ElementType::kF32 || out.stride == out.cols);
  auto* o = const_cast<__nv_bfloat16*>(Operand(ctx, out, b.o));
  // A query without keys contributes nothing: its output gradient is zeroed.
  PackBf16(ctx, dout, b.has_key, heads, b.dout, dout.cols);
  LseToStats(ctx, lse, nq, heads, b.stats);
  std::unordered_map<int64_t, void*> pack = {
      {kQ, const_cast<__nv_bfloat16*>(b.q)},
      {kK, const_cast<__nv_bfloat16*>(b.k)},
      {kV, const_cast<__nv_bfloat16*>(b.v)},
      {kO, o},
      {kDO, b.dout},
      {kStats, b.stats},
      {kDQ, b.dq},
      {kDK, b.dk},
      {kDV, b.dv}};
  if (masked) pack[kBias] = b.bias;
  plan.Run(handle_, ctx.stream(), pack, b.workspace);
  WriteResult(ctx, b.dq, dq.cols, b.has_key, heads, false, dq);
  WriteResult(ctx, b.dk, dk.cols, nullptr, 1, add_keys, dk);
  WriteResult(ctx, b.dv, VStride(v), nullptr, 1, add_keys, dv);
}

}  // namespace glm::cuda
