// Time per query of the latent attention (Backend::LatentAttentionForward and
// Backward) at glm5.2-mini's shapes: 16 heads, latent rows of 576 (512 + 64
// rope), values 512 wide, top-2048, for the last queries of sequences of 4k
// to 64k tokens. Flat per query across lengths is the point of DSA.
//
//   bazel build --config=cuda //bench:latent_attention_bench
//   latent_attention_bench [--device=cuda:0] [--queries=4096]
//       [--seqs=4096,16384,32768,65536] [--iterations=5]
//
// Two selections per length: each query's 2,048 keys drawn at random from
// the tokens before it (as an untrained indexer picks: every gathered row a
// different one, the least reuse in L2), and its 2,048 nearest tokens (the
// most reuse). Prints ms per call, us per query, the gathered rows' GB/s and
// the products' TFLOP/s.
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>

#include "bench/selected_keys.h"
#include "kernels/backend_factory.h"

namespace glm {
namespace {

constexpr int64_t kHeads = 16, kLatent = 576, kValue = 512, kTopK = 2048;

int Run(int argc, char** argv) {
  int exit_code = 0;
  const std::optional<SelectedKeysBenchFlags> flags =
      ParseSelectedKeysBenchFlags(argc, argv, "latent_attention_bench [flags]",
                                  &exit_code);
  if (!flags) return exit_code;
  const int64_t queries = flags->queries;
  const int iterations = flags->iterations;
  absl::StatusOr<std::unique_ptr<Backend>> made =
      MakeBackend(flags->device, "bf16", /*deterministic=*/false);
  if (!made.ok()) {
    std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
    return 1;
  }
  Backend& be = **made;
  std::mt19937 rng(2026);
  const float scale = 1.f / std::sqrt(256.f);
  const int64_t rows = queries * kHeads;
  // Per query and key: the scores (576) and the value product (512) forward;
  // the backward recomputes the scores and forms dP (512), dQ (576) and the
  // key rows' gradient (576 + 512).
  const double pairs = double(queries) * kTopK;
  const double forward_flops = 2.0 * pairs * kHeads * (kLatent + kValue);
  const double backward_flops =
      2.0 * pairs * kHeads * (kLatent + kValue + kLatent + kLatent + kValue);
  const double row_bytes = pairs * kLatent * 2;  // each query's gathered rows
  std::printf(
      "%s, %lld queries of 16 heads, top-%lld of latent rows %lld "
      "wide (values %lld), %d calls each\n",
      be.Name().c_str(), static_cast<long long>(queries),
      static_cast<long long>(kTopK), static_cast<long long>(kLatent),
      static_cast<long long>(kValue), iterations);
  PrintTimeHeader("rows GB/s");
  const Tensor q = RandomTensor(be, rows, kLatent, ElementType::kBF16, rng,
                                1.f),
               dout = RandomTensor(be, rows, kValue, ElementType::kBF16, rng,
                                   1e-2f);
  Tensor out({rows, kValue}, be.allocator(), ElementType::kBF16),
      dq({rows, kLatent}, be.allocator(), ElementType::kBF16),
      lse({rows}, be.allocator()), weights({queries, kTopK}, be.allocator());
  for (int64_t seq : flags->seqs) {
    const Tensor kv =
        RandomTensor(be, seq, kLatent, ElementType::kBF16, rng, 1.f);
    Tensor dkv({seq, kLatent}, be.allocator(), ElementType::kBF16);
    for (bool nearest : {false, true}) {
      const IndexTensor keys =
          IndicesOn(be, Selection(seq, queries, kTopK, nearest, rng));
      const char* selection = nearest ? "nearest" : "random";
      const double fwd = MillisecondsPerCall(be, iterations, [&] {
        be.LatentAttentionForward(q.Matrix(), kv.Matrix(), keys.data(), kTopK,
                                  kHeads, scale, out.Matrix(), lse.data());
      });
      PrintTimeRow("forward", seq, selection, queries, fwd, row_bytes,
                   forward_flops);
      const double bwd = MillisecondsPerCall(be, iterations, [&] {
        be.LatentAttentionBackward(q.Matrix(), kv.Matrix(), keys.data(), kTopK,
                                   kHeads, scale, out.Matrix(), lse.data(),
                                   dout.Matrix(), dq.Matrix(), dkv.Matrix(),
                                   weights.Matrix());
      });
      PrintTimeRow("backward", seq, selection, queries, bwd, row_bytes,
                   backward_flops);
    }
  }
  return 0;
}

}  // namespace
}  // namespace glm

int main(int argc, char** argv) { return glm::Run(argc, argv); }
