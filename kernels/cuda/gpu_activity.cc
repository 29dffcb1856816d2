#include "kernels/cuda/gpu_activity.h"

#include <cuda_runtime.h>
#include <cupti.h>
#include <cxxabi.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace glm::cuda {
namespace {

// One host buffer of records (a kernel's record is about 200 bytes, so one
// buffer holds some 80,000). calloc'd: CUPTI is told the buffers come zeroed,
// so it does not clear them on the launching thread, and pages it never
// writes cost nothing.
constexpr size_t kBufferBytes = size_t{16} << 20;

// Kernels on any stream (concurrent: recording them does not serialize
// them), copies (host-device, device-device, and peer to peer), memsets.
constexpr CUpti_ActivityKind kKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_MEMCPY2, CUPTI_ACTIVITY_KIND_MEMSET};

// What the buffer callbacks, plain functions CUPTI calls on its own thread or
// inside a flush, add to while a GpuActivity lives.
struct Records {
  std::mutex mutex;
  bool recording = false;
  std::vector<ActivityInterval> intervals;
  bool kernel_names = false;  // name the kernels' intervals
  // Demangled kernel names by mangled name (copied: a record's name may live
  // in the buffer freed after it is read), kept for the process's life: the
  // intervals' string_views point into the map's nodes, which never move.
  std::unordered_map<std::string, std::string> demangled;
};

Records& TheRecords() {
  static Records* records = new Records;
  return *records;
}

std::string CuptiError(CUptiResult result) {
  const char* text = nullptr;
  if (cuptiGetResultString(result, &text) != CUPTI_SUCCESS || text == nullptr) {
    return absl::StrCat("CUPTI error ", static_cast<int>(result));
  }
  return text;
}

// The demangled name of a kernel CUPTI calls `mangled` (under the mutex).
std::string_view KernelName(Records& records, const char* mangled) {
  if (mangled == nullptr) return {};
  auto [it, added] = records.demangled.try_emplace(mangled);
  if (added) {
    int status = 0;
    char* name = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    // "<unnamed>" as Nsight names anonymous namespaces, so that the first
    // '(' of a name opens its parameters (FormatKernelTimes cuts there).
    it->second = absl::StrReplaceAll(status == 0 ? name : mangled,
                                     {{"(anonymous namespace)", "<unnamed>"}});
    std::free(name);
  }
  return it->second;
}

void CUPTIAPI RequestBuffer(uint8_t** buffer, size_t* size,
                            size_t* max_records) {
  // malloc's alignment (16) meets CUPTI's 8 bytes; null: CUPTI drops
  // records, and says how many (GpuActivity::Summarize reports them).
  *buffer = static_cast<uint8_t*>(std::calloc(1, kBufferBytes));
  *size = *buffer == nullptr ? 0 : kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI CompleteBuffer(CUcontext, uint32_t, uint8_t* buffer, size_t,
                             size_t valid_bytes) {
  if (buffer == nullptr) return;
  std::vector<ActivityInterval> got;
  std::vector<const char*> kernel_names;  // of got's kernels, in order
  CUpti_Activity* record = nullptr;
  // Stops at the buffer's end, or at a record CUPTI did not finish.
  while (cuptiActivityGetNextRecord(buffer, valid_bytes, &record) ==
         CUPTI_SUCCESS) {
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* kernel =
            reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        got.push_back({kernel->start, kernel->end, ActivityKind::kKernel});
        kernel_names.push_back(kernel->name);  // read only when wanted
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* copy =
            reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        got.push_back({copy->start, copy->end, ActivityKind::kCopy});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY2: {
        const auto* copy =
            reinterpret_cast<const CUpti_ActivityMemcpyPtoP4*>(record);
        got.push_back({copy->start, copy->end, ActivityKind::kCopy});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* memset =
            reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        got.push_back({memset->start, memset->end, ActivityKind::kMemset});
        break;
      }
      default:
        break;
    }
  }
  Records& records = TheRecords();
  {
    std::lock_guard<std::mutex> lock(records.mutex);
    if (records.recording) {
      size_t k = 0;
      for (ActivityInterval& work : got) {
        if (work.kind != ActivityKind::kKernel) continue;
        const char* mangled = kernel_names[k++];
        if (records.kernel_names) work.name = KernelName(records, mangled);
      }
      records.intervals.insert(records.intervals.end(), got.begin(), got.end());
    }
  }
  std::free(buffer);  // after the names, which may point into it
}

// Once per process: zeroed buffers, the callbacks.
absl::Status RegisterCallbacks() {
  uint8_t zeroed = 1;
  size_t size = sizeof(zeroed);
  if (CUptiResult result = cuptiActivitySetAttribute(
          CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER, &size, &zeroed);
      result != CUPTI_SUCCESS) {
    return absl::InternalError(
        absl::StrCat("GPU activity: zeroed buffers: ", CuptiError(result)));
  }
  if (CUptiResult result =
          cuptiActivityRegisterCallbacks(RequestBuffer, CompleteBuffer);
      result != CUPTI_SUCCESS) {
    return absl::InternalError(
        absl::StrCat("GPU activity: registering the buffer callbacks: ",
                     CuptiError(result)));
  }
  return absl::OkStatus();
}

void DisableKinds() {
  for (CUpti_ActivityKind kind : kKinds) cuptiActivityDisable(kind);
}

}  // namespace

absl::StatusOr<std::unique_ptr<GpuActivity>> GpuActivity::Start(
    bool kernel_names) {
  Records& records = TheRecords();
  {
    std::lock_guard<std::mutex> lock(records.mutex);
    if (records.recording) {
      return absl::FailedPreconditionError(
          "GPU activity: this process records already");
    }
  }
  static const absl::Status* registered = new absl::Status(RegisterCallbacks());
  if (!registered->ok()) return *registered;
  for (CUpti_ActivityKind kind : kKinds) {
    if (CUptiResult result = cuptiActivityEnable(kind);
        result != CUPTI_SUCCESS) {
      DisableKinds();
      return absl::InternalError(absl::StrCat("GPU activity: enabling kind ",
                                              static_cast<int>(kind), ": ",
                                              CuptiError(result)));
    }
  }
  std::lock_guard<std::mutex> lock(records.mutex);
  records.recording = true;
  records.kernel_names = kernel_names;
  records.intervals.clear();
  return std::unique_ptr<GpuActivity>(new GpuActivity(kernel_names));
}

absl::StatusOr<std::unique_ptr<GpuActivity>> GpuActivity::StartIfAsked() {
  const char* asked = std::getenv("GLM_GPU_ACTIVITY");
  const std::string mode = asked == nullptr ? "" : asked;
  if (mode != "1" && mode != "kernels") return std::unique_ptr<GpuActivity>();
  return Start(/*kernel_names=*/mode == "kernels");
}

GpuActivity::~GpuActivity() {
  DisableKinds();
  Records& records = TheRecords();
  {
    std::lock_guard<std::mutex> lock(records.mutex);
    records.recording = false;
    records.intervals.clear();
  }
  // Hands back (and frees) the buffers CUPTI holds.
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

uint64_t GpuActivity::Now() const {
  uint64_t now = 0;
  cuptiGetTimestamp(&now);
  return now;
}

absl::StatusOr<ActivityWindow> GpuActivity::Summarize(uint64_t start,
                                                      uint64_t end) {
  // Past the window's end: every record of work launched so far completes,
  // so a forced flush delivers them all with their timestamps.
  if (cudaError_t status = cudaDeviceSynchronize(); status != cudaSuccess) {
    return absl::InternalError(absl::StrCat("GPU activity: synchronizing: ",
                                            cudaGetErrorString(status)));
  }
  if (CUptiResult result =
          cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
      result != CUPTI_SUCCESS) {
    return absl::InternalError(
        absl::StrCat("GPU activity: flushing: ", CuptiError(result)));
  }
  size_t dropped = 0;
  cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped);
  std::vector<ActivityInterval> intervals;
  {
    Records& records = TheRecords();
    std::lock_guard<std::mutex> lock(records.mutex);
    intervals.swap(records.intervals);
  }
  ActivityWindow window = SummarizeWindow(std::move(intervals), start, end,
                                          /*largest=*/3, std::move(op_spans_));
  op_spans_.clear();
  window.dropped = static_cast<int64_t>(dropped);
  return window;
}

void GpuActivity::OpBegan(const std::string& op) {
  open_op_ = OpSpan{Now(), 0, *op_names_.insert(op).first};
}

void GpuActivity::OpEnded() {
  open_op_.end = Now();
  op_spans_.push_back(open_op_);
}

}  // namespace glm::cuda
