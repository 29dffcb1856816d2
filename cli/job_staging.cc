#include "cli/job_staging.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "data/packed_sft_dataset.h"
#include "data/text_preprocess.h"
#include "data/tokenizer.h"

namespace glm {
namespace {

namespace fs = std::filesystem;

// Chat JSONL for SFT and LoRA: rendered with the tokenizer's chat template and
// packed to the job's seq_length, as `glmctl data pack` does.
absl::StatusOr<std::string> PackChat(const fs::path& input,
                                     const fs::path& state_dir,
                                     const v1::JobSpec& spec,
                                     const Tokenizer& tokenizer,
                                     std::ostream& out) {
  const std::string prefix =
      (state_dir / "data" / (input.stem().string() + "_packed")).string();
  const int64_t pad = std::max(1, spec.data().pad_seq_to_mult());
  absl::StatusOr<PackChatResult> packed = PackChatJsonl(
      input.string(), tokenizer, spec.training().seq_length(), pad, prefix);
  if (!packed.ok()) return packed.status();
  const PackingStats& stats = packed->stats;
  out << absl::StrFormat(
      "data: %s -> %s (%d conversations in %d rows of %d; packing efficiency "
      "%.2f%%, packing factor %.2f, %d supervised tokens)\n",
      input.string(), prefix, packed->conversations, stats.rows,
      spec.training().seq_length(), 100 * stats.efficiency(),
      stats.packing_factor(), stats.supervised_tokens);
  return prefix;
}

// JSONL sources become datasets under the stage folder; dataset prefixes and a
// tokenizer model's path are made absolute.
absl::Status PrepareData(
    const fs::path& state_dir,
    const std::function<fs::path(const std::string&)>& resolve_input,
    v1::JobSpec* spec, std::ostream& out) {
  v1::DataSpec& data = *spec->mutable_data();
  if (!data.tokenizer().empty() && data.tokenizer() != "byte") {
    data.set_tokenizer(resolve_input(data.tokenizer()).string());
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      LoadTokenizer(data.tokenizer().empty() ? "byte" : data.tokenizer());
  if (!tokenizer.ok()) return tokenizer.status();
  for (v1::DatasetSource& source : *data.mutable_sources()) {
    const fs::path input = resolve_input(source.path());
    if (!absl::EndsWith(source.path(), ".jsonl")) {
      source.set_path(input.string());
      continue;
    }
    fs::create_directories(state_dir / "data");
    if (spec->training().mode() != v1::PRETRAIN) {
      absl::StatusOr<std::string> packed =
          PackChat(input, state_dir, *spec, **tokenizer, out);
      if (!packed.ok()) return packed.status();
      source.set_path(*packed);
      continue;
    }
    PreprocessOptions options;
    options.input_path = input.string();
    options.output_prefix =
        (state_dir / "data" / (input.stem().string() + "_text_document"))
            .string();
    options.append_eod = true;
    absl::StatusOr<PreprocessResult> result =
        PreprocessJsonl(options, **tokenizer);
    if (!result.ok()) return result.status();
    out << "data: " << input.string() << " -> " << options.output_prefix << " ("
        << result->documents << " documents, " << result->tokens << " tokens, "
        << (*tokenizer)->name() << " tokenizer)\n";
    source.set_path(options.output_prefix);
  }
  return absl::OkStatus();
}

// Relative output folders, and a starting checkpoint given relatively (an
// earlier job's export), live in the stage folder.
void PlaceOutputs(const fs::path& state_dir, v1::JobSpec* spec) {
  auto place = [&](const std::string& path) {
    return path.empty() || fs::path(path).is_absolute()
               ? path
               : (state_dir / path).string();
  };
  v1::TrainingSpec& training = *spec->mutable_training();
  training.set_save_dir(place(training.save_dir()));
  training.set_load_dir(place(training.load_dir()));
  training.set_export_hf_dir(place(training.export_hf_dir()));
  v1::ModelSpec& model = *spec->mutable_model();
  model.set_hf_checkpoint_dir(place(model.hf_checkpoint_dir()));
}

}  // namespace

absl::Status StageJob(
    const fs::path& stage_dir,
    const std::function<fs::path(const std::string&)>& resolve_input,
    v1::JobSpec* spec, std::ostream& out) {
  if (absl::Status prepared = PrepareData(stage_dir, resolve_input, spec, out);
      !prepared.ok()) {
    return prepared;
  }
  PlaceOutputs(stage_dir, spec);
  return absl::OkStatus();
}

}  // namespace glm
