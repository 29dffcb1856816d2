#include "kernels/backend_factory.h"

#include <iostream>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/environment.h"
#include "kernels/attention_pairs.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/op_timing_backend.h"

#ifdef GLM_WITH_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_backend.h"
#endif

namespace glm {

absl::StatusOr<int> CudaOrdinal(const std::string& device) {
  int ordinal = -1;
  if (!absl::StartsWith(device, "cuda:") ||
      !absl::SimpleAtoi(device.substr(5), &ordinal) || ordinal < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device must be cpu or cuda:N, got '", device, "'"));
  }
  return ordinal;
}

namespace {

absl::Status CheckPrecision(const std::string& precision, bool gpu) {
  if (precision.empty() || precision == "fp32") return absl::OkStatus();
  if (precision == "bf16") {
    if (gpu) return absl::OkStatus();
    return absl::InvalidArgumentError(
        "precision: bf16 runs on a GPU only; the CPU backend computes in fp32");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "precision must be fp32 or bf16, got '", precision.substr(0, 32), "'"));
}

// GLM_OP_TIMES=1: the backend times each op and reports to stderr when it is
// destroyed (kernels/op_timing_backend.h).
absl::StatusOr<std::unique_ptr<Backend>> TimedIfAsked(
    absl::StatusOr<std::unique_ptr<Backend>> backend) {
  if (!backend.ok()) return backend;
  absl::StatusOr<bool> asked = EnvironmentSwitch("GLM_OP_TIMES");
  if (!asked.ok()) return asked.status();
  if (!*asked) return backend;
  return std::unique_ptr<Backend>(
      new OpTimingBackend(*std::move(backend), &std::cerr));
}

}  // namespace

absl::StatusOr<int64_t> AttentionPairsPerCall(int64_t fallback) {
  return EnvironmentWholeNumber("GLM_ATTENTION_PAIRS_PER_CALL", 1, fallback);
}

#ifdef GLM_WITH_CUDA

absl::StatusOr<int> CudaDeviceCount() {
  int count = 0;
  if (cudaError_t status = cudaGetDeviceCount(&count); status != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no usable CUDA device (", cudaGetErrorString(status), ")"));
  }
  return count;
}

absl::StatusOr<DeviceDescription> DescribeDevice(const std::string& device) {
  if (device == "cpu") return DeviceDescription{"cpu", 0};
  absl::StatusOr<int> ordinal = CudaOrdinal(device);
  if (!ordinal.ok()) return ordinal.status();
  absl::StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(device, ": ", count.status().message()));
  }
  if (*ordinal >= *count) {
    return absl::NotFoundError(
        absl::StrCat(device, " does not exist: this machine has ", *count,
                     " CUDA device(s)"));
  }
  cudaDeviceProp props;
  if (cudaError_t status = cudaGetDeviceProperties(&props, *ordinal);
      status != cudaSuccess) {
    return absl::InternalError(
        absl::StrCat(device, ": ", cudaGetErrorString(status)));
  }
  return DeviceDescription{props.name,
                           static_cast<int64_t>(props.totalGlobalMem)};
}

namespace {

// What a worker's environment sets of a CUDA backend: the attention's pairs
// a call (AttentionPairsPerCall) and three switches, 1 on and 0 off, each at
// `options`' value when unset (CudaBackendOptions says what each does):
// - GLM_TIME_PRODUCTS: the largest writing products time the cuBLASLt
//   algorithms the heuristic lists (kernels/cuda/linear.cu), for jobs that
//   are not deterministic; an experiment until the bench has measured it
//   (bench/NOTES.md);
// - GLM_SPARSE_INDEXER_LOSS: the bf16 indexer loss's sparse path (on
//   unless 0);
// - GLM_LATENT_SCORES_BY_COLUMNS: the latent forward's scores experiment.
absl::Status ReadEnvironment(CudaBackendOptions* options) {
  absl::StatusOr<int64_t> pairs_per_call =
      AttentionPairsPerCall(options->attention_pairs_per_call);
  if (!pairs_per_call.ok()) return pairs_per_call.status();
  options->attention_pairs_per_call = *pairs_per_call;
  const std::pair<const char*, bool*> switches[] = {
      {"GLM_TIME_PRODUCTS", &options->time_product_algorithms},
      {"GLM_SPARSE_INDEXER_LOSS", &options->sparse_indexer_loss},
      {"GLM_LATENT_SCORES_BY_COLUMNS", &options->latent_scores_by_columns}};
  for (const auto& [name, field] : switches) {
    absl::StatusOr<bool> on = EnvironmentSwitch(name, *field);
    if (!on.ok()) return on.status();
    *field = *on;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(
    const std::string& device, const std::string& precision, bool deterministic,
    int64_t attention_pairs_per_call) {
  const bool gpu = device != "cpu";
  if (absl::Status status = CheckPrecision(precision, gpu); !status.ok()) {
    return status;
  }
  if (!gpu) return TimedIfAsked(std::unique_ptr<Backend>(new CpuBackend()));
  absl::StatusOr<DeviceDescription> described = DescribeDevice(device);
  if (!described.ok()) return described.status();
  CudaBackendOptions options;
  options.device = *CudaOrdinal(device);
  options.precision =
      precision == "fp32" ? cuda::Precision::kFp32 : cuda::Precision::kBf16;
  options.time_attention_plans = !deterministic;
  options.atomic_sums = !deterministic;
  if (attention_pairs_per_call > 0) {
    options.attention_pairs_per_call = attention_pairs_per_call;
  }
  if (absl::Status read = ReadEnvironment(&options); !read.ok()) return read;
  options.time_product_algorithms &= !deterministic;
  return TimedIfAsked(MakeCudaBackend(options));
}

#else  // !GLM_WITH_CUDA

absl::StatusOr<int> CudaDeviceCount() {
  return absl::FailedPreconditionError(
      "this binary was built without CUDA (build with --config=cuda)");
}

absl::StatusOr<DeviceDescription> DescribeDevice(const std::string& device) {
  if (device == "cpu") return DeviceDescription{"cpu", 0};
  absl::StatusOr<int> ordinal = CudaOrdinal(device);
  if (!ordinal.ok()) return ordinal.status();
  return absl::FailedPreconditionError(absl::StrCat(
      device,
      ": this binary was built without CUDA (build with --config=cuda)"));
}

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(
    const std::string& device, const std::string& precision, bool, int64_t) {
  if (absl::Status status = CheckPrecision(precision, device != "cpu");
      !status.ok()) {
    return status;
  }
  if (device != "cpu") return DescribeDevice(device).status();
  return TimedIfAsked(std::unique_ptr<Backend>(new CpuBackend()));
}

#endif  // GLM_WITH_CUDA

}  // namespace glm
