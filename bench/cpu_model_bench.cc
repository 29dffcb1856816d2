// Forward + backward throughput of the CPU model on a preset (default
// glm5.2-tiny): tokens/s at several sequence lengths, threads, and the
// process's peak RSS.
//
//   bazel run //bench:cpu_model_bench -- [preset] [tokens per step]
// Threads: GLM_CPU_THREADS (default: all cores).
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/parallel.h"
#include "model/config.h"
#include "model/glm_model.h"
#include "model/parameters.h"

namespace glm {
namespace {

// Peak resident set size of this process so far, in MiB.
double PeakRssMib() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;  // Linux reports KiB
}

// `tokens` random ids packed as sequences of `seq_len`.
Batch RandomBatch(int64_t tokens, int64_t seq_len, int64_t vocab,
                  std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
  std::vector<std::vector<int32_t>> rows(tokens / seq_len);
  for (auto& row : rows) {
    for (int64_t t = 0; t < seq_len; ++t) row.push_back(id(rng));
  }
  return Batch::FromSequences(rows);
}

int Run(const std::string& preset, int64_t tokens_per_step) {
  absl::StatusOr<ModelConfig> config = PresetConfig(preset);
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
    return 2;
  }
  ModelParameters params(*config);
  params.InitRandom(/*seed=*/1);
  CpuBackend backend;
  GlmModel model(&params, &backend);
  std::mt19937 rng(3);
  std::printf("model %s, %d threads, %lld tokens per step\n", preset.c_str(),
              cpu::NumThreads(), static_cast<long long>(tokens_per_step));
  std::printf("%8s %8s %10s %10s %12s %10s\n", "seq_len", "steps", "fwd ms",
              "fwd+bwd ms", "tokens/s", "loss");
  for (int64_t seq_len : {256, 1024}) {
    const Batch batch =
        RandomBatch(tokens_per_step, seq_len, config->vocab_size, rng);
    constexpr int kSteps = 3;
    double forward_s = 0, total_s = 0, loss = 0;
    for (int step = 0; step <= kSteps; ++step) {  // step 0 warms up
      const auto start = std::chrono::steady_clock::now();
      absl::StatusOr<ForwardResult> result = model.Forward(batch);
      const auto forward_done = std::chrono::steady_clock::now();
      if (!result.ok() || !model.Backward().ok()) {
        std::fprintf(stderr, "step failed\n");
        return 1;
      }
      const auto done = std::chrono::steady_clock::now();
      if (step == 0) continue;
      forward_s += std::chrono::duration<double>(forward_done - start).count();
      total_s += std::chrono::duration<double>(done - start).count();
      loss = result->total_loss;
    }
    std::printf("%8lld %8d %10.1f %10.1f %12.0f %10.4f\n",
                static_cast<long long>(seq_len), kSteps,
                1e3 * forward_s / kSteps, 1e3 * total_s / kSteps,
                kSteps * static_cast<double>(batch.input_ids.size()) / total_s,
                loss);
  }
  std::printf("peak RSS %.0f MiB\n", PeakRssMib());
  return 0;
}

}  // namespace
}  // namespace glm

int main(int argc, char** argv) {
  const std::string preset = argc > 1 ? argv[1] : "glm5.2-tiny";
  const int64_t tokens = argc > 2 ? std::atoll(argv[2]) : 4096;
  return glm::Run(preset, tokens);
}
