#include "worker/training_job.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/job_spec_validator.h"
#include "data/gpt_dataset.h"
#include "kernels/cpu/cpu_backend.h"
#include "training/log_line.h"

namespace glm {
namespace {

double OrDefault(double value, double fallback) {
  return value == 0 ? fallback : value;
}

absl::StatusOr<std::unique_ptr<Trainer>> BuildTrainer(
    const v1::JobSpec& spec, const ModelConfig& model) {
  const TrainerOptions options = TrainerOptionsFromSpec(model, spec.training());
  absl::StatusOr<std::string> data_path = DataPathFromSpec(spec.data());
  if (!data_path.ok()) return data_path.status();
  GptDatasetConfig data_config;
  data_config.seq_length = options.seq_length;
  data_config.num_samples = options.train_iters * options.global_batch_size;
  data_config.seed = spec.data().data_seed();
  absl::StatusOr<std::unique_ptr<TokenSampleDataset>> data =
      BuildPretrainDataset(*data_path, data_config);
  if (!data.ok()) return data.status();
  return Trainer::Create(options, std::move(*data), nullptr,
                         std::make_unique<CpuBackend>());
}

absl::Status CheckSupported(const v1::Assignment& assignment) {
  const v1::JobSpec& spec = assignment.spec();
  if (assignment.world_size() != 1) {
    return absl::UnimplementedError(absl::StrCat(
        "parallel.world_size: this worker trains on one rank; ",
        assignment.world_size(), " ranks need the distributed runtime"));
  }
  if (!spec.device().empty() && spec.device() != "cpu") {
    return absl::UnimplementedError(
        absl::StrCat("device: '", spec.device(),
                     "' has no training backend in this worker; use \"cpu\""));
  }
  if (spec.training().mode() != v1::PRETRAIN) {
    return absl::UnimplementedError(absl::StrCat(
        "training.mode: ", v1::TrainingMode_Name(spec.training().mode()),
        " is not supported by this worker yet; use PRETRAIN"));
  }
  return absl::OkStatus();
}

}  // namespace

TrainerOptions TrainerOptionsFromSpec(const ModelConfig& model,
                                      const v1::TrainingSpec& t) {
  TrainerOptions o;
  o.model = model;
  o.train_iters = t.train_iters();
  o.global_batch_size = t.global_batch_size();
  o.micro_batch_size = t.micro_batch_size() == 0 ? 1 : t.micro_batch_size();
  o.seq_length = t.seq_length();
  o.schedule.max_lr = t.lr();
  o.schedule.min_lr = t.min_lr();
  o.schedule.warmup_iters = t.warmup_iters();
  o.schedule.decay_iters =
      t.lr_decay_iters() == 0 ? t.train_iters() : t.lr_decay_iters();
  o.adamw.beta1 = OrDefault(t.adam_beta1(), 0.9);
  o.adamw.beta2 = OrDefault(t.adam_beta2(), 0.999);
  o.adamw.eps = OrDefault(t.adam_eps(), 1e-8);
  o.adamw.weight_decay = OrDefault(t.weight_decay(), 0.01);
  o.clip_grad = OrDefault(t.clip_grad(), 1.0);
  o.loss.mtp_loss_scale =
      static_cast<float>(OrDefault(t.mtp_loss_scale(), 0.1));
  o.loss.indexer_loss_coeff =
      static_cast<float>(OrDefault(t.indexer_loss_coeff(), 0.001));
  o.router_bias_update_rate = OrDefault(t.router_bias_update_rate(), 1e-3);
  o.seed = t.seed();
  return o;
}

absl::StatusOr<std::string> DataPathFromSpec(const v1::DataSpec& data) {
  if (data.sources().empty()) {
    return absl::InvalidArgumentError("data.sources: no dataset given");
  }
  std::vector<std::string> parts;
  for (int i = 0; i < data.sources_size(); ++i) {
    const v1::DatasetSource& source = data.sources(i);
    if (source.path().empty() || source.weight() <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.sources[", i, "]: needs a path and a positive weight"));
    }
    parts.push_back(absl::StrCat(source.weight(), " ", source.path()));
  }
  return absl::StrJoin(parts, " ");
}

absl::Status RunTrainingJob(const v1::Assignment& assignment,
                            const TrainingJobHooks& hooks) {
  if (absl::Status status = CheckSupported(assignment); !status.ok()) {
    return status;
  }
  absl::StatusOr<JobPlan> plan = ValidateJobSpec(assignment.spec());
  if (!plan.ok()) return plan.status();
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      BuildTrainer(assignment.spec(), plan->model);
  if (!trainer.ok()) return trainer.status();
  const int64_t global_batch = assignment.spec().training().global_batch_size();
  while (!(*trainer)->Done()) {
    absl::StatusOr<v1::StepMetrics> metrics = (*trainer)->Step();
    if (!metrics.ok()) return metrics.status();
    hooks.log(FormatLogLine(*metrics, global_batch));
    if (hooks.on_step(*metrics)) {
      return absl::CancelledError(absl::StrCat(
          "stopped after iteration ", metrics->iteration(), " on request"));
    }
  }
  return absl::OkStatus();
}

}  // namespace glm
