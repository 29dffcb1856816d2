// How attention cost grows with sequence length under DeepSeek Sparse
// Attention: the MLA core attends min(index_topk, t + 1) keys per query, so its
// cost grows with seq x topk; dense causal attention (topk = seq) grows with
// seq^2. The indexer's scoring is quadratic too, but over index_head_dim-wide
// dot products.
//
//   bazel run -c opt //bench:long_context_bench -- [topk]
// Prints, per sequence length, forward + backward time of sparse attention with
// `topk` keys (default 64), of the dense equivalent (up to 4096), and of the
// indexer's top-k selection, each per token.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_backend.h"

namespace glm {
namespace {

// glm5.2-tiny's attention shape: 4 heads, qk 24, v 16; indexer 4 x 16.
constexpr int64_t kHeads = 4, kQk = 24, kV = 16, kIndexHeads = 4,
                  kIndexDim = 16;

Tensor Random(std::vector<int64_t> shape, std::mt19937& rng) {
  Tensor t(std::move(shape));
  std::normal_distribution<float> normal;
  for (float& x : t.values()) x = normal(rng);
  return t;
}

double Seconds(const std::function<void()>& run) {
  const auto start = std::chrono::steady_clock::now();
  run();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

// Keys for each query: the last min(topk, t + 1) positions (the cost does not
// depend on which keys the indexer picks).
std::vector<int32_t> CausalKeys(int64_t seq, int64_t topk) {
  std::vector<int32_t> keys(seq * topk, -1);
  for (int64_t t = 0; t < seq; ++t) {
    const int64_t n = std::min<int64_t>(topk, t + 1);
    for (int64_t j = 0; j < n; ++j) keys[t * topk + j] = t - j;
  }
  return keys;
}

double AttentionSeconds(CpuBackend& backend, int64_t seq, int64_t topk,
                        std::mt19937& rng) {
  Tensor q = Random({seq * kHeads, kQk}, rng),
         k = Random({seq * kHeads, kQk}, rng),
         v = Random({seq * kHeads, kV}, rng),
         dout = Random({seq * kHeads, kV}, rng);
  Tensor out({seq * kHeads, kV}), lse({seq * kHeads});
  Tensor dq({seq * kHeads, kQk}), dk({seq * kHeads, kQk}),
      dv({seq * kHeads, kV});
  const std::vector<int32_t> keys = CausalKeys(seq, topk);
  const int64_t full = std::min(seq, topk);  // CausalKeys selects them all
  const float scale = 1.f / std::sqrt(static_cast<float>(kQk));
  return Seconds([&] {
    backend.SparseAttentionForward(q.Matrix(), k.Matrix(), v.Matrix(),
                                   keys.data(), topk, full, kHeads, scale,
                                   out.Matrix(), lse.data());
    backend.SparseAttentionBackward(q.Matrix(), k.Matrix(), v.Matrix(),
                                    keys.data(), topk, full, kHeads, scale,
                                    out.Matrix(), lse.data(), dout.Matrix(),
                                    dq.Matrix(), dk.Matrix(), dv.Matrix(),
                                    /*key_weights=*/{});
  });
}

double IndexerSeconds(CpuBackend& backend, int64_t seq, int64_t topk,
                      std::mt19937& rng) {
  Tensor iq = Random({seq * kIndexHeads, kIndexDim}, rng),
         ik = Random({seq, kIndexDim}, rng),
         w = Random({seq, kIndexHeads}, rng);
  std::vector<int32_t> seq_start(seq, 0), keys(seq * topk);
  return Seconds([&] {
    backend.IndexerTopK(iq.Matrix(), ik.Matrix(), w.Matrix(), seq_start.data(),
                        0, topk, 1.f / std::sqrt(float(kIndexDim)),
                        /*keep=*/nullptr, keys.data());
  });
}

int Main(int argc, char** argv) {
  const int64_t topk = argc > 1 ? std::atoll(argv[1]) : 64;
  CpuBackend backend;
  std::mt19937 rng(1);
  std::printf(
      "| seq | sparse attn fwd+bwd ms (topk %lld) | us/token | dense attn "
      "fwd+bwd ms | us/token | indexer top-k ms | us/token |\n",
      static_cast<long long>(topk));
  std::printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (int64_t seq : {512, 1024, 2048, 4096, 8192, 16384}) {
    const double sparse = AttentionSeconds(backend, seq, topk, rng);
    const double dense =
        seq <= 4096 ? AttentionSeconds(backend, seq, seq, rng) : 0;
    const double indexer = IndexerSeconds(backend, seq, topk, rng);
    std::printf(
        "| %lld | %.1f | %.2f | %s | %s | %.1f | %.2f |\n",
        static_cast<long long>(seq), sparse * 1e3, sparse * 1e6 / seq,
        dense > 0 ? std::to_string(dense * 1e3).substr(0, 8).c_str() : "-",
        dense > 0 ? std::to_string(dense * 1e6 / seq).substr(0, 6).c_str()
                  : "-",
        indexer * 1e3, indexer * 1e6 / seq);
  }
  return 0;
}

}  // namespace
}  // namespace glm

int main(int argc, char** argv) { return glm::Main(argc, argv); }
