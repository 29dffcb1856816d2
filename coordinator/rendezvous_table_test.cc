#include "coordinator/rendezvous_table.h"

#include <thread>

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

}  // namespace
}  // namespace glm
