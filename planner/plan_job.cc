#include "planner/plan_job.h"

#include "absl/strings/str_cat.h"

namespace glm {
namespace {

template <typename T>
struct Named {
  const char* name;
  T value;
};

constexpr Named<TrainingKind> kKinds[] = {{"pretrain", TrainingKind::kPretrain},
                                          {"sft", TrainingKind::kSft},
                                          {"lora", TrainingKind::kLora}};
constexpr Named<Recompute> kRecomputes[] = {
    {"none", Recompute::kNone},
    {"selective", Recompute::kSelective},
    {"full", Recompute::kFull}};
constexpr Named<Precision> kPrecisions[] = {
    {"fp32", Precision::kFp32},
    {"fp32-bf16-copies", Precision::kFp32Bf16Copies},
    {"bf16", Precision::kBf16Mixed}};

template <typename T, size_t N>
absl::StatusOr<T> Parse(const Named<T> (&table)[N], const char* flag,
                        const std::string& name) {
  std::string known;
  for (const Named<T>& entry : table) {
    if (name == entry.name) return entry.value;
    absl::StrAppend(&known, known.empty() ? "" : ", ", entry.name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat(flag, ": unknown value '", name, "' (known: ", known, ")"));
}

template <typename T, size_t N>
const char* NameOf(const Named<T> (&table)[N], T value) {
  for (const Named<T>& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return "?";
}

}  // namespace

absl::StatusOr<TrainingKind> ParseTrainingKind(const std::string& name) {
  return Parse(kKinds, "--mode", name);
}
absl::StatusOr<Recompute> ParseRecompute(const std::string& name) {
  return Parse(kRecomputes, "--recompute", name);
}
absl::StatusOr<Precision> ParsePrecision(const std::string& name) {
  return Parse(kPrecisions, "--precision", name);
}
const char* TrainingKindName(TrainingKind kind) { return NameOf(kKinds, kind); }
const char* RecomputeName(Recompute recompute) {
  return NameOf(kRecomputes, recompute);
}
const char* PrecisionName(Precision precision) {
  return NameOf(kPrecisions, precision);
}

absl::Status ValidatePlanJob(const PlanJob& job) {
  if (absl::Status status = ValidateModelConfig(job.model); !status.ok()) {
    return status;
  }
  if (job.seq_length <= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--seq-length: must be > 1, got ", job.seq_length));
  }
  if (job.micro_batch_size <= 0 || job.global_batch_size <= 0 ||
      job.global_batch_size % job.micro_batch_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--global-batch: ", job.global_batch_size,
                     " must be a positive multiple of --micro-batch ",
                     job.micro_batch_size));
  }
  if (job.routing_imbalance < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--routing-imbalance: must be >= 1 (the busiest expert "
                     "rank over the mean), got ",
                     job.routing_imbalance));
  }
  if (job.logits_chunk_tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--logits-chunk: must be >= 0, got ", job.logits_chunk_tokens));
  }
  if (job.latent_attention_from < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--latent-attention-from: must be >= 0 (0: never), got ",
                     job.latent_attention_from));
  }
  if (job.attention_pairs_per_call < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--attention-pairs-per-call: must be >= 1, got ",
                     job.attention_pairs_per_call));
  }
  if (job.expert_chunk_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--expert-chunk-tokens: must be >= 0 (0: never), got ",
                     job.expert_chunk_tokens));
  }
  if (job.overlap_grad_reduce &&
      (job.kind == TrainingKind::kLora || !IsTrainerStore(job.precision))) {
    return absl::InvalidArgumentError(
        "--overlap-grad-reduce: this trainer overlaps its data-parallel "
        "all-reduce: needs a mode other than lora and its own precision (fp32 "
        "or fp32-bf16-copies; bf16 models Megatron's overlap)");
  }
  if (job.kind == TrainingKind::kLora &&
      (job.lora.rank <= 0 || job.lora.target_modules.empty())) {
    return absl::InvalidArgumentError(
        "--lora-rank / --lora-targets: LoRA needs a positive rank and at "
        "least one target module");
  }
  return absl::OkStatus();
}

}  // namespace glm
