// Matches jobs to workers and follows each job attempt to its end: assigns the
// ranks of PENDING jobs to idle workers, moves the job to RUNNING when every
// rank shows life, to SUCCEEDED when every rank reports success, and to FAILED
// when a rank fails or its worker goes silent. Holds one lock across each
// decision, so a worker is never given two jobs and a job never ends twice.
#ifndef GLM_COORDINATOR_SCHEDULER_H_
#define GLM_COORDINATOR_SCHEDULER_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/job_table.h"
#include "coordinator/rendezvous_table.h"
#include "coordinator/worker_registry.h"
#include "proto/worker_service.pb.h"

namespace glm {

class Scheduler {
 public:
  // The tables must outlive the scheduler.
  Scheduler(JobTable* jobs, WorkerRegistry* workers,
            RendezvousTable* rendezvous, int64_t rendezvous_timeout_ms);

  // After a coordinator restart the workers of in-flight attempts are gone:
  // SCHEDULED jobs go back to PENDING, RUNNING jobs fail.
  absl::Status RecoverAfterRestart();

  // Assigns the ranks of PENDING jobs, oldest first, to idle workers of their
  // device.
  absl::Status ScheduleReady();

  absl::StatusOr<v1::Job> Cancel(const std::string& job_id,
                                 const std::string& reason);

  // A heartbeat: keeps the worker alive, and one naming a job counts as that
  // rank showing life. The response says stop when the job has ended.
  absl::StatusOr<v1::HeartbeatResponse> OnHeartbeat(
      const v1::HeartbeatRequest& request, int64_t now_ms);
  // Step metrics of a rank: recorded on the job; true when the job has ended
  // and the rank should stop.
  absl::StatusOr<bool> OnMetrics(const v1::ReportMetricsRequest& request);
  // A rank's final word on the attempt.
  absl::Status OnJobResult(const v1::ReportJobResultRequest& request);
  // Declares silent workers dead and fails the jobs they held.
  void ExpireSilentWorkers(int64_t now_ms);

 private:
  // Ranks of the attempt in flight for one job.
  struct Attempt {
    int number = 0;
    std::vector<std::string> workers;  // by rank
    std::set<int> active;
    std::set<int> succeeded;
  };

  absl::Status ScheduleJob(const v1::Job& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkActive(const std::string& job_id, int rank)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the job to a terminal state and frees its workers and rendezvous
  // scope.
  absl::StatusOr<v1::Job> EndAttempt(const std::string& job_id, v1::JobState to,
                                     const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The rank the worker holds in the job's current attempt, or NOT_FOUND /
  // FAILED_PRECONDITION when it holds none.
  absl::StatusOr<int> RankOf(const std::string& worker_id,
                             const std::string& job_id, int attempt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  JobTable* const jobs_;
  WorkerRegistry* const workers_;
  RendezvousTable* const rendezvous_;
  const int64_t rendezvous_timeout_ms_;
  absl::Mutex mu_;
  std::map<std::string, Attempt> attempts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace glm

#endif  // GLM_COORDINATOR_SCHEDULER_H_
