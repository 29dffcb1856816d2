#include "cli/model_forward_command.h"

#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/command_flags.h"
#include "base/file_util.h"
#include "checkpoint/hf_weight_loader.h"
#include "cli/npy_writer.h"
#include "kernels/backend_factory.h"
#include "model/glm_model.h"
#include "model/weight_copies.h"

namespace glm {
namespace {

CommandFlags DeclareFlags() {
  CommandFlags flags(
      "glmctl model forward --hf=DIR --tokens=FILE --out=FILE.npy [--loss] "
      "[--device=cuda:0 --precision=fp32|bf16]");
  flags.Add("hf", "HF checkpoint folder (config.json + safetensors)");
  flags.Add("tokens",
            "one sequence per line, space-separated token ids, equal lengths");
  flags.Add("out", "float32 logits [batch, seq, vocab] as .npy");
  flags.AddBool("loss", "print the mean next-token loss");
  flags.Add("device", "cpu, or cuda:N", "cpu");
  flags.Add("precision", "fp32, or bf16 on a GPU (default: bf16 on a GPU)");
  return flags;
}

absl::Status Forward(const CommandFlags& flags) {
  for (const char* required : {"hf", "tokens", "out"}) {
    if (absl::Status given = flags.Require(required); !given.ok()) return given;
  }
  absl::StatusOr<std::string> text = ReadFile(flags.Get("tokens"));
  if (!text.ok()) return text.status();
  absl::StatusOr<std::vector<std::vector<int32_t>>> rows =
      ParseTokenLines(*text, flags.Get("tokens"));
  if (!rows.ok()) return rows.status();
  absl::StatusOr<std::unique_ptr<ModelParameters>> params =
      LoadHfModel(flags.Get("hf"));
  if (!params.ok()) return params.status();
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      MakeBackend(flags.Get("device"), flags.Get("precision"),
                  /*deterministic=*/true);
  if (!backend.ok()) return backend.status();
  std::unique_ptr<ModelParameters> on_device =
      (*backend)->allocator() == nullptr
          ? nullptr
          : MirrorParameters(**params, (*backend)->allocator());
  if (on_device) RefreshComputeCopies(**backend, *on_device);
  GlmModel model(on_device ? on_device.get() : params->get(), backend->get());
  absl::StatusOr<ForwardResult> result =
      model.Forward(Batch::FromSequences(*rows));
  if (!result.ok()) return result.status();
  const Tensor logits = result->logits.CopyTo(nullptr);
  const int64_t batch = rows->size(), seq = rows->front().size();
  const int64_t vocab = (*params)->config().vocab_size;
  if (absl::Status written = WriteNpyFloat32(
          flags.Get("out"), {batch, seq, vocab}, logits.values());
      !written.ok()) {
    return written;
  }
  std::cout << "logits [" << batch << ", " << seq << ", " << vocab << "] -> "
            << flags.Get("out") << "\n";
  if (flags.GetBool("loss")) std::cout << "loss: " << result->lm_loss << "\n";
  return absl::OkStatus();
}

int RunForward(const std::vector<std::string>& args) {
  CommandFlags flags = DeclareFlags();
  if (absl::Status parsed = flags.Parse(args); !parsed.ok()) {
    std::cerr << "glmctl model forward: " << parsed.message() << "\n"
              << flags.Help();
    return kExitUsage;
  }
  if (flags.HelpRequested()) {
    std::cout << flags.Help();
    return kExitOk;
  }
  if (absl::Status status = Forward(flags); !status.ok()) {
    std::cerr << "glmctl model forward: " << status.message() << "\n";
    return status.code() == absl::StatusCode::kInvalidArgument &&
                   absl::StartsWith(status.message(), "missing --")
               ? kExitUsage
               : kExitFailure;
  }
  return kExitOk;
}

}  // namespace

absl::StatusOr<std::vector<std::vector<int32_t>>> ParseTokenLines(
    const std::string& text, const std::string& file_name) {
  std::vector<std::vector<int32_t>> rows;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    std::vector<int32_t> ids;
    for (absl::string_view word :
         absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty())) {
      int32_t id = 0;
      if (!absl::SimpleAtoi(word, &id) || id < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            file_name, ":", line_number, ": '", word, "' is not a token id"));
      }
      ids.push_back(id);
    }
    if (ids.empty()) continue;
    if (!rows.empty() && ids.size() != rows.front().size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          file_name, ":", line_number, ": ", ids.size(),
          " tokens, but the first sequence has ", rows.front().size()));
    }
    rows.push_back(std::move(ids));
  }
  if (rows.empty()) {
    return absl::InvalidArgumentError(file_name + ": no token ids");
  }
  return rows;
}

std::vector<Command> ModelForwardCommands() {
  return {{"model forward",
           "logits (.npy) and loss of an HF checkpoint on token ids",
           RunForward}};
}

}  // namespace glm
