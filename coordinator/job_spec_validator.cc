#include "coordinator/job_spec_validator.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "parallel/tensor_parallel_shard.h"

namespace glm {
namespace {

absl::Status FieldError(const std::string& field, const std::string& rule) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", rule));
}

absl::Status Prefixed(const std::string& field, const absl::Status& status) {
  if (status.ok()) return status;
  return FieldError(field, std::string(status.message()));
}

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
  if (p.world_size() <= 0) {
    return FieldError("parallel.world_size",
                      absl::StrCat("must be positive, got ", p.world_size()));
  }
  const int model_parallel =
      ParallelSize(p.tp()) * ParallelSize(p.pp()) * ParallelSize(p.cp());
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

absl::Status CheckTraining(const v1::TrainingSpec& t, int dp) {
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
  if (t.min_lr() < 0) {
    return FieldError("training.min_lr",
                      absl::StrCat("must not be negative, got ", t.min_lr()));
  }
  if (t.lr() < t.min_lr()) {
    return FieldError("training.lr",
                      absl::StrCat(t.lr(), " is below training.min_lr ",
                                   t.min_lr(), " (need lr >= min_lr >= 0)"));
  }
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

absl::Status CheckData(const v1::DataSpec& data) {
  if (data.sources_size() == 0) {
    return FieldError("data.sources", "at least one dataset is required");
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
  if (spec.device() != "cpu" && spec.device() != "cuda") {
    return FieldError("device",
                      absl::StrCat("must be \"cpu\" or \"cuda\", got \"",
                                   spec.device(), "\""));
  }
  if (!spec.precision().empty() && spec.precision() != "fp32" &&
      spec.precision() != "bf16") {
    return FieldError("precision",
                      absl::StrCat("must be \"fp32\" or \"bf16\", got \"",
                                   spec.precision().substr(0, 32), "\""));
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
  if (absl::Status training = CheckTraining(spec.training(), plan.grid.dp);
      !training.ok()) {
    return training;
  }
  if (absl::Status data = CheckData(spec.data()); !data.ok()) return data;
  return plan;
}

}  // namespace glm
