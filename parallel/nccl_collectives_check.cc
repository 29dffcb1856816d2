// Runs every NCCL collective across the GPUs of this machine (one rank per GPU,
// one thread each, meeting through an in-memory store) and compares each
// result with the value computed on the host, then the pipeline's edge groups
// with sends pending both ways. Needs at least two GPUs; prints
// one line per collective and exits 1 on any mismatch.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "parallel/in_memory_store.h"
#include "parallel/nccl_collectives.h"
#include "parallel/pipeline_edges.h"

namespace glm {
namespace {

constexpr int64_t kCount = 1 << 20;

float* DeviceCopy(const std::vector<float>& host) {
  float* device = nullptr;
  cudaMalloc(&device, host.size() * sizeof(float));
  cudaMemcpy(device, host.data(), host.size() * sizeof(float),
             cudaMemcpyHostToDevice);
  return device;
}

std::vector<float> HostCopy(const float* device, int64_t count) {
  std::vector<float> host(count);
  cudaMemcpy(host.data(), device, count * sizeof(float),
             cudaMemcpyDeviceToHost);
  return host;
}

// Value i of rank r's input.
float Input(int rank, int64_t i) {
  return static_cast<float>(rank + 1) + i % 7;
}

struct Outcome {
  std::string op;
  bool ok = true;
};

void Expect(const std::string& op, const absl::Status& status,
            const std::vector<float>& got,
            const std::function<float(int64_t)>& want,
            std::vector<Outcome>* outcomes) {
  Outcome outcome{op, status.ok()};
  for (int64_t i = 0; outcome.ok && i < static_cast<int64_t>(got.size()); ++i) {
    outcome.ok = got[i] == want(i);
  }
  if (!status.ok())
    std::fprintf(stderr, "%s: %s\n", op.c_str(), status.ToString().c_str());
  outcomes->push_back(outcome);
}

void QueuedRoundTrip(NcclCollectives& group, int rank, int size, int64_t block,
                     const std::vector<float>& input,
                     std::vector<Outcome>* outcomes) {
  cudaStream_t caller = nullptr;
  cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking);
  constexpr size_t kFillBytes = size_t{1} << 30;
  void* fill = nullptr;
  cudaMalloc(&fill, kFillBytes);
  float* data = DeviceCopy(std::vector<float>(kCount, 0.f));
  float* received = DeviceCopy(std::vector<float>(kCount));
  float* back = DeviceCopy(std::vector<float>(kCount));
  cudaMemset(received, 0xff, kCount * sizeof(float));
  cudaMemset(back, 0xff, kCount * sizeof(float));
  cudaDeviceSynchronize();
  // Pinned host memory, so that no copy waits on the host.
  float *pinned_input = nullptr, *got = nullptr, *returned = nullptr;
  const size_t bytes = kCount * sizeof(float);
  cudaMallocHost(&pinned_input, bytes);
  cudaMallocHost(&got, bytes);
  cudaMallocHost(&returned, bytes);
  std::copy(input.begin(), input.end(), pinned_input);
  for (int i = 0; i < 8; ++i) cudaMemsetAsync(fill, i, kFillBytes, caller);
  cudaMemcpyAsync(data, pinned_input, bytes, cudaMemcpyHostToDevice, caller);
  const std::vector<int64_t> counts(size, block);
  absl::Status status =
      group.QueueAllToAllV(data, counts, received, counts, caller);
  cudaMemcpyAsync(got, received, bytes, cudaMemcpyDeviceToHost, caller);
  if (status.ok()) {
    status = group.QueueAllToAllV(received, counts, back, counts, caller);
  }
  cudaMemcpyAsync(returned, back, bytes, cudaMemcpyDeviceToHost, caller);
  cudaStreamSynchronize(caller);
  if (status.ok()) status = group.QueuedFailure();
  Expect(
      "queued all-to-all", status, std::vector<float>(got, got + kCount),
      [&](int64_t i) { return Input(i / block, rank * block + i % block); },
      outcomes);
  Expect(
      "queued and back", status,
      std::vector<float>(returned, returned + kCount),
      [&](int64_t i) { return Input(rank, i); }, outcomes);
  cudaFreeHost(pinned_input);
  cudaFreeHost(got);
  cudaFreeHost(returned);
  cudaFree(fill);
  cudaFree(data);
  cudaFree(received);
  cudaFree(back);
  cudaStreamDestroy(caller);
}

// The pipeline's edges over NCCL, every GPU a pp rank: each rank starts its
// sends to both neighbours, then receives from both, then waits for its
// sends. Over one group a receive would queue behind the pending sends and
// every rank would wait for the others (the group's timeout then fails it);
// over the edges it must not.
void PipelineEdgeSends(KeyValueStore& store, int rank, int size,
                       std::vector<Outcome>* outcomes) {
  std::vector<int> members(size);
  for (int r = 0; r < size; ++r) members[r] = r;
  absl::StatusOr<std::unique_ptr<PipelineEdges>> edges = PipelineEdges::Connect(
      members, rank,
      [&](const std::string& key, int member,
          int group_size) -> absl::StatusOr<std::unique_ptr<Collectives>> {
        auto group = NcclCollectives::Connect(store, key, member, group_size,
                                              absl::Seconds(60));
        if (!group.ok()) return group.status();
        return std::unique_ptr<Collectives>(*std::move(group));
      });
  if (!edges.ok()) {
    Expect("pipeline edges", edges.status(), {}, nullptr, outcomes);
    return;
  }
  const PipelineLinks links = (*edges)->Links();
  const int next = (rank + 1) % size, previous = (rank + size - 1) % size;
  std::vector<float> hidden(kCount), gradient(kCount);
  for (int64_t i = 0; i < kCount; ++i) {
    hidden[i] = Input(rank, i);
    gradient[i] = -Input(rank, i);
  }
  float* to_next = DeviceCopy(hidden);
  float* to_previous = DeviceCopy(gradient);
  float* from_previous = DeviceCopy(std::vector<float>(kCount, 0.f));
  float* from_next = DeviceCopy(std::vector<float>(kCount, 0.f));
  auto sent_next =
      links.to_next.group->StartSend(to_next, kCount, links.to_next.peer);
  auto sent_previous = links.to_previous.group->StartSend(
      to_previous, kCount, links.to_previous.peer);
  absl::Status status =
      sent_next.ok() ? sent_previous.status() : sent_next.status();
  if (status.ok()) {
    status = links.from_previous.group->Recv(from_previous, kCount,
                                             links.from_previous.peer);
  }
  if (status.ok()) {
    status =
        links.from_next.group->Recv(from_next, kCount, links.from_next.peer);
  }
  if (status.ok()) status = (*sent_next)->Wait();
  if (status.ok()) status = (*sent_previous)->Wait();
  Expect(
      "edges, hidden", status, HostCopy(from_previous, kCount),
      [&](int64_t i) { return Input(previous, i); }, outcomes);
  Expect(
      "edges, gradient", status, HostCopy(from_next, kCount),
      [&](int64_t i) { return -Input(next, i); }, outcomes);
  for (float* buffer : {to_next, to_previous, from_previous, from_next}) {
    cudaFree(buffer);
  }
}

std::vector<Outcome> RunRank(KeyValueStore& store, int rank, int size) {
  cudaSetDevice(rank);
  std::vector<Outcome> outcomes;
  auto group =
      NcclCollectives::Connect(store, "world", rank, size, absl::Seconds(60));
  if (!group.ok()) {
    std::fprintf(stderr, "connect: %s\n", group.status().ToString().c_str());
    return {{"connect", false}};
  }
  std::vector<float> input(kCount);
  for (int64_t i = 0; i < kCount; ++i) input[i] = Input(rank, i);
  const int total = size * (size + 1) / 2;

  float* data = DeviceCopy(input);
  absl::Status status = (*group)->AllReduce(data, kCount, ReduceOp::kSum);
  Expect(
      "all-reduce sum", status, HostCopy(data, kCount),
      [&](int64_t i) { return total + size * float(i % 7); }, &outcomes);
  cudaFree(data);

  data = DeviceCopy(input);
  status = (*group)->Broadcast(data, kCount, /*root=*/size - 1);
  Expect(
      "broadcast", status, HostCopy(data, kCount),
      [&](int64_t i) { return Input(size - 1, i); }, &outcomes);
  cudaFree(data);

  data = DeviceCopy(input);
  float* gathered = DeviceCopy(std::vector<float>(kCount * size));
  status = (*group)->AllGather(data, kCount, gathered);
  Expect(
      "all-gather", status, HostCopy(gathered, kCount * size),
      [&](int64_t i) { return Input(i / kCount, i % kCount); }, &outcomes);

  // All-to-all: rank r sends block j (kCount / size values) to rank j.
  const int64_t block = kCount / size;
  float* received = DeviceCopy(std::vector<float>(kCount));
  status = (*group)->AllToAllV(data, std::vector<int64_t>(size, block),
                               received, std::vector<int64_t>(size, block));
  Expect(
      "all-to-all", status, HostCopy(received, kCount),
      [&](int64_t i) { return Input(i / block, rank * block + i % block); },
      &outcomes);

  // The same all-to-all queued on a stream of the caller's, and back again:
  // the input is written on that stream behind a long fill, each result read
  // there after, and the host waits only at the end, so an exchange that ran
  // before the caller's work (or the caller's reads before the exchange)
  // would see stale or poisoned values.
  QueuedRoundTrip(**group, rank, size, block, input, &outcomes);

  // A ring of send/recv.
  const int next = (rank + 1) % size, previous = (rank + size - 1) % size;
  status = absl::OkStatus();
  if (rank % 2 == 0) {
    auto sent = (*group)->StartSend(data, kCount, next);
    status = sent.ok() ? (*sent)->Wait() : sent.status();
    if (status.ok()) status = (*group)->Recv(received, kCount, previous);
  } else {
    status = (*group)->Recv(received, kCount, previous);
    auto sent = (*group)->StartSend(data, kCount, next);
    if (status.ok()) status = sent.ok() ? (*sent)->Wait() : sent.status();
  }
  Expect(
      "send/recv ring", status, HostCopy(received, kCount),
      [&](int64_t i) { return Input(previous, i); }, &outcomes);
  Expect("barrier", (*group)->Barrier(), {}, nullptr, &outcomes);
  PipelineEdgeSends(store, rank, size, &outcomes);
  cudaFree(data);
  cudaFree(gathered);
  cudaFree(received);
  return outcomes;
}

int Main() {
  int devices = 0;
  cudaGetDeviceCount(&devices);
  if (devices < 2) {
    std::fprintf(stderr, "needs at least two GPUs, found %d\n", devices);
    return 2;
  }
  InMemoryStore store;
  std::vector<std::vector<Outcome>> outcomes(devices);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < devices; ++rank) {
    ranks.emplace_back(
        [&, rank] { outcomes[rank] = RunRank(store, rank, devices); });
  }
  for (std::thread& rank : ranks) rank.join();
  bool all_ok = true;
  for (int rank = 0; rank < devices; ++rank) {
    for (const Outcome& outcome : outcomes[rank]) {
      std::printf("rank %d of %d  %-16s %s\n", rank, devices,
                  outcome.op.c_str(), outcome.ok ? "OK" : "FAIL");
      all_ok &= outcome.ok;
    }
  }
  return all_ok ? 0 : 1;
}

}  // namespace
}  // namespace glm

int main() { return glm::Main(); }
