#include "cli/plan_report.h"

#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/text_table.h"
#include "kernels/attention_pairs.h"

namespace glm {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;

std::string Bytes(int64_t bytes) {
  if (bytes >= 10 * kGiB) return absl::StrFormat("%.1f GiB", bytes / kGiB);
  return absl::StrFormat("%.0f MiB", bytes / kMiB);
}

std::string Seconds(double seconds) {
  if (seconds >= 1) return absl::StrFormat("%.2f s", seconds);
  return absl::StrFormat("%.1f ms", seconds * 1e3);
}

std::string StagesOf(const SplitPlan& plan, int pp_rank) {
  std::string text;
  for (const StageSlice& stage : plan.StagesOf(pp_rank)) {
    if (!text.empty()) text += " ";
    if (stage.has_embedding) text += "E";
    if (stage.num_layers() > 0) {
      absl::StrAppend(&text, stage.first_layer, "-", stage.last_layer);
    }
    if (stage.mtp_layers > 0) text += "m";
    if (stage.has_loss) text += "L";
  }
  return text;
}

// The same-named terms of the stage's layers added up, in first-seen order.
std::vector<std::pair<std::string, int64_t>> Summed(
    const std::vector<MemoryTerm>& terms) {
  std::vector<std::pair<std::string, int64_t>> summed;
  std::map<std::string, size_t> index;
  for (const MemoryTerm& term : terms) {
    auto [at, fresh] = index.emplace(term.name, summed.size());
    if (fresh) summed.emplace_back(term.name, 0);
    summed[at->second].second += term.bytes;
  }
  return summed;
}

std::string MemoryTable(const Evaluation& e, const DeviceSpec& device) {
  TextTable table({"pp", "stages", "weights", "bf16 copies", "grads", "master",
                   "moments", "lora", "activations", "in flight", "transient",
                   "sends", "exchange+kept", "scratch", "runtime", "slack",
                   "peak", "fits"});
  for (const RankMemory& m : e.memory) {
    table.AddRow({absl::StrCat(m.pp_rank), StagesOf(e.plan, m.pp_rank),
                  Bytes(m.state.weights), Bytes(m.state.copies),
                  Bytes(m.state.gradients), Bytes(m.state.master),
                  Bytes(m.state.moments), Bytes(m.state.adapters),
                  Bytes(m.schedule.activations),
                  absl::StrCat(m.schedule.in_flight),
                  Bytes(m.schedule.transient), Bytes(m.schedule.sent),
                  Bytes(m.exchange + m.retained), Bytes(m.scratch),
                  Bytes(m.runtime), Bytes(m.slack), Bytes(m.Peak()),
                  m.Peak() <= device.memory_bytes ? "yes" : "NO"});
  }
  return table.ToString();
}

// A GPU rank's host vectors are named as such: its peak leaves them out.
std::string ActivationTerms(const RankMemory& busiest) {
  const StageActivationBytes& stage = busiest.first_stage;
  TextTable table({"term (one micro batch, first stage)", "bytes"});
  auto add = [&](const char* part, const std::vector<MemoryTerm>& terms) {
    std::vector<MemoryTerm> device, host;
    for (const MemoryTerm& term : terms) {
      (term.host && stage.device == RankDevice::kGpu ? host : device)
          .push_back(term);
    }
    for (const auto& [name, bytes] : Summed(device)) {
      table.AddRow({part + name, Bytes(bytes)});
    }
    for (const auto& [name, bytes] : Summed(host)) {
      table.AddRow({absl::StrCat("host, not on the device: ", part, name),
                    Bytes(bytes)});
    }
  };
  add("", stage.saved);
  add("transient: ", stage.transient);
  add("", stage.scratch);
  return table.ToString();
}

std::string TimeTable(const StepTime& t) {
  const MicroBatchTime& mb = t.slowest;
  const double m = t.micro_batches;
  TextTable table({"term", "per micro batch", "per step"});
  const std::pair<const char*, double> terms[] = {
      {"dense GEMMs", mb.gemm},
      {"routed experts", mb.experts},
      {"attention core", mb.attention},
      {"DSA indexer scores and top-k", mb.indexer},
      {"DSA indexer loss", mb.indexer_loss},
      {"recomputation", mb.recompute},
      {"memory-bound passes and weight traffic", mb.memory},
      {"tensor-parallel collectives", mb.tensor_parallel},
      {"context-parallel key gathers", mb.context_parallel},
      {"expert all-to-alls", mb.expert_parallel},
      {"pipeline sends", mb.pipeline_send},
  };
  for (const auto& [name, seconds] : terms) {
    table.AddRow({name, Seconds(seconds), Seconds(seconds * m)});
  }
  table.AddRow({"pipeline bubble", "", Seconds(t.bubble)});
  table.AddRow(
      {"data-parallel exchange (exposed)", "", Seconds(t.data_parallel)});
  table.AddRow({"optimizer", "", Seconds(t.optimizer)});
  table.AddRow({"step", Seconds(mb.Total()), Seconds(t.Total())});
  return table.ToString();
}

std::string Throughput(const Evaluation& e) {
  const double tokens = static_cast<double>(e.job.global_batch_size) *
                        e.job.seq_length / e.time.Total() / e.plan.world;
  return absl::StrFormat(
      "model FLOPs %.3g per step (training/flops.h): %.1f TFLOP/s and %.1f "
      "tokens/s per device\n",
      e.time.model_flops, e.time.TflopsPerDevice(e.plan.world), tokens);
}

// A line when the attention's pairs a call were fitted below the default.
std::string FittedPairsLine(const PlanJob& job) {
  if (!job.fit_attention_pairs ||
      job.attention_pairs_per_call == kDefaultAttentionPairsPerCall) {
    return "";
  }
  return absl::StrCat("attention: ", job.attention_pairs_per_call,
                      " query-key pairs a cuDNN call, the largest halving of ",
                      kDefaultAttentionPairsPerCall,
                      " that fits (as a worker picks it without "
                      "GLM_ATTENTION_PAIRS_PER_CALL)\n");
}

}  // namespace

std::string PlanHeader(const PlanJob& job, int world,
                       const ClusterSpec& cluster) {
  const ParameterCount count = CountParameters(job.model);
  return absl::StrFormat(
      "model: %d layers, hidden %d, %d experts (%.3gB parameters, %.3gB "
      "active); %s, seq %d, global batch %d, micro batch %d, precision %s\n"
      "cluster: %d x %s (%s, %.0f TFLOP/s, %.2f TB/s), %d per node, fast "
      "domain %d at %.0f GB/s, network %.0f GB/s\n",
      job.model.num_hidden_layers, job.model.hidden_size,
      job.model.n_routed_experts, count.total / 1e9, count.active / 1e9,
      TrainingKindName(job.kind), job.seq_length, job.global_batch_size,
      job.micro_batch_size, PrecisionName(job.precision), world,
      cluster.device.name, Bytes(cluster.device.memory_bytes),
      cluster.device.matmul_flops / 1e12,
      cluster.device.memory_bandwidth / 1e12, cluster.devices_per_node,
      cluster.fast_domain, cluster.fast_link_bandwidth / 1e9,
      cluster.network_bandwidth / 1e9);
}

std::string ExplainText(const Evaluation& e, const ClusterSpec& cluster) {
  const RankMemory& busiest = e.Busiest();
  return absl::StrCat("split ", SplitName(e.plan), ", recomputation ",
                      RecomputeName(e.job.recompute), ", layout ",
                      e.plan.layout.empty() ? "(one stage)" : e.plan.layout,
                      "\n", FittedPairsLine(e.job), "\n",
                      "memory of each pp rank's busiest rank (device: ",
                      Bytes(cluster.device.memory_bytes), "):\n",
                      MemoryTable(e, cluster.device), "\n",
                      "activations of pp rank ", busiest.pp_rank, ":\n",
                      ActivationTerms(busiest), "\n",
                      "step time (slowest pp rank ", e.time.slowest_pp_rank,
                      ", ", e.time.micro_batches, " micro batches):\n",
                      TimeTable(e.time), "\n", Throughput(e));
}

std::string SearchText(const SearchResult& result, const ClusterSpec& cluster) {
  TextTable table({"#", "split", "recompute", "peak", "step", "compute", "comm",
                   "bubble", "dp+opt", "TFLOP/s", "layout"});
  int place = 0;
  for (const Evaluation& e : result.best) {
    const MicroBatchTime& mb = e.time.slowest;
    const double m = e.time.micro_batches;
    const double compute = mb.Compute() * m;
    const double comm = (mb.tensor_parallel + mb.context_parallel +
                         mb.expert_parallel + mb.pipeline_send) *
                        m;
    table.AddRow({absl::StrCat(++place), SplitName(e.plan),
                  RecomputeName(e.job.recompute), Bytes(e.PeakBytes()),
                  Seconds(e.time.Total()), Seconds(compute), Seconds(comm),
                  Seconds(e.time.bubble),
                  Seconds(e.time.data_parallel + e.time.optimizer),
                  absl::StrFormat("%.1f", e.time.TflopsPerDevice(e.plan.world)),
                  e.plan.layout.empty() ? "-" : e.plan.layout});
  }
  return absl::StrCat(result.candidates, " splits tried, ",
                      result.fitting_seconds.size(), " fit ",
                      Bytes(cluster.device.memory_bytes), "; the fastest:\n",
                      table.ToString());
}

}  // namespace glm
