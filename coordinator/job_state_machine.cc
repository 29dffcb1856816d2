#include "coordinator/job_state_machine.h"

#include "absl/strings/str_cat.h"

namespace glm {

using v1::JobState;

bool IsTerminalState(JobState state) {
  return state == v1::SUCCEEDED || state == v1::FAILED ||
         state == v1::CANCELLED;
}

namespace {

bool IsLegal(JobState from, JobState to) {
  switch (from) {
    case v1::PENDING:
      return to == v1::SCHEDULED || to == v1::CANCELLED || to == v1::FAILED;
    case v1::SCHEDULED:
      return to == v1::RUNNING || to == v1::PENDING || to == v1::FAILED ||
             to == v1::CANCELLED;
    case v1::RUNNING:
      return to == v1::SUCCEEDED || to == v1::FAILED || to == v1::CANCELLED ||
             to == v1::PENDING;
    default:
      return false;
  }
}

}  // namespace

absl::Status CheckTransition(JobState from, JobState to) {
  if (IsLegal(from, to)) return absl::OkStatus();
  std::string why = IsTerminalState(from) ? " is final" : "";
  if (why.empty())
    why = absl::StrCat(" cannot move to ", v1::JobState_Name(to));
  return absl::FailedPreconditionError(absl::StrCat(
      "illegal job state transition ", v1::JobState_Name(from), " -> ",
      v1::JobState_Name(to), ": ", v1::JobState_Name(from), why));
}

absl::Status ApplyTransition(JobState to, const std::string& reason,
                             int64_t now_unix_ms, v1::Job* job) {
  if (absl::Status legal = CheckTransition(job->state(), to); !legal.ok()) {
    return legal;
  }
  v1::StateChange* change = job->add_history();
  change->set_from(job->state());
  change->set_to(to);
  change->set_unix_ms(now_unix_ms);
  change->set_reason(reason);
  job->set_state(to);
  job->set_updated_unix_ms(now_unix_ms);
  if (to == v1::FAILED || to == v1::CANCELLED) job->set_message(reason);
  if (IsTerminalState(to) || to == v1::PENDING) job->clear_worker_ids();
  return absl::OkStatus();
}

}  // namespace glm
