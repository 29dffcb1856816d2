#include "jobspec/job_spec_validator.h"

#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/quote.h"
#include "jobspec/field_error.h"
#include "jobspec/spec_bounds.h"
#include "model/parameters.h"
#include "parallel/pipeline_order.h"
#include "parallel/stage_parameters.h"
#include "parallel/tensor_parallel_shard.h"
#include "training/lora_targets.h"

namespace glm {
namespace {

absl::StatusOr<ModelConfig> ModelOf(const v1::ModelSpec& model) {
  absl::StatusOr<ModelConfig> config;
  std::string field;
  switch (model.source_case()) {
    case v1::ModelSpec::kPreset:
      field = "model.preset";
      config = PresetConfig(model.preset());
      break;
    case v1::ModelSpec::kHfConfigJson:
      field = "model.hf_config_json";
      config = ParseHfConfigJson(model.hf_config_json());
      break;
    default:
      return FieldError("model", "set preset or hf_config_json");
  }
  if (!config.ok()) return Prefixed(field, config.status());
  if (absl::Status valid = ValidateModelConfig(*config); !valid.ok()) {
    return Prefixed(field, valid);
  }
  return config;
}

absl::Status CheckParallelSizes(const v1::ParallelSpec& p) {
  const std::pair<const char*, int> sizes[] = {
      {"tp", p.tp()},
      {"pp", p.pp()},
      {"vpp", p.vpp()},
      {"cp", p.cp()},
      {"ep", p.ep()},
      {"etp", p.etp()},
      {"num_layers_in_first_stage", p.num_layers_in_first_stage()},
      {"num_layers_in_last_stage", p.num_layers_in_last_stage()},
      {"collective_timeout_seconds", p.collective_timeout_seconds()}};
  for (const auto& [name, value] : sizes) {
    if (value < 0) {
      return FieldError(absl::StrCat("parallel.", name),
                        absl::StrCat("must not be negative, got ", value));
    }
  }
  if (p.etp() > 1) {
    return FieldError(
        "parallel.etp",
        absl::StrCat(p.etp(),
                     " is not supported yet; routed experts are split by ep "
                     "only (etp 1)"));
  }
  if (p.world_size() <= 0) {
    return FieldError("parallel.world_size",
                      absl::StrCat("must be positive, got ", p.world_size()));
  }
  // In 64 bits: three sizes of up to 2^20 each.
  const int64_t model_parallel = int64_t{ParallelSize(p.tp())} *
                                 ParallelSize(p.pp()) * ParallelSize(p.cp());
  if (p.world_size() % model_parallel != 0) {
    return FieldError("parallel.world_size",
                      absl::StrCat(p.world_size(),
                                   " is not tp*pp*cp*dp: not divisible by "
                                   "tp*pp*cp = ",
                                   model_parallel));
  }
  return absl::OkStatus();
}

absl::StatusOr<RankGrid> GridOf(const v1::ParallelSpec& p,
                                const ModelConfig& model) {
  const int ep = ParallelSize(p.ep());
  if (model.n_routed_experts > 0 && model.n_routed_experts % ep != 0) {
    return FieldError(
        "parallel.ep",
        absl::StrCat(ep, " does not divide model n_routed_experts ",
                     model.n_routed_experts));
  }
  if (absl::Status status =
          CheckTensorParallelSize(model, ParallelSize(p.tp()));
      !status.ok()) {
    return status;
  }
  GridSpec grid;
  grid.world = p.world_size();
  grid.tp = ParallelSize(p.tp());
  grid.pp = ParallelSize(p.pp());
  grid.cp = ParallelSize(p.cp());
  grid.ep = ep;
  grid.etp = ParallelSize(p.etp());
  grid.num_experts = model.n_routed_experts;
  absl::StatusOr<RankGrid> built = BuildRankGrid(grid);
  if (!built.ok()) return Prefixed("parallel", built.status());
  return built;
}

absl::StatusOr<std::vector<StageSlice>> StagesOf(const v1::ParallelSpec& p,
                                                 const ModelConfig& model) {
  LayoutRequest request;
  request.layout = p.layout();
  request.num_layers = model.num_hidden_layers;
  request.mtp_layers = model.num_mtp_layers;
  request.pp = ParallelSize(p.pp());
  request.vpp = ParallelSize(p.vpp());
  request.sharing = model.index_sharing;
  request.num_layers_in_first_stage = p.num_layers_in_first_stage();
  request.num_layers_in_last_stage = p.num_layers_in_last_stage();
  absl::StatusOr<std::vector<StageSlice>> stages = PlanStages(request);
  if (stages.ok()) return stages;
  std::string field = "parallel.layout";
  if (p.layout().empty()) {
    field = p.num_layers_in_first_stage() || p.num_layers_in_last_stage()
                ? "parallel.num_layers_in_first_stage/last_stage"
                : "parallel.pp";
  }
  return Prefixed(field, stages.status());
}

absl::Status CheckTraining(const v1::TrainingSpec& t, int dp,
                           const ModelConfig& model) {
  if (t.mode() == v1::TRAINING_MODE_UNSPECIFIED) {
    return FieldError("training.mode", "must be set: PRETRAIN, SFT or LORA");
  }
  if (t.mode() == v1::LORA && t.lora().rank() <= 0) {
    return FieldError("training.lora.rank",
                      "must be positive when training.mode is LORA");
  }
  const std::pair<const char*, int64_t> positive[] = {
      {"train_iters", t.train_iters()},
      {"micro_batch_size", t.micro_batch_size()},
      {"global_batch_size", t.global_batch_size()},
      {"seq_length", t.seq_length()}};
  for (const auto& [name, value] : positive) {
    if (value <= 0) {
      return FieldError(absl::StrCat("training.", name),
                        absl::StrCat("must be positive, got ", value));
    }
  }
  const std::pair<const char*, int64_t> not_negative[] = {
      {"warmup_iters", t.warmup_iters()},
      {"lr_decay_iters", t.lr_decay_iters()},
      {"save_interval", t.save_interval()},
      {"max_restarts", t.max_restarts()}};
  for (const auto& [name, value] : not_negative) {
    if (value < 0) {
      return FieldError(absl::StrCat("training.", name),
                        absl::StrCat("must not be negative, got ", value));
    }
  }
  if (t.seq_length() < 2) {
    return FieldError("training.seq_length",
                      absl::StrCat("must be at least 2 (each token predicts "
                                   "the next), got ",
                                   t.seq_length()));
  }
  if (t.seq_length() > model.max_position_embeddings) {
    return FieldError("training.seq_length",
                      absl::StrCat(t.seq_length(),
                                   " exceeds the model's "
                                   "max_position_embeddings ",
                                   model.max_position_embeddings));
  }
  if (!(t.lr() > 0)) {
    return FieldError("training.lr",
                      absl::StrCat("must be positive, got ", t.lr()));
  }
  if (t.min_lr() < 0) {
    return FieldError("training.min_lr",
                      absl::StrCat("must not be negative, got ", t.min_lr()));
  }
  if (t.lr() < t.min_lr()) {
    return FieldError("training.lr",
                      absl::StrCat(t.lr(), " is below training.min_lr ",
                                   t.min_lr(), " (need lr >= min_lr >= 0)"));
  }
  // Megatron's schedule decays until lr_decay_iters (0: train_iters), after
  // the warm-up.
  if (t.lr_decay_iters() > 0 && t.lr_decay_iters() < t.warmup_iters()) {
    return FieldError(
        "training.lr_decay_iters",
        absl::StrCat(t.lr_decay_iters(), " is below training.warmup_iters ",
                     t.warmup_iters()));
  }
  if (t.lr_decay_iters() == 0 && t.train_iters() < t.warmup_iters()) {
    return FieldError(
        "training.warmup_iters",
        absl::StrCat(t.warmup_iters(), " exceeds training.train_iters ",
                     t.train_iters(),
                     ", where the decay ends when lr_decay_iters is 0"));
  }
  // At most 2^24 * 2^20: no overflow.
  const int64_t per_step = t.micro_batch_size() * dp;
  if (t.global_batch_size() % per_step != 0) {
    return FieldError(
        "training.global_batch_size",
        absl::StrCat(t.global_batch_size(),
                     " is not divisible by micro_batch_size * dp = ",
                     t.micro_batch_size(), " * ", dp, " = ", per_step));
  }
  return absl::OkStatus();
}

// The interleaved schedule runs the micro batches in groups of pp.
absl::Status CheckPipelineSchedule(const v1::JobSpec& spec,
                                   const JobPlan& plan) {
  const v1::TrainingSpec& t = spec.training();
  const int pp = ParallelSize(spec.parallel().pp());
  const int chunks = static_cast<int>(plan.stages.size()) / pp;
  const int64_t micro_batches =
      t.global_batch_size() / t.micro_batch_size() / plan.grid.dp;
  return Prefixed("training.global_batch_size",
                  PipelineOrder(pp, 0, chunks, micro_batches).status());
}

// Recomputation and recorded micro batches live in the one-rank model
// (GlmModel); the stage and token-parallel models keep every layer's
// activations and run their ops one by one.
absl::Status CheckOneModelPerRank(const v1::JobSpec& spec,
                                  const std::string& field) {
  const v1::ParallelSpec& p = spec.parallel();
  for (const auto& [name, size] : {std::pair<const char*, int>{"tp", p.tp()},
                                   {"cp", p.cp()},
                                   {"pp", p.pp()},
                                   {"ep", p.ep()}}) {
    if (ParallelSize(size) != 1) {
      return FieldError(field, absl::StrCat("needs parallel.", name,
                                            " = 1 (one model per rank; "
                                            "data parallelism is fine), got ",
                                            size));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckRecompute(const v1::JobSpec& spec) {
  if (!spec.training().recompute_activations()) return absl::OkStatus();
  return CheckOneModelPerRank(spec, "training.recompute_activations");
}

absl::Status CheckCudaGraphs(const v1::JobSpec& spec) {
  if (!spec.training().cuda_graphs()) return absl::OkStatus();
  if (spec.device() != "cuda") {
    return FieldError(
        "training.cuda_graphs",
        absl::StrCat("needs device \"cuda\", got ", Quote(spec.device())));
  }
  return CheckOneModelPerRank(spec, "training.cuda_graphs");
}

absl::Status CheckOverlapGradReduce(const v1::JobSpec& spec) {
  const v1::TrainingSpec& t = spec.training();
  if (!t.overlap_grad_reduce()) return absl::OkStatus();
  if (t.mode() == v1::LORA) {
    return FieldError("training.overlap_grad_reduce",
                      "needs a mode other than LORA (adapter gradients are "
                      "formed after the backward)");
  }
  return CheckOneModelPerRank(spec, "training.overlap_grad_reduce");
}

// Only the targets the spec names: the default ones (the attention
// projections) are in every layer and on no two pipeline stages.
absl::Status CheckLoraTargets(const v1::JobSpec& spec, const JobPlan& plan) {
  const v1::TrainingSpec& t = spec.training();
  const v1::LoraSpec& lora = t.lora();
  if (t.mode() != v1::LORA || lora.target_modules().empty()) {
    return absl::OkStatus();
  }
  HeldTensors nothing;  // names only: no tensor is allocated
  nothing.names.emplace();
  ModelParameters params(plan.model, nothing);
  const std::set<std::string> wanted(lora.target_modules().begin(),
                                     lora.target_modules().end());
  std::set<std::string> matched;
  std::vector<std::string> targets;
  for (const NamedTensor& named : params.Named()) {
    const std::string module = LoraModuleOf(
        named.name, params.WholeShape(named.name), named.grad != nullptr);
    if (wanted.count(module) == 0) continue;
    matched.insert(module);
    targets.push_back(named.name);
  }
  std::vector<std::string> unmatched;
  for (const std::string& module : lora.target_modules()) {
    if (matched.count(module) == 0) unmatched.push_back(module);
  }
  if (!unmatched.empty()) {
    return FieldError(
        "training.lora.target_modules",
        absl::StrCat("no 2-D weight named ", absl::StrJoin(unmatched, ", "),
                     " (modules look like q_a_proj, kv_b_proj, o_proj, "
                     "gate_proj)"));
  }
  if (ParallelSize(spec.parallel().pp()) == 1) return absl::OkStatus();
  // Each pp rank trains the adapters of its own stages, so an adapter on a
  // weight that several stages read (the embedding or output head with MTP)
  // would have no single owner.
  const std::vector<std::string> shared =
      PipelineTensorsOf(params, plan.stages, 0).shared;
  const std::set<std::string> shared_set(shared.begin(), shared.end());
  for (const std::string& target : targets) {
    if (shared_set.count(target) > 0) {
      return FieldError("training.lora.target_modules",
                        absl::StrCat(target,
                                     " is read on several pipeline stages; "
                                     "LoRA on it needs pp 1"));
    }
  }
  return absl::OkStatus();
}

// The HF export is made from the final checkpoint.
absl::Status CheckExport(const v1::TrainingSpec& t) {
  if (t.export_hf_dir().empty()) return absl::OkStatus();
  if (t.save_dir().empty()) {
    return FieldError("training.export_hf_dir",
                      "exporting needs training.save_dir (the export is made "
                      "from the final checkpoint)");
  }
  if (t.mode() == v1::LORA && !t.lora().merge_on_export()) {
    return FieldError("training.export_hf_dir",
                      "a LoRA job exports the merged model; set "
                      "training.lora.merge_on_export (the adapters alone are "
                      "in the checkpoints)");
  }
  return absl::OkStatus();
}

absl::Status CheckData(const v1::DataSpec& data, v1::TrainingMode mode) {
  if (data.sources_size() == 0) {
    return FieldError("data.sources", "at least one dataset is required");
  }
  // Fine-tuning reads one packed SFT dataset (`glmctl data pack` output), as
  // the fine-tuning recipes do.
  if ((mode == v1::SFT || mode == v1::LORA) && data.sources_size() != 1) {
    return FieldError("data.sources",
                      absl::StrCat("SFT and LoRA read exactly one packed "
                                   "dataset, got ",
                                   data.sources_size()));
  }
  for (int i = 0; i < data.sources_size(); ++i) {
    const v1::DatasetSource& source = data.sources(i);
    const std::string field = absl::StrCat("data.sources[", i, "]");
    if (source.path().empty()) {
      return FieldError(absl::StrCat(field, ".path"), "must not be empty");
    }
    if (!(source.weight() > 0)) {
      return FieldError(
          absl::StrCat(field, ".weight"),
          absl::StrCat("must be positive, got ", source.weight()));
    }
  }
  if (data.tokenizer().empty()) {
    return FieldError("data.tokenizer",
                      "must be \"byte\" or the path of a SentencePiece model");
  }
  if (data.pad_seq_to_mult() < 0) {
    return FieldError("data.pad_seq_to_mult", "must not be negative");
  }
  return absl::OkStatus();
}

}  // namespace

int ParallelSize(int value) { return value == 0 ? 1 : value; }

absl::StatusOr<JobPlan> ValidateJobSpec(const v1::JobSpec& spec) {
  if (absl::Status bounds = CheckSpecBounds(spec); !bounds.ok()) {
    return bounds;
  }
  if (spec.device() != "cpu" && spec.device() != "cuda") {
    return FieldError("device",
                      absl::StrCat("must be \"cpu\" or \"cuda\", got ",
                                   Quote(spec.device())));
  }
  if (!spec.precision().empty() && spec.precision() != "fp32" &&
      spec.precision() != "bf16") {
    return FieldError("precision",
                      absl::StrCat("must be \"fp32\" or \"bf16\", got ",
                                   Quote(spec.precision())));
  }
  if (spec.precision() == "bf16" && spec.device() != "cuda") {
    return FieldError("precision",
                      "bf16 runs on \"cuda\" only; the CPU computes in fp32");
  }
  if (spec.scheduling_timeout_seconds() < 0) {
    return FieldError("scheduling_timeout_seconds",
                      absl::StrCat("must not be negative, got ",
                                   spec.scheduling_timeout_seconds()));
  }
  JobPlan plan;
  absl::StatusOr<ModelConfig> model = ModelOf(spec.model());
  if (!model.ok()) return model.status();
  plan.model = *std::move(model);
  if (absl::Status sizes = CheckParallelSizes(spec.parallel()); !sizes.ok()) {
    return sizes;
  }
  absl::StatusOr<RankGrid> grid = GridOf(spec.parallel(), plan.model);
  if (!grid.ok()) return grid.status();
  plan.grid = *std::move(grid);
  absl::StatusOr<std::vector<StageSlice>> stages =
      StagesOf(spec.parallel(), plan.model);
  if (!stages.ok()) return stages.status();
  plan.stages = *std::move(stages);
  if (absl::Status training =
          CheckTraining(spec.training(), plan.grid.dp, plan.model);
      !training.ok()) {
    return training;
  }
  for (absl::Status status :
       {CheckPipelineSchedule(spec, plan), CheckRecompute(spec),
        CheckCudaGraphs(spec), CheckOverlapGradReduce(spec),
        CheckLoraTargets(spec, plan), CheckExport(spec.training()),
        CheckData(spec.data(), spec.training().mode())}) {
    if (!status.ok()) return status;
  }
  return plan;
}

}  // namespace glm
