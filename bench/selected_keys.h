// Shared by the benches of the ops over each query's selected keys
// (bench/latent_attention_bench.cc, bench/indexer_loss_bench.cc): random
// operands on a backend, the two selections they time, and a call's time.
#ifndef GLM_BENCH_SELECTED_KEYS_H_
#define GLM_BENCH_SELECTED_KEYS_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/tensor.h"

namespace glm {

// The benches' flags: --device, --queries (per call, the last of each
// sequence), --seqs (comma-separated lengths), --iterations (timed calls).
struct SelectedKeysBenchFlags {
  std::string device;
  int64_t queries = 0;
  int iterations = 0;
  std::vector<int64_t> seqs;
};

// The flags from argv; on --help or a bad flag, prints the help (and the
// error) to stderr and returns nullopt with *exit_code set.
std::optional<SelectedKeysBenchFlags> ParseSelectedKeysBenchFlags(
    int argc, char** argv, const std::string& usage, int* exit_code);

// Prints the header of PrintTimeRow's table.
void PrintTimeHeader(const char* keys_label);

// A table row: the pass, the sequence length, the selection, ms per call,
// us per query, GB/s of `bytes` and TFLOP/s of `flops` a call.
void PrintTimeRow(const char* pass, int64_t seq, const char* selection,
                  int64_t queries, double ms, double bytes, double flops);

// `count` normal values with standard deviation `scale`.
std::vector<float> NormalValues(int64_t count, std::mt19937& rng, float scale);

// A [rows, cols] tensor of `type` (F32 or BF16) on the backend holding
// `values` (rows * cols of them, rounded to bf16 for BF16).
Tensor TensorOf(Backend& be, int64_t rows, int64_t cols, ElementType type,
                const std::vector<float>& values);

// TensorOf with normal entries of standard deviation `scale`.
Tensor RandomTensor(Backend& be, int64_t rows, int64_t cols, ElementType type,
                    std::mt19937& rng, float scale);

// For queries at tokens [seq - queries, seq): top-k distinct keys among the
// tokens up to each query, drawn at random (Floyd's sampling: as an untrained
// indexer picks, every gathered row a different one, the least reuse in L2)
// or the nearest (the most reuse); -1 past the visible tokens.
std::vector<int32_t> Selection(int64_t seq, int64_t queries, int64_t topk,
                               bool nearest, std::mt19937& rng);

// int32 values (a selection's keys, sequence starts) on the backend.
IndexTensor IndicesOn(Backend& be, const std::vector<int32_t>& keys);

// Milliseconds per call over `iterations` calls, after one warm-up call (the
// kernels' first launch).
template <typename Call>
double MillisecondsPerCall(Backend& be, int iterations, const Call& call) {
  call();
  be.Synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) call();
  be.Synchronize();
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - start)
             .count() /
         iterations;
}

}  // namespace glm

#endif  // GLM_BENCH_SELECTED_KEYS_H_
