// Matches jobs to workers and follows each job attempt to its end: assigns the
// ranks of PENDING jobs to idle workers, moves the job to RUNNING when every
// rank shows life, to SUCCEEDED when every rank reports success. When a rank
// fails or its worker goes silent the attempt ends: the job goes back to
// PENDING for a new attempt while spec.training.max_restarts allows (workers
// resume from the job's latest checkpoint), else to FAILED. The other ranks of
// an ended attempt are told to stop and get no new assignment until they report
// their result, go silent, or heartbeat idle for a heartbeat timeout (their
// report was lost). A PENDING job still short of idle workers after its
// spec.scheduling_timeout_seconds fails. Holds one lock across each decision,
// so a worker is never given two jobs and a job never ends twice.
#ifndef GLM_COORDINATOR_SCHEDULER_H_
#define GLM_COORDINATOR_SCHEDULER_H_

#include <cstdint>
#include <functional>
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
  // SCHEDULED jobs go back to PENDING; RUNNING jobs restart (counted) while
  // restarts remain, else fail. Ranks of the old attempt still training stop
  // at their next metrics report (their attempt is unknown).
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
  // A worker that stopped: forgotten, so it gets no further assignment; a job
  // rank it still held restarts or fails its job at once.
  absl::Status OnDeregister(const std::string& worker_id);
  // PERMISSION_DENIED when `scope` is the rendezvous scope of an attempt in
  // flight that `worker_id` holds no rank of: only its ranks meet there.
  // Other scopes are no job's (an attempt's scope is emptied when it is
  // scheduled, so nothing written there earlier reaches its ranks).
  absl::Status CheckRendezvousMember(const std::string& worker_id,
                                     const std::string& scope);
  // Declares silent workers dead and restarts or fails the jobs they held.
  void ExpireSilentWorkers(int64_t now_ms);
  // Fails the PENDING jobs that have waited for workers longer than their
  // spec.scheduling_timeout_seconds as of `now_ms`.
  absl::Status FailJobsWaitingTooLong(int64_t now_ms);

 private:
  // Ranks of the attempt in flight for one job.
  struct Attempt {
    int number = 0;
    std::vector<std::string> workers;  // by rank
    std::set<int> active;
    std::set<int> succeeded;
    // Ranks that reported their result (success or failure).
    std::set<int> reported;
  };
  // A worker told to stop the rank it held in an ended attempt.
  struct Stopping {
    std::string job_id;
    std::string reason;
    // When a heartbeat first told it to stop; 0 before.
    int64_t told_ms = 0;
  };

  absl::Status ScheduleJob(const v1::Job& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkActive(const std::string& job_id, int rank)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the job to `to` (terminal, or PENDING for a restart; `also` edits it
  // in the same step) and drops its rendezvous scope. Workers whose rank
  // reported its result, or that are dead, are freed; the others stop first.
  absl::StatusOr<v1::Job> EndAttempt(
      const std::string& job_id, v1::JobState to, const std::string& reason,
      const std::function<void(v1::Job*)>& also = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A lost or failed rank: a new attempt while restarts remain, else FAILED.
  void RestartOrFail(const std::string& job_id, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees a stopping worker once its rank of `job_id` is over (`job_id` empty:
  // whatever it held).
  bool FreeIfStopping(const std::string& worker_id, const std::string& job_id)
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
  // By worker id.
  std::map<std::string, Stopping> stopping_ ABSL_GUARDED_BY(mu_);
};

}  // namespace glm

#endif  // GLM_COORDINATOR_SCHEDULER_H_
