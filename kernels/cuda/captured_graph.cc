#include "kernels/cuda/captured_graph.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.h"

namespace glm::cuda {

absl::StatusOr<std::unique_ptr<CapturedGraph>> CapturedGraph::Capture(
    cudaStream_t stream, const std::function<absl::Status()>& work) {
  // Thread-local: other threads' CUDA calls (a heartbeat's, say) neither
  // join the graph nor break it.
  GLM_CUDA_CHECK(
      cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const absl::Status worked = work();
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (!worked.ok() || ended != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();  // an invalidated capture leaves its error behind
    return worked.ok() ? absl::FailedPreconditionError(absl::StrCat(
                             "the captured work queued what a CUDA graph "
                             "cannot hold: ",
                             cudaGetErrorString(ended)))
                       : worked;
  }
  cudaGraphExec_t exec = nullptr;
  if (const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
      made != cudaSuccess) {
    cudaGraphDestroy(graph);
    cudaGetLastError();
    return absl::InternalError(absl::StrCat(
        "cannot instantiate the captured graph: ", cudaGetErrorString(made)));
  }
  // Uploading now keeps the first replay's setup out of the timed steps.
  GLM_CUDA_CHECK(cudaGraphUpload(exec, stream));
  return std::unique_ptr<CapturedGraph>(new CapturedGraph(stream, graph, exec));
}

CapturedGraph::~CapturedGraph() {
  // Destroying a graph that may still run waits for nothing: finish first.
  cudaStreamSynchronize(stream_);
  cudaGraphExecDestroy(exec_);
  cudaGraphDestroy(graph_);
  // The memory the graph's allocations held goes back to the device.
  int device = 0;
  if (cudaGetDevice(&device) == cudaSuccess) cudaDeviceGraphMemTrim(device);
}

void CapturedGraph::Replay() {
  GLM_CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
}

}  // namespace glm::cuda
