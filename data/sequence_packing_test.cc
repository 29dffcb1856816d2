#include "data/sequence_packing.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace glm {
namespace {

constexpr int32_t kPad = 9999;

SftSequence MakeSequence(int length, int32_t first_token) {
  SftSequence sequence;
  for (int i = 0; i < length; ++i) {
    sequence.tokens.push_back(first_token + i);
    sequence.loss_mask.push_back(i % 3 == 2);
  }
  return sequence;
}

TEST(FirstFitDecreasingTest, WorkedExample) {
  // Decreasing: 7(#2) 5(#0) 4(#4) 3(#1) 2(#3) 1(#5) into capacity 8.
  EXPECT_EQ(FirstFitDecreasing({5, 3, 7, 2, 4, 1}, 8),
            (std::vector<std::vector<int64_t>>{{2, 5}, {0, 1}, {4, 3}}));
}

TEST(FirstFitDecreasingTest, PropertiesOnRandomSizes) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t capacity = 64;
    std::vector<int64_t> sizes(200);
    for (int64_t& size : sizes) size = 1 + rng() % capacity;
    const auto bins = FirstFitDecreasing(sizes, capacity);
    std::vector<int> placed(sizes.size(), 0);
    int64_t total = 0;
    std::vector<int64_t> loads;
    for (const auto& bin : bins) {
      int64_t load = 0;
      for (size_t k = 0; k < bin.size(); ++k) {
        ++placed[bin[k]];
        load += sizes[bin[k]];
        // Within a bin, items arrive in decreasing size.
        if (k > 0) {
          EXPECT_GE(sizes[bin[k - 1]], sizes[bin[k]]);
        }
      }
      EXPECT_LE(load, capacity);
      loads.push_back(load);
      total += load;
    }
    for (int count : placed) EXPECT_EQ(count, 1);
    EXPECT_GE(static_cast<int64_t>(bins.size()),
              (total + capacity - 1) / capacity);
    // First fit never leaves two bins at most half full: the later one's
    // items would have fitted in the earlier one.
    int half_empty = 0;
    for (int64_t load : loads) half_empty += 2 * load <= capacity;
    EXPECT_LE(half_empty, 1);
    // Each bin's first item did not fit in any earlier bin's final room.
    for (size_t b = 1; b < bins.size(); ++b) {
      for (size_t earlier = 0; earlier < b; ++earlier) {
        EXPECT_GT(sizes[bins[b][0]], capacity - loads[earlier]);
      }
    }
  }
}

TEST(PackSequencesTest, WorkedExampleLayoutAndStats) {
  // Lengths 5, 9, 3 pad to 8, 12, 4 (multiple of 4); rows of 16 take
  // {12, 4} and {8 + 8 trailing padding}.
  const std::vector<SftSequence> sequences = {
      MakeSequence(5, 100), MakeSequence(9, 200), MakeSequence(3, 300)};
  auto packed = PackSequences(sequences, {16, 4, kPad});
  ASSERT_TRUE(packed.ok()) << packed.status();
  ASSERT_EQ(packed->packs.size(), 2u);
  const Pack& first = packed->packs[0];
  EXPECT_EQ(first.cu_seqlens, (std::vector<int32_t>{0, 12, 16}));
  EXPECT_EQ(first.sequence_ids, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(first.tokens,
            (std::vector<int32_t>{200, 201, 202, 203, 204, 205, 206, 207, 208,
                                  kPad, kPad, kPad, 300, 301, 302, kPad}));
  EXPECT_EQ(first.loss_mask, (std::vector<uint8_t>{0, 0, 1, 0, 0, 1, 0, 0, 1, 0,
                                                   0, 0, 0, 0, 1, 0}));
  const Pack& second = packed->packs[1];
  EXPECT_EQ(second.cu_seqlens, (std::vector<int32_t>{0, 8, 16}));
  EXPECT_EQ(second.sequence_lengths, (std::vector<int32_t>{5}));

  const PackingStats& stats = packed->stats;
  EXPECT_EQ(stats.sequences, 3);
  EXPECT_EQ(stats.rows, 2);
  EXPECT_EQ(stats.real_tokens, 17);
  EXPECT_EQ(stats.padded_sequence_tokens, 24);
  EXPECT_EQ(stats.token_slots, 32);
  EXPECT_EQ(stats.supervised_tokens, 1 + 3 + 1);
  EXPECT_EQ(stats.truncated_sequences, 0);
  EXPECT_DOUBLE_EQ(stats.efficiency(), 17.0 / 32);
  EXPECT_DOUBLE_EQ(stats.fill(), 24.0 / 32);
  EXPECT_DOUBLE_EQ(stats.packing_factor(), 1.5);
}

TEST(PackSequencesTest, NoTokenLostOrDuplicated) {
  std::mt19937_64 rng(11);
  std::vector<SftSequence> sequences;
  for (int i = 0; i < 300; ++i) {
    SftSequence sequence;
    const int length = 1 + rng() % 120;
    for (int t = 0; t < length; ++t) {
      sequence.tokens.push_back(rng() % 500);
      sequence.loss_mask.push_back(rng() % 2);
    }
    sequences.push_back(sequence);
  }
  const PackingConfig config{128, 8, kPad};
  auto packed = PackSequences(sequences, config);
  ASSERT_TRUE(packed.ok()) << packed.status();

  std::multiset<std::pair<std::vector<int32_t>, std::vector<uint8_t>>>
      recovered, expected;
  for (const SftSequence& s : sequences)
    expected.insert({s.tokens, s.loss_mask});
  int64_t supervised = 0, real = 0;
  for (const Pack& pack : packed->packs) {
    ASSERT_EQ(pack.tokens.size(), 128u);
    ASSERT_EQ(pack.loss_mask.size(), 128u);
    const std::vector<int32_t>& cu = pack.cu_seqlens;
    ASSERT_EQ(cu.front(), 0);
    ASSERT_EQ(cu.back(), 128);
    for (size_t k = 1; k < cu.size(); ++k) ASSERT_LT(cu[k - 1], cu[k]);
    const size_t real_segments = pack.sequence_ids.size();
    ASSERT_TRUE(cu.size() == real_segments + 1 ||
                cu.size() == real_segments + 2);
    for (size_t k = 0; k < real_segments; ++k) {
      EXPECT_EQ((cu[k + 1] - cu[k]) % 8, 0);
      const int32_t length = pack.sequence_lengths[k];
      ASSERT_LE(length, cu[k + 1] - cu[k]);
      ASSERT_GT(length, cu[k + 1] - cu[k] - 8);  // padded to the next multiple
      std::vector<int32_t> tokens(pack.tokens.begin() + cu[k],
                                  pack.tokens.begin() + cu[k] + length);
      std::vector<uint8_t> mask(pack.loss_mask.begin() + cu[k],
                                pack.loss_mask.begin() + cu[k] + length);
      EXPECT_EQ(tokens, sequences[pack.sequence_ids[k]].tokens);
      recovered.insert({tokens, mask});
      real += length;
      for (int32_t p = cu[k] + length; p < cu[k + 1]; ++p) {
        EXPECT_EQ(pack.tokens[p], kPad);
        EXPECT_EQ(pack.loss_mask[p], 0);
      }
    }
    for (int32_t p = cu[real_segments]; p < 128; ++p) {
      EXPECT_EQ(pack.tokens[p], kPad);  // trailing padding segment
      EXPECT_EQ(pack.loss_mask[p], 0);
    }
    supervised += std::count(pack.loss_mask.begin(), pack.loss_mask.end(), 1);
  }
  EXPECT_EQ(recovered, expected);
  EXPECT_EQ(packed->stats.real_tokens, real);
  EXPECT_EQ(packed->stats.supervised_tokens, supervised);
  EXPECT_EQ(packed->stats.token_slots, 128 * packed->stats.rows);
  EXPECT_EQ(packed->stats.sequences, 300);
  EXPECT_GT(packed->stats.fill(), 0.9);  // FFD packs these lengths tightly
}

TEST(PackSequencesTest, TruncatesToTheLargestPaddedLengthThatFits) {
  // seq_length 16 with multiples of 3: at most 15 tokens of a sequence.
  auto packed = PackSequences({MakeSequence(20, 0)}, {16, 3, kPad});
  ASSERT_TRUE(packed.ok()) << packed.status();
  ASSERT_EQ(packed->packs.size(), 1u);
  EXPECT_EQ(packed->packs[0].cu_seqlens, (std::vector<int32_t>{0, 15, 16}));
  EXPECT_EQ(packed->packs[0].tokens[14], 14);
  EXPECT_EQ(packed->stats.truncated_sequences, 1);
  EXPECT_EQ(packed->stats.real_tokens, 15);
  EXPECT_EQ(packed->stats.supervised_tokens, 5);  // positions 2, 5, .., 14
}

TEST(PackSequencesTest, RejectsBadInput) {
  EXPECT_FALSE(PackSequences({SftSequence{}}, {16, 1, kPad}).ok());
  SftSequence mismatched = MakeSequence(4, 0);
  mismatched.loss_mask.pop_back();
  EXPECT_FALSE(PackSequences({mismatched}, {16, 1, kPad}).ok());
  EXPECT_FALSE(PackSequences({MakeSequence(4, 0)}, {4, 8, kPad}).ok());
  EXPECT_FALSE(PackSequences({MakeSequence(4, 0)}, {16, 0, kPad}).ok());
  // A row that could not be allocated is refused before it is tried.
  EXPECT_FALSE(
      PackSequences({MakeSequence(4, 0)}, {int64_t{1} << 46, 1, kPad}).ok());
}

}  // namespace
}  // namespace glm
