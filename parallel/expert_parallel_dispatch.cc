#include "parallel/expert_parallel_dispatch.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "parallel/staged_collectives.h"

namespace glm {
namespace {

std::vector<int64_t> Times(const std::vector<int64_t>& rows, int64_t width) {
  std::vector<int64_t> counts;
  for (int64_t r : rows) counts.push_back(r * width);
  return counts;
}

// The rows (hidden states with their router weights, and their gradients)
// stay in the backend's memory and go to the group where they lie (through
// host copies where the group's buffers are the host's and the backend's a
// device's); only the rows each expert gets from each member travel from the
// host.

// The group as the backend's buffers reach it.
StagedCollectives RowsGroup(Collectives& group, Backend& backend) {
  return StagedCollectives(group,
                           backend.allocator() == nullptr
                               ? BufferPlace::kHost
                               : BufferPlace::kDevice,
                           backend.allocator());
}

// The group as host buffers reach it.
StagedCollectives HostGroup(Collectives& group, Backend& backend) {
  return StagedCollectives(group, BufferPlace::kHost, backend.allocator());
}

// [rows, cols] of the backend's memory, at least one row allocated: a
// collective needs a real buffer even when a member exchanges nothing.
Tensor BackendRows(Backend& backend, int64_t rows, int64_t cols) {
  return Tensor({std::max<int64_t>(rows, 1), cols}, backend.allocator());
}

// A dispatched row: the hidden state (or its gradient), its router weight
// (or that weight's gradient), then padding to a multiple of four columns, so
// the hidden part's rows stay 16-byte aligned for the backend's quad loads.
int64_t DispatchWidth(int64_t hidden) { return (hidden + 1 + 3) / 4 * 4; }

// The rows of each member: the sums of `expert_rows`' blocks of `per_rank`.
std::vector<int64_t> MemberRows(const std::vector<float>& expert_rows,
                                int64_t per_rank) {
  std::vector<int64_t> rows(expert_rows.size() / per_rank, 0);
  for (size_t e = 0; e < expert_rows.size(); ++e) {
    rows[e / per_rank] += static_cast<int64_t>(expert_rows[e]);
  }
  return rows;
}

// The held expert of each row received from `source` (its rows come in
// expert order; received_expert_rows holds each source's block of counts).
std::vector<int32_t> ExpertOfRows(
    const std::vector<float>& received_expert_rows, size_t source,
    int64_t per_rank) {
  std::vector<int32_t> expert;
  for (int64_t e = 0; e < per_rank; ++e) {
    const auto count =
        static_cast<size_t>(received_expert_rows[source * per_rank + e]);
    expert.insert(expert.end(), count, static_cast<int32_t>(e));
  }
  return expert;
}

// The input row of each sent (token, k) slot.
std::vector<int32_t> SentTokens(const std::vector<int32_t>& slots,
                                int64_t top_k) {
  std::vector<int32_t> tokens;
  tokens.reserve(slots.size());
  for (int32_t slot : slots) tokens.push_back(slot / top_k);
  return tokens;
}

}  // namespace

ExpertRange ExpertsOfRank(int64_t num_experts, int size, int rank) {
  const int64_t count = num_experts / size;
  return {rank * count, count};
}

absl::Status ExpertParallelDispatcher::TryForward(
    Backend& backend, const MoeParameters& p, ConstMatrixView x,
    const IndexTensor& choice_tensor, ConstMatrixView weights, MatrixView out,
    RoutedActivations* acts) {
  // The per-peer counts are read on the host (one copy per layer).
  const std::vector<int32_t> host_choice = choice_tensor.HostValues();
  const int32_t* choice = host_choice.data();
  const int size = group_->size();
  const int64_t num_experts = p.gate.value.dim(0), top_k = weights.cols;
  const int64_t hidden = x.cols, slots = x.rows * top_k;
  if (num_experts % size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert parallelism: ", num_experts,
                     " routed experts do not split over ", size, " ranks"));
  }
  const ExpertRange held = ExpertsOfRank(num_experts, size, group_->rank());
  if (p.experts_gate_up.value.dim(0) != held.count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert parallelism: rank ", group_->rank(), " holds ",
        p.experts_gate_up.value.dim(0), " routed experts, not its ", held.count,
        " of ", num_experts));
  }
  const int64_t per_rank = held.count;
  StagedCollectives host = HostGroup(*group_, backend);
  StagedCollectives rows = RowsGroup(*group_, backend);

  // Slots in (expert, slot) order, which groups them by the member holding
  // their expert: each token's output then adds its experts' rows in the
  // order one process with every expert adds them.
  acts->sent_slots.resize(slots);
  std::iota(acts->sent_slots.begin(), acts->sent_slots.end(), 0);
  std::stable_sort(acts->sent_slots.begin(), acts->sent_slots.end(),
                   [&](int32_t a, int32_t b) { return choice[a] < choice[b]; });
  // The rows of each expert, in expert order: each member's block is what it
  // gets from this one, and tells it which rows go to which of its experts.
  std::vector<float> expert_rows(num_experts, 0.f);
  for (int64_t slot = 0; slot < slots; ++slot) ++expert_rows[choice[slot]];
  std::vector<float> received_expert_rows(num_experts);
  if (absl::Status s = host.AllToAll(expert_rows.data(), per_rank,
                                     received_expert_rows.data());
      !s.ok()) {
    return s;
  }
  acts->send_rows = MemberRows(expert_rows, per_rank);
  acts->recv_rows = MemberRows(received_expert_rows, per_rank);
  int64_t received = 0;
  for (int64_t r : acts->recv_rows) received += r;
  const int64_t sent = static_cast<int64_t>(acts->sent_slots.size());

  // Each sent slot's hidden state and router weight, gathered where the
  // backend keeps them.
  const IndexTensor tokens =
      IndexTensor::FromHost(SentTokens(acts->sent_slots, top_k));
  const int64_t width = DispatchWidth(hidden);
  Tensor send_x = BackendRows(backend, sent, width);
  if (sent > 0) {
    const IndexTensor sent_slots = IndexTensor::FromHost(acts->sent_slots);
    const MatrixView send_rows = send_x.Matrix().Rows(0, sent);
    backend.EmbeddingForward(x, tokens.data(), send_rows.Columns(0, hidden));
    backend.EmbeddingForward(AsColumn(weights), sent_slots.data(),
                             send_rows.Columns(hidden, 1));
  }
  acts->received = BackendRows(backend, received, width);
  if (absl::Status s =
          rows.AllToAllV(send_x.data(), Times(acts->send_rows, width),
                         acts->received.data(), Times(acts->recv_rows, width));
      !s.ok()) {
    return s;
  }

  // This member's experts on the rows of each member in turn, as their own
  // products: the experts then see the micro batches one process would, in
  // its order (the ranks' micro batches interleave), so expert parallelism
  // matches one process as closely as data parallelism does.
  const ConstMatrixView received_rows = acts->received.Matrix();
  const ConstMatrixView x_rows = received_rows.Columns(0, hidden);
  const ConstMatrixView weight_column = received_rows.Columns(hidden, 1);
  Tensor combined = BackendRows(backend, received, hidden);
  const MatrixView combined_rows = combined.Matrix();
  acts->experts.assign(acts->recv_rows.size(), {});
  int64_t first = 0;
  for (size_t source = 0; source < acts->recv_rows.size(); ++source) {
    const int64_t count = acts->recv_rows[source];
    const IndexTensor op_expert = IndexTensor::FromHost(
        ExpertOfRows(received_expert_rows, source, per_rank));
    acts->experts[source].grouping =
        GroupRowsByExpert(backend, op_expert.data(), count, 1, held.count);
    ExpertsForward(backend, p, x_rows.Rows(first, count),
                   weight_column.Rows(first, count), &acts->experts[source],
                   combined_rows.Rows(first, count));
    first += count;
  }

  Tensor back = BackendRows(backend, sent, hidden);
  if (absl::Status s =
          rows.AllToAllV(combined.data(), Times(acts->recv_rows, hidden),
                         back.data(), Times(acts->send_rows, hidden));
      !s.ok()) {
    return s;
  }
  if (sent > 0) {
    backend.ScatterAddRows(back.Matrix().Rows(0, sent), tokens.data(), nullptr,
                           out);
  }
  return absl::OkStatus();
}

absl::Status ExpertParallelDispatcher::TryBackward(
    Backend& backend, MoeParameters& p, const RoutedActivations& acts,
    ConstMatrixView dout, MatrixView dx, MatrixView dweights) {
  const int64_t hidden = dout.cols;
  const int64_t sent = static_cast<int64_t>(acts.sent_slots.size());
  int64_t received = 0;
  for (int64_t r : acts.recv_rows) received += r;
  StagedCollectives rows = RowsGroup(*group_, backend);
  const IndexTensor tokens =
      IndexTensor::FromHost(SentTokens(acts.sent_slots, dweights.cols));

  // The output gradient of every sent row goes where the row went.
  Tensor send = BackendRows(backend, sent, hidden);
  if (sent > 0) {
    backend.EmbeddingForward(dout, tokens.data(), send.Matrix().Rows(0, sent));
  }
  Tensor received_dout = BackendRows(backend, received, hidden);
  if (absl::Status s =
          rows.AllToAllV(send.data(), Times(acts.send_rows, hidden),
                         received_dout.data(), Times(acts.recv_rows, hidden));
      !s.ok()) {
    return s;
  }

  // Each row back as it came: the input gradient, then the router-weight
  // gradient.
  const int64_t width = DispatchWidth(hidden);
  Tensor grads = BackendRows(backend, received, width);
  const MatrixView grad_rows = grads.Matrix();
  const ConstMatrixView dout_rows = received_dout.Matrix();
  int64_t first = 0;
  for (size_t source = 0; source < acts.recv_rows.size(); ++source) {
    const int64_t count = acts.recv_rows[source];
    const MatrixView block = grad_rows.Rows(first, count);
    ExpertsBackward(backend, p, acts.experts[source],
                    dout_rows.Rows(first, count), block.Columns(0, hidden),
                    block.Columns(hidden, 1));
    first += count;
  }
  Tensor back = BackendRows(backend, sent, width);
  if (absl::Status s =
          rows.AllToAllV(grads.data(), Times(acts.recv_rows, width),
                         back.data(), Times(acts.send_rows, width));
      !s.ok()) {
    return s;
  }
  if (sent == 0) return absl::OkStatus();
  const ConstMatrixView back_rows = back.Matrix().Rows(0, sent);
  const IndexTensor sent_slots = IndexTensor::FromHost(acts.sent_slots);
  backend.ScatterAddRows(back_rows.Columns(0, hidden), tokens.data(), nullptr,
                         dx);
  backend.ScatterAddRows(back_rows.Columns(hidden, 1), sent_slots.data(),
                         nullptr, AsColumn(dweights));
  return absl::OkStatus();
}

// The grouping of this rank's own choices is not used: the rows an expert
// runs come from every member.
void ExpertParallelDispatcher::Forward(Backend& backend, const MoeParameters& p,
                                       ConstMatrixView x,
                                       const IndexTensor& choice,
                                       ExpertGrouping /*grouping*/,
                                       ConstMatrixView weights, MatrixView out,
                                       RoutedActivations* acts) {
  if (status_.ok()) {
    status_ = TryForward(backend, p, x, choice, weights, out, acts);
  }
}

void ExpertParallelDispatcher::Backward(Backend& backend, MoeParameters& p,
                                        const RoutedActivations& acts,
                                        ConstMatrixView dout, MatrixView dx,
                                        MatrixView dweights) {
  if (status_.ok()) {
    status_ = TryBackward(backend, p, acts, dout, dx, dweights);
  }
}

}  // namespace glm
