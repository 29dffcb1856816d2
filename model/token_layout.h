// Where each token of a packed batch sits: its position inside its own sequence
// and the index of that sequence's first token. Attention, the indexer and the
// losses use it so that nothing crosses a sequence boundary.
#ifndef GLM_MODEL_TOKEN_LAYOUT_H_
#define GLM_MODEL_TOKEN_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/tensor.h"

namespace glm {

struct TokenLayout {
  int64_t tokens = 0;
  int64_t max_seq_len = 0;
  std::vector<int32_t> positions;  // restarts at 0 in every sequence
  std::vector<int32_t> seq_start;  // first token of the token's sequence
  std::vector<int32_t> seq_end;    // one past its last token
  // positions and seq_start where the backend's ops read them: copies on the
  // allocator current when the layout was made (host copies without one).
  IndexTensor op_positions, op_seq_start;
};

// cu_seqlens: 0 = c_0 < c_1 < ... < c_m = tokens. Empty means one sequence.
absl::StatusOr<TokenLayout> MakeTokenLayout(
    int64_t tokens, const std::vector<int32_t>& cu_seqlens);
// The same without op_positions and op_seq_start, for a caller that sends
// them along with its other index arrays.
absl::StatusOr<TokenLayout> MakeHostTokenLayout(
    int64_t tokens, const std::vector<int32_t>& cu_seqlens);

}  // namespace glm

#endif  // GLM_MODEL_TOKEN_LAYOUT_H_
