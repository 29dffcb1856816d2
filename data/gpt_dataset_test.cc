#include "data/gpt_dataset.h"

#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "data/seeded_shuffle.h"
#include "gtest/gtest.h"

namespace glm {
namespace {

// Document d holds tokens base + 100 * d + k for k < its length.
std::vector<std::vector<int32_t>> MakeDocuments(const std::vector<int>& lengths,
                                                int32_t base) {
  std::vector<std::vector<int32_t>> documents;
  for (size_t d = 0; d < lengths.size(); ++d) {
    std::vector<int32_t> document;
    for (int k = 0; k < lengths[d]; ++k) document.push_back(base + 100 * d + k);
    documents.push_back(document);
  }
  return documents;
}

std::shared_ptr<const IndexedDataset> WriteAndOpen(
    const std::string& name, const std::vector<std::vector<int32_t>>& docs) {
  const std::string prefix = ::testing::TempDir() + "/" + name;
  auto builder = IndexedDatasetBuilder::Create(prefix, TokenDtype::kUint16);
  EXPECT_TRUE(builder.ok());
  for (const auto& doc : docs) EXPECT_TRUE((*builder)->AddDocument(doc).ok());
  EXPECT_TRUE((*builder)->Finish().ok());
  auto dataset = IndexedDataset::Open(prefix);
  EXPECT_TRUE(dataset.ok()) << dataset.status();
  return std::move(*dataset);
}

// The same samples computed the plain way: materialise the whole shuffled
// token stream, cut it, shuffle the cuts.
std::vector<std::vector<int32_t>> ReferenceSamples(
    const std::vector<std::vector<int32_t>>& documents, int64_t epochs,
    int64_t seq_length, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> stream;
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    std::vector<int32_t> order(documents.size());
    std::iota(order.begin(), order.end(), 0);
    SeededShuffle(rng, &order);
    for (int32_t d : order) {
      stream.insert(stream.end(), documents[d].begin(), documents[d].end());
    }
  }
  const int64_t count = (stream.size() - 1) / seq_length;
  std::vector<int64_t> shuffle(count);
  std::iota(shuffle.begin(), shuffle.end(), 0);
  SeededShuffle(rng, &shuffle);
  std::vector<std::vector<int32_t>> samples;
  for (int64_t s : shuffle) {
    samples.emplace_back(stream.begin() + s * seq_length,
                         stream.begin() + s * seq_length + seq_length + 1);
  }
  return samples;
}

TEST(GptDatasetTest, SamplesAreWindowsOfTheShuffledStream) {
  // 37 tokens per epoch, including an empty document and a short one.
  const auto documents = MakeDocuments({5, 9, 0, 1, 12, 10}, 0);
  auto dataset = GptDataset::Build(WriteAndOpen("windows", documents),
                                   {/*seq_length=*/4, /*num_samples=*/20, 7});
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  EXPECT_EQ((*dataset)->tokens_per_epoch(), 37);
  // (37 * 2 - 1) / 4 = 18 < 20 <= (37 * 3 - 1) / 4 = 27.
  EXPECT_EQ((*dataset)->epochs(), 3);
  EXPECT_EQ((*dataset)->size(), 27);
  const auto expected = ReferenceSamples(documents, 3, 4, 7);
  ASSERT_EQ(expected.size(), 27u);
  for (int64_t i = 0; i < (*dataset)->size(); ++i) {
    EXPECT_EQ((*dataset)->Sample(i), expected[i]) << "sample " << i;
  }
}

TEST(GptDatasetTest, OneEpochCoversEveryTokenOnce) {
  const auto documents = MakeDocuments({8, 8, 8, 8}, 0);  // 32 tokens
  auto dataset = GptDataset::Build(WriteAndOpen("cover", documents),
                                   {/*seq_length=*/3, /*num_samples=*/10, 1});
  ASSERT_TRUE(dataset.ok());
  ASSERT_EQ((*dataset)->epochs(), 1);
  ASSERT_EQ((*dataset)->size(), 10);  // (32 - 1) / 3
  std::multiset<int32_t> inputs;      // the first seq_length tokens of each
  for (int64_t i = 0; i < 10; ++i) {
    const std::vector<int32_t> sample = (*dataset)->Sample(i);
    ASSERT_EQ(sample.size(), 4u);
    inputs.insert(sample.begin(), sample.end() - 1);
  }
  EXPECT_EQ(inputs.size(), 30u);
  for (int32_t token : inputs) EXPECT_EQ(inputs.count(token), 1u) << token;
}

TEST(GptDatasetTest, SeedDecidesTheOrder) {
  const auto documents = MakeDocuments({20, 15, 30, 25}, 0);
  auto documents_file = WriteAndOpen("seeds", documents);
  auto a = GptDataset::Build(documents_file, {8, 10, 1234});
  auto b = GptDataset::Build(documents_file, {8, 10, 1234});
  auto c = GptDataset::Build(documents_file, {8, 10, 1235});
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  bool any_differs = false;
  for (int64_t i = 0; i < 10; ++i) {
    EXPECT_EQ((*a)->Sample(i), (*b)->Sample(i));
    any_differs |= (*a)->Sample(i) != (*c)->Sample(i);
  }
  EXPECT_TRUE(any_differs);
}

TEST(GptDatasetTest, ResumingFromConsumedSamplesContinuesTheSameSequence) {
  const auto documents = MakeDocuments({17, 33, 9, 41, 26}, 0);
  auto documents_file = WriteAndOpen("resume", documents);
  const GptDatasetConfig config{/*seq_length=*/8, /*num_samples=*/60, 99};
  auto uninterrupted = GptDataset::Build(documents_file, config);
  ASSERT_TRUE(uninterrupted.ok());
  std::vector<std::vector<int32_t>> seen;
  for (int64_t i = 0; i < 60; ++i) seen.push_back((*uninterrupted)->Sample(i));

  const int64_t consumed_samples = 23;  // stopped after 23 samples
  auto resumed = GptDataset::Build(documents_file, config);  // fresh process
  ASSERT_TRUE(resumed.ok());
  for (int64_t i = consumed_samples; i < 60; ++i) {
    EXPECT_EQ((*resumed)->Sample(i), seen[i]) << "sample " << i;
  }
}

TEST(GptDatasetTest, RejectsTooLittleData) {
  auto documents_file = WriteAndOpen("tiny", MakeDocuments({3}, 0));
  auto dataset = GptDataset::Build(documents_file, {3, 1, 0});
  ASSERT_FALSE(dataset.ok());
  EXPECT_NE(dataset.status().message().find("3 tokens, fewer than one sample"),
            std::string::npos)
      << dataset.status();
  EXPECT_FALSE(GptDataset::Build(documents_file, {0, 1, 0}).ok());
  EXPECT_FALSE(GptDataset::Build(documents_file, {2, 0, 0}).ok());
}

TEST(BlendingTest, FollowsMegatronsGreedyRule) {
  std::vector<int16_t> dataset_index;
  std::vector<int64_t> dataset_sample_index;
  BuildBlendingIndices({0.7, 0.3}, 1000, &dataset_index, &dataset_sample_index);
  // Worked by hand: errors w * max(i, 1) - taken.
  EXPECT_EQ(
      std::vector<int16_t>(dataset_index.begin(), dataset_index.begin() + 5),
      (std::vector<int16_t>{0, 1, 0, 0, 1}));
  EXPECT_EQ(std::vector<int64_t>(dataset_sample_index.begin(),
                                 dataset_sample_index.begin() + 5),
            (std::vector<int64_t>{0, 0, 1, 2, 1}));
  int64_t taken = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    taken += dataset_index[i] == 1;
    EXPECT_LE(std::abs(taken - 0.3 * (i + 1)), 1.0) << "after " << i + 1;
  }
  EXPECT_EQ(taken, 300);
}

TEST(BlendingTest, SamplesComeFromTheChosenComponent) {
  auto a = WriteAndOpen("blend_a", MakeDocuments({50, 60, 70}, 0));
  auto b = WriteAndOpen("blend_b", MakeDocuments({40, 30}, 10000));
  const GptDatasetConfig config{/*seq_length=*/16, /*num_samples=*/40, 5};
  auto blend = BlendedDataset::Build({{3.0, a}, {1.0, b}}, config);
  ASSERT_TRUE(blend.ok()) << blend.status();
  EXPECT_EQ((*blend)->size(), 40);
  auto only_b = GptDataset::Build(b, {16, 10, 5});
  ASSERT_TRUE(only_b.ok());
  int64_t from_b = 0;
  for (int64_t i = 0; i < 40; ++i) {
    const std::vector<int32_t> sample = (*blend)->Sample(i);
    ASSERT_EQ(sample.size(), 17u);
    const bool is_b = (*blend)->dataset_index(i) == 1;
    for (int32_t token : sample) EXPECT_EQ(token >= 10000, is_b);
    // The k-th sample taken from b is b's own k-th sample.
    if (is_b) {
      EXPECT_EQ(sample, (*only_b)->Sample(from_b++));
    }
  }
  EXPECT_EQ(from_b, 10);
}

TEST(BlendingTest, RejectsBadWeights) {
  auto a = WriteAndOpen("weights_a", MakeDocuments({50}, 0));
  EXPECT_FALSE(BlendedDataset::Build({{0.0, a}}, {8, 4, 0}).ok());
  EXPECT_FALSE(BlendedDataset::Build({{-1.0, a}, {1.0, a}}, {8, 4, 0}).ok());
  EXPECT_FALSE(BlendedDataset::Build({}, {8, 4, 0}).ok());
}

TEST(BuildPretrainDatasetTest, ParsesMegatronDataPaths) {
  WriteAndOpen("path_a", MakeDocuments({50, 60}, 0));
  WriteAndOpen("path_b", MakeDocuments({40, 30}, 10000));
  const std::string a = ::testing::TempDir() + "/path_a";
  const std::string b = ::testing::TempDir() + "/path_b";
  const GptDatasetConfig config{8, 12, 3};
  auto single = BuildPretrainDataset(a, config);
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_GE((*single)->size(), 12);
  auto blend = BuildPretrainDataset("0.5 " + a + " 0.5 " + b, config);
  ASSERT_TRUE(blend.ok()) << blend.status();
  EXPECT_EQ((*blend)->size(), 12);
  EXPECT_EQ((*blend)->seq_length(), 8);
  auto not_weight = BuildPretrainDataset("half " + a + " 0.5 " + b, config);
  ASSERT_FALSE(not_weight.ok());
  EXPECT_NE(not_weight.status().message().find("'half' is not a weight"),
            std::string::npos);
  EXPECT_FALSE(BuildPretrainDataset("0.5 " + a + " " + b, config).ok());
  EXPECT_FALSE(BuildPretrainDataset(a + "_missing", config).ok());
}

}  // namespace
}  // namespace glm
