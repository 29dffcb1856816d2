#include "metrics_log/step_metrics_log.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "gtest/gtest.h"
#include "metrics_log/crc32c.h"

namespace glm {
namespace {

namespace fs = std::filesystem;

template <typename T>
T LittleEndianAt(const std::string& bytes, size_t at) {
  T value;
  std::memcpy(&value, bytes.data() + at, sizeof(T));
  return value;
}

// The records of a TFRecord file, each checked against its masked CRCs.
std::vector<std::string> ReadRecords(const std::string& bytes) {
  std::vector<std::string> records;
  size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_GE(bytes.size() - at, 16u) << "truncated record at " << at;
    const uint64_t length = LittleEndianAt<uint64_t>(bytes, at);
    EXPECT_EQ(LittleEndianAt<uint32_t>(bytes, at + 8),
              MaskedCrc32c(bytes.data() + at, 8));
    std::string record = bytes.substr(at + 12, length);
    EXPECT_EQ(LittleEndianAt<uint32_t>(bytes, at + 12 + length),
              MaskedCrc32c(record.data(), record.size()));
    records.push_back(record);
    at += 16 + length;
  }
  return records;
}

v1::StepMetrics Step(int64_t iteration, double loss) {
  v1::StepMetrics metrics;
  metrics.set_iteration(iteration);
  metrics.set_train_iters(10);
  metrics.set_lm_loss(loss);
  metrics.add_expert_load_imbalance(1.5);
  metrics.add_expert_load_imbalance(2.25);
  return metrics;
}

class StepMetricsLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = StepMetricsDir(
        fs::path(::testing::TempDir()) /
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  std::string EventFile() {
    for (const auto& entry : fs::directory_iterator(dir_)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("events.out.tfevents.", 0) == 0) return entry.path();
    }
    ADD_FAILURE() << "no event file in " << dir_;
    return "";
  }
  std::string dir_;
};

TEST_F(StepMetricsLogTest, WritesFramedEventsAfterTheVersionRecord) {
  {
    absl::StatusOr<std::unique_ptr<StepMetricsLog>> log =
        StepMetricsLog::Open(dir_);
    ASSERT_TRUE(log.ok()) << log.status();
    ASSERT_TRUE((*log)->Write(Step(1, 6.5)).ok());
    ASSERT_TRUE((*log)->Write(Step(2, 6.25)).ok());
  }
  absl::StatusOr<std::string> bytes = ReadFile(EventFile());
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const std::vector<std::string> records = ReadRecords(*bytes);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_NE(records[0].find("brain.Event:2"), std::string::npos);
  // Step 2 (field 2, varint) and lm_loss 6.25 as a float simple_value.
  EXPECT_NE(records[2].find(std::string("\x10\x02", 2)), std::string::npos);
  const float loss = 6.25f;
  std::string loss_bytes(sizeof(loss), '\0');
  std::memcpy(loss_bytes.data(), &loss, sizeof(loss));
  const size_t tag = records[2].find("lm_loss");
  ASSERT_NE(tag, std::string::npos);
  EXPECT_EQ(records[2].substr(tag + 7, 5), "\x15" + loss_bytes);
  EXPECT_NE(records[2].find("expert_load_imbalance/layer_1"),
            std::string::npos);
}

TEST_F(StepMetricsLogTest, AppendsOneJsonLinePerStepAcrossRestarts) {
  for (int64_t iteration : {1, 2}) {
    absl::StatusOr<std::unique_ptr<StepMetricsLog>> log =
        StepMetricsLog::Open(dir_);
    ASSERT_TRUE(log.ok()) << log.status();
    ASSERT_TRUE((*log)->Write(Step(iteration, 1.0 / 0.0)).ok());
  }
  absl::StatusOr<std::string> text = ReadFile(dir_ + "/steps.jsonl");
  ASSERT_TRUE(text.ok()) << text.status();
  std::vector<std::string> lines =
      absl::StrSplit(*text, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[1].find("\"iteration\":2,\"train_iters\":10,"),
            std::string::npos)
      << lines[1];
  EXPECT_NE(lines[1].find("\"lm_loss\":null"), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("\"expert_load_imbalance\":[1.5,2.25]"),
            std::string::npos)
      << lines[1];
}

}  // namespace
}  // namespace glm
