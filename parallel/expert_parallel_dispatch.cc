#include "parallel/expert_parallel_dispatch.h"

#include <algorithm>
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

// The input row of each sent (token, k) slot.
std::vector<int32_t> SentTokens(const std::vector<int32_t>& slots,
                                int64_t top_k) {
  std::vector<int32_t> tokens;
  tokens.reserve(slots.size());
  for (int32_t slot : slots) tokens.push_back(slot / top_k);
  return tokens;
}

}  // namespace

absl::Status ExpertParallelDispatcher::TryForward(
    Backend& backend, const MoeParameters& p, ConstMatrixView x,
    const int32_t* choice, ConstMatrixView weights, MatrixView out,
    RoutedActivations* acts) {
  const int size = group_->size();
  const int64_t num_experts = p.gate.value.dim(0), top_k = weights.cols;
  const int64_t hidden = x.cols, slots = x.rows * top_k;
  if (num_experts % size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert parallelism: ", num_experts,
                     " routed experts do not split over ", size, " ranks"));
  }
  const int64_t per_rank = num_experts / size;

  // Slots grouped by the member holding their expert, in slot order.
  acts->sent_slots.clear();
  acts->send_rows.assign(size, 0);
  for (int peer = 0; peer < size; ++peer) {
    for (int64_t slot = 0; slot < slots; ++slot) {
      if (choice[slot] / per_rank != peer) continue;
      acts->sent_slots.push_back(static_cast<int32_t>(slot));
      ++acts->send_rows[peer];
    }
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
  std::vector<float> send = Buffer(sent * width);
  for (int64_t i = 0; i < sent; ++i) {
    const int32_t slot = acts->sent_slots[i];
    float* row = send.data() + i * width;
    std::copy_n(x.Row(slot / top_k), hidden, row);
    row[hidden] = weights.data[slot];
    row[hidden + 1] = static_cast<float>(choice[slot]);
  }
  std::vector<float> recv = Buffer(received * width);
  if (absl::Status s =
          group_->AllToAllV(send.data(), Times(acts->send_rows, width),
                            recv.data(), Times(acts->recv_rows, width));
      !s.ok()) {
    return s;
  }

  // This member's experts on every row it received.
  const ConstMatrixView rows(recv.data(), received, width, width);
  std::vector<int32_t> expert(received);
  for (int64_t i = 0; i < received; ++i) {
    expert[i] = static_cast<int32_t>(rows.Row(i)[hidden + 1]);
  }
  acts->experts = GroupRowsByExpert(expert.data(), received, 1, num_experts);
  std::vector<float> combined = Buffer(received * hidden);
  ExpertsForward(backend, p, rows.Columns(0, hidden), rows.Columns(hidden, 1),
                 &acts->experts,
                 MatrixView{combined.data(), received, hidden, hidden});

  std::vector<float> back = Buffer(sent * hidden);
  if (absl::Status s =
          group_->AllToAllV(combined.data(), Times(acts->recv_rows, hidden),
                            back.data(), Times(acts->send_rows, hidden));
      !s.ok()) {
    return s;
  }
  const std::vector<int32_t> tokens = SentTokens(acts->sent_slots, top_k);
  backend.ScatterAddRows(ConstMatrixView(back.data(), sent, hidden, hidden),
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
  const std::vector<int32_t> tokens =
      SentTokens(acts.sent_slots, dweights.cols);

  // The output gradient of every sent row goes where the row went.
  std::vector<float> send = Buffer(sent * hidden);
  backend.EmbeddingForward(dout, tokens.data(),
                           MatrixView{send.data(), sent, hidden, hidden});
  std::vector<float> recv = Buffer(received * hidden);
  if (absl::Status s =
          group_->AllToAllV(send.data(), Times(acts.send_rows, hidden),
                            recv.data(), Times(acts.recv_rows, hidden));
      !s.ok()) {
    return s;
  }

  // Each row back: the input gradient, then the router-weight gradient.
  const int64_t width = hidden + 1;
  std::vector<float> grads = Buffer(received * width);
  const MatrixView grad_rows{grads.data(), received, width, width};
  ExpertsBackward(backend, p, acts.experts,
                  ConstMatrixView(recv.data(), received, hidden, hidden),
                  grad_rows.Columns(0, hidden), grad_rows.Columns(hidden, 1));
  std::vector<float> back = Buffer(sent * width);
  if (absl::Status s =
          group_->AllToAllV(grads.data(), Times(acts.recv_rows, width),
                            back.data(), Times(acts.send_rows, width));
      !s.ok()) {
    return s;
  }
  const ConstMatrixView back_rows(back.data(), sent, width, width);
  backend.ScatterAddRows(back_rows.Columns(0, hidden), tokens.data(), nullptr,
                         dx);
  backend.ScatterAddRows(back_rows.Columns(hidden, 1), acts.sent_slots.data(),
                         nullptr, AsColumn(dweights));
  return absl::OkStatus();
}

void ExpertParallelDispatcher::Forward(Backend& backend, const MoeParameters& p,
                                       ConstMatrixView x, const int32_t* choice,
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
