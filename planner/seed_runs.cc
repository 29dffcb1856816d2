#include "planner/seed_runs.h"

#include <utility>

namespace glm {
namespace {

// Pipeline layouts the cards give: the 352-GPU pretrain's and the 416-GPU
// SFT's strings, and the GB200 recipes' decoder split [14, 16, 12, 12, 12,
// 12] (given for the 128k run; its recipe family is assumed for the other
// GB200 runs).
constexpr char kPretrainH100Layout[] =
    "Etttttt|tttttttt|tttttttt|tttttttt|tttttttt|tttttttt|tttttttt|tttttttt|"
    "tttttttt|tttt|ttttmL";
constexpr char kSftH100Layout[] =
    "Etttttt|tttt|tttttttt|tttttttt|tttttttt|tttttttt|tttttttt|tttttttt|tttt|"
    "tttt|tttt|tttt|ttttmL";
constexpr char kGb200Layout[] =
    "Etttttttttttttt|tttttttttttttttt|tttttttttttt|tttttttttttt|tttttttttttt|"
    "ttttttttttttmL";

Split SplitOf(int tp, int pp, int cp, int ep, std::string layout) {
  Split split;
  split.tp = tp;
  split.pp = pp;
  split.cp = cp;
  split.ep = ep;
  split.layout = std::move(layout);
  return split;
}

PlanJob JobOf(TrainingKind kind, int64_t seq, int64_t global_batch,
              Recompute recompute = Recompute::kNone) {
  PlanJob job;
  job.model = *PresetConfig("glm5.2");
  job.kind = kind;
  job.seq_length = seq;
  job.global_batch_size = global_batch;
  job.micro_batch_size = 1;
  job.recompute = recompute;
  job.precision = Precision::kBf16Mixed;
  job.distributed_optimizer = true;
  return job;
}

SeedRun Run(std::string name, const char* cluster, int world, Split split,
            PlanJob job, double step_ms, double tflops, double tokens,
            double peak_mib, std::string assumed) {
  SeedRun run;
  run.name = std::move(name);
  run.cluster = *ClusterPreset(cluster);
  run.world = world;
  run.split = std::move(split);
  run.job = std::move(job);
  run.step_ms = step_ms;
  run.tflops_per_gpu = tflops;
  run.tokens_per_gpu = tokens;
  run.peak_mib = peak_mib;
  run.assumed = std::move(assumed);
  return run;
}

}  // namespace

std::vector<SeedRun> SeedRuns() {
  const TrainingKind pretrain = TrainingKind::kPretrain;
  const TrainingKind sft = TrainingKind::kSft;
  const TrainingKind lora = TrainingKind::kLora;
  return {
      Run("pretrain, 352 H100", "h100", 352,
          SplitOf(1, 11, 1, 32, kPretrainH100Layout),
          JobOf(pretrain, 2048, 1024, Recompute::kNone), 31204.920, 54.595,
          190.926, 80999, "no recomputation"),
      Run("pretrain, 192 GB200", "gb200", 192,
          SplitOf(1, 6, 1, 32, kGb200Layout),
          JobOf(pretrain, 4096, 1024, Recompute::kNone), 64786.540, 102.520,
          337.189, 0, "no recomputation; the GB200 recipes' layout"),
      Run("SFT, 416 H100", "h100", 416, SplitOf(1, 13, 2, 32, kSftH100Layout),
          JobOf(sft, 2048, 32, Recompute::kNone), 4436.290, 10.154, 35.511, 0,
          "no recomputation"),
      Run("SFT, 192 GB200", "gb200", 192, SplitOf(1, 6, 4, 32, kGb200Layout),
          JobOf(sft, 8192, 8, Recompute::kNone), 8593.990, 12.446, 39.718, 0,
          "no recomputation; the GB200 recipes' layout"),
      Run("long context 200k, 608 H100", "h100", 608,
          SplitOf(1, 19, 32, 32, ""), JobOf(sft, 200000, 13, Recompute::kFull),
          36603.370, 39.648, 116.828, 81005,
          "full recomputation; the planner's layout; 13 rows a step (the "
          "card's tokens/s x GPUs x step time)"),
      Run("long context 128k, 192 GB200", "gb200", 192,
          SplitOf(1, 6, 32, 32, kGb200Layout),
          JobOf(sft, 131072, 56, Recompute::kFull), 143248.820, 88.848, 266.874,
          0, ""),
      Run("LoRA, 208 H100", "h100", 208, SplitOf(1, 13, 1, 16, kSftH100Layout),
          JobOf(lora, 2048, 32, Recompute::kNone), 4638.550, 19.423, 67.926, 0,
          "no recomputation; the SFT run's 13-stage layout"),
      Run("LoRA, 192 GB200", "gb200", 192, SplitOf(1, 6, 1, 32, kGb200Layout),
          JobOf(lora, 2048, 32, Recompute::kNone), 68588.270, 1.423, 4.977, 0,
          "no recomputation; the GB200 recipes' layout; seq 2048 (the "
          "card's tokens/s x GPUs x step time / batch)"),
  };
}

}  // namespace glm
