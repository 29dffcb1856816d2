#include "parallel/expert_parallel_dispatch.h"

#include <algorithm>
#include <utility>
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
// device's); so do the counts of rows each expert gets from each member,
// which the host then reads once a layer.

// Rows between the members, in the backend's memory: queued on the device
// where the group can (no host wait: the backend's later work waits for the
// rows on the device), else through the group as the backend's buffers reach
// it.
absl::Status ExchangeRows(Collectives& group, Backend& backend, const float* in,
                          const std::vector<int64_t>& send_counts, float* out,
                          const std::vector<int64_t>& recv_counts) {
  Allocator* device = backend.allocator();
  if (device != nullptr && group.queues_on_device()) {
    return group.QueueAllToAllV(in, send_counts, out, recv_counts,
                                device->queue());
  }
  StagedCollectives staged(
      group, device == nullptr ? BufferPlace::kHost : BufferPlace::kDevice,
      device);
  return staged.AllToAllV(in, send_counts, out, recv_counts);
}

// Each member's block of `expert_rows` (this member's rows for each expert,
// `per_rank` experts a member) goes to it: the rows each member sends this
// one, for each of its experts. Exchanged where the rows are (queued on the
// device where the group can), then read once on the host.
absl::StatusOr<std::vector<float>> ExchangeExpertRows(
    Collectives& group, Backend& backend, const std::vector<float>& expert_rows,
    int64_t per_rank) {
  const int64_t experts = static_cast<int64_t>(expert_rows.size());
  Tensor on_host({experts}, nullptr);
  on_host.values() = expert_rows;
  const Tensor sent = on_host.CopyTo(backend.allocator());
  Tensor received({experts}, backend.allocator());
  const std::vector<int64_t> counts(group.size(), per_rank);
  if (absl::Status s = ExchangeRows(group, backend, sent.data(), counts,
                                    received.data(), counts);
      !s.ok()) {
    return s;
  }
  return received.HostValues();
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

}  // namespace

ExpertRange ExpertsOfRank(int64_t num_experts, int size, int rank) {
  const int64_t count = num_experts / size;
  return {rank * count, count};
}

absl::Status ExpertParallelDispatcher::TryForward(
    Backend& backend, const MoeParameters& p, ConstMatrixView x,
    ExpertGrouping grouping, ConstMatrixView weights, MatrixView out,
    RoutedActivations* acts) {
  const int size = group_->size();
  const int64_t num_experts = p.gate.value.dim(0);
  const int64_t hidden = x.cols;
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

  // The slots go out grouped by expert (in (expert, slot) order), which
  // groups them by the member holding their expert: each token's output then
  // adds its experts' rows in the order one process with every expert adds
  // them. The rows of each expert are read on the host (one copy a layer):
  // each member's block of them is what it gets from this one, and tells it
  // which rows go to which of its experts.
  acts->sent = std::move(grouping);
  const std::vector<int32_t> offsets = acts->sent.offsets.HostValues();
  std::vector<float> expert_rows(num_experts);
  for (int64_t e = 0; e < num_experts; ++e) {
    expert_rows[e] = static_cast<float>(offsets[e + 1] - offsets[e]);
  }
  absl::StatusOr<std::vector<float>> received_expert_rows =
      ExchangeExpertRows(*group_, backend, expert_rows, per_rank);
  if (!received_expert_rows.ok()) return received_expert_rows.status();
  acts->send_rows = MemberRows(expert_rows, per_rank);
  acts->recv_rows = MemberRows(*received_expert_rows, per_rank);
  int64_t received = 0;
  for (int64_t r : acts->recv_rows) received += r;
  const int64_t sent = acts->sent.rows();

  // Each sent slot's hidden state and router weight, gathered where the
  // backend keeps them.
  const int64_t width = DispatchWidth(hidden);
  Tensor send_x = BackendRows(backend, sent, width);
  if (sent > 0) {
    const MatrixView send_rows = send_x.Matrix().Rows(0, sent);
    backend.EmbeddingForward(x, acts->sent.tokens.data(),
                             send_rows.Columns(0, hidden));
    backend.EmbeddingForward(AsColumn(weights), acts->sent.slots.data(),
                             send_rows.Columns(hidden, 1));
  }
  acts->received = BackendRows(backend, received, width);
  if (absl::Status s = ExchangeRows(
          *group_, backend, send_x.data(), Times(acts->send_rows, width),
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
        ExpertOfRows(*received_expert_rows, source, per_rank));
    acts->experts[source].grouping =
        GroupRowsByExpert(backend, op_expert.data(), count, 1, held.count);
    ExpertsForward(backend, p, x_rows.Rows(first, count),
                   weight_column.Rows(first, count), &acts->experts[source],
                   combined_rows.Rows(first, count));
    first += count;
  }

  Tensor back = BackendRows(backend, sent, hidden);
  if (absl::Status s = ExchangeRows(*group_, backend, combined.data(),
                                    Times(acts->recv_rows, hidden), back.data(),
                                    Times(acts->send_rows, hidden));
      !s.ok()) {
    return s;
  }
  if (sent > 0) {
    AddRowsToTokens(backend, acts->sent, back.Matrix().Rows(0, sent), nullptr,
                    out);
  }
  return absl::OkStatus();
}

absl::Status ExpertParallelDispatcher::TryBackward(
    Backend& backend, MoeParameters& p, const RoutedActivations& acts,
    ConstMatrixView dout, MatrixView dx, MatrixView dweights) {
  const int64_t hidden = dout.cols;
  const int64_t sent = acts.sent.rows();
  int64_t received = 0;
  for (int64_t r : acts.recv_rows) received += r;

  // The output gradient of every sent row goes where the row went.
  Tensor send = BackendRows(backend, sent, hidden);
  if (sent > 0) {
    backend.EmbeddingForward(dout, acts.sent.tokens.data(),
                             send.Matrix().Rows(0, sent));
  }
  Tensor received_dout = BackendRows(backend, received, hidden);
  if (absl::Status s = ExchangeRows(
          *group_, backend, send.data(), Times(acts.send_rows, hidden),
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
  if (absl::Status s = ExchangeRows(*group_, backend, grads.data(),
                                    Times(acts.recv_rows, width), back.data(),
                                    Times(acts.send_rows, width));
      !s.ok()) {
    return s;
  }
  if (sent == 0) return absl::OkStatus();
  const ConstMatrixView back_rows = back.Matrix().Rows(0, sent);
  AddRowsToTokens(backend, acts.sent, back_rows.Columns(0, hidden), nullptr,
                  dx);
  backend.ScatterAddRows(back_rows.Columns(hidden, 1), acts.sent.slots.data(),
                         nullptr, AsColumn(dweights));
  return absl::OkStatus();
}

absl::Status ExpertParallelDispatcher::status() const {
  if (!status_.ok()) return status_;
  return group_->QueuedFailure();
}

// This rank's choices grouped by expert say what goes where; the rows an
// expert runs come from every member.
void ExpertParallelDispatcher::Forward(Backend& backend, const MoeParameters& p,
                                       ConstMatrixView x,
                                       ExpertGrouping grouping,
                                       ConstMatrixView weights, MatrixView out,
                                       RoutedActivations* acts) {
  if (status_.ok()) {
    status_ =
        TryForward(backend, p, x, std::move(grouping), weights, out, acts);
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
