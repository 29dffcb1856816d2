#include "data/packed_sft_dataset.h"

#include <numeric>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "data/seeded_shuffle.h"

namespace glm {

std::string PackedTokensPrefix(const std::string& prefix) {
  return prefix + "_tokens";
}
std::string PackedLossMaskPrefix(const std::string& prefix) {
  return prefix + "_loss_mask";
}
std::string PackedCuSeqlensPrefix(const std::string& prefix) {
  return prefix + "_cu_seqlens";
}

absl::Status WritePackedSft(const std::string& prefix,
                            const std::vector<Pack>& packs,
                            TokenDtype token_dtype) {
  auto tokens =
      IndexedDatasetBuilder::Create(PackedTokensPrefix(prefix), token_dtype);
  if (!tokens.ok()) return tokens.status();
  auto loss_mask = IndexedDatasetBuilder::Create(PackedLossMaskPrefix(prefix),
                                                 TokenDtype::kUint8);
  if (!loss_mask.ok()) return loss_mask.status();
  auto cu_seqlens = IndexedDatasetBuilder::Create(PackedCuSeqlensPrefix(prefix),
                                                  TokenDtype::kInt32);
  if (!cu_seqlens.ok()) return cu_seqlens.status();
  for (const Pack& pack : packs) {
    const std::vector<int32_t> mask(pack.loss_mask.begin(),
                                    pack.loss_mask.end());
    for (absl::Status status :
         {(*tokens)->AddDocument(pack.tokens), (*loss_mask)->AddDocument(mask),
          (*cu_seqlens)->AddDocument(pack.cu_seqlens)}) {
      if (!status.ok()) return status;
    }
  }
  for (IndexedDatasetBuilder* builder :
       {tokens->get(), loss_mask->get(), cu_seqlens->get()}) {
    if (absl::Status status = builder->Finish(); !status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::StatusOr<PackChatResult> PackChatJsonl(const std::string& chat_jsonl,
                                             const Tokenizer& tokenizer,
                                             int64_t seq_length,
                                             int64_t pad_seq_to_mult,
                                             const std::string& prefix) {
  absl::StatusOr<std::vector<Conversation>> conversations =
      ReadChatJsonl(chat_jsonl);
  if (!conversations.ok()) return conversations.status();
  std::vector<SftSequence> sequences;
  for (const Conversation& conversation : *conversations) {
    absl::StatusOr<SftSequence> sequence =
        RenderConversation(conversation, tokenizer);
    if (!sequence.ok()) return sequence.status();
    sequences.push_back(std::move(*sequence));
  }
  absl::StatusOr<PackedSequences> packed = PackSequences(
      sequences, {seq_length, pad_seq_to_mult, tokenizer.pad_id()});
  if (!packed.ok()) return packed.status();
  if (absl::Status status = WritePackedSft(
          prefix, packed->packs, DtypeForVocabSize(tokenizer.vocab_size()));
      !status.ok()) {
    return status;
  }
  return PackChatResult{static_cast<int64_t>(conversations->size()),
                        packed->stats};
}

ShiftedTargets TargetsOf(const PackedRow& row, int shift) {
  const size_t length = row.tokens.size();
  ShiftedTargets targets{std::vector<int32_t>(length, 0),
                         std::vector<uint8_t>(length, 0)};
  for (size_t k = 0; k + 1 < row.cu_seqlens.size(); ++k) {
    const int64_t end = row.cu_seqlens[k + 1];
    for (int64_t p = row.cu_seqlens[k]; p + shift < end; ++p) {
      targets.labels[p] = row.tokens[p + shift];
      targets.loss_mask[p] = row.loss_mask[p + shift];
    }
  }
  return targets;
}

absl::StatusOr<std::unique_ptr<PackedSftDataset>> PackedSftDataset::Open(
    const std::string& prefix, int64_t num_samples, uint64_t seed) {
  std::unique_ptr<PackedSftDataset> dataset(new PackedSftDataset());
  std::pair<std::string, std::unique_ptr<IndexedDataset>*> parts[] = {
      {PackedTokensPrefix(prefix), &dataset->tokens_},
      {PackedLossMaskPrefix(prefix), &dataset->loss_mask_},
      {PackedCuSeqlensPrefix(prefix), &dataset->cu_seqlens_}};
  for (auto& [part_prefix, part] : parts) {
    absl::StatusOr<std::unique_ptr<IndexedDataset>> opened =
        IndexedDataset::Open(part_prefix);
    if (!opened.ok()) return opened.status();
    *part = std::move(*opened);
  }
  if (absl::Status status = dataset->Validate(); !status.ok()) return status;
  if (num_samples < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_samples must not be negative, got ", num_samples));
  }
  std::mt19937_64 rng(seed);
  std::vector<int64_t> epoch(dataset->rows());
  while (static_cast<int64_t>(dataset->order_.size()) < num_samples) {
    std::iota(epoch.begin(), epoch.end(), 0);
    SeededShuffle(rng, &epoch);
    dataset->order_.insert(dataset->order_.end(), epoch.begin(), epoch.end());
  }
  return dataset;
}

absl::Status PackedSftDataset::Validate() {
  const std::string& where = tokens_->prefix();
  auto bad = [&where](auto&&... what) {
    return absl::DataLossError(absl::StrCat(where, ": ", what...));
  };
  const int64_t rows = tokens_->sequence_count();
  if (rows == 0) return bad("no rows");
  if (loss_mask_->sequence_count() != rows ||
      cu_seqlens_->sequence_count() != rows) {
    return bad(rows, " token rows but ", loss_mask_->sequence_count(),
               " loss-mask rows and ", cu_seqlens_->sequence_count(),
               " cu_seqlens rows");
  }
  const int64_t length = tokens_->sequence_length(0);
  for (int64_t row = 0; row < rows; ++row) {
    if (tokens_->sequence_length(row) != length ||
        loss_mask_->sequence_length(row) != length) {
      return bad("row ", row, " has ", tokens_->sequence_length(row),
                 " tokens and ", loss_mask_->sequence_length(row),
                 " loss-mask entries; rows must all be ", length, " long");
    }
    const std::vector<int32_t> cu = cu_seqlens_->Sequence(row);
    if (cu.size() < 2 || cu.front() != 0 || cu.back() != length) {
      return bad("row ", row, ": cu_seqlens must run from 0 to ", length);
    }
    for (size_t k = 1; k < cu.size(); ++k) {
      if (cu[k] <= cu[k - 1]) {
        return bad("row ", row, ": cu_seqlens not increasing at ", k);
      }
    }
    for (int32_t value : loss_mask_->Sequence(row)) {
      if (value != 0 && value != 1) {
        return bad("row ", row, ": loss mask value ", value);
      }
    }
  }
  seq_length_ = length;
  return absl::OkStatus();
}

PackedRow PackedSftDataset::Row(int64_t row) const {
  PackedRow packed;
  packed.tokens = tokens_->Sequence(row);
  const std::vector<int32_t> mask = loss_mask_->Sequence(row);
  packed.loss_mask.assign(mask.begin(), mask.end());
  packed.cu_seqlens = cu_seqlens_->Sequence(row);
  return packed;
}

}  // namespace glm
