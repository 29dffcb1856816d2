// How busy a GPU was over a window of time, from the intervals its kernels,
// copies and memsets ran (kernels/cuda/gpu_activity.h records them with
// CUPTI): the union of those intervals inside the window, the idle gaps
// between them and the largest of those. Plain C++ on timestamps, so it builds
// and is tested without CUDA.
//
// Busy means at least one piece of work was running: overlapping kernels
// (several streams, or a kernel that starts before the previous one drains)
// count once, and work that runs inside other work adds nothing. The idle
// share of a training step is its launch-gap share: the time the GPU waited on
// the host (launches, synchronizations, host work between ops).
#ifndef GLM_KERNELS_CUDA_ACTIVITY_WINDOW_H_
#define GLM_KERNELS_CUDA_ACTIVITY_WINDOW_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace glm::cuda {

enum class ActivityKind { kKernel, kCopy, kMemset };

// One piece of device work, [start, end) in nanoseconds on one clock (CUPTI's
// timestamps). A record whose start is 0 or whose end is before its start had
// no timing (CUPTI writes 0 when it lacked device memory for it).
struct ActivityInterval {
  uint64_t start = 0;
  uint64_t end = 0;
  ActivityKind kind = ActivityKind::kKernel;
  // A kernel's name (its storage outlives the window's summary); empty for
  // copies and memsets, and for kernels whose name was not recorded.
  std::string_view name;
};

// The time one kernel (by name) ran inside a window.
struct KernelTime {
  std::string_view name;
  int64_t calls = 0;
  uint64_t total = 0;  // ns, clipped to the window
};

// One op's stretch of host time [start, end) on the records' clock: an op
// that waits for the device before it begins and after it ends (GLM_OP_TIMES'
// ops, kernels/op_timing_backend.h), so the kernels it launched start inside
// its stretch. op: its group's name (storage outlives the window's summary).
struct OpSpan {
  uint64_t start = 0;
  uint64_t end = 0;
  std::string_view op;
};

// The time the kernels of one name ran that started inside one op group's
// spans.
struct OpKernelTime {
  std::string_view op;
  std::string_view kernel;
  int64_t calls = 0;
  uint64_t total = 0;  // ns, clipped to the window
};

// An idle stretch of the window: where it begins, from the window's start,
// and how long it lasts (ns).
struct IdleGap {
  uint64_t offset = 0;
  uint64_t length = 0;
};

// Upper ends of the idle-by-gap-length classes (ns): under 10 us, under
// 100 us, under 1 ms, and the rest.
inline constexpr std::array<uint64_t, 3> kGapClassBounds = {10'000, 100'000,
                                                            1'000'000};

struct ActivityWindow {
  uint64_t window = 0;  // end - start (ns)
  uint64_t busy = 0;    // the union of the work's intervals inside the window
  uint64_t idle = 0;    // window - busy
  // Idle stretches, the one before the first piece of work and the one after
  // the last included; the longest first (at most the number asked for).
  int64_t gaps = 0;
  std::vector<IdleGap> largest_gaps;
  // Idle time by the length of the gap it belongs to (kGapClassBounds):
  // short gaps are launch latency between back-to-back ops, long ones the
  // host working or waiting.
  std::array<uint64_t, kGapClassBounds.size() + 1> idle_by_gap_length{};
  // Pieces of work that ran at least partly inside the window (one of zero
  // length: starting inside it).
  int64_t kernels = 0;
  int64_t copies = 0;
  int64_t memsets = 0;
  // Records without timing (not counted above).
  int64_t untimed = 0;
  // The union of the work past the window's end: work the step left running
  // when its host side returned.
  uint64_t busy_after_end = 0;
  // Records the tracer lost for want of buffer space (set by the tracer).
  int64_t dropped = 0;
  // Named kernels inside the window, the longest total first (ties: by
  // name). Kernels that overlap each count in full.
  std::vector<KernelTime> kernel_times;
  // Those kernels by the op span each started in (given op spans only; a
  // kernel outside every span under kOutsideOps), the longest total first
  // (ties: by op, then kernel).
  std::vector<OpKernelTime> kernels_by_op;

  // busy / window and idle / window; 0 for an empty window.
  double busy_share() const;
  double idle_share() const;
};

inline constexpr std::string_view kOutsideOps = "outside ops";

// The window [start, end) of `intervals` (any order, overlaps allowed);
// intervals reaching outside it are clipped to it. Keeps the `largest` longest
// gaps (ties: the earlier first). With `ops` (any order, not overlapping),
// named kernels are attributed to them as well (kernels_by_op).
ActivityWindow SummarizeWindow(std::vector<ActivityInterval> intervals,
                               uint64_t start, uint64_t end, int largest = 3,
                               std::vector<OpSpan> ops = {});

// One log line's worth: "window (ms): 1234.5 | busy: 97.21% | idle (ms):
// 34.412 | launch-gap share: 2.79% in 5123 gaps | largest gaps (ms at ms):
// 5.210 at 0.000, ... | idle by gap <10us/<100us/<1ms/>=1ms (ms): ... |
// kernels: ... | copies: ... | memsets: ... | busy after end (ms): ... |
// untimed: ... | dropped: ...".
std::string FormatActivityWindow(const ActivityWindow& window);

// The `top` longest of window.kernel_times as a markdown table (kernel, calls,
// total ms, us per call, share of the busy time), each name cut at its
// parameter list and to 90 characters, then a line for the rest.
std::string FormatKernelTimes(const ActivityWindow& window, int top);

// The `top` longest rows of window.kernels_by_op as a markdown table (op
// group, kernel, calls, total ms, us per call, share of the busy time), names
// cut as FormatKernelTimes cuts them, then a line for the rest.
std::string FormatKernelsByOp(const ActivityWindow& window, int top);

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_ACTIVITY_WINDOW_H_
