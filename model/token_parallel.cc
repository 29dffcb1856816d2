#include "model/token_parallel.h"

#include <algorithm>
#include <cassert>
#include <utility>
#include <vector>

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

// Part `index` of `total` rows split into `parts` nearly equal ranges.
TokenRange Part(int64_t total, int parts, int index) {
  const int64_t base = total / parts, extra = total % parts;
  return {index * base + std::min<int64_t>(index, extra),
          base + (index < extra ? 1 : 0)};
}

int64_t LargestPart(int64_t total, int parts) {
  return (total + parts - 1) / parts;
}

}  // namespace

absl::Status TokenParallel::CheckTokens(int64_t tokens) const {
  if (tokens < tp() * cp()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a micro batch of ", tokens, " tokens is too short for ",
                     "tp ", tp(), " x cp ", cp(), " ranks"));
  }
  return absl::OkStatus();
}

TokenRange TokenParallel::ChunkRows(int64_t tokens) const {
  return Part(tokens, cp(), cp_rank());
}

TokenRange TokenParallel::LocalRows(int64_t tokens) const {
  const TokenRange chunk = ChunkRows(tokens);
  const TokenRange local = Part(chunk.count, tp(), tp_rank());
  return {chunk.begin + local.begin, local.count};
}

TokenRange LocalRowsOf(const TokenParallel* parallel, int64_t tokens) {
  return parallel == nullptr ? TokenRange{0, tokens}
                             : parallel->LocalRows(tokens);
}

Tensor TokenParallel::GatherChunk(ConstMatrixView local, int64_t tokens) {
  return Gather(tensor_, local, ChunkRows(tokens).count);
}

Tensor TokenParallel::ReduceScatterChunk(ConstMatrixView chunk,
                                         int64_t tokens) {
  assert(chunk.rows == ChunkRows(tokens).count);
  return ReduceScatter(tensor_, chunk);
}

Tensor TokenParallel::GatherAll(ConstMatrixView chunk, int64_t tokens) {
  return Gather(context_, chunk, tokens);
}

Tensor TokenParallel::ReduceScatterAll(ConstMatrixView all, int64_t tokens) {
  assert(all.rows == tokens);
  return ReduceScatter(context_, all);
}

Tensor TokenParallel::Gather(Collectives* group, ConstMatrixView part,
                             int64_t whole_rows) {
  if (group == nullptr || group->size() == 1) return Contiguous(part);
  const int members = group->size();
  const int64_t block = LargestPart(whole_rows, members) * part.cols;
  Tensor mine({block});
  for (int64_t r = 0; r < part.rows; ++r) {
    std::copy_n(part.Row(r), part.cols, mine.data() + r * part.cols);
  }
  std::vector<float> blocks(block * members);
  Keep(group->AllGather(mine.data(), block, blocks.data()));
  Tensor whole({whole_rows, part.cols});
  for (int m = 0; m < members; ++m) {
    const TokenRange rows = Part(whole_rows, members, m);
    std::copy_n(blocks.data() + m * block, rows.count * part.cols,
                whole.data() + rows.begin * part.cols);
  }
  return whole;
}

Tensor TokenParallel::ReduceScatter(Collectives* group, ConstMatrixView whole) {
  if (group == nullptr || group->size() == 1) return Contiguous(whole);
  const int members = group->size();
  const int64_t block = LargestPart(whole.rows, members) * whole.cols;
  std::vector<float> blocks(block * members, 0.f);
  for (int m = 0; m < members; ++m) {
    const TokenRange rows = Part(whole.rows, members, m);
    for (int64_t r = 0; r < rows.count; ++r) {
      std::copy_n(whole.Row(rows.begin + r), whole.cols,
                  blocks.data() + m * block + r * whole.cols);
    }
  }
  Tensor summed({block});
  Keep(group->ReduceScatter(blocks.data(), block, summed.data(),
                            ReduceOp::kSum));
  const TokenRange mine = Part(whole.rows, members, group->rank());
  Tensor part({mine.count, whole.cols});
  std::copy_n(summed.data(), part.numel(), part.data());
  return part;
}

void TokenParallel::Keep(absl::Status status) {
  if (status_.ok() && !status.ok()) status_ = std::move(status);
}

}  // namespace glm
