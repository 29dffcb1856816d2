// How busy the GPU was over windows of host time, from CUPTI's activity
// records of this process's kernels, copies and memsets: the launch-gap share
// of a training step (GLM_GPU_ACTIVITY=1 in a CUDA worker's environment logs
// it for every step, worker/training_job.cc).
//
// Recording is asynchronous: CUPTI timestamps each piece of work on the device
// and hands full buffers back on its own thread, so it adds no synchronization
// inside the window; it adds a little launch overhead per op (and with it some
// of the gaps it measures). Summarize() is called after a window ends: it waits
// for the device there, outside the window, so that every record of the window
// is complete, then flushes (between two training steps, so the next step's
// host work no longer overlaps device work the last one left running; the
// trainer's steps end on reads from the device, which leaves next to none).
//
// The records are the process's, on every device it uses (a worker drives
// one); work of other processes sharing the GPU counts as idle time.
#ifndef GLM_KERNELS_CUDA_GPU_ACTIVITY_H_
#define GLM_KERNELS_CUDA_GPU_ACTIVITY_H_

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/activity_window.h"

namespace glm::cuda {

class GpuActivity {
 public:
  // Starts recording (before the CUDA context exists is best, so that no
  // work goes unrecorded). CUPTI's activity API is the process's: one
  // recorder at a time; a second Start() while one lives is refused. With
  // kernel_names, kernels are recorded with their (demangled) names, which
  // ActivityWindow::kernel_times needs; without, no name work is done.
  static absl::StatusOr<std::unique_ptr<GpuActivity>> Start(
      bool kernel_names = false);

  // GLM_GPU_ACTIVITY=1, or =kernels for per-kernel times too: Start();
  // otherwise null.
  static absl::StatusOr<std::unique_ptr<GpuActivity>> StartIfAsked();

  // Whether kernels are recorded with their names (GLM_GPU_ACTIVITY=kernels
  // asks for each window's kernel times, FormatKernelTimes, to be logged).
  bool kernel_names() const { return kernel_names_; }

  // Stops recording and drops what is left.
  ~GpuActivity();

  GpuActivity(const GpuActivity&) = delete;
  GpuActivity& operator=(const GpuActivity&) = delete;

  // CUPTI's clock (ns), the clock of the records: a window's edges.
  uint64_t Now() const;

  // The device's work over [start, end) (SummarizeWindow), called after the
  // window ends: waits for the calling thread's device, flushes the records
  // and then drops them all, so windows are summarized in order, each after
  // the previous one's Summarize(). The op spans marked since the last one
  // attribute its kernels to ops (ActivityWindow::kernels_by_op).
  absl::StatusOr<ActivityWindow> Summarize(uint64_t start, uint64_t end);

  // Where an op of group `op` begins and ends, on the records' clock, for
  // ops that wait for the device at both ends (GLM_OP_TIMES,
  // kernels/op_timing_backend.h): the kernels that start inside its span
  // are its. One thread's ops, one at a time.
  void OpBegan(const std::string& op);
  void OpEnded();

 private:
  explicit GpuActivity(bool kernel_names) : kernel_names_(kernel_names) {}

  bool kernel_names_;
  std::set<std::string> op_names_;  // the spans' names (nodes never move)
  std::vector<OpSpan> op_spans_;
  OpSpan open_op_;
};

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_GPU_ACTIVITY_H_
