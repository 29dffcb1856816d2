#include "model/token_layout.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace glm {

absl::StatusOr<TokenLayout> MakeHostTokenLayout(
    int64_t tokens, const std::vector<int32_t>& cu_seqlens) {
  std::vector<int32_t> bounds = cu_seqlens;
  if (bounds.empty()) bounds = {0, static_cast<int32_t>(tokens)};
  if (bounds.size() < 2 || bounds.front() != 0 || bounds.back() != tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cu_seqlens must start at 0 and end at the token count ", tokens));
  }
  TokenLayout layout;
  layout.tokens = tokens;
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    if (bounds[s + 1] <= bounds[s]) {
      return absl::InvalidArgumentError(
          absl::StrCat("cu_seqlens must increase strictly; entry ", s + 1,
                       " is ", bounds[s + 1], " after ", bounds[s]));
    }
    layout.max_seq_len =
        std::max<int64_t>(layout.max_seq_len, bounds[s + 1] - bounds[s]);
    for (int32_t t = bounds[s]; t < bounds[s + 1]; ++t) {
      layout.positions.push_back(t - bounds[s]);
      layout.seq_start.push_back(bounds[s]);
      layout.seq_end.push_back(bounds[s + 1]);
    }
  }
  return layout;
}

absl::StatusOr<TokenLayout> MakeTokenLayout(
    int64_t tokens, const std::vector<int32_t>& cu_seqlens) {
  absl::StatusOr<TokenLayout> layout = MakeHostTokenLayout(tokens, cu_seqlens);
  if (!layout.ok()) return layout;
  layout->op_positions = IndexTensor::FromHost(layout->positions);
  layout->op_seq_start = IndexTensor::FromHost(layout->seq_start);
  return layout;
}

}  // namespace glm
