// Time per query of the indexer's top-k (Backend::IndexerTopK: its scores
// over every key up to the query, and the selection) and of its KL loss with
// the gradients (Backend::IndexerKlLoss), at glm5.2-mini's indexer shapes:
// 32 heads of 128 dims, top-2048, for the last queries of sequences of 4k to
// 64k tokens. The top-k's time grows with the length (the indexer's
// quadratic term); the loss's should not. The loss runs in the bf16 mode
// with atomics allowed (past 8 x top-k keys: the sparse path,
// kernels/cuda/indexer_sparse_loss.cuh, with GLM_SPARSE_INDEXER_LOSS=1) and
// without (a job's training.deterministic: the sorted per-query path there),
// in one process.
//
//   bazel build --config=cuda //bench:indexer_bench
//   indexer_bench [--device=cuda:0] [--queries=4096]
//       [--seqs=4096,16384,32768,65536] [--iterations=5]
//
// The loss's two selections as bench/latent_attention_bench.cc's (random
// keys: the least reuse in L2; the nearest: the most). Prints ms per call, us
// per query, GB/s (the top-k: the fp32 scores of the visible keys written
// once; the loss: the selected key rows read once) and TFLOP/s (the top-k:
// the visible keys' dots; the loss: its three products, dots, e K and e^T (w
// q)).
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "bench/selected_keys.h"
#include "kernels/backend_factory.h"

namespace glm {
namespace {

constexpr int64_t kHeads = 32, kDim = 128, kTopK = 2048;

// The top-k of the last flags.queries queries of a sequence of `seq` tokens
// (one sequence from token 0): its scores cover each query's visible keys.
void TimeTopK(Backend& be, const SelectedKeysBenchFlags& flags, int64_t seq,
              const Tensor& iq, const Tensor& ik, const Tensor& w,
              float scale) {
  const int64_t queries = flags.queries, offset = seq - queries;
  const IndexTensor seq_start = IndicesOn(be, std::vector<int32_t>(queries, 0));
  IndexTensor keys({queries * kTopK}, 0, be.allocator());
  const double ms = MillisecondsPerCall(be, flags.iterations, [&] {
    be.IndexerTopK(iq.Matrix(), ik.Matrix(), w.Matrix(), seq_start.data(),
                   offset, kTopK, scale, /*keep=*/nullptr, keys.data());
  });
  // Keys visible to the queries: offset + 1 to seq, on average.
  const double visible = double(queries) * (offset + (queries + 1) / 2.0);
  PrintTimeRow("top-k", seq, "scored", queries, ms, visible * sizeof(float),
               2.0 * visible * kHeads * kDim);
}

int Run(int argc, char** argv) {
  int exit_code = 0;
  const std::optional<SelectedKeysBenchFlags> flags =
      ParseSelectedKeysBenchFlags(argc, argv, "indexer_loss_bench [flags]",
                                  &exit_code);
  if (!flags) return exit_code;
  const int64_t queries = flags->queries;
  std::unique_ptr<Backend> backends[2];
  const char* names[2] = {"atomics", "ordered"};  // the loss's two rows
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::unique_ptr<Backend>> made =
        MakeBackend(flags->device, "bf16", /*deterministic=*/i == 1);
    if (!made.ok()) {
      std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
      return 1;
    }
    backends[i] = *std::move(made);
  }
  std::mt19937 rng(2026);
  const float scale = 1.f / std::sqrt(float(kDim));
  const double pairs = double(queries) * kTopK;
  const double loss_flops = 3 * 2.0 * pairs * kHeads * kDim;
  const double row_bytes = pairs * kDim * sizeof(float);
  std::printf(
      "%s, %lld queries of %lld indexer heads x %lld, top-%lld, %d calls "
      "each; top-k: the bf16 mode's; loss, atomics: dik summed with atomics, "
      "ordered: in a fixed order\n",
      backends[0]->Name().c_str(), static_cast<long long>(queries),
      static_cast<long long>(kHeads), static_cast<long long>(kDim),
      static_cast<long long>(kTopK), flags->iterations);
  PrintTimeHeader("GB/s");
  std::vector<float> target = NormalValues(queries * kTopK, rng, 1.f);
  for (float& x : target) x = std::abs(x);
  for (int64_t seq : flags->seqs) {
    for (int i = 0; i < 2; ++i) {
      Backend& be = *backends[i];
      const Tensor iq = RandomTensor(be, queries * kHeads, kDim,
                                     ElementType::kF32, rng, 1.f),
                   ik =
                       RandomTensor(be, seq, kDim, ElementType::kF32, rng, 1.f),
                   w = RandomTensor(be, queries, kHeads, ElementType::kF32, rng,
                                    1.f / std::sqrt(float(kHeads))),
                   t = TensorOf(be, queries, kTopK, ElementType::kF32, target);
      if (i == 0) TimeTopK(be, *flags, seq, iq, ik, w, scale);
      Tensor diq({queries * kHeads, kDim}, be.allocator()),
          dik({seq, kDim}, be.allocator()),
          dw({queries, kHeads}, be.allocator());
      TensorStorage<double> sum(1, 0.0, be.allocator());
      for (bool nearest : {false, true}) {
        const IndexTensor keys =
            IndicesOn(be, Selection(seq, queries, kTopK, nearest, rng));
        const double ms = MillisecondsPerCall(be, flags->iterations, [&] {
          be.IndexerKlLoss(iq.Matrix(), ik.Matrix(), w.Matrix(), keys.data(),
                           kTopK, scale, t.Matrix(), 1.f, /*kept=*/nullptr,
                           diq.Matrix(), dik.Matrix(), dw.Matrix(), sum.data());
        });
        PrintTimeRow(names[i], seq, nearest ? "nearest" : "random", queries, ms,
                     row_bytes, loss_flops);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace glm

int main(int argc, char** argv) { return glm::Run(argc, argv); }
