// Offline packing of SFT sequences into fixed-length rows, as Megatron-Bridge
// packs its SFT data: each sequence is padded to a multiple of
// pad_seq_to_mult, the padded sequences are placed first-fit-decreasing into
// rows of seq_length tokens, and each row records the sequence boundaries
// (cu_seqlens) so attention and the loss stay within a sequence.
//
// A sequence longer than the largest multiple of pad_seq_to_mult that fits
// in seq_length is truncated to it (its tail is dropped, its start kept) and
// counted in PackingStats::truncated_sequences.
#ifndef GLM_DATA_SEQUENCE_PACKING_H_
#define GLM_DATA_SEQUENCE_PACKING_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "data/chat_sft.h"

namespace glm {

// Longer rows are refused before any is allocated: no model has more
// positions.
inline constexpr int64_t kMaxPackedSeqLength = int64_t{1} << 24;

struct PackingConfig {
  int64_t seq_length = 0;
  int64_t pad_seq_to_mult = 1;
  int32_t pad_id = 0;
};

// One row of seq_length tokens.
struct Pack {
  std::vector<int32_t> tokens;
  // 1 where tokens[t] is a supervised target; 0 on prompts and padding.
  std::vector<uint8_t> loss_mask;
  // Offsets of the padded sequences: 0, end of the first, ..., and last
  // seq_length. When the sequences do not fill the row, the trailing padding
  // is one more (fully masked) segment.
  std::vector<int32_t> cu_seqlens;
  // Input index and unpadded length of each sequence, in row order.
  std::vector<int64_t> sequence_ids;
  std::vector<int32_t> sequence_lengths;
};

struct PackingStats {
  int64_t sequences = 0;
  int64_t rows = 0;
  int64_t truncated_sequences = 0;
  int64_t real_tokens = 0;             // sequence tokens, no padding
  int64_t padded_sequence_tokens = 0;  // with pad_seq_to_mult padding
  int64_t token_slots = 0;             // rows * seq_length
  int64_t supervised_tokens = 0;       // loss-mask ones

  // Real tokens per token slot.
  double efficiency() const {
    return token_slots == 0 ? 0 : double(real_tokens) / token_slots;
  }
  // Padded sequence tokens per token slot: how full FFD made the rows
  // (Megatron-Bridge's packing efficiency counts the sequences as padded).
  double fill() const {
    return token_slots == 0 ? 0 : double(padded_sequence_tokens) / token_slots;
  }
  // Sequences per row.
  double packing_factor() const {
    return rows == 0 ? 0 : double(sequences) / rows;
  }
};

struct PackedSequences {
  std::vector<Pack> packs;
  PackingStats stats;
};

// First-fit-decreasing bin packing: items by decreasing size (ties by
// index), each into the first bin with room, else a new bin. Returns the
// item indices of each bin in placement order. Every size must be in
// [1, capacity].
std::vector<std::vector<int64_t>> FirstFitDecreasing(
    const std::vector<int64_t>& sizes, int64_t capacity);

// InvalidArgument on an empty sequence, a mask of the wrong length, or a
// config that cannot hold one padded token.
absl::StatusOr<PackedSequences> PackSequences(
    const std::vector<SftSequence>& sequences, const PackingConfig& config);

}  // namespace glm

#endif  // GLM_DATA_SEQUENCE_PACKING_H_
