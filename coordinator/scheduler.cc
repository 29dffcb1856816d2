#include "coordinator/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/assignment_builder.h"
#include "coordinator/job_state_machine.h"
#include "jobspec/device_rules.h"
#include "jobspec/job_spec_validator.h"

namespace glm {
namespace {

// Attempts are numbered by how often the job has been scheduled, so a requeued
// job's new attempt gets a fresh rendezvous scope.
int NextAttemptNumber(const v1::Job& job) {
  int scheduled = 0;
  for (const v1::StateChange& change : job.history()) {
    scheduled += change.to() == v1::SCHEDULED;
  }
  return scheduled + 1;
}

// When the job last became PENDING: submitted, or requeued for a restart.
int64_t PendingSinceMs(const v1::Job& job) {
  for (auto it = job.history().rbegin(); it != job.history().rend(); ++it) {
    if (it->to() == v1::PENDING) return it->unix_ms();
  }
  return job.created_unix_ms();
}

}  // namespace

Scheduler::Scheduler(JobTable* jobs, WorkerRegistry* workers,
                     RendezvousTable* rendezvous, int64_t rendezvous_timeout_ms)
    : jobs_(jobs),
      workers_(workers),
      rendezvous_(rendezvous),
      rendezvous_timeout_ms_(rendezvous_timeout_ms) {}

absl::Status Scheduler::RecoverAfterRestart() {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::vector<v1::Job>> in_flight =
      jobs_->List({v1::SCHEDULED, v1::RUNNING});
  if (!in_flight.ok()) return in_flight.status();
  for (const v1::Job& job : *in_flight) {
    if (job.state() == v1::RUNNING) {
      RestartOrFail(
          job.id(),
          "coordinator restarted while the job ran; its workers are gone");
      continue;
    }
    absl::StatusOr<v1::Job> requeued = jobs_->Transition(
        job.id(), v1::PENDING,
        "coordinator restarted before the job started; requeued");
    if (!requeued.ok()) return requeued.status();
  }
  return absl::OkStatus();
}

absl::Status Scheduler::ScheduleReady() {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::vector<v1::Job>> pending = jobs_->List({v1::PENDING});
  if (!pending.ok()) return pending.status();
  for (const v1::Job& job : *pending) {
    if (absl::Status scheduled = ScheduleJob(job); !scheduled.ok()) {
      return scheduled;
    }
  }
  return absl::OkStatus();
}

absl::Status Scheduler::ScheduleJob(const v1::Job& job) {
  std::vector<std::string> idle =
      workers_->IdleWorkers(DeviceKindOf(job.spec()));
  if (static_cast<int>(idle.size()) < job.spec().parallel().world_size()) {
    return absl::OkStatus();  // waits for more workers
  }
  absl::StatusOr<JobPlan> plan = ValidateJobSpec(job.spec());
  if (!plan.ok()) {
    return jobs_
        ->Transition(
            job.id(), v1::FAILED,
            absl::StrCat("cannot plan ranks: ", plan.status().message()))
        .status();
  }
  Attempt attempt;
  attempt.number = NextAttemptNumber(job);
  std::vector<v1::Assignment> assignments =
      BuildAssignments(job, *plan, attempt.number, rendezvous_timeout_ms_);
  attempt.workers.assign(idle.begin(), idle.begin() + assignments.size());
  // Whatever was written to the scope before the attempt existed is not its
  // ranks'.
  rendezvous_->DropScope(RendezvousScope(job.id(), attempt.number));
  absl::StatusOr<v1::Job> scheduled =
      jobs_->Transition(job.id(), v1::SCHEDULED,
                        absl::StrCat("attempt ", attempt.number, ": ",
                                     assignments.size(), " ranks assigned"),
                        [&](v1::Job* j) {
                          for (const std::string& worker : attempt.workers) {
                            j->add_worker_ids(worker);
                          }
                        });
  if (!scheduled.ok()) return scheduled.status();
  for (size_t rank = 0; rank < assignments.size(); ++rank) {
    workers_->Assign(attempt.workers[rank], assignments[rank]);
  }
  attempts_[job.id()] = std::move(attempt);
  return absl::OkStatus();
}

absl::StatusOr<v1::Job> Scheduler::Cancel(const std::string& job_id,
                                          const std::string& reason) {
  absl::MutexLock lock(&mu_);
  return EndAttempt(job_id, v1::CANCELLED,
                    reason.empty() ? "cancelled by user" : reason);
}

absl::StatusOr<v1::Job> Scheduler::EndAttempt(
    const std::string& job_id, v1::JobState to, const std::string& reason,
    const std::function<void(v1::Job*)>& also) {
  absl::StatusOr<v1::Job> ended = jobs_->Transition(job_id, to, reason, also);
  if (!ended.ok()) return ended;
  auto it = attempts_.find(job_id);
  if (it == attempts_.end()) return ended;
  const Attempt& attempt = it->second;
  for (size_t rank = 0; rank < attempt.workers.size(); ++rank) {
    const std::string& worker = attempt.workers[rank];
    absl::StatusOr<WorkerRecord> record = workers_->Get(worker);
    // A rank still training keeps its worker until it has stopped; one whose
    // assignment was never delivered has nothing to stop.
    const bool over = attempt.reported.count(rank) || !record.ok() ||
                      !record->alive || workers_->WithdrawAssignment(worker);
    if (over) {
      workers_->Release(worker);
    } else {
      stopping_[worker] = {
          job_id, absl::StrCat(job_id, " attempt ", attempt.number, " ended (",
                               v1::JobState_Name(to), "): ", reason)};
    }
  }
  rendezvous_->DropScope(RendezvousScope(job_id, attempt.number));
  attempts_.erase(it);
  return ended;
}

void Scheduler::RestartOrFail(const std::string& job_id,
                              const std::string& reason) {
  absl::StatusOr<v1::Job> job = jobs_->Get(job_id);
  if (!job.ok() || IsTerminalState(job->state())) return;
  const int max_restarts = job->spec().training().max_restarts();
  if (job->restarts() < max_restarts) {
    const int restart = job->restarts() + 1;
    EndAttempt(
        job_id, v1::PENDING,
        absl::StrCat("restart ", restart, " of ", max_restarts, ": ", reason),
        [restart](v1::Job* j) { j->set_restarts(restart); })
        .IgnoreError();  // the job may have ended concurrently
    return;
  }
  EndAttempt(job_id, v1::FAILED,
             max_restarts == 0
                 ? reason
                 : absl::StrCat(reason, " (after ", job->restarts(),
                                " restarts, the most allowed)"))
      .IgnoreError();
}

bool Scheduler::FreeIfStopping(const std::string& worker_id,
                               const std::string& job_id) {
  auto it = stopping_.find(worker_id);
  if (it == stopping_.end() || (!job_id.empty() && it->second.job_id != job_id))
    return false;
  stopping_.erase(it);
  workers_->Release(worker_id);
  return true;
}

absl::StatusOr<int> Scheduler::RankOf(const std::string& worker_id,
                                      const std::string& job_id, int attempt) {
  auto it = attempts_.find(job_id);
  if (it == attempts_.end() || (attempt && it->second.number != attempt)) {
    return absl::FailedPreconditionError(
        absl::StrCat(job_id, " has no attempt ",
                     attempt ? absl::StrCat(attempt) : "", " in flight"));
  }
  const std::vector<std::string>& ranks = it->second.workers;
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    if (ranks[rank] == worker_id) return static_cast<int>(rank);
  }
  return absl::FailedPreconditionError(
      absl::StrCat(worker_id, " holds no rank of ", job_id));
}

void Scheduler::MarkActive(const std::string& job_id, int rank) {
  Attempt& attempt = attempts_.at(job_id);
  attempt.active.insert(rank);
  if (attempt.active.size() != attempt.workers.size()) return;
  absl::StatusOr<v1::Job> job = jobs_->Get(job_id);
  if (job.ok() && job->state() == v1::SCHEDULED) {
    jobs_
        ->Transition(job_id, v1::RUNNING,
                     absl::StrCat("all ", attempt.workers.size(),
                                  " ranks running"))
        .IgnoreError();  // a concurrent cancel already ended it
  }
}

absl::StatusOr<v1::HeartbeatResponse> Scheduler::OnHeartbeat(
    const v1::HeartbeatRequest& request, int64_t now_ms) {
  absl::MutexLock lock(&mu_);
  if (absl::Status alive = workers_->Heartbeat(request.worker_id(), now_ms);
      !alive.ok()) {
    return alive;
  }
  v1::HeartbeatResponse response;
  if (auto stopping = stopping_.find(request.worker_id());
      stopping != stopping_.end()) {
    // Idle for longer than a heartbeat timeout after it was first told to
    // stop: it stopped but its result never arrived. (Right after the stop, an
    // idle heartbeat may come from a worker that has not yet started the rank.)
    if (stopping->second.told_ms == 0) stopping->second.told_ms = now_ms;
    if (request.job_id().empty() &&
        now_ms - stopping->second.told_ms > workers_->heartbeat_timeout_ms()) {
      FreeIfStopping(request.worker_id(), "");
      return response;
    }
    response.set_stop_job(true);
    response.set_reason(stopping->second.reason);
    return response;
  }
  if (request.job_id().empty()) return response;
  absl::StatusOr<int> rank = RankOf(request.worker_id(), request.job_id(), 0);
  if (rank.ok()) {
    MarkActive(request.job_id(), *rank);
    return response;
  }
  absl::StatusOr<v1::Job> job = jobs_->Get(request.job_id());
  response.set_stop_job(true);
  response.set_reason(job.ok() && !job->message().empty()
                          ? absl::StrCat(job->id(), " ",
                                         v1::JobState_Name(job->state()), ": ",
                                         job->message())
                          : std::string(rank.status().message()));
  return response;
}

absl::StatusOr<bool> Scheduler::OnMetrics(
    const v1::ReportMetricsRequest& request) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<int> rank = RankOf(request.worker_id(), request.job_id(), 0);
  if (!rank.ok()) return true;  // the attempt ended: stop
  // Running first, so the step that completes the set is reported as RUNNING.
  MarkActive(request.job_id(), *rank);
  absl::StatusOr<v1::Job> job =
      jobs_->RecordMetrics(request.job_id(), request.metrics());
  if (!job.ok()) return job.status();
  return false;
}

absl::Status Scheduler::OnJobResult(const v1::ReportJobResultRequest& request) {
  absl::MutexLock lock(&mu_);
  // A rank of an ended attempt has stopped: its worker may take new work.
  if (FreeIfStopping(request.worker_id(), request.job_id()))
    return absl::OkStatus();
  absl::StatusOr<int> rank =
      RankOf(request.worker_id(), request.job_id(), request.attempt());
  if (!rank.ok()) return rank.status();
  MarkActive(request.job_id(), *rank);  // a rank that finished has run
  Attempt& attempt = attempts_.at(request.job_id());
  attempt.reported.insert(*rank);
  if (!request.ok()) {
    RestartOrFail(request.job_id(),
                  absl::StrCat("rank ", *rank, " (", request.worker_id(),
                               ") failed: ", request.message()));
    return absl::OkStatus();
  }
  attempt.succeeded.insert(*rank);
  if (attempt.succeeded.size() < attempt.workers.size())
    return absl::OkStatus();
  return EndAttempt(
             request.job_id(), v1::SUCCEEDED,
             absl::StrCat("all ", attempt.workers.size(), " ranks finished"))
      .status();
}

absl::Status Scheduler::FailJobsWaitingTooLong(int64_t now_ms) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::vector<v1::Job>> pending = jobs_->List({v1::PENDING});
  if (!pending.ok()) return pending.status();
  for (const v1::Job& job : *pending) {
    const int64_t timeout_s = job.spec().scheduling_timeout_seconds();
    if (timeout_s <= 0 || now_ms - PendingSinceMs(job) < timeout_s * 1000) {
      continue;
    }
    const size_t idle = workers_->IdleWorkers(DeviceKindOf(job.spec())).size();
    absl::StatusOr<v1::Job> failed = jobs_->Transition(
        job.id(), v1::FAILED,
        absl::StrCat(
            "waited ", timeout_s, " s (scheduling_timeout_seconds) for ",
            job.spec().parallel().world_size(), " idle ", job.spec().device(),
            " workers (parallel.world_size); ", idle, " available"));
    if (!failed.ok()) return failed.status();
  }
  return absl::OkStatus();
}

absl::Status Scheduler::OnDeregister(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<WorkerRecord> gone = workers_->Remove(worker_id);
  if (!gone.ok()) return gone.status();
  stopping_.erase(worker_id);
  if (!gone->job_id.empty() && attempts_.count(gone->job_id)) {
    RestartOrFail(gone->job_id, absl::StrCat(worker_id, " (rank ", gone->rank,
                                             ") stopped and deregistered"));
  }
  return absl::OkStatus();
}

absl::Status Scheduler::CheckRendezvousMember(const std::string& worker_id,
                                              const std::string& scope) {
  absl::MutexLock lock(&mu_);
  for (const auto& [job_id, attempt] : attempts_) {
    if (RendezvousScope(job_id, attempt.number) != scope) continue;
    if (std::find(attempt.workers.begin(), attempt.workers.end(), worker_id) !=
        attempt.workers.end()) {
      return absl::OkStatus();
    }
    return absl::PermissionDeniedError(
        absl::StrCat(worker_id, " holds no rank of ", job_id, " attempt ",
                     attempt.number, ", whose rendezvous scope this is"));
  }
  return absl::OkStatus();
}

void Scheduler::ExpireSilentWorkers(int64_t now_ms) {
  absl::MutexLock lock(&mu_);
  for (const WorkerRecord& dead : workers_->ExpireSilent(now_ms)) {
    if (FreeIfStopping(dead.id, "")) continue;
    if (dead.job_id.empty() || !attempts_.count(dead.job_id)) continue;
    RestartOrFail(
        dead.job_id,
        absl::StrCat(dead.id, " (rank ", dead.rank, ") sent no heartbeat for ",
                     workers_->heartbeat_timeout_ms(), " ms"));
  }
}

}  // namespace glm
