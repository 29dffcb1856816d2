#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/bf16_copy.cuh"
#include "kernels/cuda/bf16_weight_copies.h"
#include "kernels/cuda/captured_graph.h"
#include "kernels/cuda/cross_entropy.cuh"
#include "kernels/cuda/cuda_allocator.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cudnn_attention.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/grouped_linear.h"
#include "kernels/cuda/indexer.cuh"
#include "kernels/cuda/latent_attention.cuh"
#include "kernels/cuda/layer_norm.cuh"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/linear_cross_entropy.h"
#include "kernels/cuda/optimizer.cuh"
#include "kernels/cuda/rms_norm.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/router.cuh"
#include "kernels/cuda/rows.cuh"
#include "kernels/cuda/self_attention_backward.h"
#include "kernels/cuda/sparse_attention.cuh"
#include "kernels/cuda/swiglu.cuh"
#include "kernels/dtype_check.h"

namespace glm {
namespace {

// A captured graph whose replays count its working set in the allocator's
// peak, as running its ops one by one would (the ledger sees no allocation
// during a replay).
class AccountedReplay : public RecordedWork {
 public:
  AccountedReplay(std::unique_ptr<cuda::CapturedGraph> graph,
                  int64_t working_set, cuda::CudaAllocator* allocator)
      : graph_(std::move(graph)),
        working_set_(working_set),
        allocator_(allocator) {}
  void Replay() override {
    allocator_->RaisePeak(allocator_->bytes_in_use() + working_set_);
    graph_->Replay();
  }

 private:
  std::unique_ptr<cuda::CapturedGraph> graph_;
  int64_t working_set_;
  cuda::CudaAllocator* allocator_;
};

// The backend is also the context its ops run with: one stream, one cuBLASLt
// handle, two grow-only scratch buffers; cuDNN attention in the bf16 mode.
class CudaBackend : public Backend, public cuda::CudaContext {
 public:
  explicit CudaBackend(const CudaBackendOptions& options) : options_(options) {
    GLM_CUDA_CHECK(cudaSetDevice(options_.device));
    GLM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    GLM_CUBLAS_CHECK(cublasLtCreate(&cublas_lt_));
    allocator_ =
        std::make_unique<cuda::CudaAllocator>(options_.device, stream_);
    if (options_.precision == cuda::Precision::kBf16) {
      cudnn_attention_ = std::make_unique<cuda::CudnnAttention>(
          stream_, options_.attention_pairs_per_call,
          options_.time_attention_plans);
    }
    loss_ = static_cast<double*>(allocator_->Allocate(sizeof(double)));
  }

  ~CudaBackend() override {
    scratch_ = Grown();
    composite_scratch_ = Grown();
    weight_copies_ = cuda::Bf16WeightCopies();
    cudnn_attention_.reset();
    allocator_->Free(loss_);
    cudaStreamSynchronize(stream_);
    // A tensor freed after its pool would free into a destroyed pool.
    if (allocator_->bytes_in_use() != 0) {
      std::fprintf(stderr,
                   "%lld bytes of device memory outlive the CUDA backend "
                   "that allocated them\n",
                   static_cast<long long>(allocator_->bytes_in_use()));
      std::abort();
    }
    allocator_.reset();
    cublasLtDestroy(cublas_lt_);
    cudaStreamDestroy(stream_);
  }

  void Synchronize() override {
    GLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  std::string Name() const override {
    return absl::StrCat(
        "cuda:", options_.device,
        options_.precision == cuda::Precision::kBf16 ? " bf16" : " fp32");
  }
  Allocator* allocator() override { return allocator_.get(); }
  ElementType ActivationType() const override {
    return options_.precision == cuda::Precision::kBf16 ? ElementType::kBF16
                                                        : ElementType::kF32;
  }

  // ---- CudaContext ----
  cudaStream_t stream() const override { return stream_; }
  cublasLtHandle_t cublas_lt() const override { return cublas_lt_; }
  cuda::Precision precision() const override { return options_.precision; }
  void* Scratch(size_t bytes) override { return Grow(&scratch_, bytes); }
  void* CompositeScratch(size_t bytes) override {
    return Grow(&composite_scratch_, bytes);
  }
  const __nv_bfloat16* Bf16WeightCopy(ConstMatrixView v) const override {
    return weight_copies_.Find(v);
  }
  bool recording() const override { return recording_; }
  bool time_products() const override {
    return options_.time_product_algorithms;
  }
  void FailRecording(const char* why) override {
    if (recording_failure_.empty()) recording_failure_ = why;
  }

  absl::StatusOr<std::unique_ptr<RecordedWork>> Record(
      const std::function<absl::Status()>& work) override {
    // The capture's allocations go through the ledger as the ops run them:
    // their peak above what was in use is the graph's working set.
    const int64_t in_use = allocator_->bytes_in_use(),
                  peak = allocator_->peak_bytes();
    allocator_->ResetPeak();
    recording_ = true;
    recording_failure_.clear();
    absl::StatusOr<std::unique_ptr<cuda::CapturedGraph>> graph =
        cuda::CapturedGraph::Capture(stream_, [&] {
          absl::Status status = work();
          if (status.ok() && !recording_failure_.empty()) {
            status = absl::FailedPreconditionError(recording_failure_);
          }
          return status;
        });
    recording_ = false;
    const int64_t working_set = allocator_->peak_bytes() - in_use;
    allocator_->RaisePeak(peak);
    if (!graph.ok()) return graph.status();
    // The graph's allocations come from a pool of its own: what the stream's
    // pool keeps from the unrecorded runs (their activations, all freed) is
    // returned, so the device does not hold both.
    GLM_CUDA_CHECK(cudaStreamSynchronize(stream_));
    cudaMemPool_t pool;
    GLM_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, options_.device));
    GLM_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
    return std::unique_ptr<RecordedWork>(
        new AccountedReplay(*std::move(graph), working_set, allocator_.get()));
  }

  // ---- Backend ----
  void Linear(ConstMatrixView x, ConstMatrixView w, MatrixView y,
              bool accumulate) override {
    CheckActivations("CudaBackend::Linear", {{"x", x}, {"y", y}});
    CheckF32("CudaBackend::Linear", {w});
    if (accumulate) CheckF32("CudaBackend::Linear accumulating", {y});
    cuda::Linear(*this, x, w, y, accumulate);
  }
  void LinearAdd(ConstMatrixView x, ConstMatrixView w, ConstMatrixView addend,
                 MatrixView y) override {
    CheckActivations("CudaBackend::LinearAdd", {{"x", x}});
    CheckF32("CudaBackend::LinearAdd", {w, addend, y});
    cuda::LinearAdd(*this, x, w, addend, y);
  }
  void LinearBackward(ConstMatrixView x, ConstMatrixView w, ConstMatrixView dy,
                      MatrixView dx, MatrixView dw) override {
    CheckActivations("CudaBackend::LinearBackward",
                     {{"x", x}, {"dy", dy}, {"dx", dx}});
    CheckF32("CudaBackend::LinearBackward", {w, dw});
    cuda::LinearBackward(*this, x, w, dy, dx, dw);
  }
  void Copy(ConstMatrixView x, MatrixView y) override {
    CheckActivations("CudaBackend::Copy", {{"x", x}, {"y", y}});
    cuda::Copy(*this, x, y);
  }
  void Axpy(float alpha, ConstMatrixView x, MatrixView y) override {
    CheckF32("CudaBackend::Axpy", {x, y});
    cuda::Axpy(*this, alpha, x, y);
  }
  void RepeatRows(ConstMatrixView x, int64_t repeats, MatrixView y) override {
    CheckActivations("CudaBackend::RepeatRows", {{"y", y}});
    CheckF32("CudaBackend::RepeatRows", {x});
    cuda::RepeatRows(*this, x, repeats, y);
  }
  void SumRowGroups(ConstMatrixView x, int64_t repeats, MatrixView y) override {
    CheckActivations("CudaBackend::SumRowGroups", {{"x", x}});
    CheckF32("CudaBackend::SumRowGroups", {y});
    cuda::SumRowGroups(*this, x, repeats, y);
  }
  void EmbeddingForward(ConstMatrixView table, const int32_t* ids,
                        MatrixView out) override {
    CheckActivations("CudaBackend::EmbeddingForward",
                     {{"table", table}, {"out", out}});
    if (out.dtype == ElementType::kBF16) {  // gathered and converted at once
      cuda::PackBf16Rows(*this, table, ids, nullptr, out.rows,
                         reinterpret_cast<__nv_bfloat16*>(out.data),
                         out.stride);
      return;
    }
    CheckF32("CudaBackend::EmbeddingForward", {table});
    cuda::EmbeddingForward(*this, table, ids, out);
  }
  void EmbeddingBackward(ConstMatrixView dout, const int32_t* ids,
                         MatrixView dtable) override {
    CheckF32("CudaBackend::EmbeddingBackward", {dout, dtable});
    cuda::EmbeddingBackward(*this, dout, ids, dtable);
  }
  void ScatterAddRows(ConstMatrixView src, const int32_t* rows,
                      const float* scale, MatrixView out) override {
    CheckActivations("CudaBackend::ScatterAddRows", {{"src", src}});
    CheckF32("CudaBackend::ScatterAddRows", {out});
    cuda::ScatterAddRows(*this, src, rows, scale, out);
  }
  void ScatterAddRowsBackward(ConstMatrixView src, const int32_t* rows,
                              const float* scale, ConstMatrixView dout,
                              MatrixView dsrc, MatrixView dscale,
                              const int32_t* dscale_rows) override {
    CheckActivations("CudaBackend::ScatterAddRowsBackward",
                     {{"src", src}, {"dsrc", dsrc}});
    CheckF32("CudaBackend::ScatterAddRowsBackward", {dout, dscale});
    cuda::ScatterAddRowsBackward(*this, src, rows, scale, dout, dsrc, dscale,
                                 dscale_rows);
  }
  void RmsNormForward(ConstMatrixView x, const float* w, float eps,
                      MatrixView y, float* rstd) override {
    CheckActivations("CudaBackend::RmsNormForward", {{"y", y}});
    CheckF32("CudaBackend::RmsNormForward", {x});
    cuda::RmsNormForward(*this, x, w, eps, y, rstd);
  }
  void RmsNormBackward(ConstMatrixView x, const float* w, const float* rstd,
                       ConstMatrixView dy, ConstMatrixView residual,
                       MatrixView dx, float* dw) override {
    CheckF32("CudaBackend::RmsNormBackward", {x, dy, residual, dx});
    cuda::RmsNormBackward(*this, x, w, rstd, dy, residual, dx, dw);
  }
  void LayerNormForward(ConstMatrixView x, const float* w, const float* b,
                        float eps, MatrixView y, float* mean,
                        float* rstd) override {
    CheckF32("CudaBackend::LayerNormForward", {x, y});
    cuda::LayerNormForward(*this, x, w, b, eps, y, mean, rstd);
  }
  void LayerNormBackward(ConstMatrixView x, const float* w, const float* mean,
                         const float* rstd, ConstMatrixView dy, MatrixView dx,
                         float* dw, float* db) override {
    CheckF32("CudaBackend::LayerNormBackward", {x, dy, dx});
    cuda::LayerNormBackward(*this, x, w, mean, rstd, dy, dx, dw, db);
  }
  void SwiGluForward(ConstMatrixView gate, ConstMatrixView up,
                     MatrixView out) override {
    CheckActivations("CudaBackend::SwiGluForward",
                     {{"gate", gate}, {"up", up}, {"out", out}});
    cuda::SwiGluForward(*this, gate, up, out);
  }
  void SwiGluBackward(ConstMatrixView gate, ConstMatrixView up,
                      ConstMatrixView dout, MatrixView dgate,
                      MatrixView dup) override {
    CheckActivations("CudaBackend::SwiGluBackward", {{"gate", gate},
                                                     {"up", up},
                                                     {"dout", dout},
                                                     {"dgate", dgate},
                                                     {"dup", dup}});
    cuda::SwiGluBackward(*this, gate, up, dout, dgate, dup);
  }
  void RopeForward(ConstMatrixView x, const int32_t* positions,
                   int64_t rows_per_position, float theta,
                   MatrixView y) override {
    CheckActivations("CudaBackend::RopeForward", {{"y", y}});
    CheckF32("CudaBackend::RopeForward", {x});
    cuda::RopeForward(*this, x, positions, rows_per_position, theta, y);
  }
  void RopeBackward(ConstMatrixView dy, const int32_t* positions,
                    int64_t rows_per_position, float theta,
                    MatrixView dx) override {
    CheckActivations("CudaBackend::RopeBackward", {{"dy", dy}, {"dx", dx}});
    cuda::RopeBackward(*this, dy, positions, rows_per_position, theta, dx);
  }
  void RouterForward(ConstMatrixView logits, const float* bias,
                     const RouterSpec& spec, MatrixView scores,
                     MatrixView weights, int32_t* indices) override {
    CheckF32("CudaBackend::RouterForward", {logits, scores, weights});
    cuda::RouterForward(*this, logits, bias, spec, scores, weights, indices);
  }
  void RouterBackward(ConstMatrixView scores, const int32_t* indices,
                      ConstMatrixView dweights, const RouterSpec& spec,
                      MatrixView dlogits) override {
    CheckF32("CudaBackend::RouterBackward", {scores, dweights, dlogits});
    cuda::RouterBackward(*this, scores, indices, dweights, spec, dlogits);
  }
  void GroupByExpert(const int32_t* expert, int64_t count, int64_t per_token,
                     int64_t experts, int32_t* slots, int32_t* tokens,
                     int32_t* offsets) override {
    cuda::GroupByExpert(*this, expert, count, per_token, experts, slots, tokens,
                        offsets);
  }
  void TokenRows(const int32_t* slots, int64_t count, int64_t per_token,
                 int32_t* token_rows) override {
    cuda::TokenRows(*this, slots, count, per_token, token_rows);
  }
  void AddRowGroups(ConstMatrixView src, const int32_t* sources,
                    int64_t per_row, const float* scale,
                    MatrixView out) override {
    CheckActivations("CudaBackend::AddRowGroups", {{"src", src}});
    CheckF32("CudaBackend::AddRowGroups", {out});
    cuda::AddRowGroups(*this, src, sources, per_row, scale, out);
  }
  void AddRowGroupsBackward(ConstMatrixView src, const int32_t* sources,
                            int64_t per_row, const float* scale,
                            ConstMatrixView dout, MatrixView dsrc,
                            MatrixView dscale,
                            const int32_t* dscale_rows) override {
    CheckActivations("CudaBackend::AddRowGroupsBackward",
                     {{"src", src}, {"dsrc", dsrc}});
    CheckF32("CudaBackend::AddRowGroupsBackward", {dout, dscale});
    cuda::AddRowGroupsBackward(*this, src, sources, per_row, scale, dout, dsrc,
                               dscale, dscale_rows);
  }
  void AddExpertLoads(const int32_t* offsets, int64_t experts,
                      int32_t* loads) override {
    cuda::AddExpertLoads(*this, offsets, experts, loads);
  }
  void GroupedLinear(IndexedRows x, ConstMatrixView w, const int32_t* offsets,
                     int64_t experts, MatrixView y) override {
    CheckActivations("CudaBackend::GroupedLinear", {{"x", x.x}, {"y", y}});
    CheckF32("CudaBackend::GroupedLinear", {w});
    cuda::GroupedLinear(*this, x, w, offsets, experts, y);
  }
  void GroupedLinearBackward(IndexedRows x, ConstMatrixView w,
                             const int32_t* offsets, int64_t experts,
                             IndexedRows dy, MatrixView dx, bool accumulate_dx,
                             MatrixView dw) override {
    CheckActivations("CudaBackend::GroupedLinearBackward", {{"x", x.x}});
    // A dy read by index (the combine's gradient) is the output gradient.
    if (dy.indexed()) {
      CheckF32("CudaBackend::GroupedLinearBackward", {dy.x});
    } else {
      CheckActivations("CudaBackend::GroupedLinearBackward", {{"dy", dy.x}});
    }
    // A written dx may be the activation type; one added to is F32.
    if (accumulate_dx) {
      CheckF32("CudaBackend::GroupedLinearBackward", {dx});
    } else {
      CheckActivations("CudaBackend::GroupedLinearBackward", {{"dx", dx}});
    }
    CheckF32("CudaBackend::GroupedLinearBackward", {w, dw});
    cuda::GroupedLinearBackward(*this, x, w, offsets, experts, dy, dx,
                                accumulate_dx, dw);
  }
  void CrossEntropyForward(ConstMatrixView logits, const int32_t* targets,
                           double divisor, double* sum) override {
    CheckF32("CudaBackend::CrossEntropyForward", {logits});
    cuda::CrossEntropyForward(*this, logits, targets, loss_);
    cuda::AddQuotient(*this, loss_, divisor, sum);
  }
  void CrossEntropyBackward(ConstMatrixView logits, const int32_t* targets,
                            float scale, MatrixView dlogits) override {
    CheckF32("CudaBackend::CrossEntropyBackward", {logits, dlogits});
    cuda::CrossEntropyBackward(*this, logits, targets, scale, dlogits);
  }
  void LinearCrossEntropy(ConstMatrixView x, ConstMatrixView w,
                          const int32_t* targets, double divisor, float scale,
                          MatrixView logits, double* sum, MatrixView dx,
                          MatrixView dw) override {
    CheckActivations("CudaBackend::LinearCrossEntropy",
                     {{"x", x}, {"logits", logits}});
    CheckF32("CudaBackend::LinearCrossEntropy", {w, dx, dw});
    cuda::LinearCrossEntropy(*this, x, w, targets, scale, logits, loss_, dx,
                             dw);
    cuda::AddQuotient(*this, loss_, divisor, sum);
  }
  void SparseAttentionForward(ConstMatrixView q, ConstMatrixView k,
                              ConstMatrixView v, const int32_t* keys,
                              int64_t topk, int64_t full_queries, int64_t heads,
                              float scale, MatrixView out,
                              float* lse) override {
    CheckActivations("CudaBackend::SparseAttentionForward",
                     {{"q", q}, {"k", k}, {"v", v}, {"out", out}});
    if (UseCudnn(q, k, v, topk, full_queries, heads, scale, false)) {
      cudnn_attention_->Forward(*this, q, k, v, keys, topk, full_queries, heads,
                                scale, out, lse);
      return;
    }
    const std::vector<MatrixView> f = cuda::AsF32(*this, {q, k, v}, {out});
    cuda::SparseAttentionForward(*this, f[0], f[1], f[2], keys, topk, heads,
                                 scale, f[3], lse);
    cuda::FromF32(*this, f[3], out);
  }
  void SparseAttentionBackward(ConstMatrixView q, ConstMatrixView k,
                               ConstMatrixView v, const int32_t* keys,
                               int64_t topk, int64_t full_queries,
                               int64_t heads, float scale, ConstMatrixView out,
                               const float* lse, ConstMatrixView dout,
                               MatrixView dq, MatrixView dk, MatrixView dv,
                               MatrixView key_weights) override {
    CheckActivations("CudaBackend::SparseAttentionBackward", {{"q", q},
                                                              {"k", k},
                                                              {"v", v},
                                                              {"out", out},
                                                              {"dout", dout},
                                                              {"dq", dq},
                                                              {"dk", dk},
                                                              {"dv", dv}});
    // Scratch for the bias, P and dS (4 bytes a pair and head): glm5.2-mini's
    // 16 heads up to 5k tokens; longer sequences run cuDNN's backward.
    constexpr int64_t kProductsScratchBytes = int64_t{2} << 30;
    CheckF32("CudaBackend::SparseAttentionBackward", {key_weights});
    if (cuda::SelfAttentionProductsBackward(
            *this, q, k, v, keys, topk, heads, scale, out, lse, dout, dq, dk,
            dv, key_weights, kProductsScratchBytes)) {
      return;
    }
    // Elsewhere the probabilities are not at hand: the key weights are formed
    // as SparseAttentionKeyWeights forms them.
    if (!key_weights.empty()) {
      SparseAttentionKeyWeights(q, k, keys, topk, heads, scale, lse,
                                key_weights);
    }
    if (UseCudnn(q, k, v, topk, full_queries, heads, scale, true)) {
      cudnn_attention_->Backward(*this, q, k, v, keys, topk, full_queries,
                                 heads, scale, out, lse, dout, dq, dk, dv);
      return;
    }
    // These kernels read and write F32, adding into the gradients (the op
    // writes them: zeroed first); they recompute the probabilities and read
    // no output.
    const std::vector<MatrixView> f =
        cuda::AsF32(*this, {q, k, v, dout}, {dq, dk, dv});
    for (int i : {4, 5, 6}) cuda::Zero(*this, f[i]);
    cuda::SparseAttentionBackward(*this, f[0], f[1], f[2], keys, topk, heads,
                                  scale, f[3], f[4], f[5], f[6]);
    cuda::FromF32(*this, f[4], dq);
    cuda::FromF32(*this, f[5], dk);
    cuda::FromF32(*this, f[6], dv);
  }
  void SparseAttentionKeyWeights(ConstMatrixView q, ConstMatrixView k,
                                 const int32_t* keys, int64_t topk,
                                 int64_t heads, float scale, const float* lse,
                                 MatrixView weights) override {
    CheckActivations("CudaBackend::SparseAttentionKeyWeights",
                     {{"q", q}, {"k", k}});
    CheckF32("CudaBackend::SparseAttentionKeyWeights", {weights});
    cuda::SparseAttentionKeyWeights(*this, q, k, keys, topk, heads, scale, lse,
                                    weights);
  }
  void LatentAttentionForward(ConstMatrixView q, ConstMatrixView kv,
                              const int32_t* keys, int64_t topk, int64_t heads,
                              float scale, MatrixView out,
                              float* lse) override {
    CheckActivations("CudaBackend::LatentAttentionForward",
                     {{"q", q}, {"kv", kv}, {"out", out}});
    const bool by_columns = options_.latent_scores_by_columns;
    if (cuda::LatentAttentionSupported(q, kv, out, {}, topk, heads,
                                       by_columns)) {
      cuda::LatentAttentionForward(*this, q, kv, keys, topk, heads, scale, out,
                                   lse, by_columns);
      return;
    }
    const Tensor k = PerHeadKeys(kv, heads);
    SparseAttentionForward(q, k.Matrix(), k.Matrix().Columns(0, out.cols), keys,
                           topk, 0, heads, scale, out, lse);
  }
  void LatentAttentionBackward(ConstMatrixView q, ConstMatrixView kv,
                               const int32_t* keys, int64_t topk, int64_t heads,
                               float scale, ConstMatrixView out,
                               const float* lse, ConstMatrixView dout,
                               MatrixView dq, MatrixView dkv,
                               MatrixView key_weights) override {
    CheckActivations("CudaBackend::LatentAttentionBackward", {{"q", q},
                                                              {"kv", kv},
                                                              {"out", out},
                                                              {"dout", dout},
                                                              {"dq", dq},
                                                              {"dkv", dkv}});
    CheckF32("CudaBackend::LatentAttentionBackward", {key_weights});
    if (options_.atomic_sums &&
        cuda::LatentAttentionSupported(q, kv, out, dout, topk, heads,
                                       /*scores_by_columns=*/false)) {
      cuda::LatentAttentionBackward(*this, q, kv, keys, topk, heads, scale, out,
                                    lse, dout, dq, dkv, key_weights);
      return;
    }
    const Tensor k = PerHeadKeys(kv, heads);
    const int64_t dv = out.cols;
    Tensor dk, dvh;
    if (!dkv.empty()) {
      dk = Tensor({k.dim(0), kv.cols}, allocator_.get());
      dvh = Tensor({k.dim(0), dv}, allocator_.get());
    }
    SparseAttentionBackward(
        q, k.Matrix(), k.Matrix().Columns(0, dv), keys, topk, 0, heads, scale,
        out, lse, dout, dq, dkv.empty() ? MatrixView{} : dk.Matrix(),
        dkv.empty() ? MatrixView{} : dvh.Matrix(), key_weights);
    if (dkv.empty()) return;
    // Each latent row's gradient: its heads' key rows and value rows summed.
    Tensor sum({kv.rows, kv.cols}, allocator_.get()),
        value_sum({kv.rows, dv}, allocator_.get());
    cuda::SumRowGroups(*this, dk.Matrix(), heads, sum.Matrix());
    cuda::SumRowGroups(*this, dvh.Matrix(), heads, value_sum.Matrix());
    cuda::Axpy(*this, 1.f, value_sum.Matrix(), sum.Matrix().Columns(0, dv));
    cuda::Copy(*this, sum.Matrix(), dkv);
  }
  void IndexerTopK(ConstMatrixView iq, ConstMatrixView ik, ConstMatrixView w,
                   const int32_t* seq_start, int64_t query_offset, int64_t topk,
                   float scale, KeptIndexerScores* keep,
                   int32_t* keys) override {
    CheckF32("CudaBackend::IndexerTopK", {iq, ik, w});
    cuda::IndexerTopK(*this, iq, ik, w, seq_start, query_offset, topk, scale,
                      keys, keep);
  }
  void IndexerKlLoss(ConstMatrixView iq, ConstMatrixView ik, ConstMatrixView w,
                     const int32_t* keys, int64_t topk, float scale,
                     ConstMatrixView target, float coeff,
                     const KeptIndexerScores* kept, MatrixView diq,
                     MatrixView dik, MatrixView dw, double* sum) override {
    CheckF32("CudaBackend::IndexerKlLoss", {iq, ik, w, target, diq, dik, dw});
    cuda::IndexerKlLoss(
        *this, iq, ik, w, keys, topk, scale, target, coeff, diq, dik, dw, kept,
        options_.atomic_sums && options_.sparse_indexer_loss, loss_);
    cuda::AddQuotient(*this, loss_, 1.0, sum);
  }
  void RefreshComputeCopies(
      const std::vector<ConstFloatSpan>& weights) override {
    if (options_.precision == cuda::Precision::kBf16) {
      weight_copies_.Refresh(*this, allocator_.get(), weights);
    }
  }
  double SquaredSum(const std::vector<ConstFloatSpan>& spans) override {
    cuda::SquaredSum(*this, spans, loss_);
    return ReadLoss();
  }
  void AdamWStep(const AdamWHyperparameters& hyper,
                 const std::vector<AdamWTensor>& tensors) override {
    // The bf16 mode's copies of the weights it updates are written in the
    // same pass instead of a refresh after it.
    std::vector<__nv_bfloat16*> copies;
    for (const AdamWTensor& t : tensors) {
      copies.push_back(weight_copies_.CopyOf({t.value, t.size}));
    }
    cuda::AdamWStep(*this, hyper, tensors, copies);
  }

 private:
  // Where the latent kernels do not run (F32, more heads, other widths; the
  // backward when sums must keep a fixed order): the per-head form on every
  // head's copy of the latent rows, [nk*heads, d] in the activation type.
  Tensor PerHeadKeys(ConstMatrixView kv, int64_t heads) {
    Tensor wide({kv.rows, kv.cols}, allocator_.get());
    cuda::Copy(*this, kv, wide.Matrix());
    Tensor k({kv.rows * heads, kv.cols}, allocator_.get(), ActivationType());
    cuda::RepeatRows(*this, wide.Matrix(), heads, k.Matrix());
    return k;
  }
  // A grow-only buffer: grows geometrically so that a few calls settle on
  // the largest size.
  struct Grown {
    DeviceBuffer buffer;
    size_t bytes = 0;
  };
  void* Grow(Grown* grown, size_t bytes) {
    if (bytes > grown->buffer.bytes() && recording_) {
      // A buffer allocated in a capture is the graph's, and freeing the old
      // one there would free it under the eager ops queued before: the
      // recording is dropped, and the eager run that follows grows it.
      FailRecording("an op's scratch outgrew what earlier runs allocated");
      return grown->buffer.data();
    }
    if (bytes > grown->buffer.bytes()) {
      grown->buffer = DeviceBuffer();
      grown->buffer =
          DeviceBuffer(allocator_.get(), std::max(bytes, grown->bytes * 3 / 2));
      grown->bytes = grown->buffer.bytes();
    }
    return grown->buffer.data();
  }

  // Refuses an operand that is neither F32 nor the activation type.
  void CheckActivations(
      const char* op,
      std::initializer_list<std::pair<const char*, ConstMatrixView>> operands)
      const {
    for (const auto& [name, view] : operands) {
      CheckActivation(op, name, view, ActivationType());
    }
  }

  // The bf16 mode's attention goes to cuDNN where it has a plan.
  bool UseCudnn(ConstMatrixView q, ConstMatrixView k, ConstMatrixView v,
                int64_t topk, int64_t full_queries, int64_t heads, float scale,
                bool backward) {
    return cudnn_attention_ != nullptr && q.rows > 0 &&
           cudnn_attention_->Supports(q, k, v, topk, full_queries, heads, scale,
                                      backward);
  }

  // Reads the double an op left in loss_ (waits for the stream).
  double ReadLoss() {
    double loss = 0;
    allocator_->CopyToHost(&loss, loss_, sizeof(double));
    return loss;
  }

  CudaBackendOptions options_;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t cublas_lt_ = nullptr;
  std::unique_ptr<cuda::CudaAllocator> allocator_;
  Grown scratch_, composite_scratch_;
  bool recording_ = false;
  std::string recording_failure_;
  std::unique_ptr<cuda::CudnnAttention> cudnn_attention_;
  cuda::Bf16WeightCopies weight_copies_;
  double* loss_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(
    const CudaBackendOptions& options) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuda:", options.device, ": no CUDA device usable (",
                     cudaGetErrorString(status), ")"));
  }
  if (options.device < 0 || options.device >= count) {
    return absl::NotFoundError(absl::StrCat(
        "cuda:", options.device, " does not exist: this machine has ", count,
        " CUDA device(s)"));
  }
  return std::unique_ptr<Backend>(new CudaBackend(options));
}

}  // namespace glm
