#include "model/token_parallel.h"

#include <algorithm>
#include <cassert>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace glm {
namespace {

// The collectives read and write where the pass's tensors live (the current
// allocator's memory, the host's on the CPU): the groups are handed to this
// class as those buffers reach them, and the rows are arranged there, with no
// host copy.
//
// `count` floats from `src` to `dst`, both where the pass's tensors live.
void CopyFloats(float* dst, const float* src, int64_t count) {
  CopyFloats(CurrentAllocator(), dst, src, count);
}

// `view`'s rows one after another from `to`.
void CopyRows(ConstMatrixView view, float* to) {
  assert(view.dtype == ElementType::kF32);
  if (view.stride == view.cols) {
    CopyFloats(to, view.data, view.rows * view.cols);
    return;
  }
  for (int64_t r = 0; r < view.rows; ++r) {
    CopyFloats(to + r * view.cols, view.Row(r), view.cols);
  }
}

// A contiguous copy of `view` where the pass's tensors live.
Tensor Contiguous(ConstMatrixView view) {
  Tensor copy({view.rows, view.cols});
  CopyRows(view, copy.data());
  return copy;
}

// Part `index` of `total` rows split into `parts` nearly equal ranges.
TokenRange Part(int64_t total, int parts, int index) {
  const int64_t base = total / parts, extra = total % parts;
  return {index * base + std::min<int64_t>(index, extra),
          base + (index < extra ? 1 : 0)};
}

// Context rank `rank` of `cp`: runs rank and 2cp-1-rank of 2cp.
TokenRows ContextChunk(int64_t tokens, int cp, int rank) {
  if (cp == 1) return {{{0, tokens}}};
  return {
      {Part(tokens, 2 * cp, rank), Part(tokens, 2 * cp, 2 * cp - 1 - rank)}};
}

int64_t MostRows(const std::vector<TokenRows>& members) {
  int64_t most = 0;
  for (const TokenRows& rows : members) most = std::max(most, rows.count());
  return most;
}

}  // namespace

int64_t TokenRows::count() const {
  int64_t total = 0;
  for (const TokenRange& run : runs) total += run.count;
  return total;
}

TokenRows TokenRows::Sub(TokenRange rows) const {
  TokenRows sub;
  int64_t first = 0;  // row of the run's first token
  for (const TokenRange& run : runs) {
    const int64_t begin = std::max(rows.begin, first);
    const int64_t end = std::min(rows.end(), first + run.count);
    if (begin < end)
      sub.runs.push_back({run.begin + begin - first, end - begin});
    first += run.count;
  }
  return sub;
}

absl::Status TokenParallel::CheckTokens(int64_t tokens) const {
  const int64_t needed = tp() * cp() * (cp() > 1 ? 2 : 1);
  if (tokens < needed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a micro batch of ", tokens, " tokens is too short for tp ", tp(),
        " x cp ", cp(), " ranks (", needed, " at least)"));
  }
  return absl::OkStatus();
}

TokenRows TokenParallel::ChunkRows(int64_t tokens) const {
  return ContextChunk(tokens, cp(), cp_rank());
}

TokenRange TokenParallel::LocalInChunk(int64_t tokens) const {
  return Part(ChunkRows(tokens).count(), tp(), tp_rank());
}

TokenRows TokenParallel::LocalRows(int64_t tokens) const {
  return ChunkRows(tokens).Sub(LocalInChunk(tokens));
}

TokenRows LocalRowsOf(const TokenParallel* parallel, int64_t tokens) {
  return parallel == nullptr ? TokenRows{{{0, tokens}}}
                             : parallel->LocalRows(tokens);
}

TokenParallel::MemberRows TokenParallel::ChunkMembers(int64_t tokens) const {
  const int64_t chunk = ChunkRows(tokens).count();
  MemberRows members;
  for (int m = 0; m < tp(); ++m) members.push_back({{Part(chunk, tp(), m)}});
  return members;
}

TokenParallel::MemberRows TokenParallel::ContextMembers(int64_t tokens) const {
  MemberRows members;
  for (int m = 0; m < cp(); ++m) {
    members.push_back(ContextChunk(tokens, cp(), m));
  }
  return members;
}

Tensor TokenParallel::GatherChunk(ConstMatrixView local, int64_t tokens) {
  return Gather(tensor_, local, ChunkRows(tokens).count(),
                ChunkMembers(tokens));
}

Tensor TokenParallel::ReduceScatterChunk(ConstMatrixView chunk,
                                         int64_t tokens) {
  assert(chunk.rows == ChunkRows(tokens).count());
  return ReduceScatter(tensor_, chunk, ChunkMembers(tokens));
}

Tensor TokenParallel::GatherAll(ConstMatrixView chunk, int64_t tokens) {
  return Gather(context_, chunk, tokens, ContextMembers(tokens));
}

Tensor TokenParallel::ReduceScatterAll(ConstMatrixView all, int64_t tokens) {
  assert(all.rows == tokens);
  return ReduceScatter(context_, all, ContextMembers(tokens));
}

Tensor TokenParallel::Gather(Collectives* group, ConstMatrixView part,
                             int64_t whole_rows, const MemberRows& members) {
  if (group == nullptr || group->size() == 1) return Contiguous(part);
  const int64_t cols = part.cols, block = MostRows(members) * cols;
  Tensor mine({block});  // this rank's rows, padded to the block
  CopyRows(part, mine.data());
  Tensor blocks({block * static_cast<int64_t>(members.size())});
  Keep(group->AllGather(mine.data(), block, blocks.data()));
  Tensor whole({whole_rows, cols});
  for (size_t m = 0; m < members.size(); ++m) {
    const float* from = blocks.data() + m * block;
    for (const TokenRange& run : members[m].runs) {
      CopyFloats(whole.data() + run.begin * cols, from, run.count * cols);
      from += run.count * cols;
    }
  }
  return whole;
}

Tensor TokenParallel::ReduceScatter(Collectives* group, ConstMatrixView whole,
                                    const MemberRows& members) {
  if (group == nullptr || group->size() == 1) return Contiguous(whole);
  const int64_t cols = whole.cols, block = MostRows(members) * cols;
  // Each member's rows in its block, padded with zeros.
  Tensor blocks({block * static_cast<int64_t>(members.size())});
  for (size_t m = 0; m < members.size(); ++m) {
    float* to = blocks.data() + m * block;
    for (const TokenRange& run : members[m].runs) {
      CopyRows(whole.Rows(run.begin, run.count), to);
      to += run.count * cols;
    }
  }
  Tensor summed({block});
  Keep(group->ReduceScatter(blocks.data(), block, summed.data(),
                            ReduceOp::kSum));
  Tensor part({members[group->rank()].count(), cols});
  CopyFloats(part.data(), summed.data(), part.numel());
  return part;
}

void TokenParallel::Keep(absl::Status status) {
  if (status_.ok() && !status.ok()) status_ = std::move(status);
}

}  // namespace glm
