#include "parallel/pipeline_schedule.h"

#include <deque>
#include <map>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

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

// A link's group must take buffers where the schedule's tensors are.
absl::Status CheckPlace(const PipelineLink& link, bool on_host,
                        const char* what) {
  if (link.group == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("pipeline: no group to ", what, " over"));
  }
  const bool group_on_host = link.group->buffer_place() == BufferPlace::kHost;
  if (group_on_host == on_host) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("pipeline: a ", what, " of ", on_host ? "host" : "device",
                   " tensors over a group that takes ",
                   group_on_host ? "host" : "device", " buffers"));
}

absl::Status Receive(const PipelineLink& link, Tensor& into) {
  if (absl::Status place = CheckPlace(link, into.on_host(), "receive");
      !place.ok()) {
    return place;
  }
  return link.group->Recv(into.data(), into.numel(), link.peer);
}

// Sends posted and not yet waited for, with the buffers they read.
class SendQueue {
 public:
  absl::Status Send(const PipelineLink& link, Tensor values) {
    if (absl::Status place = CheckPlace(link, values.on_host(), "send");
        !place.ok()) {
      return place;
    }
    sends_.push_back({std::move(values), nullptr});
    Entry& entry = sends_.back();
    absl::StatusOr<std::unique_ptr<PendingSend>> pending =
        link.group->StartSend(entry.values.data(), entry.values.numel(),
                              link.peer);
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
    const std::vector<StageModel*>& chunks, const PipelineLinks& links,
    Allocator* buffers, int64_t micro_batches,
    const std::function<Batch(int64_t)>& micro_batch) {
  absl::StatusOr<std::vector<PipelineOp>> order = PipelineOrder(
      links.size, links.rank, static_cast<int>(chunks.size()), micro_batches);
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
          {stage.Rows(batch.input_ids.size()).count(), stage.hidden_size()},
          buffers);
      if (absl::Status s = Receive(links.from_previous, input); !s.ok()) {
        return s;
      }
    }
    StageActivations& acts = in_flight[{chunk, m}];
    absl::StatusOr<StageLosses> losses = stage.Forward(batch, input, &acts);
    if (!losses.ok()) return losses.status();
    Accumulate(*losses, &total);
    if (stage.last()) return absl::OkStatus();
    return sends.Send(links.to_next, StageModel::Output(acts));
  };
  auto run_backward = [&](int chunk, int64_t m) -> absl::Status {
    StageModel& stage = *chunks[chunk];
    auto acts = in_flight.find({chunk, m});
    Tensor d_output;
    if (!stage.last()) {
      d_output = Tensor(StageModel::Output(acts->second).shape(), buffers);
      if (absl::Status s = Receive(links.from_next, d_output); !s.ok()) {
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
    return sends.Send(links.to_previous, std::move(d_input));
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
