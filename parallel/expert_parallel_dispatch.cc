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

// Rows of the activation type in the backend's memory, as they travel:
// `cols` wide, each row padded to a multiple of eight elements (16-byte
// aligned rows for the products' loads and the backend's quad loads), at
// least one row allocated (a collective needs a real buffer even when a
// member exchanges nothing).
struct ActivationRows {
  ActivationRows(Backend& backend, int64_t rows, int64_t cols)
      : cols(cols),
        stride((cols + 7) / 8 * 8),
        tensor({std::max<int64_t>(rows, 1), stride}, backend.allocator(),
               backend.ActivationType()) {}

  // Rows [first, first + count), `cols` wide.
  MatrixView Rows(int64_t first, int64_t count) {
    return tensor.Matrix().Rows(first, count).Columns(0, cols);
  }
  // The 32-bit words of one row: what an exchange counts.
  int64_t words() const { return stride * ElementBytes(tensor.dtype()) / 4; }

  int64_t cols;
  int64_t stride;
  Tensor tensor;
};

// `from`'s rows to the members (from_rows[m] of them to member m), `to`'s
// from them (to_rows[m] from member m).
absl::Status ExchangeActivationRows(Collectives& group, Backend& backend,
                                    const ActivationRows& from,
                                    const std::vector<int64_t>& from_rows,
                                    ActivationRows& to,
                                    const std::vector<int64_t>& to_rows) {
  return ExchangeRows(group, backend, from.tensor.words(),
                      Times(from_rows, from.words()), to.tensor.words(),
                      Times(to_rows, to.words()));
}

// Rows [first, first + count) of a kept ActivationRows tensor, `cols` wide.
ConstMatrixView KeptRows(const Tensor& rows, int64_t first, int64_t count,
                         int64_t cols) {
  return ConstMatrixView(rows.Matrix()).Rows(first, count).Columns(0, cols);
}

// The rows of each member: the sums of `expert_rows`' blocks of `per_rank`.
std::vector<int64_t> MemberRows(const std::vector<float>& expert_rows,
                                int64_t per_rank) {
  std::vector<int64_t> rows(expert_rows.size() / per_rank, 0);
  for (size_t e = 0; e < expert_rows.size(); ++e) {
    rows[e / per_rank] += static_cast<int64_t>(expert_rows[e]);
  }
  return rows;
}

// The expert offsets of the rows received from `source`, which come in
// expert order (received_expert_rows holds each source's block of counts).
std::vector<int32_t> OffsetsOfRows(
    const std::vector<float>& received_expert_rows, size_t source,
    int64_t per_rank) {
  std::vector<int32_t> offsets{0};
  for (int64_t e = 0; e < per_rank; ++e) {
    offsets.push_back(
        offsets.back() +
        static_cast<int32_t>(received_expert_rows[source * per_rank + e]));
  }
  return offsets;
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

  // Each sent slot's hidden state in the activation type, gathered where the
  // backend keeps them; its router weight stays here (the combine below
  // weights the rows that come back, as one process does).
  ActivationRows send(backend, sent, hidden);
  if (sent > 0) {
    acts->sent_weights = Tensor::ForOutput({sent, 1});
    backend.EmbeddingForward(x, acts->sent.tokens.data(), send.Rows(0, sent));
    backend.EmbeddingForward(AsColumn(weights), acts->sent.slots.data(),
                             acts->sent_weights.Matrix());
  }
  ActivationRows inputs(backend, received, hidden);
  if (absl::Status s = ExchangeActivationRows(
          *group_, backend, send, acts->send_rows, inputs, acts->recv_rows);
      !s.ok()) {
    return s;
  }

  // This member's experts on the rows of each member in turn, as their own
  // products: the experts then see the micro batches one process would, in
  // its order (the ranks' micro batches interleave), so expert parallelism
  // matches one process as closely as data parallelism does. The rows came
  // grouped by expert: the products read them as they lie.
  ActivationRows outputs(backend, received, hidden);
  acts->experts.assign(acts->recv_rows.size(), {});
  int64_t first = 0;
  for (size_t source = 0; source < acts->recv_rows.size(); ++source) {
    const int64_t count = acts->recv_rows[source];
    ExpertRows& block = acts->experts[source];
    block.grouping.offsets = IndexTensor::FromHost(
        OffsetsOfRows(*received_expert_rows, source, per_rank));
    if (count > 0) {
      ExpertProducts(backend, p, inputs.Rows(first, count),
                     block.grouping.offsets.data(), &block.mlp,
                     outputs.Rows(first, count));
    }
    first += count;
  }

  ActivationRows returned(backend, sent, hidden);
  if (absl::Status s =
          ExchangeActivationRows(*group_, backend, outputs, acts->recv_rows,
                                 returned, acts->send_rows);
      !s.ok()) {
    return s;
  }
  if (sent > 0) {
    AddRowsToTokens(backend, acts->sent, returned.Rows(0, sent),
                    acts->sent_weights.data(), out);
  }
  acts->received = std::move(inputs.tensor);
  acts->returned = std::move(returned.tensor);
  return absl::OkStatus();
}

absl::Status ExpertParallelDispatcher::TryBackward(
    Backend& backend, MoeParameters& p, const RoutedActivations& acts,
    ConstMatrixView dout, MatrixView dx, MatrixView dweights) {
  const int64_t hidden = dout.cols;
  const int64_t sent = acts.sent.rows();
  int64_t received = 0;
  for (int64_t r : acts.recv_rows) received += r;

  // The combine's backward here, as one process runs it: each sent row's
  // output gradient (its token's dout times its router weight, in the
  // activation type) and its router weight's gradient (the returned row's
  // dot with that dout, written at its slot). Router weights never travel.
  ActivationRows send(backend, sent, hidden);
  if (sent > 0) {
    AddRowsToTokensBackward(
        backend, acts.sent, KeptRows(acts.returned, 0, sent, hidden),
        acts.sent_weights.data(), dout, send.Rows(0, sent), AsColumn(dweights));
  }
  ActivationRows douts(backend, received, hidden);
  if (absl::Status s = ExchangeActivationRows(
          *group_, backend, send, acts.send_rows, douts, acts.recv_rows);
      !s.ok()) {
    return s;
  }

  // The experts' backward on each member's rows; their input gradients go
  // back as the rows came.
  ActivationRows grads(backend, received, hidden);
  int64_t first = 0;
  for (size_t source = 0; source < acts.recv_rows.size(); ++source) {
    const int64_t count = acts.recv_rows[source];
    if (count > 0) {
      const ExpertRows& block = acts.experts[source];
      ExpertProductsBackward(
          backend, p, KeptRows(acts.received, first, count, hidden), block.mlp,
          block.grouping.offsets.data(), douts.Rows(first, count),
          grads.Rows(first, count));
    }
    first += count;
  }
  ActivationRows back(backend, sent, hidden);
  if (absl::Status s = ExchangeActivationRows(
          *group_, backend, grads, acts.recv_rows, back, acts.send_rows);
      !s.ok()) {
    return s;
  }
  if (sent > 0) {
    AddRowsToTokens(backend, acts.sent, back.Rows(0, sent), nullptr, dx);
  }
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
