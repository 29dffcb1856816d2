// Bus bandwidth of the NCCL collectives that tensor, context and data
// parallelism use (all-reduce, all-gather, reduce-scatter), through our
// NcclCollectives, one rank per GPU of this machine, bootstrapped through an
// in-process coordinator's rendezvous. Each call returns after the GPU
// finished (as training's calls do), so a time is one call end to end.
// Prints one line per (op, size): "op bytes ms busbw_GBps", bus bandwidth as
// nccl-tests defines it (all-reduce: bytes/t * 2(n-1)/n; all-gather and
// reduce-scatter, bytes = the whole buffer: bytes/t * (n-1)/n).
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/test_coordinator.h"
#include "parallel/nccl_collectives.h"
#include "worker/rendezvous_store.h"

namespace glm {
namespace {

constexpr int kWarmup = 3;
constexpr int kTimed = 20;

struct Timing {
  std::string op;
  int64_t bytes = 0;
  double ms = 0;
};

// Mean milliseconds of `call` over kTimed calls after kWarmup, every rank
// starting together.
double TimeCalls(Collectives& group,
                 const std::function<absl::Status()>& call) {
  for (int i = 0; i < kWarmup; ++i) call().IgnoreError();
  group.Barrier().IgnoreError();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kTimed; ++i) {
    if (absl::Status status = call(); !status.ok()) {
      std::fprintf(stderr, "%s\n", status.ToString().c_str());
      return -1;
    }
  }
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - start)
             .count() /
         kTimed;
}

std::vector<Timing> RunRank(TestCoordinator& server, int rank, int size) {
  cudaSetDevice(rank);
  RendezvousStore store(server.Connect(), "nccl-bench");
  auto group =
      NcclCollectives::Connect(store, "world", rank, size, absl::Seconds(60));
  if (!group.ok()) {
    std::fprintf(stderr, "connect: %s\n", group.status().ToString().c_str());
    return {};
  }
  Collectives& g = **group;
  std::vector<Timing> timings;
  for (int64_t mib : {1, 4, 16, 64, 256}) {
    const int64_t count = mib * (1 << 20) / sizeof(float);
    float *whole = nullptr, *part = nullptr;
    cudaMalloc(&whole, count * sizeof(float));
    cudaMalloc(&part, count / size * sizeof(float));
    cudaMemset(whole, 0, count * sizeof(float));
    cudaMemset(part, 0, count / size * sizeof(float));
    const int64_t bytes = count * sizeof(float);
    timings.push_back({"all-reduce", bytes, TimeCalls(g, [&] {
                         return g.AllReduce(whole, count, ReduceOp::kSum);
                       })});
    timings.push_back({"all-gather", bytes, TimeCalls(g, [&] {
                         return g.AllGather(part, count / size, whole);
                       })});
    timings.push_back({"reduce-scatter", bytes, TimeCalls(g, [&] {
                         return g.ReduceScatter(whole, count / size, part,
                                                ReduceOp::kSum);
                       })});
    cudaFree(whole);
    cudaFree(part);
  }
  return timings;
}

int Main() {
  int devices = 0;
  cudaGetDeviceCount(&devices);
  if (devices < 2) {
    std::fprintf(stderr, "needs at least two GPUs, found %d\n", devices);
    return 2;
  }
  TestCoordinator server("nccl_bench");
  std::vector<std::vector<Timing>> timings(devices);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < devices; ++rank) {
    ranks.emplace_back(
        [&, rank] { timings[rank] = RunRank(server, rank, devices); });
  }
  for (std::thread& rank : ranks) rank.join();
  const double n = devices;
  for (const Timing& t : timings[0]) {
    if (t.ms <= 0) return 1;
    const double factor = t.op == "all-reduce" ? 2 * (n - 1) / n : (n - 1) / n;
    std::printf("%s %lld %.3f %.1f\n", t.op.c_str(),
                static_cast<long long>(t.bytes), t.ms,
                t.bytes / (t.ms * 1e-3) * factor / 1e9);
  }
  return 0;
}

}  // namespace
}  // namespace glm

int main() { return glm::Main(); }
