#include "planner/hardware.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace glm {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

// Stated, not measured here: a CUDA context (~0.5 GiB) plus NCCL channel
// buffers and cuBLAS/cuDNN workspaces (~0.5 GiB).
constexpr int64_t kGpuRuntimeBytes = 1 * kGiB;

// Stated: fragmentation of PyTorch's caching allocator, commonly 5-15% of
// the activations in large-model training.
constexpr double kCachingAllocatorSlack = 0.10;

// NVLink 4 (H100, H200): 900 GB/s per GPU counting both directions. A
// ConnectX-7 NIC per GPU (DGX H100/H200, GB200 NVL72 compute trays): 400
// Gb/s each way.
constexpr double kNvlink4Bandwidth = 450e9;
constexpr double kNdr400Bandwidth = 50e9;

// H100 SXM5 80GB. Memory: the 81,559 MiB nvidia-smi reports
// (modal-labs/modal-client#2797 lists it). 989.4 TFLOP/s dense BF16 and
// 3.35 TB/s HBM3: NVIDIA H100 Tensor Core GPU datasheet (1,979 TFLOP/s is
// the 2:4-sparse figure).
ClusterSpec H100() {
  ClusterSpec c;
  c.device = {"H100 SXM 80GB", 81559 * kMiB, kGpuRuntimeBytes,
              989.4e12,        3.35e12,      kCachingAllocatorSlack};
  c.devices_per_node = 8;
  c.fast_domain = 8;
  c.fast_link_bandwidth = kNvlink4Bandwidth;
  c.network_bandwidth = kNdr400Bandwidth;
  return c;
}

// H200 SXM 141GB: 143,771 MiB as nvidia-smi reports it on the H200s this
// project measures on; same 989.4 TFLOP/s dense BF16 as the H100, 4.8 TB/s
// HBM3e (NVIDIA H200 datasheet).
ClusterSpec H200() {
  ClusterSpec c = H100();
  c.device = {"H200 SXM 141GB", 143771 * kMiB, kGpuRuntimeBytes,
              989.4e12,         4.8e12,        kCachingAllocatorSlack};
  return c;
}

// One Blackwell GPU of a GB200 NVL72 rack, from NVIDIA's GB200 NVL72
// datasheet rack totals divided by its 72 GPUs: 13.4 TB HBM3e (186 GB),
// 576 TB/s (8 TB/s), 360 PFLOP/s FP16/BF16 with 2:4 sparsity (2.5 PFLOP/s
// dense), 130 TB/s NVLink 5 (1.8 TB/s per GPU, 900 GB/s each way). The 72
// GPUs form one NVLink domain; a compute tray (node) holds 4.
ClusterSpec Gb200() {
  ClusterSpec c;
  c.device = {"GB200 (NVL72)", 186'000'000'000, kGpuRuntimeBytes, 2.5e15, 8e12};
  c.devices_per_node = 4;
  c.fast_domain = 72;
  c.fast_link_bandwidth = 900e9;
  c.network_bandwidth = kNdr400Bandwidth;
  return c;
}

// CPU ranks on one host (glm-worker processes; the development box: 2
// AMD EPYC vCPUs, 23.5 GiB). Runtime: a glm-worker's resident memory before
// it registers, 20.2 MiB measured (17.5 MiB of mapped code and libraries).
// Rates are rough, unmeasured figures for 2 cores: fp32 GEMM through
// OpenBLAS, memory bandwidth, loopback TCP for Gloo.
ClusterSpec Cpu() {
  ClusterSpec c;
  c.device = {"CPU rank", 24683652 * int64_t{1024}, 20 * kMiB, 60e9, 10e9, 0.0};
  c.devices_per_node = 1 << 20;
  c.fast_domain = 1 << 20;
  c.fast_link_bandwidth = 1e9;
  c.network_bandwidth = 1e9;
  return c;
}

}  // namespace

std::vector<std::string> ClusterPresetNames() {
  return {"h100", "h200", "gb200", "cpu"};
}

absl::StatusOr<ClusterSpec> ClusterPreset(const std::string& name) {
  if (name == "h100") return H100();
  if (name == "h200") return H200();
  if (name == "gb200") return Gb200();
  if (name == "cpu") return Cpu();
  return absl::InvalidArgumentError(absl::StrCat(
      "--cluster: unknown preset '", name,
      "' (known: ", absl::StrJoin(ClusterPresetNames(), ", "), ")"));
}

absl::Status ValidateCluster(const ClusterSpec& c) {
  struct Rule {
    bool ok;
    const char* field;
    const char* what;
  };
  const Rule rules[] = {
      {c.device.memory_bytes > 0, "--memory-gib", "must be positive"},
      {c.device.runtime_bytes >= 0 &&
           c.device.runtime_bytes < c.device.memory_bytes,
       "--runtime-gib", "must be at least 0 and below the device memory"},
      {c.device.matmul_flops > 0, "--tflops", "must be positive"},
      {c.device.memory_bandwidth > 0, "--memory-bandwidth-gbs",
       "must be positive"},
      {c.devices_per_node > 0, "--devices-per-node", "must be positive"},
      {c.fast_domain > 0, "--fast-domain", "must be positive"},
      {c.fast_link_bandwidth > 0, "--fast-link-gbs", "must be positive"},
      {c.network_bandwidth > 0, "--network-gbs", "must be positive"},
  };
  for (const Rule& rule : rules) {
    if (!rule.ok) {
      return absl::InvalidArgumentError(
          absl::StrCat(rule.field, ": ", rule.what));
    }
  }
  return absl::OkStatus();
}

bool SameFastDomain(const ClusterSpec& cluster, int a, int b) {
  return a / cluster.fast_domain == b / cluster.fast_domain;
}

}  // namespace glm
