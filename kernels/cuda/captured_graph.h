// A stream's work captured once as a CUDA graph and replayed on that stream
// (Backend::Record on the CUDA backend): one launch for thousands of kernels,
// so the device no longer waits for the host between them.
#ifndef GLM_KERNELS_CUDA_CAPTURED_GRAPH_H_
#define GLM_KERNELS_CUDA_CAPTURED_GRAPH_H_

#include <cuda_runtime.h>

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace glm::cuda {

class CapturedGraph : public RecordedWork {
 public:
  // What `work` queues on `stream` from this thread, captured (not run).
  // Fails, capturing nothing, when `work` returns an error or queues what a
  // graph cannot hold (a wait for the device, say); the error says which.
  static absl::StatusOr<std::unique_ptr<CapturedGraph>> Capture(
      cudaStream_t stream, const std::function<absl::Status()>& work);

  ~CapturedGraph() override;
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  void Replay() override;

 private:
  CapturedGraph(cudaStream_t stream, cudaGraph_t graph, cudaGraphExec_t exec)
      : stream_(stream), graph_(graph), exec_(exec) {}

  cudaStream_t stream_;
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
};

}  // namespace glm::cuda

#endif  // GLM_KERNELS_CUDA_CAPTURED_GRAPH_H_
