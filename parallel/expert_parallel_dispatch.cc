#include "parallel/expert_parallel_dispatch.h"

#include <algorithm>
#include <cassert>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"

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

// The collectives read and write host memory; on a device backend the rows
// travel through these copies (one small count exchange per layer stays on
// the host anyway).
//
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

// Host rows [rows, cols] as a tensor of the backend's memory.
Tensor BackendRows(Backend& backend, const std::vector<float>& host,
                   int64_t rows, int64_t cols) {
  Tensor staged({rows, cols}, nullptr);
  std::copy_n(host.data(), rows * cols, staged.data());
  return staged.CopyTo(backend.allocator());
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
  if (absl::Status s = group_->AllToAll(send_rows.data(), 1, recv_rows.data());
      !s.ok()) {
    return s;
  }
  acts->recv_rows.assign(recv_rows.begin(), recv_rows.end());
  int64_t received = 0;
  for (int64_t r : acts->recv_rows) received += r;

  // Each row: the hidden state, the router weight, the expert.
  const int64_t width = hidden + 2;
  const int64_t sent = static_cast<int64_t>(acts->sent_slots.size());
  const std::vector<float> x_rows = HostRows(backend, x);
  const std::vector<float> weight_rows = HostRows(backend, weights);
  std::vector<float> send = Buffer(sent * width);
  for (int64_t i = 0; i < sent; ++i) {
    const int32_t slot = acts->sent_slots[i];
    float* row = send.data() + i * width;
    std::copy_n(x_rows.data() + (slot / top_k) * hidden, hidden, row);
    row[hidden] = weight_rows[slot];
    row[hidden + 1] = static_cast<float>(choice[slot]);
  }
  std::vector<float> recv = Buffer(received * width);
  if (absl::Status s =
          group_->AllToAllV(send.data(), Times(acts->send_rows, width),
                            recv.data(), Times(acts->recv_rows, width));
      !s.ok()) {
    return s;
  }

  // This member's experts on the rows of each member in turn, as their own
  // products: the experts then see the micro batches one process would, in
  // its order (the ranks' micro batches interleave), so expert parallelism
  // matches one process as closely as data parallelism does.
  const ConstMatrixView host_rows(recv.data(), received, width, width);
  acts->received = BackendRows(backend, recv, received, width);
  const ConstMatrixView rows = acts->received.Matrix();
  Tensor combined_rows_on_backend({received, hidden}, backend.allocator());
  const MatrixView combined_rows = combined_rows_on_backend.Matrix();
  acts->experts.assign(acts->recv_rows.size(), {});
  int64_t first = 0;
  for (size_t source = 0; source < acts->recv_rows.size(); ++source) {
    const int64_t count = acts->recv_rows[source];
    const ConstMatrixView block = rows.Rows(first, count);
    std::vector<int32_t> expert(count);
    for (int64_t i = 0; i < count; ++i) {
      expert[i] = static_cast<int32_t>(host_rows.Row(first + i)[hidden + 1] -
                                       held.first);
    }
    const IndexTensor op_expert = IndexTensor::FromHost(expert);
    acts->experts[source].grouping =
        GroupRowsByExpert(backend, op_expert.data(), count, 1, held.count);
    ExpertsForward(backend, p, block.Columns(0, hidden),
                   block.Columns(hidden, 1), &acts->experts[source],
                   combined_rows.Rows(first, count));
    first += count;
  }

  std::vector<float> combined = HostRows(backend, combined_rows);
  combined.resize(std::max<int64_t>(received * hidden, 1));
  std::vector<float> back = Buffer(sent * hidden);
  if (absl::Status s =
          group_->AllToAllV(combined.data(), Times(acts->recv_rows, hidden),
                            back.data(), Times(acts->send_rows, hidden));
      !s.ok()) {
    return s;
  }
  const IndexTensor tokens =
      IndexTensor::FromHost(SentTokens(acts->sent_slots, top_k));
  backend.ScatterAddRows(BackendRows(backend, back, sent, hidden).Matrix(),
                         tokens.data(), nullptr, out);
  return absl::OkStatus();
}

absl::Status ExpertParallelDispatcher::TryBackward(
    Backend& backend, MoeParameters& p, const RoutedActivations& acts,
    ConstMatrixView dout, MatrixView dx, MatrixView dweights) {
  const int64_t hidden = dout.cols;
  const int64_t sent = static_cast<int64_t>(acts.sent_slots.size());
  int64_t received = 0;
  for (int64_t r : acts.recv_rows) received += r;
  const IndexTensor tokens =
      IndexTensor::FromHost(SentTokens(acts.sent_slots, dweights.cols));

  // The output gradient of every sent row goes where the row went.
  Tensor sent_rows({sent, hidden}, backend.allocator());
  backend.EmbeddingForward(dout, tokens.data(), sent_rows.Matrix());
  std::vector<float> send = HostRows(backend, sent_rows.Matrix());
  send.resize(std::max<int64_t>(sent * hidden, 1));
  std::vector<float> recv = Buffer(received * hidden);
  if (absl::Status s =
          group_->AllToAllV(send.data(), Times(acts.send_rows, hidden),
                            recv.data(), Times(acts.recv_rows, hidden));
      !s.ok()) {
    return s;
  }

  // Each row back: the input gradient, then the router-weight gradient.
  const int64_t width = hidden + 1;
  Tensor grad_rows_on_backend({received, width}, backend.allocator());
  const MatrixView grad_rows = grad_rows_on_backend.Matrix();
  const Tensor received_dout = BackendRows(backend, recv, received, hidden);
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
  std::vector<float> grads = HostRows(backend, grad_rows);
  grads.resize(std::max<int64_t>(received * width, 1));
  std::vector<float> back = Buffer(sent * width);
  if (absl::Status s =
          group_->AllToAllV(grads.data(), Times(acts.recv_rows, width),
                            back.data(), Times(acts.send_rows, width));
      !s.ok()) {
    return s;
  }
  const Tensor back_on_backend = BackendRows(backend, back, sent, width);
  const ConstMatrixView back_rows = back_on_backend.Matrix();
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
