#include "parallel/pipeline_schedule.h"

#include <deque>
#include <map>
#include <memory>
#include <utility>

namespace glm {
namespace {

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

// Sends posted and not yet waited for, with the buffers they read.
class SendQueue {
 public:
  absl::Status Send(Collectives& group, Tensor values, int peer) {
    // Collectives read host memory: a device tensor travels through a copy.
    if (!values.on_host()) values = values.CopyTo(nullptr);
    sends_.push_back({std::move(values), nullptr});
    Entry& entry = sends_.back();
    absl::StatusOr<std::unique_ptr<PendingSend>> pending =
        group.StartSend(entry.values.data(), entry.values.numel(), peer);
    if (!pending.ok()) return pending.status();
    entry.pending = *std::move(pending);
    return absl::OkStatus();
  }

  absl::Status WaitAll() {
    absl::Status first;
    for (Entry& entry : sends_) {
      if (entry.pending != nullptr) first.Update(entry.pending->Wait());
    }
    sends_.clear();
    return first;
  }

 private:
  struct Entry {
    Tensor values;
    std::unique_ptr<PendingSend> pending;
  };
  std::deque<Entry> sends_;
};

}  // namespace

absl::StatusOr<StageLosses> RunPipelineSchedule(
    const std::vector<StageModel*>& chunks, Collectives& forward,
    Collectives& backward, int64_t micro_batches,
    const std::function<Batch(int64_t)>& micro_batch) {
  const int pp = forward.size(), rank = forward.rank();
  const int previous = (rank + pp - 1) % pp, next = (rank + 1) % pp;
  absl::StatusOr<std::vector<PipelineOp>> order =
      PipelineOrder(pp, rank, static_cast<int>(chunks.size()), micro_batches);
  if (!order.ok()) return order.status();
  SendQueue sends;
  std::map<std::pair<int, int64_t>, StageActivations> in_flight;
  StageLosses total;

  auto run_forward = [&](int chunk, int64_t m) -> absl::Status {
    StageModel& stage = *chunks[chunk];
    const Batch batch = micro_batch(m);
    Tensor input;
    if (!stage.first()) {
      // This rank's rows of the micro batch (all of them without tensor or
      // context parallelism).
      input = Tensor(
          {stage.Rows(batch.input_ids.size()).count(), stage.hidden_size()});
      if (absl::Status s = forward.Recv(input.data(), input.numel(), previous);
          !s.ok()) {
        return s;
      }
    }
    StageActivations& acts = in_flight[{chunk, m}];
    absl::StatusOr<StageLosses> losses = stage.Forward(batch, input, &acts);
    if (!losses.ok()) return losses.status();
    Accumulate(*losses, &total);
    if (stage.last()) return absl::OkStatus();
    return sends.Send(forward, StageModel::Output(acts), next);
  };
  auto run_backward = [&](int chunk, int64_t m) -> absl::Status {
    StageModel& stage = *chunks[chunk];
    auto acts = in_flight.find({chunk, m});
    Tensor d_output;
    if (!stage.last()) {
      d_output = Tensor(StageModel::Output(acts->second).shape());
      if (absl::Status s =
              backward.Recv(d_output.data(), d_output.numel(), next);
          !s.ok()) {
        return s;
      }
    }
    Tensor d_input;
    if (absl::Status s = stage.Backward(acts->second, d_output, &d_input);
        !s.ok()) {
      return s;
    }
    in_flight.erase(acts);
    if (stage.first()) return absl::OkStatus();
    return sends.Send(backward, std::move(d_input), previous);
  };

  for (const PipelineOp& op : *order) {
    absl::Status status = op.forward ? run_forward(op.chunk, op.micro_batch)
                                     : run_backward(op.chunk, op.micro_batch);
    if (!status.ok()) {
      sends.WaitAll().IgnoreError();
      return status;
    }
  }
  if (absl::Status s = sends.WaitAll(); !s.ok()) return s;
  return total;
}

}  // namespace glm
