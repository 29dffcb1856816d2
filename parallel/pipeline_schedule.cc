#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <deque>
#include <future>
#include <utility>

namespace glm {
namespace {

// At most one send in flight; the next waits for it.
class Sender {
 public:
  explicit Sender(Collectives& group) : group_(group) {}
  ~Sender() { Wait().IgnoreError(); }

  absl::Status Send(Tensor values, int peer) {
    if (absl::Status status = Wait(); !status.ok()) return status;
    pending_ = std::async(
        std::launch::async, [this, values = std::move(values), peer] {
          return group_.Send(values.data(), values.numel(), peer);
        });
    return absl::OkStatus();
  }

  absl::Status Wait() {
    if (!pending_.valid()) return absl::OkStatus();
    return pending_.get();
  }

 private:
  Collectives& group_;
  std::future<absl::Status> pending_;
};

void Accumulate(const StageLosses& micro, StageLosses* total) {
  total->lm_loss += micro.lm_loss;
  total->mtp_loss += micro.mtp_loss;
  total->indexer_loss += micro.indexer_loss;
  if (total->expert_load.empty()) {
    total->expert_load = micro.expert_load;
    return;
  }
  for (size_t layer = 0; layer < total->expert_load.size(); ++layer) {
    for (size_t e = 0; e < total->expert_load[layer].size(); ++e) {
      total->expert_load[layer][e] += micro.expert_load[layer][e];
    }
  }
}

}  // namespace

absl::StatusOr<StageLosses> RunOneForwardOneBackward(
    StageModel& stage, Collectives& pipeline, int64_t micro_batches,
    const std::function<Batch(int64_t)>& micro_batch) {
  const int rank = pipeline.rank();
  const int64_t warmup =
      std::min<int64_t>(pipeline.size() - rank - 1, micro_batches);
  Sender sender(pipeline);
  std::deque<StageActivations> in_flight;
  StageLosses total;

  auto forward = [&](int64_t m) -> absl::Status {
    const Batch batch = micro_batch(m);
    Tensor input;
    if (!stage.first()) {
      input = Tensor(
          {static_cast<int64_t>(batch.input_ids.size()), stage.hidden_size()});
      if (absl::Status s = pipeline.Recv(input.data(), input.numel(), rank - 1);
          !s.ok()) {
        return s;
      }
    }
    in_flight.emplace_back();
    absl::StatusOr<StageLosses> losses =
        stage.Forward(batch, input, &in_flight.back());
    if (!losses.ok()) return losses.status();
    Accumulate(*losses, &total);
    if (stage.last()) return absl::OkStatus();
    return sender.Send(StageModel::Output(in_flight.back()), rank + 1);
  };
  auto backward = [&]() -> absl::Status {
    const StageActivations& acts = in_flight.front();
    Tensor d_output;
    if (!stage.last()) {
      d_output = Tensor(StageModel::Output(acts).shape());
      if (absl::Status s =
              pipeline.Recv(d_output.data(), d_output.numel(), rank + 1);
          !s.ok()) {
        return s;
      }
    }
    Tensor d_input;
    if (absl::Status s = stage.Backward(acts, d_output, &d_input); !s.ok()) {
      return s;
    }
    in_flight.pop_front();
    if (stage.first()) return absl::OkStatus();
    return sender.Send(std::move(d_input), rank - 1);
  };

  for (int64_t m = 0; m < warmup; ++m) {
    if (absl::Status s = forward(m); !s.ok()) return s;
  }
  for (int64_t m = warmup; m < micro_batches; ++m) {
    if (absl::Status s = forward(m); !s.ok()) return s;
    if (absl::Status s = backward(); !s.ok()) return s;
  }
  while (!in_flight.empty()) {
    if (absl::Status s = backward(); !s.ok()) return s;
  }
  if (absl::Status s = sender.Wait(); !s.ok()) return s;
  return total;
}

}  // namespace glm
