// The machines a plan is made for: one device kind (memory, matrix rate,
// memory bandwidth) and how devices are wired (a fast domain such as an
// NVLink island, and the network between domains). Presets carry published
// figures; every field can be overridden.
#ifndef GLM_PLANNER_HARDWARE_H_
#define GLM_PLANNER_HARDWARE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace glm {

struct DeviceSpec {
  std::string name;
  // What a process can allocate on the device: the total the runtime reports
  // (nvidia-smi), or host memory for CPU ranks.
  int64_t memory_bytes = 0;
  // Taken before the trainer allocates anything: the CUDA context, library
  // workspaces and NCCL buffers on a GPU; the process's code, libraries and
  // thread stacks on a CPU rank.
  int64_t runtime_bytes = 0;
  // Dense matrix-multiply peak in the precision the plan trains in (bf16 on
  // GPUs, fp32 on CPUs), FLOP/s.
  double matmul_flops = 0;
  // Device memory bandwidth, bytes/s.
  double memory_bandwidth = 0;
  // What the allocator holds beyond live tensors, as a fraction of the
  // activations' peak (they are what comes and goes in blocks of many
  // sizes): PyTorch's caching allocator on GPUs, glibc's heap on CPUs.
  double allocator_slack = 0;
};

struct ClusterSpec {
  DeviceSpec device;
  int devices_per_node = 1;
  // Devices joined by the fast link (an NVLink domain): 8 in an H100/H200
  // node, 72 in a GB200 NVL72 rack. Ranks are numbered so that consecutive
  // ranks share a domain.
  int fast_domain = 1;
  // Bytes/s each device sends (and receives at the same time) over the fast
  // link and over the network.
  double fast_link_bandwidth = 0;
  double network_bandwidth = 0;
};

// "h100", "h200", "gb200", "cpu".
absl::StatusOr<ClusterSpec> ClusterPreset(const std::string& name);
std::vector<std::string> ClusterPresetNames();

// InvalidArgument naming the field unless every size and rate is positive
// and the runtime leaves memory over.
absl::Status ValidateCluster(const ClusterSpec& cluster);

// Whether ranks a and b talk over the fast link.
bool SameFastDomain(const ClusterSpec& cluster, int a, int b);

}  // namespace glm

#endif  // GLM_PLANNER_HARDWARE_H_
