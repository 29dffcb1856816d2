#include "model/token_parallel.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace glm {
namespace {

// A contiguous copy of `view` (collectives send flat buffers).
Tensor Contiguous(ConstMatrixView view) {
  Tensor copy({view.rows, view.cols});
  for (int64_t r = 0; r < view.rows; ++r) {
    std::copy_n(view.Row(r), view.cols, copy.data() + r * view.cols);
  }
  return copy;
}

}  // namespace

absl::Status TokenParallel::CheckTokens(int64_t tokens) const {
  if (tokens % (tp() * cp()) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a micro batch of ", tokens, " tokens does not split evenly over tp ",
        tp(), " x cp ", cp(), " ranks"));
  }
  return absl::OkStatus();
}

RowRange TokenParallel::ChunkRows(int64_t tokens) const {
  const int64_t chunk = tokens / cp();
  return {cp_rank() * chunk, chunk};
}

RowRange TokenParallel::LocalRows(int64_t tokens) const {
  const RowRange chunk = ChunkRows(tokens);
  const int64_t local = chunk.count / tp();
  return {chunk.begin + tp_rank() * local, local};
}

RowRange LocalRowsOf(const TokenParallel* parallel, int64_t tokens) {
  return parallel == nullptr ? RowRange{0, tokens}
                             : parallel->LocalRows(tokens);
}

Tensor TokenParallel::GatherChunk(ConstMatrixView local) {
  return Gather(tensor_, local);
}

Tensor TokenParallel::ReduceScatterChunk(ConstMatrixView chunk) {
  return ReduceScatter(tensor_, chunk);
}

Tensor TokenParallel::GatherAll(ConstMatrixView chunk) {
  return Gather(context_, chunk);
}

Tensor TokenParallel::ReduceScatterAll(ConstMatrixView all) {
  return ReduceScatter(context_, all);
}

Tensor TokenParallel::Gather(Collectives* group, ConstMatrixView part) {
  if (group == nullptr || group->size() == 1) return Contiguous(part);
  const Tensor mine = Contiguous(part);
  Tensor whole({part.rows * group->size(), part.cols});
  Keep(group->AllGather(mine.data(), mine.numel(), whole.data()));
  return whole;
}

Tensor TokenParallel::ReduceScatter(Collectives* group, ConstMatrixView whole) {
  if (group == nullptr || group->size() == 1) return Contiguous(whole);
  const Tensor all = Contiguous(whole);
  Tensor mine({whole.rows / group->size(), whole.cols});
  Keep(group->ReduceScatter(all.data(), mine.numel(), mine.data(),
                            ReduceOp::kSum));
  return mine;
}

void TokenParallel::Keep(absl::Status status) {
  if (status_.ok() && !status.ok()) status_ = std::move(status);
}

}  // namespace glm
