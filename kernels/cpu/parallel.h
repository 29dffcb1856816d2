// Row parallelism for the CPU ops: a fixed pool of worker threads that sleep
// (never spin) between calls, so the ops share a busy machine politely. The
// range is split into one contiguous chunk per thread, always the same way for
// the same size, and every op keeps its reductions inside one chunk: results do
// not depend on timing.
#ifndef GLM_KERNELS_CPU_PARALLEL_H_
#define GLM_KERNELS_CPU_PARALLEL_H_

#include <cstdint>
#include <functional>

namespace glm::cpu {

// Below this much work (multiply-adds or elements touched) a call stays on the
// calling thread: waking the pool costs some microseconds.
constexpr int64_t kMinParallelWork = int64_t{1} << 15;

// Threads used, the caller included: GLM_CPU_THREADS if set, else the
// hardware's.
int NumThreads();

// Calls body(begin, end) on disjoint chunks covering [0, n), in parallel when
// `work` is at least kMinParallelWork. Calls from several threads take turns on
// the pool; a call from inside a body runs inline.
void ParallelFor(int64_t n, int64_t work,
                 const std::function<void(int64_t, int64_t)>& body);

}  // namespace glm::cpu

#endif  // GLM_KERNELS_CPU_PARALLEL_H_
