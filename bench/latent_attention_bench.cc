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
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/bf16.h"
#include "base/command_flags.h"
#include "kernels/backend_factory.h"

namespace glm {
namespace {

constexpr int64_t kHeads = 16, kLatent = 576, kValue = 512, kTopK = 2048;

// A bf16 [rows, cols] tensor on the backend with random normal entries.
Tensor RandomBf16(Backend& be, int64_t rows, int64_t cols, std::mt19937& rng,
                  float scale) {
  std::normal_distribution<float> normal(0.f, scale);
  std::vector<uint16_t> bits(rows * cols);
  for (uint16_t& b : bits) b = Float32ToBfloat16(normal(rng));
  Tensor t({rows, cols}, be.allocator(), ElementType::kBF16);
  be.allocator()->CopyFromHost(t.Matrix().data, bits.data(),
                               bits.size() * sizeof(uint16_t));
  return t;
}

// For queries at tokens [seq - queries, seq): top-k distinct keys among the
// tokens up to each query, drawn at random (Floyd's sampling) or the nearest.
std::vector<int32_t> Selection(int64_t seq, int64_t queries, bool nearest,
                               std::mt19937& rng) {
  std::vector<int32_t> keys(queries * kTopK);
  std::unordered_set<int32_t> chosen;
  for (int64_t i = 0; i < queries; ++i) {
    const int64_t t = seq - queries + i, visible = t + 1;
    int32_t* row = keys.data() + i * kTopK;
    if (nearest || visible <= kTopK) {
      for (int64_t j = 0; j < kTopK; ++j)
        row[j] = j < visible ? static_cast<int32_t>(t - j) : -1;
      continue;
    }
    chosen.clear();
    for (int64_t j = visible - kTopK; j < visible; ++j) {
      const int32_t pick = std::uniform_int_distribution<int32_t>(
          0, static_cast<int32_t>(j))(rng);
      chosen.insert(chosen.count(pick) ? static_cast<int32_t>(j) : pick);
    }
    std::copy(chosen.begin(), chosen.end(), row);
  }
  return keys;
}

template <typename Call>
double MillisecondsPerCall(Backend& be, int iterations, const Call& call) {
  call();  // warm-up: the kernels' first launch
  be.Synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) call();
  be.Synchronize();
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - start)
             .count() /
         iterations;
}

void Row(const char* pass, int64_t seq, const char* selection, int64_t queries,
         double ms, double bytes, double flops) {
  std::printf("%-8s %7lld  %-8s %9.2f %10.2f %9.0f %9.1f\n", pass,
              static_cast<long long>(seq), selection, ms, ms * 1e3 / queries,
              bytes / (ms * 1e-3) / 1e9, flops / (ms * 1e-3) / 1e12);
}

int Run(int argc, char** argv) {
  CommandFlags flags("latent_attention_bench [flags]");
  flags.Add("device", "the GPU", "cuda:0");
  flags.Add("queries", "queries per call (the last of each sequence)", "4096");
  flags.Add("seqs", "sequence lengths, comma-separated",
            "4096,16384,32768,65536");
  flags.Add("iterations", "timed calls of each op", "5");
  int64_t queries = 0;
  int iterations = 0;
  absl::Status status =
      flags.Parse(std::vector<std::string>(argv + 1, argv + argc));
  if (status.ok()) status = flags.GetInt("queries", &queries);
  if (status.ok()) status = flags.GetInt("iterations", &iterations);
  if (status.ok() && (queries < 1 || iterations < 1))
    status = absl::InvalidArgumentError("--queries and --iterations: >= 1");
  std::vector<int64_t> seqs;
  for (absl::string_view s : absl::StrSplit(flags.Get("seqs"), ',')) {
    int64_t seq = 0;
    if (status.ok() && (!absl::SimpleAtoi(s, &seq) || seq < queries)) {
      status = absl::InvalidArgumentError(absl::StrCat(
          "--seqs: '", s, "' is not a length of at least ", queries));
    }
    seqs.push_back(seq);
  }
  if (!status.ok() || flags.HelpRequested()) {
    if (!status.ok()) std::fprintf(stderr, "%s\n", status.ToString().c_str());
    std::fprintf(stderr, "%s", flags.Help().c_str());
    return status.ok() ? kExitOk : kExitUsage;
  }
  const std::string device = flags.Get("device");
  absl::StatusOr<std::unique_ptr<Backend>> made =
      MakeBackend(device, "bf16", /*deterministic=*/false);
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
  std::printf("%-8s %7s  %-8s %9s %10s %9s %9s\n", "pass", "seq", "keys",
              "ms/call", "us/query", "rows GB/s", "TFLOP/s");
  const Tensor q = RandomBf16(be, rows, kLatent, rng, 1.f),
               dout = RandomBf16(be, rows, kValue, rng, 1e-2f);
  Tensor out({rows, kValue}, be.allocator(), ElementType::kBF16),
      dq({rows, kLatent}, be.allocator(), ElementType::kBF16),
      lse({rows}, be.allocator()), weights({queries, kTopK}, be.allocator());
  for (int64_t seq : seqs) {
    const Tensor kv = RandomBf16(be, seq, kLatent, rng, 1.f);
    Tensor dkv({seq, kLatent}, be.allocator(), ElementType::kBF16);
    for (bool nearest : {false, true}) {
      IndexTensor keys({queries * kTopK}, 0, be.allocator());
      const std::vector<int32_t> host = Selection(seq, queries, nearest, rng);
      be.allocator()->CopyFromHost(keys.data(), host.data(),
                                   host.size() * sizeof(int32_t));
      const char* selection = nearest ? "nearest" : "random";
      const double fwd = MillisecondsPerCall(be, iterations, [&] {
        be.LatentAttentionForward(q.Matrix(), kv.Matrix(), keys.data(), kTopK,
                                  kHeads, scale, out.Matrix(), lse.data());
      });
      Row("forward", seq, selection, queries, fwd, row_bytes, forward_flops);
      const double bwd = MillisecondsPerCall(be, iterations, [&] {
        be.LatentAttentionBackward(q.Matrix(), kv.Matrix(), keys.data(), kTopK,
                                   kHeads, scale, out.Matrix(), lse.data(),
                                   dout.Matrix(), dq.Matrix(), dkv.Matrix(),
                                   weights.Matrix());
      });
      Row("backward", seq, selection, queries, bwd, row_bytes, backward_flops);
    }
  }
  return 0;
}

}  // namespace
}  // namespace glm

int main(int argc, char** argv) { return glm::Run(argc, argv); }
