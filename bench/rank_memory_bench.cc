// Peak resident memory of one parallel rank's weights: the rank's share
// allocated and initialized (or read from an HF checkpoint) directly, or the
// whole model first and then cut to the share (as ranks did before). One
// measurement per process: ru_maxrss is the process's peak.
//
//   rank_memory_bench [--preset=glm5.2-mini] [--layers=N] [--layout=L]
//       [--pp=1 --pp-rank=0] [--ep=1 --ep-rank=0] [--tp=1 --tp-rank=0]
//       [--hf=DIR] [--whole-first] [--count-only]
//   rank_memory_bench --write-hf=DIR [--preset=...] [--layers=N]
#include <sys/resource.h>

#include <chrono>
#include <iostream>
#include <memory>

#include "base/command_flags.h"
#include "base/file_util.h"
#include "checkpoint/hf_weight_loader.h"
#include "checkpoint/synthetic_hf.h"
#include "model/config.h"
#include "model/parameters.h"
#include "parallel/pipeline_layout.h"
#include "parallel/rank_tensors.h"

namespace glm {
namespace {

double PeakResidentMiB() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;  // Linux reports KiB
}

// Elements of the whole model, or of what `held` names.
int64_t Elements(const ModelConfig& config, const HeldTensors& held) {
  HeldTensors nothing;
  nothing.names.emplace();
  ModelParameters shapes(config, nothing);
  int64_t total = 0;
  for (const NamedTensor& named : shapes.Named()) {
    if (!held.Holds(named.name)) continue;
    total +=
        NumElements(held.PartShape(named.name, shapes.WholeShape(named.name)));
  }
  return total;
}

absl::StatusOr<RankShare> ShareFromFlags(const CommandFlags& flags,
                                         const ModelConfig& config) {
  RankShare share;
  int pp = 1;
  for (const auto& [name, out] : {std::pair<const char*, int*>{"pp", &pp},
                                  {"pp-rank", &share.pp_rank},
                                  {"ep", &share.ep},
                                  {"ep-rank", &share.ep_rank},
                                  {"tp", &share.tp},
                                  {"tp-rank", &share.tp_rank}}) {
    if (absl::Status status = flags.GetInt(name, out); !status.ok()) {
      return status;
    }
  }
  if (pp == 1) return share;
  LayoutRequest request;
  request.layout = flags.Get("layout");
  request.num_layers = config.num_hidden_layers;
  request.mtp_layers = config.num_mtp_layers;
  request.pp = pp;
  request.sharing = config.index_sharing;
  absl::StatusOr<std::vector<StageSlice>> plan = PlanStages(request);
  if (!plan.ok()) return plan.status();
  share.plan = *std::move(plan);
  return share;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

// The rank's weights, by the path the flags ask for; `init_seconds`: the time
// InitRandom took (0 when read from a checkpoint).
absl::StatusOr<std::unique_ptr<ModelParameters>> RankWeights(
    const CommandFlags& flags, const ModelConfig& config,
    const HeldTensors& held, double* init_seconds) {
  const bool whole_first = flags.GetBool("whole-first");
  std::unique_ptr<ModelParameters> params;
  if (flags.Has("hf")) {
    absl::StatusOr<std::unique_ptr<ModelParameters>> loaded =
        LoadHfModel(flags.Get("hf"), whole_first ? HeldTensors() : held);
    if (!loaded.ok()) return loaded.status();
    params = *std::move(loaded);
  } else {
    params = std::make_unique<ModelParameters>(
        config, whole_first ? HeldTensors() : held);
    const auto start = std::chrono::steady_clock::now();
    params->InitRandom(1);
    *init_seconds = SecondsSince(start);
  }
  if (absl::Status status = params->KeepHeld(held); !status.ok()) {
    return status;
  }
  return params;
}

int Main(int argc, char** argv) {
  CommandFlags flags(
      "rank_memory_bench [--preset=NAME] [--layers=N] [--layout=L] "
      "[--pp=N --pp-rank=R] [--ep=N --ep-rank=R] [--tp=N --tp-rank=R] "
      "[--hf=DIR] [--whole-first] [--count-only] | --write-hf=DIR");
  flags.Add("preset", "model preset", "glm5.2-mini");
  flags.Add("layers", "decoder layers (0: the preset's)", "0");
  flags.Add("layout", "pipeline layout", "");
  for (const char* name : {"pp", "ep", "tp"}) flags.Add(name, "size", "1");
  for (const char* name : {"pp-rank", "ep-rank", "tp-rank"}) {
    flags.Add(name, "rank", "0");
  }
  flags.Add("hf", "read the weights from this HF folder");
  flags.Add("write-hf", "write a synthetic HF checkpoint (bf16) and exit");
  flags.AddBool("whole-first", "the whole model first, then cut");
  flags.AddBool("count-only", "print the element counts only");
  absl::Status status =
      flags.Parse(std::vector<std::string>(argv + 1, argv + argc));
  int layers = 0;
  if (status.ok()) status = flags.GetInt("layers", &layers);
  absl::StatusOr<ModelConfig> config = PresetConfig(flags.Get("preset"));
  if (status.ok()) status = config.status();
  if (flags.HelpRequested() || !status.ok()) {
    std::cerr << status.message() << "\n" << flags.Help();
    return kExitUsage;
  }
  if (layers > 0) config->num_hidden_layers = layers;
  if (flags.Has("write-hf")) {
    config->torch_dtype = "bfloat16";
    SyntheticHfOptions options;
    options.max_shard_bytes = 2'000'000'000;
    status = MakeDirectories(flags.Get("write-hf"));
    if (status.ok()) {
      status =
          WriteSyntheticHfCheckpoint(flags.Get("write-hf"), *config, options);
    }
    if (!status.ok()) std::cerr << status.message() << "\n";
    return status.ok() ? kExitOk : kExitFailure;
  }
  absl::StatusOr<RankShare> share = ShareFromFlags(flags, *config);
  if (!share.ok()) {
    std::cerr << share.status().message() << "\n";
    return kExitUsage;
  }
  const HeldTensors held = HeldTensorsOf(*config, *share);
  const int64_t whole = Elements(*config, HeldTensors());
  const int64_t mine = Elements(*config, held);
  std::cout << "elements: whole " << whole << ", held " << mine << " ("
            << 100.0 * mine / whole << "%); values + grads fp32: whole "
            << whole * 8 / 1048576.0 << " MiB, held " << mine * 8 / 1048576.0
            << " MiB\n";
  if (flags.GetBool("count-only")) return kExitOk;
  const auto start = std::chrono::steady_clock::now();
  double init_seconds = 0;
  absl::StatusOr<std::unique_ptr<ModelParameters>> params =
      RankWeights(flags, *config, held, &init_seconds);
  if (!params.ok()) {
    std::cerr << params.status().message() << "\n";
    return kExitFailure;
  }
  std::cout << "peak RSS " << PeakResidentMiB() << " MiB, "
            << SecondsSince(start) << " s (InitRandom " << init_seconds
            << " s)\n";
  return kExitOk;
}

}  // namespace
}  // namespace glm

int main(int argc, char** argv) { return glm::Main(argc, argv); }
