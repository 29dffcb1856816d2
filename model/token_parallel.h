// Tensor and context parallelism inside the model. Both split a micro batch's
// tokens between ranks that receive the same batch:
// - the context group (cp ranks) splits the tokens into chunks; a chunk's
//   queries attend over the keys of every chunk (Megatron's all-gather
//   context parallelism), so the top-k runs over the whole sequence. As in
//   Megatron, the tokens are cut into 2cp runs and rank i takes runs i and
//   2cp-1-i, so that every rank has early and late queries (causal work
//   grows with the position);
// - the tensor group (tp ranks) splits a chunk again between layers
//   (Megatron's sequence parallelism) and, inside attention and the dense
//   MLP, splits heads and intermediate columns instead: the chunk is
//   all-gathered before the column-parallel projections and reduce-scattered
//   after the row-parallel ones.
// Everything per token (norms, MoE, embeddings, losses) runs on a rank's own
// rows. A rank's weight gradients are then its part of the whole: the trainer
// sums them over both groups (the split tensors over context only).
//
// Collective failures do not stop the layer code (it has no status); the
// first is kept and reported by status(), as the expert dispatcher does.
#ifndef GLM_MODEL_TOKEN_PARALLEL_H_
#define GLM_MODEL_TOKEN_PARALLEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "collectives/collectives.h"
#include "kernels/tensor.h"

namespace glm {

struct TokenRange {
  int64_t begin = 0;
  int64_t count = 0;
  int64_t end() const { return begin + count; }
};

// The tokens of a micro batch a rank holds, as runs of consecutive tokens in
// the order of its rows.
struct TokenRows {
  std::vector<TokenRange> runs;

  int64_t count() const;
  // all[t] for every held token t, in row order.
  template <typename T>
  std::vector<T> Select(const std::vector<T>& all) const {
    std::vector<T> held;
    for (const TokenRange& run : runs) {
      held.insert(held.end(), all.begin() + run.begin, all.begin() + run.end());
    }
    return held;
  }
  // The tokens of rows [rows.begin, rows.end()).
  TokenRows Sub(TokenRange rows) const;
};

class TokenParallel {
 public:
  // Null groups mean size 1; none is owned. `tensor` and `context` take
  // buffers where the pass's tensors live (the current allocator's memory:
  // the model's gathers and reductions); `tensor_host` and `context_host` are
  // the same groups taking host buffers (the trainer's sums of gradients and
  // losses). Where the pass's tensors are the host's, both pairs are the
  // same.
  TokenParallel(Collectives* tensor, Collectives* context,
                Collectives* tensor_host, Collectives* context_host)
      : tensor_(tensor),
        context_(context),
        tensor_host_(tensor_host),
        context_host_(context_host) {}
  TokenParallel(Collectives* tensor, Collectives* context)
      : TokenParallel(tensor, context, tensor, context) {}

  int tp() const { return tensor_ == nullptr ? 1 : tensor_->size(); }
  int tp_rank() const { return tensor_ == nullptr ? 0 : tensor_->rank(); }
  int cp() const { return context_ == nullptr ? 1 : context_->size(); }
  int cp_rank() const { return context_ == nullptr ? 0 : context_->rank(); }
  Collectives* tensor_host_group() const { return tensor_host_; }
  Collectives* context_host_group() const { return context_host_; }

  // InvalidArgument when the micro batch is too short to give every rank a
  // token (tp * 2cp tokens under context parallelism, tp without).
  absl::Status CheckTokens(int64_t tokens) const;
  // This rank's context chunk of a micro batch of `tokens` (runs differ by
  // at most a token); the chunk's rows that are this rank's own (its
  // contiguous tensor-parallel part, chunk-relative); and their tokens.
  TokenRows ChunkRows(int64_t tokens) const;
  TokenRange LocalInChunk(int64_t tokens) const;
  TokenRows LocalRows(int64_t tokens) const;

  // Over the tensor group: every rank's rows of the chunk, in order (a copy at
  // tp 1); and the sum over ranks of a [chunk, cols] partial, this rank's rows
  // of it. `tokens` is the micro batch's.
  Tensor GatherChunk(ConstMatrixView local, int64_t tokens);
  Tensor ReduceScatterChunk(ConstMatrixView chunk, int64_t tokens);
  // Over the context group: every chunk (all tokens); and the sum over ranks
  // of an [all tokens, cols] partial, this rank's chunk of it.
  Tensor GatherAll(ConstMatrixView chunk, int64_t tokens);
  Tensor ReduceScatterAll(ConstMatrixView all, int64_t tokens);

  // OK, or the first collective that failed.
  const absl::Status& status() const { return status_; }

 private:
  // The rows of `whole_rows` that group member m holds, for every m.
  using MemberRows = std::vector<TokenRows>;
  // Collectives move equal blocks, so members' rows are padded to the most.
  Tensor Gather(Collectives* group, ConstMatrixView part, int64_t whole_rows,
                const MemberRows& members);
  Tensor ReduceScatter(Collectives* group, ConstMatrixView whole,
                       const MemberRows& members);
  MemberRows ChunkMembers(int64_t tokens) const;
  MemberRows ContextMembers(int64_t tokens) const;
  void Keep(absl::Status status);

  Collectives* tensor_;
  Collectives* context_;
  Collectives* tensor_host_;
  Collectives* context_host_;
  absl::Status status_;
};

// parallel->LocalRows(tokens), or all of them without parallelism.
TokenRows LocalRowsOf(const TokenParallel* parallel, int64_t tokens);

}  // namespace glm

#endif  // GLM_MODEL_TOKEN_PARALLEL_H_
