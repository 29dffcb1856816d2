#include "parallel/ordered_work_watch.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace glm {
namespace {

// Work whose state the test sets; counts its polls.
class SetWork : public WatchedWork {
 public:
  struct State {
    std::atomic<bool> done{false};
    std::atomic<int> polls{0};
    absl::Status error;
    std::mutex mu;  // guards error
  };
  explicit SetWork(std::shared_ptr<State> state) : state_(std::move(state)) {}
  absl::StatusOr<bool> Poll() override {
    ++state_->polls;
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->error.ok()) return state_->error;
    return state_->done.load();
  }

 private:
  std::shared_ptr<State> state_;
};

struct GiveUps {
  std::mutex mu;
  std::vector<absl::Status> seen;
  absl::Notification first;
  void operator()(const absl::Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(s);
    if (!first.HasBeenNotified()) first.Notify();
  }
};

constexpr absl::Duration kInterval = absl::Milliseconds(1);

void WaitUntil(const std::function<bool()>& condition) {
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (!condition() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
}

TEST(OrderedWorkWatchTest, FinishedWorkLeavesInOrderAndNothingIsGivenUp) {
  GiveUps give_ups;
  OrderedWorkWatch watch(kInterval,
                         [&](const absl::Status& s) { give_ups(s); });
  auto first = std::make_shared<SetWork::State>();
  auto second = std::make_shared<SetWork::State>();
  const absl::Time later = absl::Now() + absl::Hours(1);
  watch.Add(std::make_unique<SetWork>(first), "first", later);
  watch.Add(std::make_unique<SetWork>(second), "second", later);
  WaitUntil([&] { return first->polls >= 3; });
  EXPECT_EQ(watch.pending(), 2);
  // Only the oldest is polled: the second waits behind it.
  EXPECT_EQ(second->polls, 0);
  second->done = true;
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(watch.pending(), 2);
  first->done = true;
  WaitUntil([&] { return watch.pending() == 0; });
  EXPECT_EQ(watch.pending(), 0);
  EXPECT_TRUE(watch.failure().ok());
  std::lock_guard<std::mutex> lock(give_ups.mu);
  EXPECT_TRUE(give_ups.seen.empty());
}

TEST(OrderedWorkWatchTest, WorkPastItsDeadlineIsGivenUpOnceByName) {
  GiveUps give_ups;
  OrderedWorkWatch watch(kInterval,
                         [&](const absl::Status& s) { give_ups(s); });
  auto stuck = std::make_shared<SetWork::State>();
  watch.Add(std::make_unique<SetWork>(stuck), "all-to-all 3",
            absl::Now() + absl::Milliseconds(30));
  watch.Add(std::make_unique<SetWork>(std::make_shared<SetWork::State>()),
            "all-to-all 4", absl::Now() + absl::Hours(1));
  ASSERT_TRUE(give_ups.first.WaitForNotificationWithTimeout(absl::Seconds(20)));
  const absl::Status failure = watch.failure();
  EXPECT_EQ(failure.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(failure.message().find("all-to-all 3"), std::string::npos)
      << failure;
  EXPECT_EQ(watch.pending(), 0);
  // Later work is not taken, and nothing is given up twice.
  watch.Add(std::make_unique<SetWork>(std::make_shared<SetWork::State>()),
            "all-to-all 5", absl::Now());
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(watch.pending(), 0);
  std::lock_guard<std::mutex> lock(give_ups.mu);
  ASSERT_EQ(give_ups.seen.size(), 1u);
  EXPECT_EQ(give_ups.seen[0], failure);
}

TEST(OrderedWorkWatchTest, FailedWorkIsGivenUpWithItsError) {
  GiveUps give_ups;
  OrderedWorkWatch watch(kInterval,
                         [&](const absl::Status& s) { give_ups(s); });
  auto failing = std::make_shared<SetWork::State>();
  watch.Add(std::make_unique<SetWork>(failing), "broadcast",
            absl::Now() + absl::Hours(1));
  WaitUntil([&] { return failing->polls >= 1; });
  {
    std::lock_guard<std::mutex> lock(failing->mu);
    failing->error = absl::InternalError("remote process exited");
  }
  ASSERT_TRUE(give_ups.first.WaitForNotificationWithTimeout(absl::Seconds(20)));
  const absl::Status failure = watch.failure();
  EXPECT_EQ(failure.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(failure.message(), "broadcast: remote process exited");
}

TEST(OrderedWorkWatchTest, StopsPromptlyWithWorkStillRunning) {
  const absl::Time start = absl::Now();
  {
    OrderedWorkWatch watch(absl::Seconds(10), [](const absl::Status&) {});
    watch.Add(std::make_unique<SetWork>(std::make_shared<SetWork::State>()),
              "recv", absl::Now() + absl::Hours(1));
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace glm
