#include "data/packed_sft_dataset.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace glm {
namespace {

std::vector<SftSequence> RandomSequences(int count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<SftSequence> sequences(count);
  for (SftSequence& sequence : sequences) {
    const int length = 1 + rng() % 40;
    for (int t = 0; t < length; ++t) {
      sequence.tokens.push_back(rng() % 262);
      sequence.loss_mask.push_back(rng() % 2);
    }
  }
  return sequences;
}

std::vector<Pack> WritePacks(const std::string& prefix) {
  auto packed = PackSequences(RandomSequences(60, 1), {64, 4, 257});
  EXPECT_TRUE(packed.ok());
  EXPECT_TRUE(WritePackedSft(prefix, packed->packs, TokenDtype::kUint16).ok());
  return packed->packs;
}

TEST(PackedSftDatasetTest, RowsRoundTrip) {
  const std::string prefix = ::testing::TempDir() + "/round_trip";
  const std::vector<Pack> packs = WritePacks(prefix);
  auto dataset = PackedSftDataset::Open(prefix, 1, 0);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  ASSERT_EQ((*dataset)->rows(), static_cast<int64_t>(packs.size()));
  EXPECT_EQ((*dataset)->seq_length(), 64);
  for (size_t r = 0; r < packs.size(); ++r) {
    const PackedRow row = (*dataset)->Row(r);
    EXPECT_EQ(row.tokens, packs[r].tokens);
    EXPECT_EQ(row.loss_mask, packs[r].loss_mask);
    EXPECT_EQ(row.cu_seqlens, packs[r].cu_seqlens);
  }
}

TEST(PackedSftDatasetTest, EpochsVisitEveryRowOnceInASeededOrder) {
  const std::string prefix = ::testing::TempDir() + "/epochs";
  const std::vector<Pack> packs = WritePacks(prefix);
  const int64_t rows = packs.size();
  auto a = PackedSftDataset::Open(prefix, 2 * rows + 1, 42);
  auto b = PackedSftDataset::Open(prefix, 2 * rows + 1, 42);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->size(), 3 * rows);
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<std::vector<int32_t>> seen, all;
    for (int64_t i = epoch * rows; i < (epoch + 1) * rows; ++i) {
      seen.push_back((*a)->Sample(i).tokens);
      // A reopened dataset (a resumed run) gives the same sample i.
      EXPECT_EQ((*b)->Sample(i).tokens, seen.back());
    }
    for (const Pack& pack : packs) all.push_back(pack.tokens);
    std::sort(seen.begin(), seen.end());
    std::sort(all.begin(), all.end());
    EXPECT_EQ(seen, all) << "epoch " << epoch;
  }
}

TEST(TargetsOfTest, ShiftStaysWithinSequences) {
  PackedRow row;
  row.tokens = {10, 11, 12, 99, 20, 21, 99, 99};
  row.loss_mask = {0, 1, 1, 0, 0, 1, 0, 0};
  row.cu_seqlens = {0, 4, 8};
  const ShiftedTargets next = TargetsOf(row);
  EXPECT_EQ(next.labels, (std::vector<int32_t>{11, 12, 99, 0, 21, 99, 99, 0}));
  EXPECT_EQ(next.loss_mask, (std::vector<uint8_t>{1, 1, 0, 0, 1, 0, 0, 0}));
  const ShiftedTargets mtp = TargetsOf(row, 2);
  EXPECT_EQ(mtp.labels, (std::vector<int32_t>{12, 99, 0, 0, 99, 99, 0, 0}));
  EXPECT_EQ(mtp.loss_mask, (std::vector<uint8_t>{1, 0, 0, 0, 0, 0, 0, 0}));
}

TEST(PackedSftDatasetTest, DisagreeingPartsAreRejected) {
  const std::string prefix = ::testing::TempDir() + "/disagree";
  WritePacks(prefix);
  // Replace the loss masks with a dataset of one row.
  auto builder = IndexedDatasetBuilder::Create(PackedLossMaskPrefix(prefix),
                                               TokenDtype::kUint8);
  ASSERT_TRUE(builder.ok());
  ASSERT_TRUE((*builder)->AddDocument(std::vector<int32_t>(64, 0)).ok());
  ASSERT_TRUE((*builder)->Finish().ok());
  auto dataset = PackedSftDataset::Open(prefix, 1, 0);
  ASSERT_FALSE(dataset.ok());
  EXPECT_NE(dataset.status().message().find("1 loss-mask rows"),
            std::string::npos)
      << dataset.status();

  std::remove(BinPath(PackedCuSeqlensPrefix(prefix)).c_str());
  dataset = PackedSftDataset::Open(prefix, 1, 0);
  ASSERT_FALSE(dataset.ok());
  EXPECT_NE(dataset.status().message().find("_cu_seqlens.bin"),
            std::string::npos)
      << dataset.status();
}

TEST(PackChatJsonlTest, RendersPacksAndWrites) {
  const std::string chat = ::testing::TempDir() + "/chat.jsonl";
  std::ofstream(chat) << R"({"messages":[{"role":"user","content":"1+1?"},)"
                         R"({"role":"assistant","content":"2"}]})"
                      << "\n"
                      << R"({"messages":[{"role":"user","content":"Hi"},)"
                         R"({"role":"assistant","content":"Hello"}]})"
                      << "\n";
  ByteTokenizer tokenizer;
  const std::string prefix = ::testing::TempDir() + "/chat_packed";
  auto result = PackChatJsonl(chat, tokenizer, 32, 4, prefix);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->conversations, 2);
  // <|user|> \n 1+1? <|end|> <|assistant|> \n 2 <|end|>: 11 tokens, 2
  // supervised; the second: 13 tokens, 6 supervised. Padded to 12 and 16,
  // both fit one row of 32, the longer first.
  EXPECT_EQ(result->stats.rows, 1);
  EXPECT_EQ(result->stats.real_tokens, 24);
  EXPECT_EQ(result->stats.supervised_tokens, 8);
  auto dataset = PackedSftDataset::Open(prefix, 1, 0);
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  const PackedRow row = (*dataset)->Row(0);
  EXPECT_EQ(row.cu_seqlens, (std::vector<int32_t>{0, 16, 28, 32}));
  EXPECT_EQ(
      tokenizer.Decode(
          std::vector<int32_t>(row.tokens.begin(), row.tokens.begin() + 16)),
      "<|user|>\nHi<|end|><|assistant|>\nHello<|end|><|pad|><|pad|><|pad|>");
  EXPECT_EQ(row.tokens[16], ByteTokenizer::kUser);
  EXPECT_EQ(row.tokens[31], ByteTokenizer::kPad);

  EXPECT_FALSE(PackChatJsonl(chat + ".missing", tokenizer, 32, 4, prefix).ok());
}

}  // namespace
}  // namespace glm
