#include "cli/plan_command.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/command_flags.h"
#include "cli/plan_report.h"
#include "kernels/attention_pairs.h"
#include "model/mla_attention.h"
#include "model/moe.h"
#include "planner/evaluation.h"
#include "planner/search.h"

namespace glm {
namespace {

constexpr char kUsage[] =
    "glmctl plan (--preset=NAME | --config=FILE) --cluster=PRESET "
    "--world=N [flags] [--explain --tp=N --pp=N ...]";

CommandFlags DeclareFlags() {
  CommandFlags flags(kUsage);
  // The model and how it trains.
  flags.Add("preset",
            "a built-in model: glm5.2, glm5.2-mini, glm5.2-tiny, ...");
  flags.Add("config", "an HF config.json");
  flags.Add("mtp-layers", "MTP layers (default: the model's)");
  flags.Add("mode", "pretrain, sft or lora", "pretrain");
  flags.Add("lora-rank", "LoRA rank", "8");
  flags.Add("lora-targets", "LoRA target modules, comma separated",
            "q_a_proj,q_b_proj,kv_a_proj_with_mqa,kv_b_proj,o_proj");
  flags.Add("seq-length", "tokens per sequence", "4096");
  flags.Add("global-batch", "sequences per step", "1024");
  flags.Add("micro-batch", "sequences per micro batch", "1");
  flags.Add("recompute",
            "none, selective, full, or search (try all that the precision "
            "allows)",
            "search");
  flags.Add("precision",
            "bf16 (Megatron-Core mixed precision), fp32 (this trainer: CPU "
            "ranks, or a job's precision fp32 on cuda) or fp32-bf16-copies "
            "(this trainer's CUDA bf16 mode: the fp32 store plus bf16 copies "
            "of the product weights); default bf16, fp32 on --cluster=cpu");
  flags.Add("distributed-optimizer", "ZeRO-1 over data-parallel ranks", "true");
  flags.AddBool("overlap-grad-reduce",
                "this trainer's overlapGradReduce: data parallelism's "
                "all-reduce during the last backward");
  flags.Add("routing-imbalance",
            "tokens the busiest expert rank receives over the mean", "1.0");
  flags.Add("logits-chunk",
            "tokens whose logits exist at once (0: the whole micro batch)",
            "0");
  flags.Add("latent-attention-from",
            "this trainer's first query of a micro batch in MLA's latent "
            "form (a worker's GLM_LATENT_ATTENTION_FROM; 0: never)",
            absl::StrCat(kDefaultLatentAttentionFrom));
  flags.Add(
      "attention-pairs-per-call",
      absl::StrCat("query-key pairs a GPU rank's cuDNN attention call takes at "
                   "most (a worker's GLM_ATTENTION_PAIRS_PER_CALL): its "
                   "backward's scratch (default: as a worker without the "
                   "variable, ",
                   kDefaultAttentionPairsPerCall,
                   " or, for one model per GPU rank, the largest halving of it "
                   "that fits the device)"));
  flags.Add("expert-chunk-tokens",
            "this trainer's routed experts run a longer micro batch a chunk "
            "of this many tokens at a time, each chunk's rows formed again "
            "in a recomputed layer's backward (0: never)",
            absl::StrCat(kDefaultExpertChunkTokens));
  // The cluster.
  flags.Add("cluster", "h100, h200, gb200 or cpu", "h100");
  flags.Add("world", "devices (ranks)");
  flags.Add("devices-per-node", "override the preset");
  flags.Add("fast-domain", "devices on one fast link (NVLink); override");
  flags.Add("memory-gib", "device memory, GiB; override");
  flags.Add("runtime-gib", "memory the runtime takes first, GiB; override");
  flags.Add("tflops", "dense matrix peak, TFLOP/s; override");
  flags.Add("memory-bandwidth-gbs", "device memory bandwidth, GB/s; override");
  flags.Add("fast-link-gbs", "fast link bandwidth each way, GB/s; override");
  flags.Add("network-gbs", "network bandwidth each way, GB/s; override");
  // The search, or one split.
  flags.Add("top", "splits to print", "5");
  flags.Add("max-vpp", "virtual pipeline stages per pp rank tried", "4");
  flags.Add("max-etp", "expert tensor-parallel size tried", "8");
  flags.AddBool("explain", "explain one split (the flags below) term by term");
  for (const char* size : {"tp", "pp", "vpp", "cp", "ep", "etp"}) {
    flags.Add(size, absl::StrCat(size, " of the split to explain"), "1");
  }
  flags.Add("layout",
            "pipeline layout of the split to explain (default: "
            "the layout planner's)");
  return flags;
}

absl::Status ModelOf(const CommandFlags& flags, PlanJob* job) {
  if (flags.Has("preset") == flags.Has("config")) {
    return absl::InvalidArgumentError("--preset / --config: give exactly one");
  }
  absl::StatusOr<ModelConfig> model =
      flags.Has("preset") ? PresetConfig(flags.Get("preset"))
                          : ReadHfConfigFile(flags.Get("config"));
  if (!model.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flags.Has("preset") ? "--preset: " : "--config: ",
                     model.status().message()));
  }
  job->model = *model;
  if (flags.Has("mtp-layers")) {
    return flags.GetInt("mtp-layers", &job->model.num_mtp_layers);
  }
  return absl::OkStatus();
}

absl::Status TrainingOf(const CommandFlags& flags, PlanJob* job) {
  absl::StatusOr<TrainingKind> kind = ParseTrainingKind(flags.Get("mode"));
  if (!kind.ok()) return kind.status();
  job->kind = *kind;
  job->lora.target_modules =
      absl::StrSplit(flags.Get("lora-targets"), ',', absl::SkipEmpty());
  for (absl::Status status :
       {flags.GetInt("lora-rank", &job->lora.rank),
        flags.GetInt("seq-length", &job->seq_length),
        flags.GetInt("global-batch", &job->global_batch_size),
        flags.GetInt("micro-batch", &job->micro_batch_size),
        flags.GetDouble("routing-imbalance", &job->routing_imbalance),
        flags.GetInt("logits-chunk", &job->logits_chunk_tokens),
        flags.GetInt("latent-attention-from", &job->latent_attention_from),
        flags.GetInt("expert-chunk-tokens", &job->expert_chunk_tokens)}) {
    if (!status.ok()) return status;
  }
  job->fit_attention_pairs = !flags.Has("attention-pairs-per-call");
  if (!job->fit_attention_pairs) {
    if (absl::Status status = flags.GetInt("attention-pairs-per-call",
                                           &job->attention_pairs_per_call);
        !status.ok()) {
      return status;
    }
  }
  job->distributed_optimizer = flags.GetBool("distributed-optimizer");
  job->overlap_grad_reduce = flags.GetBool("overlap-grad-reduce");
  const std::string precision =
      flags.Has("precision")
          ? flags.Get("precision")
          : (flags.Get("cluster") == "cpu" ? "fp32" : "bf16");
  absl::StatusOr<Precision> parsed = ParsePrecision(precision);
  if (!parsed.ok()) return parsed.status();
  // As a job spec: bf16 computes on "cuda" only (jobspec/).
  if (*parsed == Precision::kFp32Bf16Copies && flags.Get("cluster") == "cpu") {
    return absl::InvalidArgumentError(
        "--precision: fp32-bf16-copies is this trainer's CUDA bf16 mode; CPU "
        "ranks keep no copies (--precision=fp32)");
  }
  job->precision = *parsed;
  job->device =
      flags.Get("cluster") == "cpu" ? RankDevice::kCpu : RankDevice::kGpu;
  return absl::OkStatus();
}

// A flag in `unit`s overriding a field, if given.
absl::Status Override(const CommandFlags& flags, const std::string& name,
                      double unit, double* field) {
  if (!flags.Has(name)) return absl::OkStatus();
  double value = 0;
  if (absl::Status status = flags.GetDouble(name, &value); !status.ok()) {
    return status;
  }
  *field = value * unit;
  return absl::OkStatus();
}

absl::StatusOr<ClusterSpec> ClusterOf(const CommandFlags& flags) {
  absl::StatusOr<ClusterSpec> cluster = ClusterPreset(flags.Get("cluster"));
  if (!cluster.ok()) return cluster.status();
  double memory = static_cast<double>(cluster->device.memory_bytes);
  double runtime = static_cast<double>(cluster->device.runtime_bytes);
  const double gib = 1024.0 * 1024.0 * 1024.0;
  for (absl::Status status :
       {Override(flags, "memory-gib", gib, &memory),
        Override(flags, "runtime-gib", gib, &runtime),
        Override(flags, "tflops", 1e12, &cluster->device.matmul_flops),
        Override(flags, "memory-bandwidth-gbs", 1e9,
                 &cluster->device.memory_bandwidth),
        Override(flags, "fast-link-gbs", 1e9, &cluster->fast_link_bandwidth),
        Override(flags, "network-gbs", 1e9, &cluster->network_bandwidth)}) {
    if (!status.ok()) return status;
  }
  cluster->device.memory_bytes = static_cast<int64_t>(memory);
  cluster->device.runtime_bytes = static_cast<int64_t>(runtime);
  for (const auto& [name, field] :
       {std::pair<const char*, int*>{"devices-per-node",
                                     &cluster->devices_per_node},
        {"fast-domain", &cluster->fast_domain}}) {
    if (!flags.Has(name)) continue;
    if (absl::Status status = flags.GetInt(name, field); !status.ok()) {
      return status;
    }
  }
  if (absl::Status status = ValidateCluster(*cluster); !status.ok()) {
    return status;
  }
  return cluster;
}

absl::StatusOr<Split> SplitOf(const CommandFlags& flags) {
  Split split;
  for (const auto& [name, field] :
       {std::pair<const char*, int*>{"tp", &split.tp},
        {"pp", &split.pp},
        {"vpp", &split.vpp},
        {"cp", &split.cp},
        {"ep", &split.ep},
        {"etp", &split.etp}}) {
    if (absl::Status status = flags.GetInt(name, field); !status.ok()) {
      return status;
    }
  }
  split.layout = flags.Get("layout");
  return split;
}

absl::StatusOr<std::string> Explain(const CommandFlags& flags,
                                    const PlanJob& job, int world,
                                    const ClusterSpec& cluster) {
  absl::StatusOr<Split> split = SplitOf(flags);
  if (!split.ok()) return split.status();
  absl::StatusOr<SplitPlan> plan = PlanSplit(job, world, *split);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<Evaluation> evaluation =
      Evaluate(job, *plan, cluster, KernelRates());
  if (!evaluation.ok()) return evaluation.status();
  return ExplainText(*evaluation, cluster);
}

absl::StatusOr<std::string> Search(const CommandFlags& flags,
                                   const PlanJob& job, int world,
                                   const ClusterSpec& cluster) {
  SearchOptions options;
  for (const auto& [name, field] :
       {std::pair<const char*, int*>{"top", &options.keep},
        {"max-vpp", &options.max_vpp},
        {"max-etp", &options.max_etp}}) {
    if (absl::Status status = flags.GetInt(name, field); !status.ok()) {
      return status;
    }
  }
  if (flags.Get("recompute") != "search") options.recompute = {job.recompute};
  absl::StatusOr<SearchResult> result =
      SearchSplits(job, world, cluster, KernelRates(), options);
  if (!result.ok()) return result.status();
  if (result->best.empty()) {
    return absl::StrCat("no split of ", world, " ", cluster.device.name,
                        " fits this job (", result->candidates,
                        " tried): more devices, recomputation, or a shorter "
                        "sequence\n");
  }
  return absl::StrCat(SearchText(*result, cluster),
                      "\nthe fastest, term by term:\n",
                      ExplainText(result->best.front(), cluster));
}

}  // namespace

absl::StatusOr<std::string> PlanText(const std::vector<std::string>& args) {
  CommandFlags flags = DeclareFlags();
  if (absl::Status status = flags.Parse(args); !status.ok()) return status;
  if (flags.HelpRequested()) return flags.Help();
  PlanJob job;
  if (absl::Status status = ModelOf(flags, &job); !status.ok()) return status;
  if (absl::Status status = TrainingOf(flags, &job); !status.ok()) {
    return status;
  }
  if (flags.Get("recompute") != "search") {
    absl::StatusOr<Recompute> recompute =
        ParseRecompute(flags.Get("recompute"));
    if (!recompute.ok()) return recompute.status();
    job.recompute = *recompute;
  }
  if (absl::Status status = ValidatePlanJob(job); !status.ok()) return status;
  absl::StatusOr<ClusterSpec> cluster = ClusterOf(flags);
  if (!cluster.ok()) return cluster.status();
  if (absl::Status status = flags.Require("world"); !status.ok()) return status;
  int world = 0;
  if (absl::Status status = flags.GetInt("world", &world); !status.ok()) {
    return status;
  }
  if (world <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--world: must be positive, got ", world));
  }
  absl::StatusOr<std::string> body = flags.GetBool("explain")
                                         ? Explain(flags, job, world, *cluster)
                                         : Search(flags, job, world, *cluster);
  if (!body.ok()) return body.status();
  return absl::StrCat(PlanHeader(job, world, *cluster), "\n", *body);
}

std::vector<Command> PlanCommands() {
  return {{"plan",
           "predict a job's memory and step time on a cluster; recommend a "
           "split",
           [](const std::vector<std::string>& args) {
             absl::StatusOr<std::string> text = PlanText(args);
             if (!text.ok()) {
               std::cerr << "glmctl plan: " << text.status().message() << "\n"
                         << DeclareFlags().Help();
               return kExitUsage;
             }
             std::cout << *text;
             return kExitOk;
           }}};
}

}  // namespace glm
