#include "coordinator/rendezvous_table.h"

#include <cstdint>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace glm {
namespace {

TEST(RendezvousTableTest, WaitReturnsOnceEveryKeyIsSet) {
  RendezvousTable table;
  table.Set("job-1/attempt-1", "rank0", "addr0");
  std::thread late([&] {
    absl::SleepFor(absl::Milliseconds(50));
    table.Set("job-1/attempt-1", "rank1", "addr1");
  });
  auto values =
      table.Wait("job-1/attempt-1", {"rank0", "rank1"}, absl::Seconds(5));
  late.join();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, (std::vector<std::string>{"addr0", "addr1"}));
}

TEST(RendezvousTableTest, WaitTimesOutNamingMissingKeys) {
  RendezvousTable table;
  table.Set("s", "a", "1");
  const absl::Time start = absl::Now();
  auto values = table.Wait("s", {"a", "b"}, absl::Milliseconds(100));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  EXPECT_EQ(values.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(values.status().message().find(": b"), std::string::npos)
      << values.status();
}

TEST(RendezvousTableTest, ScopesAreSeparateAndDropForgets) {
  RendezvousTable table;
  table.Set("job-1/attempt-1", "k", "old");
  EXPECT_FALSE(table.Get("job-1/attempt-2", "k").has_value());
  table.DropScope("job-1/attempt-1");
  EXPECT_FALSE(table.Get("job-1/attempt-1", "k").has_value());
}

TEST(RendezvousTableTest, AddCountsAndRefusesNonIntegers) {
  RendezvousTable table;
  EXPECT_EQ(*table.Add("s", "n", 2), 2);
  EXPECT_EQ(*table.Add("s", "n", 3), 5);
  EXPECT_EQ(*table.Get("s", "n"), "5");
  table.Set("s", "text", "abc");
  EXPECT_EQ(table.Add("s", "text", 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(RendezvousTableTest, AddRefusesASumPastInt64AndKeepsTheValue) {
  RendezvousTable table;
  table.Set("s", "n", "5");
  absl::StatusOr<int64_t> sum =
      table.Add("s", "n", std::numeric_limits<int64_t>::max());
  EXPECT_EQ(sum.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(sum.status().message().find("key n holds 5"), std::string::npos)
      << sum.status();
  EXPECT_EQ(*table.Get("s", "n"), "5");
  table.Set("s", "low", absl::StrCat(std::numeric_limits<int64_t>::min()));
  EXPECT_EQ(table.Add("s", "low", -1).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(*table.Add("s", "low", 1), std::numeric_limits<int64_t>::min() + 1);
}

}  // namespace
}  // namespace glm
