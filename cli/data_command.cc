#include "cli/data_command.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/command_flags.h"
#include "data/indexed_dataset.h"
#include "data/packed_sft_dataset.h"
#include "data/text_preprocess.h"
#include "data/tokenizer.h"

namespace glm {
namespace {

// Parses flags; prints help (kExitOk) or a usage error (kExitUsage) and
// returns false when the command should not go on.
bool ParseFlags(const std::string& name, const std::vector<std::string>& args,
                const std::vector<std::string>& required, CommandFlags* flags,
                int* exit_code) {
  absl::Status status = flags->Parse(args);
  if (flags->HelpRequested()) {
    std::cout << flags->Help();
    *exit_code = kExitOk;
    return false;
  }
  for (const std::string& flag : required) {
    if (status.ok()) status = flags->Require(flag);
  }
  if (status.ok() && !flags->positional().empty()) {
    status = absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", flags->positional()[0], "'"));
  }
  if (!status.ok()) {
    std::cerr << "glmctl " << name << ": " << status.message() << "\n"
              << flags->Help();
    *exit_code = kExitUsage;
    return false;
  }
  return true;
}

int Fail(const std::string& name, const absl::Status& status) {
  std::cerr << "glmctl " << name << ": " << status.message() << "\n";
  return kExitFailure;
}

// The folder an output prefix writes into ("out/data/corpus" -> "out/data"),
// created when absent.
absl::Status CreatePrefixFolder(const std::string& prefix) {
  const std::filesystem::path folder =
      std::filesystem::path(prefix).parent_path();
  std::error_code error;
  if (!folder.empty()) std::filesystem::create_directories(folder, error);
  if (error) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", folder.string(), ": ", error.message()));
  }
  return absl::OkStatus();
}

void AddTokenizerFlag(CommandFlags* flags) {
  flags->Add("tokenizer", "byte, or the path of a SentencePiece .model",
             "byte");
}

int RunPreprocess(const std::vector<std::string>& args) {
  const std::string name = "data preprocess";
  CommandFlags flags(
      "glmctl data preprocess --input=FILE.jsonl --output-prefix=P "
      "[--json-key=text] [--tokenizer=byte|PATH.model] [--append-eod]");
  flags.Add("input", "JSONL file, one document per line");
  flags.Add("json-key", "the field holding each document's text", "text");
  AddTokenizerFlag(&flags);
  flags.Add("output-prefix",
            "writes P.bin and P.idx (creating P's folder when absent)");
  flags.AddBool("append-eod",
                "end each document with the end-of-document token (needed "
                "for pretraining: samples run across documents)");
  int exit_code = kExitOk;
  if (!ParseFlags(name, args, {"input", "output-prefix"}, &flags, &exit_code)) {
    return exit_code;
  }
  auto tokenizer = LoadTokenizer(flags.Get("tokenizer"));
  if (!tokenizer.ok()) return Fail(name, tokenizer.status());
  const PreprocessOptions options{flags.Get("input"), flags.Get("json-key"),
                                  flags.Get("output-prefix"),
                                  flags.GetBool("append-eod")};
  if (absl::Status created = CreatePrefixFolder(options.output_prefix);
      !created.ok()) {
    return Fail(name, created);
  }
  auto result = PreprocessJsonl(options, **tokenizer);
  if (!result.ok()) return Fail(name, result.status());
  std::cout << "documents: " << result->documents << "\n"
            << "tokens: " << result->tokens << " (" << DtypeName(result->dtype)
            << ", tokenizer " << (*tokenizer)->name() << ", vocab "
            << (*tokenizer)->vocab_size() << ")\n"
            << "wrote " << BinPath(options.output_prefix) << "\n"
            << "wrote " << IdxPath(options.output_prefix) << "\n";
  return kExitOk;
}

int RunPack(const std::vector<std::string>& args) {
  const std::string name = "data pack";
  CommandFlags flags(
      "glmctl data pack --input=chat.jsonl --seq-length=N --output-prefix=P "
      "[--pad-seq-to-mult=M] [--tokenizer=byte|PATH.model]");
  flags.Add("input", "chat JSONL: {\"messages\":[{\"role\",\"content\"}...]}");
  AddTokenizerFlag(&flags);
  flags.Add("seq-length", "tokens per packed row");
  flags.Add("pad-seq-to-mult", "pad each sequence to a multiple of this", "1");
  flags.Add("output-prefix",
            "writes P_tokens, P_loss_mask and P_cu_seqlens (.bin/.idx), "
            "creating P's folder when absent");
  int exit_code = kExitOk;
  if (!ParseFlags(name, args, {"input", "seq-length", "output-prefix"}, &flags,
                  &exit_code)) {
    return exit_code;
  }
  int64_t seq_length = 0, pad_seq_to_mult = 0;
  for (absl::Status status :
       {flags.GetInt("seq-length", &seq_length),
        flags.GetInt("pad-seq-to-mult", &pad_seq_to_mult)}) {
    if (!status.ok()) {
      std::cerr << "glmctl " << name << ": " << status.message() << "\n";
      return kExitUsage;
    }
  }
  auto tokenizer = LoadTokenizer(flags.Get("tokenizer"));
  if (!tokenizer.ok()) return Fail(name, tokenizer.status());
  const std::string prefix = flags.Get("output-prefix");
  if (absl::Status created = CreatePrefixFolder(prefix); !created.ok()) {
    return Fail(name, created);
  }
  auto result = PackChatJsonl(flags.Get("input"), **tokenizer, seq_length,
                              pad_seq_to_mult, prefix);
  if (!result.ok()) return Fail(name, result.status());
  std::cout << "conversations: " << result->conversations << "\n"
            << PackingStatsText(result->stats, seq_length, pad_seq_to_mult);
  for (const std::string& part :
       {PackedTokensPrefix(prefix), PackedLossMaskPrefix(prefix),
        PackedCuSeqlensPrefix(prefix)}) {
    std::cout << "wrote " << part << ".bin, .idx\n";
  }
  return kExitOk;
}

void InspectIndexed(const IndexedDataset& dataset, const Tokenizer& tokenizer,
                    int64_t max_tokens) {
  std::cout << "indexed dataset " << dataset.prefix() << "\n"
            << "dtype: " << DtypeName(dataset.dtype()) << "\n"
            << "documents: " << dataset.document_count() << "\n"
            << "sequences: " << dataset.sequence_count() << "\n"
            << "tokens: " << dataset.element_count() << "\n";
  if (dataset.sequence_count() == 0) return;
  std::vector<int32_t> first = dataset.Sequence(0);
  std::cout << "first sequence (" << first.size() << " tokens";
  if (static_cast<int64_t>(first.size()) > max_tokens) {
    first.resize(max_tokens);
    std::cout << ", first " << max_tokens << " shown";
  }
  std::cout << "):\n" << tokenizer.Decode(first) << "\n";
}

void InspectPacked(const PackedSftDataset& dataset,
                   const Tokenizer& tokenizer) {
  int64_t sequences = 0, supervised = 0;
  for (int64_t r = 0; r < dataset.rows(); ++r) {
    const PackedRow row = dataset.Row(r);
    sequences += row.cu_seqlens.size() - 1;
    for (uint8_t m : row.loss_mask) supervised += m;
  }
  std::cout << "packed SFT rows\n"
            << "rows: " << dataset.rows() << "\n"
            << "seq length: " << dataset.seq_length() << "\n"
            << "segments (sequences and trailing padding): " << sequences
            << "\n"
            << "supervised tokens: " << supervised << "\n";
  const PackedRow row = dataset.Row(0);
  const std::vector<int32_t> first(row.tokens.begin(),
                                   row.tokens.begin() + row.cu_seqlens[1]);
  std::vector<int32_t> targets;
  for (int32_t p = 0; p < row.cu_seqlens[1]; ++p) {
    if (row.loss_mask[p]) targets.push_back(row.tokens[p]);
  }
  std::cout << "first sequence of row 0 (" << first.size() << " tokens):\n"
            << tokenizer.Decode(first) << "\n"
            << "its supervised tokens:\n"
            << tokenizer.Decode(targets) << "\n";
}

int RunInspect(const std::vector<std::string>& args) {
  const std::string name = "data inspect";
  CommandFlags flags(
      "glmctl data inspect --prefix=P [--tokenizer=byte|PATH.model]");
  flags.Add("prefix",
            "an indexed dataset (P.bin/P.idx) or packed SFT rows "
            "(P_tokens, ...)");
  AddTokenizerFlag(&flags);
  flags.Add("max-tokens", "decode at most this many tokens", "2000");
  int exit_code = kExitOk;
  if (!ParseFlags(name, args, {"prefix"}, &flags, &exit_code)) {
    return exit_code;
  }
  int64_t max_tokens = 0;
  if (absl::Status status = flags.GetInt("max-tokens", &max_tokens);
      !status.ok()) {
    std::cerr << "glmctl " << name << ": " << status.message() << "\n";
    return kExitUsage;
  }
  auto tokenizer = LoadTokenizer(flags.Get("tokenizer"));
  if (!tokenizer.ok()) return Fail(name, tokenizer.status());
  const std::string prefix = flags.Get("prefix");
  if (std::ifstream(IdxPath(PackedTokensPrefix(prefix))).good()) {
    auto packed = PackedSftDataset::Open(prefix, 0, 0);
    if (!packed.ok()) return Fail(name, packed.status());
    InspectPacked(**packed, **tokenizer);
    return kExitOk;
  }
  auto dataset = IndexedDataset::Open(prefix);
  if (!dataset.ok()) return Fail(name, dataset.status());
  InspectIndexed(**dataset, **tokenizer, max_tokens);
  return kExitOk;
}

}  // namespace

std::string PackingStatsText(const PackingStats& stats, int64_t seq_length,
                             int64_t pad_seq_to_mult) {
  return absl::StrFormat(
      "rows: %d of %d tokens (sequences padded to a multiple of %d)\n"
      "sequences: %d (%d truncated)\n"
      "packing efficiency: %.2f%% (%d real tokens / %d token slots)\n"
      "fill with pad-to-multiple: %.2f%%\n"
      "packing factor: %.2f sequences per row\n"
      "supervised tokens: %d\n",
      stats.rows, seq_length, pad_seq_to_mult, stats.sequences,
      stats.truncated_sequences, 100 * stats.efficiency(), stats.real_tokens,
      stats.token_slots, 100 * stats.fill(), stats.packing_factor(),
      stats.supervised_tokens);
}

std::vector<Command> DataCommands() {
  return {
      {"data preprocess", "tokenize JSONL text into a Megatron .bin/.idx",
       RunPreprocess},
      {"data pack", "render chat JSONL and pack it into SFT rows", RunPack},
      {"data inspect", "counts and the first sample of a dataset", RunInspect},
  };
}

}  // namespace glm
