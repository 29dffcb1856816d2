// The coordinator's jobs: the durable JobStore plus the lifecycle rules, under
// one lock, so concurrent clients (users cancelling, workers reporting, the
// scheduler assigning) see and make only legal changes. Every change is written
// before it is announced to watchers.
#ifndef GLM_COORDINATOR_JOB_TABLE_H_
#define GLM_COORDINATOR_JOB_TABLE_H_

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/job_events.h"
#include "coordinator/job_store.h"
#include "proto/job_service.pb.h"

namespace glm {

class JobTable {
 public:
  // `store` must outlive the table.
  explicit JobTable(JobStore* store);

  // Stores a new PENDING job for an already validated spec.
  absl::StatusOr<v1::Job> Create(const v1::JobSpec& spec);
  absl::StatusOr<v1::Job> Get(const std::string& id);
  // Jobs in id order; `states` empty means every state. Only live states
  // (PENDING, SCHEDULED, RUNNING) asked for: read by id from the table's
  // index, at a cost in the live jobs, not in every job ever stored.
  absl::StatusOr<std::vector<v1::Job>> List(
      const std::vector<v1::JobState>& states);
  // At most `limit` of them, after the job `after_id` (JobStore::ListPage).
  absl::StatusOr<JobStore::Page> ListPage(
      const std::vector<v1::JobState>& states, const std::string& after_id,
      size_t limit);

  // Moves the job to `to` (FAILED_PRECONDITION when illegal). `also` edits the
  // job in the same atomic step (e.g. records the workers it was scheduled on).
  absl::StatusOr<v1::Job> Transition(
      const std::string& id, v1::JobState to, const std::string& reason,
      const std::function<void(v1::Job*)>& also = nullptr);

  // A step's metrics become the job's latest and are announced to watchers.
  absl::StatusOr<v1::Job> RecordMetrics(const std::string& id,
                                        const v1::StepMetrics& metrics);
  absl::StatusOr<v1::Job> AddCheckpoint(const std::string& id,
                                        const v1::CheckpointManifest& manifest);

  // The job as it stands now and a subscription to every later event, taken
  // together so that no event falls between them.
  absl::StatusOr<std::shared_ptr<JobSubscription>> Watch(const std::string& id,
                                                         v1::Job* current);

  // Number of jobs in each state (from the index: no scan).
  absl::StatusOr<std::map<v1::JobState, int>> CountByState();

 private:
  absl::Status PutAndPublish(
      const v1::Job& job, v1::JobEvent event,
      JobStore::Durability durability = JobStore::Durability::kSync)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Builds the index from the store on first use (the store may hold jobs
  // from an earlier run of the coordinator).
  absl::Status EnsureIndex() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records a stored job's move from `from` (UNSPECIFIED: a new job) to `to`.
  void Reindex(const std::string& id, v1::JobState from, v1::JobState to)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The page of live jobs in `states` read by id, as the store's ListPage.
  absl::StatusOr<JobStore::Page> LivePage(
      const std::vector<v1::JobState>& states, const std::string& after_id,
      size_t limit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  JobStore* const store_;
  JobEventHub events_;
  absl::Mutex mu_;
  // The scheduler lists the pending and the active jobs on every submit,
  // cancel and result; a scan of the store parses every job ever submitted
  // (Submit p50 141 ms at 4k stored jobs, bench/NOTES.md). The ids of live
  // jobs per state and the count in every state are kept beside the store,
  // changed under mu_ with each write.
  bool indexed_ ABSL_GUARDED_BY(mu_) = false;
  std::map<v1::JobState, std::set<std::string>> live_ids_ ABSL_GUARDED_BY(mu_);
  std::map<v1::JobState, int> counts_ ABSL_GUARDED_BY(mu_);
};

int64_t UnixMillisNow();

}  // namespace glm

#endif  // GLM_COORDINATOR_JOB_TABLE_H_
