#include "parallel/expert_parallel_dispatch.h"

#include <algorithm>
#include <cassert>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "parallel/staged_collectives.h"

namespace glm {
namespace {

// Gloo needs a real buffer even when a member exchanges nothing.
std::vector<float> Buffer(int64_t count) {
  return std::vector<float>(std::max<int64_t>(count, 1));
}

std::vector<int64_t> Times(const std::vector<int64_t>& rows, int64_t width) {
  std::vector<int64_t> counts;
  for (int64_t r : rows) counts.push_back(r * width);
  return counts;
}

// The rows (hidden states and their gradients) stay in the backend's memory
// and go to the group where they lie (through host copies where the group's
// buffers are the host's and the backend's a device's); the counts and each
// slot's router weight and expert, a few floats a row, travel from the host.

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

// Host rows [rows, cols] as a tensor of the backend's memory.
Tensor Uploaded(Backend& backend, const std::vector<float>& host, int64_t rows,
                int64_t cols) {
  Tensor staged({rows, cols}, nullptr);
  std::copy_n(host.data(), rows * cols, staged.data());
  return staged.CopyTo(backend.allocator());
}

// The elements of a contiguous view of the backend's memory, on the host.
std::vector<float> HostRows(Backend& backend, ConstMatrixView view) {
  assert(view.stride == view.cols);
  Tensor rows({view.rows, view.cols}, nullptr);
  if (backend.allocator() == nullptr) {
    std::copy_n(view.data, view.rows * view.cols, rows.data());
  } else if (view.rows > 0) {
    backend.allocator()->CopyToHost(rows.data(), view.data,
                                    view.rows * view.cols * sizeof(float));
  }
  return std::move(rows.values());
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
  acts->send_rows.assign(size, 0);
  for (int64_t slot = 0; slot < slots; ++slot) {
    ++acts->send_rows[choice[slot] / per_rank];
  }
  std::vector<float> send_rows(acts->send_rows.begin(), acts->send_rows.end());
  std::vector<float> recv_rows(size);
  if (absl::Status s = host.AllToAll(send_rows.data(), 1, recv_rows.data());
      !s.ok()) {
    return s;
  }
  acts->recv_rows.assign(recv_rows.begin(), recv_rows.end());
  int64_t received = 0;
  for (int64_t r : acts->recv_rows) received += r;
  const int64_t sent = static_cast<int64_t>(acts->sent_slots.size());

  // Each sent slot's router weight and expert, from the host.
  const std::vector<float> weight_rows = HostRows(backend, weights);
  std::vector<float> send_meta = Buffer(sent * 2);
  for (int64_t i = 0; i < sent; ++i) {
    const int32_t slot = acts->sent_slots[i];
    send_meta[2 * i] = weight_rows[slot];
    send_meta[2 * i + 1] = static_cast<float>(choice[slot]);
  }
  std::vector<float> recv_meta = Buffer(received * 2);
  if (absl::Status s =
          host.AllToAllV(send_meta.data(), Times(acts->send_rows, 2),
                         recv_meta.data(), Times(acts->recv_rows, 2));
      !s.ok()) {
    return s;
  }
  // Each sent slot's hidden state, gathered where the backend keeps it.
  const IndexTensor tokens =
      IndexTensor::FromHost(SentTokens(acts->sent_slots, top_k));
  Tensor send_x = BackendRows(backend, sent, hidden);
  if (sent > 0) {
    backend.EmbeddingForward(x, tokens.data(), send_x.Matrix().Rows(0, sent));
  }
  acts->received = BackendRows(backend, received, hidden);
  if (absl::Status s =
          rows.AllToAllV(send_x.data(), Times(acts->send_rows, hidden),
                         acts->received.data(), Times(acts->recv_rows, hidden));
      !s.ok()) {
    return s;
  }
  std::vector<float> received_weights(std::max<int64_t>(received, 1));
  for (int64_t i = 0; i < received; ++i) received_weights[i] = recv_meta[2 * i];
  acts->received_weights =
      Uploaded(backend, received_weights, received_weights.size(), 1);

  // This member's experts on the rows of each member in turn, as their own
  // products: the experts then see the micro batches one process would, in
  // its order (the ranks' micro batches interleave), so expert parallelism
  // matches one process as closely as data parallelism does.
  const ConstMatrixView x_rows = acts->received.Matrix();
  const ConstMatrixView weight_column = acts->received_weights.Matrix();
  Tensor combined = BackendRows(backend, received, hidden);
  const MatrixView combined_rows = combined.Matrix();
  acts->experts.assign(acts->recv_rows.size(), {});
  int64_t first = 0;
  for (size_t source = 0; source < acts->recv_rows.size(); ++source) {
    const int64_t count = acts->recv_rows[source];
    std::vector<int32_t> expert(count);
    for (int64_t i = 0; i < count; ++i) {
      expert[i] = static_cast<int32_t>(recv_meta[2 * (first + i) + 1] -
                                       static_cast<float>(held.first));
    }
    const IndexTensor op_expert = IndexTensor::FromHost(expert);
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

  // Each row back: the input gradient, then the router-weight gradient.
  const int64_t width = hidden + 1;
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
