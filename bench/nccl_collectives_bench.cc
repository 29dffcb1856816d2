// Bus bandwidth of the NCCL collectives that tensor, context and data
// parallelism use (all-reduce, all-gather, reduce-scatter), through our
// NcclCollectives, one rank per GPU of this machine, bootstrapped through a
// coordinator's rendezvous. Ranks are processes, as glm-workers are (this
// program starts the coordinator and one copy of itself per GPU), or with
// --threads threads of this process. Each call returns after the GPU
// finished (as training's calls do), so a time is one call end to end.
// Prints one line per (op, size): "op bytes ms busbw_GBps", bus bandwidth as
// nccl-tests defines it (all-reduce: bytes/t * 2(n-1)/n; all-gather and
// reduce-scatter, bytes = the whole buffer: bytes/t * (n-1)/n).
#include <cuda_runtime.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
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

std::vector<Timing> RunRank(std::shared_ptr<ClientConnection> connection,
                            int rank, int size) {
  cudaSetDevice(rank);
  RendezvousStore store(std::move(connection), "nccl-bench");
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

void Print(const std::vector<Timing>& timings, int size) {
  const double n = size;
  for (const Timing& t : timings) {
    const double factor = t.op == "all-reduce" ? 2 * (n - 1) / n : (n - 1) / n;
    std::printf("%s %lld %.3f %.1f\n", t.op.c_str(),
                static_cast<long long>(t.bytes), t.ms,
                t.bytes / (t.ms * 1e-3) * factor / 1e9);
  }
}

bool AllTimed(const std::vector<Timing>& timings) {
  if (timings.empty()) return false;
  for (const Timing& t : timings) {
    if (t.ms <= 0) return false;
  }
  return true;
}

// One rank of a process run: argv = self --rank=R --size=N --target=T.
int RankProcess(int rank, int size, const std::string& target) {
  auto connection = PlaintextConnection(target, TestCoordinator::kWorkerToken);
  RegisterTestWorker(v1::CUDA, *connection);
  const std::vector<Timing> timings = RunRank(connection, rank, size);
  if (!AllTimed(timings)) return 1;
  if (rank == 0) Print(timings, size);
  return 0;
}

int Main(int argc, char** argv) {
  int rank = -1, size = 0;
  std::string target;
  bool threads = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--threads") threads = true;
    if (absl::StartsWith(arg, "--rank=")) {
      (void)absl::SimpleAtoi(arg.substr(7), &rank);
    }
    if (absl::StartsWith(arg, "--size=")) {
      (void)absl::SimpleAtoi(arg.substr(7), &size);
    }
    if (absl::StartsWith(arg, "--target=")) target = arg.substr(9);
  }
  if (rank >= 0) return RankProcess(rank, size, target);
  int devices = 0;
  cudaGetDeviceCount(&devices);
  if (devices < 2) {
    std::fprintf(stderr, "needs at least two GPUs, found %d\n", devices);
    return 2;
  }
  TestCoordinator server("nccl_bench");
  if (threads) {
    std::vector<std::vector<Timing>> timings(devices);
    std::vector<std::thread> ranks;
    for (int r = 0; r < devices; ++r) {
      ranks.emplace_back([&, r] {
        timings[r] = RunRank(server.ConnectAsRegisteredWorker(), r, devices);
      });
    }
    for (std::thread& r : ranks) r.join();
    if (!AllTimed(timings[0])) return 1;
    Print(timings[0], devices);
    return 0;
  }
  std::vector<pid_t> children;
  for (int r = 0; r < devices; ++r) {
    const std::string args[] = {argv[0], absl::StrCat("--rank=", r),
                                absl::StrCat("--size=", devices),
                                "--target=" + server.target()};
    char* child_argv[] = {const_cast<char*>(args[0].c_str()),
                          const_cast<char*>(args[1].c_str()),
                          const_cast<char*>(args[2].c_str()),
                          const_cast<char*>(args[3].c_str()), nullptr};
    pid_t pid = 0;
    if (posix_spawn(&pid, argv[0], nullptr, nullptr, child_argv, environ) !=
        0) {
      std::fprintf(stderr, "could not start rank %d\n", r);
      return 1;
    }
    children.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace glm

int main(int argc, char** argv) { return glm::Main(argc, argv); }
