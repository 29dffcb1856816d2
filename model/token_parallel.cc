#include "model/token_parallel.h"

#include <algorithm>
#include <cassert>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace glm {
namespace {

// The collectives read and write host memory. Inside a model pass the
// current allocator is the backend's (null on the CPU): views point there, and
// results go back there.
//
// A contiguous host copy of `view`.
Tensor HostCopy(ConstMatrixView view) {
  Tensor copy({view.rows, view.cols}, nullptr);
  Allocator* memory = CurrentAllocator();
  const size_t row_bytes = view.cols * sizeof(float);
  for (int64_t r = 0; r < view.rows; ++r) {
    float* to = copy.data() + r * view.cols;
    if (memory == nullptr) {
      std::copy_n(view.Row(r), view.cols, to);
    } else {
      memory->CopyToHost(to, view.Row(r), row_bytes);
    }
  }
  return copy;
}

// A contiguous copy of `view` where the pass's tensors live.
Tensor Contiguous(ConstMatrixView view) {
  return HostCopy(view).CopyTo(CurrentAllocator());
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
  std::vector<float> mine = std::move(HostCopy(part).values());
  mine.resize(block);
  std::vector<float> blocks(block * members.size());
  Keep(group->AllGather(mine.data(), block, blocks.data()));
  Tensor whole({whole_rows, cols}, nullptr);
  for (size_t m = 0; m < members.size(); ++m) {
    const float* from = blocks.data() + m * block;
    for (const TokenRange& run : members[m].runs) {
      std::copy_n(from, run.count * cols, whole.data() + run.begin * cols);
      from += run.count * cols;
    }
  }
  return whole.CopyTo(CurrentAllocator());
}

Tensor TokenParallel::ReduceScatter(Collectives* group, ConstMatrixView whole,
                                    const MemberRows& members) {
  if (group == nullptr || group->size() == 1) return Contiguous(whole);
  const int64_t cols = whole.cols, block = MostRows(members) * cols;
  const Tensor rows = HostCopy(whole);
  std::vector<float> blocks(block * members.size(), 0.f);
  for (size_t m = 0; m < members.size(); ++m) {
    float* to = blocks.data() + m * block;
    for (const TokenRange& run : members[m].runs) {
      std::copy_n(rows.data() + run.begin * cols, run.count * cols, to);
      to += run.count * cols;
    }
  }
  std::vector<float> summed(block);
  Keep(group->ReduceScatter(blocks.data(), block, summed.data(),
                            ReduceOp::kSum));
  Tensor part({members[group->rank()].count(), cols}, nullptr);
  std::copy_n(summed.data(), part.numel(), part.data());
  return part.CopyTo(CurrentAllocator());
}

void TokenParallel::Keep(absl::Status status) {
  if (status_.ok() && !status.ok()) status_ = std::move(status);
}

}  // namespace glm
