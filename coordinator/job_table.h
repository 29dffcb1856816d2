// The coordinator's jobs: the durable JobStore plus the lifecycle rules, under
// one lock, so concurrent clients (users cancelling, workers reporting, the
// scheduler assigning) see and make only legal changes. Every change is written
// before it is announced to watchers.
#ifndef GLM_COORDINATOR_JOB_TABLE_H_
#define GLM_COORDINATOR_JOB_TABLE_H_

#include <functional>
#include <map>
#include <memory>
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
  // Jobs in id order; `states` empty means every state.
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

  // Number of jobs in each state.
  absl::StatusOr<std::map<v1::JobState, int>> CountByState();

 private:
  absl::Status PutAndPublish(
      const v1::Job& job, v1::JobEvent event,
      JobStore::Durability durability = JobStore::Durability::kSync)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  JobStore* const store_;
  JobEventHub events_;
  absl::Mutex mu_;
};

int64_t UnixMillisNow();

}  // namespace glm

#endif  // GLM_COORDINATOR_JOB_TABLE_H_
