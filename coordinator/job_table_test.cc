#include "coordinator/job_table.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace glm {
namespace {

class JobTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string dir =
        std::string(std::getenv("TEST_TMPDIR")) + "/table_" +
        ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::system(("rm -rf '" + dir + "'").c_str());
    auto store = JobStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    table_ = std::make_unique<JobTable>(store_.get());
  }
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<JobTable> table_;
};

TEST_F(JobTableTest, CreateTransitionAndList) {
  v1::JobSpec spec;
  spec.set_name("a");
  auto job = table_->Create(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::PENDING);
  ASSERT_EQ(job->history_size(), 1);
  EXPECT_EQ(job->history(0).reason(), "submitted");

  auto scheduled =
      table_->Transition(job->id(), v1::SCHEDULED, "2 workers",
                         [](v1::Job* j) { j->add_worker_ids("worker-1"); });
  ASSERT_TRUE(scheduled.ok()) << scheduled.status();
  EXPECT_EQ(scheduled->worker_ids_size(), 1);

  auto illegal = table_->Transition(job->id(), v1::SUCCEEDED, "no");
  EXPECT_EQ(illegal.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(illegal.status().message().find(job->id()), std::string::npos);

  auto stored = table_->Get(job->id());
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->state(), v1::SCHEDULED);
  EXPECT_EQ(stored->history_size(), 2);

  auto scheduled_only = table_->List({v1::SCHEDULED});
  ASSERT_TRUE(scheduled_only.ok());
  EXPECT_EQ(scheduled_only->size(), 1u);
  EXPECT_TRUE(table_->List({v1::RUNNING})->empty());
  auto counts = table_->CountByState();
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ((*counts)[v1::SCHEDULED], 1);
}

// The ids of the jobs in `jobs`, in order.
std::vector<std::string> Ids(const std::vector<v1::Job>& jobs) {
  std::vector<std::string> ids;
  for (const v1::Job& job : jobs) ids.push_back(job.id());
  return ids;
}

// What a scan of the store says about the jobs in `states`.
std::vector<std::string> ScannedIds(const JobStore& store,
                                    const std::vector<v1::JobState>& states) {
  std::vector<std::string> ids;
  const absl::StatusOr<std::vector<v1::Job>> jobs = store.List();
  for (const v1::Job& job : *jobs) {
    if (std::find(states.begin(), states.end(), job.state()) != states.end()) {
      ids.push_back(job.id());
    }
  }
  return ids;
}

TEST_F(JobTableTest, LiveListsFollowEveryChangeAndSurviveAReopen) {
  // 30 jobs left in a mix of states, terminal ones among them.
  std::vector<std::string> created;
  for (int i = 0; i < 30; ++i) {
    v1::JobSpec spec;
    spec.set_name("job-" + std::to_string(i));
    created.push_back(table_->Create(spec)->id());
    if (i % 3 == 0) continue;  // PENDING
    ASSERT_TRUE(table_->Transition(created.back(), v1::SCHEDULED, "").ok());
    if (i % 3 == 1) continue;  // SCHEDULED
    ASSERT_TRUE(table_->Transition(created.back(), v1::RUNNING, "").ok());
    if (i % 5 == 0) {
      ASSERT_TRUE(table_->Transition(created.back(), v1::FAILED, "").ok());
    }
  }
  ASSERT_TRUE(table_->Transition(created[3], v1::CANCELLED, "").ok());
  const std::vector<std::vector<v1::JobState>> queries = {
      {v1::PENDING},
      {v1::SCHEDULED, v1::RUNNING},
      {v1::RUNNING, v1::PENDING, v1::RUNNING},
      {v1::FAILED},
      {}};
  // A second table over the same store rebuilds its index from it.
  JobTable reopened(store_.get());
  for (JobTable* table : {table_.get(), &reopened}) {
    for (const std::vector<v1::JobState>& states : queries) {
      absl::StatusOr<std::vector<v1::Job>> listed = table->List(states);
      ASSERT_TRUE(listed.ok()) << listed.status();
      std::vector<std::string> expected = ScannedIds(*store_, states);
      if (states.empty()) expected = Ids(*store_->List());
      EXPECT_EQ(Ids(*listed), expected);
    }
    // Pages of 4 after a given id, as the store's ListPage pages.
    std::vector<std::string> paged;
    std::string after;
    do {
      absl::StatusOr<JobStore::Page> page =
          table->ListPage({v1::SCHEDULED, v1::RUNNING}, after, 4);
      ASSERT_TRUE(page.ok()) << page.status();
      ASSERT_LE(page->jobs.size(), 4u);
      for (const v1::Job& job : page->jobs) paged.push_back(job.id());
      after = page->next_after;
    } while (!after.empty());
    EXPECT_EQ(paged, ScannedIds(*store_, {v1::SCHEDULED, v1::RUNNING}));
    absl::StatusOr<std::map<v1::JobState, int>> counts = table->CountByState();
    ASSERT_TRUE(counts.ok());
    for (v1::JobState state :
         {v1::PENDING, v1::SCHEDULED, v1::RUNNING, v1::FAILED, v1::CANCELLED}) {
      EXPECT_EQ((*counts)[state],
                static_cast<int>(ScannedIds(*store_, {state}).size()))
          << v1::JobState_Name(state);
    }
  }
  // A change through one table is seen by its own lists at once.
  ASSERT_TRUE(table_->Transition(created[0], v1::CANCELLED, "").ok());
  EXPECT_EQ(Ids(*table_->List({v1::PENDING})),
            ScannedIds(*store_, {v1::PENDING}));
}

TEST_F(JobTableTest, ConcurrentClientsMakeExactlyOneTerminalChange) {
  auto job = table_->Create(v1::JobSpec());
  ASSERT_TRUE(job.ok());
  std::atomic<int> wins{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 8; ++i) {
    clients.emplace_back([&, i] {
      v1::JobState to = i % 2 ? v1::CANCELLED : v1::FAILED;
      if (table_->Transition(job->id(), to, "race").ok()) ++wins;
    });
  }
  for (std::thread& client : clients) client.join();
  EXPECT_EQ(wins.load(), 1);
  EXPECT_EQ(table_->Get(job->id())->history_size(), 2);
}

TEST_F(JobTableTest, WatchSeesCurrentStateThenEveryEvent) {
  auto job = table_->Create(v1::JobSpec());
  ASSERT_TRUE(job.ok());
  v1::Job current;
  auto subscription = table_->Watch(job->id(), &current);
  ASSERT_TRUE(subscription.ok());
  EXPECT_EQ(current.state(), v1::PENDING);

  v1::StepMetrics metrics;
  metrics.set_iteration(3);
  metrics.set_lm_loss(2.5);
  ASSERT_TRUE(table_->RecordMetrics(job->id(), metrics).ok());
  ASSERT_TRUE(table_->Transition(job->id(), v1::CANCELLED, "stop").ok());

  auto first = (*subscription)->Next(absl::Seconds(1));
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->metrics().iteration(), 3);
  EXPECT_DOUBLE_EQ(first->job().latest_metrics().lm_loss(), 2.5);
  auto second = (*subscription)->Next(absl::Seconds(1));
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->state_change().to(), v1::CANCELLED);
  EXPECT_EQ(second->job().state(), v1::CANCELLED);
  EXPECT_FALSE((*subscription)->Next(absl::Milliseconds(10)).has_value());

  EXPECT_EQ(table_->Watch("job-424242", &current).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace glm
