// How many query-key pairs one cuDNN attention call of the CUDA backend takes
// at most (kernels/cuda/cudnn_attention.h): longer calls run a chunk of
// queries at a time, since the backward's mask and workspace (about 38 bytes
// a pair) grow with the pairs. The planner counts that scratch from the same
// figure (planner/activation_fp32.cc).
#ifndef GLM_KERNELS_ATTENTION_PAIRS_H_
#define GLM_KERNELS_ATTENTION_PAIRS_H_

#include <algorithm>
#include <cstdint>

namespace glm {

// One 16k-token self-attention: 9.5 GiB of backward workspace at glm5.2-mini's
// 16 heads.
inline constexpr int64_t kDefaultAttentionPairsPerCall = int64_t{1} << 28;

// The queries of one call over `keys` keys each: as many as keep the call
// within pairs_per_call pairs, at least one. The backend cuts its calls so
// (CudnnAttention::Chunks), and the planner counts their scratch and time
// from the same cut.
inline int64_t QueriesPerAttentionCall(int64_t pairs_per_call, int64_t keys) {
  return std::max<int64_t>(1, pairs_per_call / keys);
}

}  // namespace glm

#endif  // GLM_KERNELS_ATTENTION_PAIRS_H_
