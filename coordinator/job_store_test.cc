#include "coordinator/job_store.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace glm {
namespace {

std::string FreshDir(const std::string& name) {
  std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::system(("rm -rf '" + dir + "'").c_str());
  return dir;
}

TEST(JobStoreTest, JobsAndCounterSurviveReopen) {
  const std::string dir = FreshDir("reopen");
  {
    auto store = JobStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status();
    auto first = (*store)->AllocateJobId();
    auto second = (*store)->AllocateJobId();
    ASSERT_TRUE(first.ok() && second.ok());
    EXPECT_EQ(*first, "job-" + (*store)->tag() + "-000001");
    EXPECT_EQ(*second, "job-" + (*store)->tag() + "-000002");
    v1::Job job;
    job.set_id(*first);
    job.set_state(v1::CANCELLED);
    job.mutable_spec()->set_name("tiny");
    v1::StateChange* change = job.add_history();
    change->set_from(v1::PENDING);
    change->set_to(v1::CANCELLED);
    change->set_reason("user");
    ASSERT_TRUE((*store)->Put(job).ok());
  }
  auto store = JobStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  auto job = (*store)->Get("job-" + (*store)->tag() + "-000001");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec().name(), "tiny");
  EXPECT_EQ(job->state(), v1::CANCELLED);
  ASSERT_EQ(job->history_size(), 1);
  EXPECT_EQ(job->history(0).reason(), "user");
  auto next = (*store)->AllocateJobId();
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(*next, "job-" + (*store)->tag() + "-000003");
}

TEST(JobStoreTest, EachNewStoreDrawsItsOwnTagAndKeepsIt) {
  auto first = JobStore::Open(FreshDir("tag_first"));
  auto second = JobStore::Open(FreshDir("tag_second"));
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ((*first)->tag().size(), 6u);
  EXPECT_EQ((*first)->tag().find_first_not_of("0123456789abcdef"),
            std::string::npos);
  // 2^-24 odds that two stores draw the same tag.
  EXPECT_NE((*first)->tag(), (*second)->tag());
  EXPECT_NE(*(*first)->AllocateJobId(), *(*second)->AllocateJobId());

  const std::string tag = (*first)->tag();
  first->reset();
  auto reopened =
      JobStore::Open(std::string(std::getenv("TEST_TMPDIR")) + "/tag_first");
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ((*reopened)->tag(), tag);
}

TEST(JobStoreTest, ListIsInIdOrderAndGetMissingIsNotFound) {
  auto store = JobStore::Open(FreshDir("list"));
  ASSERT_TRUE(store.ok());
  for (const char* id : {"job-000002", "job-000010", "job-000001"}) {
    v1::Job job;
    job.set_id(id);
    ASSERT_TRUE((*store)->Put(job).ok());
  }
  auto jobs = (*store)->List();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 3u);
  EXPECT_EQ((*jobs)[0].id(), "job-000001");
  EXPECT_EQ((*jobs)[1].id(), "job-000002");
  EXPECT_EQ((*jobs)[2].id(), "job-000010");
  auto missing = (*store)->Get("job-999999");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("job-999999"), std::string::npos);
}

TEST(JobStoreTest, OpenOnAFileIsAnError) {
  const std::string path = FreshDir("a_file");
  std::system(("touch '" + path + "'").c_str());
  auto store = JobStore::Open(path);
  EXPECT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find(path), std::string::npos);
}

// The sequence numbers of the stored audit entries, oldest first.
std::vector<int64_t> AuditSequences(const JobStore& store) {
  std::vector<int64_t> sequences;
  // Held in a local: a range-for over *store.ListAudit(...) would read a
  // destroyed temporary.
  const absl::StatusOr<std::vector<v1::AuditEntry>> entries =
      store.ListAudit(0, 1000);
  EXPECT_TRUE(entries.ok()) << entries.status();
  if (!entries.ok()) return sequences;
  for (const v1::AuditEntry& entry : *entries) {
    sequences.push_back(entry.sequence());
  }
  return sequences;
}

TEST(JobStoreTest, AuditLogKeepsTheNewestEntriesAcrossReopens) {
  const std::string dir = FreshDir("audit");
  {
    auto store = JobStore::Open(dir);
    ASSERT_TRUE(store.ok());
    for (int i = 0; i < 5; ++i) {
      v1::AuditEntry entry;
      entry.set_method(i % 2 ? "JobService/CancelJob" : "JobService/SubmitJob");
      ASSERT_TRUE(
          (*store)->AppendAudit(entry, 3, JobStore::Durability::kSync).ok());
      EXPECT_EQ(entry.sequence(), i + 1);
    }
    EXPECT_EQ(AuditSequences(**store), (std::vector<int64_t>{3, 4, 5}));
    auto after = (*store)->ListAudit(3, 1);
    ASSERT_TRUE(after.ok());
    ASSERT_EQ(after->size(), 1u);
    EXPECT_EQ((*after)[0].sequence(), 4);
    EXPECT_EQ((*after)[0].method(), "JobService/CancelJob");
  }
  auto reopened = JobStore::Open(dir);
  ASSERT_TRUE(reopened.ok());
  v1::AuditEntry next;
  ASSERT_TRUE(
      (*reopened)->AppendAudit(next, 3, JobStore::Durability::kBuffered).ok());
  EXPECT_EQ(next.sequence(), 6);  // numbering continues
  EXPECT_EQ(AuditSequences(**reopened), (std::vector<int64_t>{4, 5, 6}));
  // A smaller bound drops the older entries at once.
  ASSERT_TRUE((*reopened)->TrimAudit(1).ok());
  EXPECT_EQ(AuditSequences(**reopened), (std::vector<int64_t>{6}));
}

}  // namespace
}  // namespace glm
