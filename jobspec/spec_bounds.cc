#include "jobspec/spec_bounds.h"

#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/quote.h"
#include "jobspec/field_error.h"

namespace glm {
namespace {

absl::Status CheckText(const std::string& field, const std::string& text,
                       int max_bytes) {
  if (static_cast<int64_t>(text.size()) > max_bytes) {
    return FieldError(field, absl::StrCat(text.size(), " bytes, more than ",
                                          max_bytes, ": ", Quote(text)));
  }
  for (char c : text) {
    if (absl::ascii_iscntrl(static_cast<unsigned char>(c))) {
      return FieldError(field,
                        absl::StrCat("has control characters: ", Quote(text)));
    }
  }
  return absl::OkStatus();
}

// Lower bounds are the rules' (job_spec_validator.cc); these keep products
// of counts and sizes far from overflowing 64 bits.
struct Bounded {
  const char* field;
  int64_t value;
  int64_t high;
};

absl::Status CheckAtMost(const Bounded& bounded) {
  if (bounded.value > bounded.high) {
    return FieldError(bounded.field,
                      absl::StrCat(bounded.value, " is more than the ",
                                   bounded.high, " allowed"));
  }
  return absl::OkStatus();
}

struct Real {
  std::string field;
  double value;
  bool may_be_negative;  // a rule elsewhere says more
};

// NaN and infinities are never meaningful; a negative coefficient, epsilon or
// rate is not either.
absl::Status CheckReal(const Real& real) {
  if (!std::isfinite(real.value)) {
    return FieldError(real.field,
                      absl::StrCat("must be finite, got ", real.value));
  }
  if (!real.may_be_negative && real.value < 0) {
    return FieldError(real.field,
                      absl::StrCat("must not be negative, got ", real.value));
  }
  return absl::OkStatus();
}

absl::Status CheckStrings(const v1::JobSpec& spec) {
  const std::pair<const char*, const std::string*> paths[] = {
      {"model.hf_checkpoint_dir", &spec.model().hf_checkpoint_dir()},
      {"training.save_dir", &spec.training().save_dir()},
      {"training.load_dir", &spec.training().load_dir()},
      {"training.export_hf_dir", &spec.training().export_hf_dir()},
      {"data.tokenizer", &spec.data().tokenizer()},
      {"model.preset", &spec.model().preset()},
      {"device", &spec.device()},
      {"precision", &spec.precision()}};
  for (const auto& [field, text] : paths) {
    if (absl::Status status = CheckText(field, *text, kMaxPathBytes);
        !status.ok()) {
      return status;
    }
  }
  if (spec.data().sources_size() > kMaxDataSources) {
    return FieldError("data.sources",
                      absl::StrCat(spec.data().sources_size(),
                                   " sources, more than ", kMaxDataSources));
  }
  for (int i = 0; i < spec.data().sources_size(); ++i) {
    const v1::DatasetSource& source = spec.data().sources(i);
    const std::string field = absl::StrCat("data.sources[", i, "]");
    if (absl::Status status = CheckText(absl::StrCat(field, ".path"),
                                        source.path(), kMaxPathBytes);
        !status.ok()) {
      return status;
    }
    if (absl::Status status =
            CheckReal({absl::StrCat(field, ".weight"), source.weight(), true});
        !status.ok()) {
      return status;
    }
  }
  const v1::LoraSpec& lora = spec.training().lora();
  if (lora.target_modules_size() > kMaxLoraTargets) {
    return FieldError("training.lora.target_modules",
                      absl::StrCat(lora.target_modules_size(),
                                   " modules, more than ", kMaxLoraTargets));
  }
  for (int i = 0; i < lora.target_modules_size(); ++i) {
    if (absl::Status status =
            CheckText(absl::StrCat("training.lora.target_modules[", i, "]"),
                      lora.target_modules(i), kMaxJobNameBytes);
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

absl::Status CheckParallelRanges(const v1::ParallelSpec& p) {
  const Bounded bounds[] = {
      {"parallel.world_size", p.world_size(), kMaxWorldSize},
      {"parallel.tp", p.tp(), kMaxWorldSize},
      {"parallel.pp", p.pp(), kMaxWorldSize},
      {"parallel.cp", p.cp(), kMaxWorldSize},
      {"parallel.ep", p.ep(), kMaxWorldSize},
      {"parallel.etp", p.etp(), kMaxWorldSize},
      {"parallel.vpp", p.vpp(), kMaxLayersPerSpec},
      {"parallel.num_layers_in_first_stage", p.num_layers_in_first_stage(),
       kMaxLayersPerSpec},
      {"parallel.num_layers_in_last_stage", p.num_layers_in_last_stage(),
       kMaxLayersPerSpec}};
  for (const Bounded& bounded : bounds) {
    if (absl::Status status = CheckAtMost(bounded); !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

absl::Status CheckTrainingRanges(const v1::TrainingSpec& t) {
  const Bounded bounds[] = {
      {"training.train_iters", t.train_iters(), kMaxIterations},
      {"training.warmup_iters", t.warmup_iters(), kMaxIterations},
      {"training.lr_decay_iters", t.lr_decay_iters(), kMaxIterations},
      {"training.save_interval", t.save_interval(), kMaxIterations},
      {"training.global_batch_size", t.global_batch_size(),
       kMaxGlobalBatchSize},
      {"training.micro_batch_size", t.micro_batch_size(), kMaxGlobalBatchSize},
      {"training.max_restarts", t.max_restarts(), kMaxRestarts},
      {"training.lora.rank", t.lora().rank(), kMaxLoraRank},
      {"training.seq_length", t.seq_length(), kMaxSequenceLength}};
  for (const Bounded& bounded : bounds) {
    if (absl::Status status = CheckAtMost(bounded); !status.ok()) {
      return status;
    }
  }
  const Real reals[] = {
      {"training.lr", t.lr(), true},
      {"training.min_lr", t.min_lr(), true},
      {"training.weight_decay", t.weight_decay(), false},
      {"training.clip_grad", t.clip_grad(), false},
      {"training.adam_beta1", t.adam_beta1(), false},
      {"training.adam_beta2", t.adam_beta2(), false},
      {"training.adam_eps", t.adam_eps(), false},
      {"training.mtp_loss_scale", t.mtp_loss_scale(), false},
      {"training.indexer_loss_coeff", t.indexer_loss_coeff(), false},
      {"training.router_bias_update_rate", t.router_bias_update_rate(), false},
      {"training.lora.alpha", t.lora().alpha(), false}};
  for (const Real& real : reals) {
    if (absl::Status status = CheckReal(real); !status.ok()) return status;
  }
  for (const Real& beta : {reals[4], reals[5]}) {
    if (beta.value >= 1) {
      return FieldError(beta.field,
                        absl::StrCat("must be below 1, got ", beta.value));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckJobName(const std::string& name) {
  if (static_cast<int>(name.size()) > kMaxJobNameBytes) {
    return FieldError("name",
                      absl::StrCat(name.size(), " bytes, more than ",
                                   kMaxJobNameBytes, ": ", Quote(name)));
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' &&
        c != '_' && c != '-') {
      return FieldError("name",
                        absl::StrCat("may hold only letters, digits, '.', '_' "
                                     "and '-', got ",
                                     Quote(name)));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSpecBounds(const v1::JobSpec& spec) {
  const size_t bytes = spec.ByteSizeLong();
  if (bytes > static_cast<size_t>(kMaxJobSpecBytes)) {
    return FieldError(
        "spec", absl::StrCat(bytes, " bytes, more than ", kMaxJobSpecBytes));
  }
  for (absl::Status status :
       {CheckJobName(spec.name()), CheckStrings(spec),
        CheckAtMost({"data.pad_seq_to_mult", spec.data().pad_seq_to_mult(),
                     kMaxSequenceLength}),
        CheckParallelRanges(spec.parallel()),
        CheckTrainingRanges(spec.training())}) {
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace glm
