#include "data/sequence_packing.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace glm {
namespace {

int64_t RoundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// Lays the chosen sequences of one row out as tokens, masks and cu_seqlens.
Pack BuildPack(const std::vector<SftSequence>& sequences,
               const std::vector<int64_t>& members,
               const std::vector<int64_t>& lengths,
               const PackingConfig& config) {
  Pack pack;
  pack.tokens.reserve(config.seq_length);
  pack.loss_mask.reserve(config.seq_length);
  pack.cu_seqlens.push_back(0);
  for (int64_t id : members) {
    const SftSequence& sequence = sequences[id];
    const int64_t length = lengths[id];
    pack.tokens.insert(pack.tokens.end(), sequence.tokens.begin(),
                       sequence.tokens.begin() + length);
    pack.loss_mask.insert(pack.loss_mask.end(), sequence.loss_mask.begin(),
                          sequence.loss_mask.begin() + length);
    const int64_t padded = RoundUp(length, config.pad_seq_to_mult);
    pack.tokens.insert(pack.tokens.end(), padded - length, config.pad_id);
    pack.loss_mask.insert(pack.loss_mask.end(), padded - length, 0);
    pack.cu_seqlens.push_back(pack.tokens.size());
    pack.sequence_ids.push_back(id);
    pack.sequence_lengths.push_back(length);
  }
  if (static_cast<int64_t>(pack.tokens.size()) < config.seq_length) {
    pack.tokens.resize(config.seq_length, config.pad_id);
    pack.loss_mask.resize(config.seq_length, 0);
    pack.cu_seqlens.push_back(config.seq_length);
  }
  return pack;
}

}  // namespace

std::vector<std::vector<int64_t>> FirstFitDecreasing(
    const std::vector<int64_t>& sizes, int64_t capacity) {
  std::vector<int64_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&sizes](int64_t a, int64_t b) {
    return sizes[a] > sizes[b];
  });
  std::vector<std::vector<int64_t>> bins;
  std::vector<int64_t> room;
  for (int64_t item : order) {
    size_t bin = 0;
    while (bin < bins.size() && room[bin] < sizes[item]) ++bin;
    if (bin == bins.size()) {
      bins.emplace_back();
      room.push_back(capacity);
    }
    bins[bin].push_back(item);
    room[bin] -= sizes[item];
  }
  return bins;
}

absl::StatusOr<PackedSequences> PackSequences(
    const std::vector<SftSequence>& sequences, const PackingConfig& config) {
  if (config.pad_seq_to_mult < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pad_seq_to_mult must be at least 1, got ", config.pad_seq_to_mult));
  }
  if (config.seq_length > kMaxPackedSeqLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("seq_length ", config.seq_length, " is more than the ",
                     kMaxPackedSeqLength, " a row may have"));
  }
  // The longest sequence that still fits once padded.
  const int64_t cap =
      config.seq_length / config.pad_seq_to_mult * config.pad_seq_to_mult;
  if (cap < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "seq_length ", config.seq_length,
        " holds no sequence padded to a multiple of ", config.pad_seq_to_mult));
  }
  PackedSequences packed;
  PackingStats& stats = packed.stats;
  std::vector<int64_t> lengths(sequences.size());
  std::vector<int64_t> padded(sequences.size());
  for (size_t i = 0; i < sequences.size(); ++i) {
    const SftSequence& sequence = sequences[i];
    if (sequence.tokens.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", i, " is empty"));
    }
    if (sequence.loss_mask.size() != sequence.tokens.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence ", i, " has ", sequence.tokens.size(), " tokens but ",
          sequence.loss_mask.size(), " loss-mask entries"));
    }
    lengths[i] = std::min<int64_t>(sequence.tokens.size(), cap);
    padded[i] = RoundUp(lengths[i], config.pad_seq_to_mult);
    stats.truncated_sequences += lengths[i] < int64_t(sequence.tokens.size());
    stats.real_tokens += lengths[i];
    stats.padded_sequence_tokens += padded[i];
    stats.supervised_tokens += std::count(
        sequence.loss_mask.begin(), sequence.loss_mask.begin() + lengths[i], 1);
  }
  for (const std::vector<int64_t>& members :
       FirstFitDecreasing(padded, config.seq_length)) {
    packed.packs.push_back(BuildPack(sequences, members, lengths, config));
  }
  stats.sequences = sequences.size();
  stats.rows = packed.packs.size();
  stats.token_slots = stats.rows * config.seq_length;
  return packed;
}

}  // namespace glm
