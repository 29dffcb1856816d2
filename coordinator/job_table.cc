#include "coordinator/job_table.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "coordinator/job_state_machine.h"

namespace glm {

int64_t UnixMillisNow() { return absl::ToUnixMillis(absl::Now()); }

namespace {

bool IsLive(v1::JobState state) {
  return state == v1::PENDING || state == v1::SCHEDULED || state == v1::RUNNING;
}

}  // namespace

JobTable::JobTable(JobStore* store) : store_(store) {}

absl::Status JobTable::EnsureIndex() {
  if (indexed_) return absl::OkStatus();
  absl::StatusOr<std::vector<v1::Job>> jobs = store_->List();
  if (!jobs.ok()) return jobs.status();
  for (const v1::Job& job : *jobs) {
    Reindex(job.id(), v1::JOB_STATE_UNSPECIFIED, job.state());
  }
  indexed_ = true;
  return absl::OkStatus();
}

void JobTable::Reindex(const std::string& id, v1::JobState from,
                       v1::JobState to) {
  if (from == to) return;
  if (from != v1::JOB_STATE_UNSPECIFIED) {
    --counts_[from];
    if (IsLive(from)) live_ids_[from].erase(id);
  }
  ++counts_[to];
  if (IsLive(to)) live_ids_[to].insert(id);
}

absl::StatusOr<JobStore::Page> JobTable::LivePage(
    const std::vector<v1::JobState>& states, const std::string& after_id,
    size_t limit) {
  std::set<std::string> ids;
  for (v1::JobState state : states) {
    const std::set<std::string>& live = live_ids_[state];
    ids.insert(live.upper_bound(after_id), live.end());
  }
  JobStore::Page page;
  for (const std::string& id : ids) {
    if (page.jobs.size() == limit) {
      page.next_after = page.jobs.back().id();
      break;
    }
    absl::StatusOr<v1::Job> job = store_->Get(id);
    if (!job.ok()) return job.status();
    page.jobs.push_back(*std::move(job));
  }
  return page;
}

absl::StatusOr<v1::Job> JobTable::Create(const v1::JobSpec& spec) {
  absl::MutexLock lock(&mu_);
  if (absl::Status indexed = EnsureIndex(); !indexed.ok()) return indexed;
  absl::StatusOr<std::string> id = store_->AllocateJobId();
  if (!id.ok()) return id.status();
  const int64_t now = UnixMillisNow();
  v1::Job job;
  job.set_id(*id);
  *job.mutable_spec() = spec;
  job.set_created_unix_ms(now);
  job.set_updated_unix_ms(now);
  job.set_state(v1::PENDING);
  // A job's life begins in PENDING; the first history entry records its
  // arrival.
  v1::StateChange* submitted = job.add_history();
  submitted->set_to(v1::PENDING);
  submitted->set_unix_ms(now);
  submitted->set_reason("submitted");
  v1::JobEvent event;
  *event.mutable_state_change() = *submitted;
  if (absl::Status put = PutAndPublish(job, std::move(event)); !put.ok()) {
    return put;
  }
  Reindex(job.id(), v1::JOB_STATE_UNSPECIFIED, job.state());
  return job;
}

absl::StatusOr<v1::Job> JobTable::Get(const std::string& id) {
  absl::MutexLock lock(&mu_);
  return store_->Get(id);
}

absl::StatusOr<std::vector<v1::Job>> JobTable::List(
    const std::vector<v1::JobState>& states) {
  absl::StatusOr<JobStore::Page> all =
      ListPage(states, "", std::numeric_limits<size_t>::max());
  if (!all.ok()) return all.status();
  return std::move(all->jobs);
}

absl::StatusOr<JobStore::Page> JobTable::ListPage(
    const std::vector<v1::JobState>& states, const std::string& after_id,
    size_t limit) {
  auto in_states = [&states](const v1::Job& job) {
    return std::find(states.begin(), states.end(), job.state()) != states.end();
  };
  absl::MutexLock lock(&mu_);
  if (!states.empty() && std::all_of(states.begin(), states.end(), IsLive)) {
    if (absl::Status indexed = EnsureIndex(); !indexed.ok()) return indexed;
    return LivePage(states, after_id, limit);
  }
  return store_->ListPage(after_id, limit,
                          states.empty()
                              ? std::function<bool(const v1::Job&)>()
                              : std::function<bool(const v1::Job&)>(in_states));
}

absl::StatusOr<v1::Job> JobTable::Transition(
    const std::string& id, v1::JobState to, const std::string& reason,
    const std::function<void(v1::Job*)>& also) {
  absl::MutexLock lock(&mu_);
  if (absl::Status indexed = EnsureIndex(); !indexed.ok()) return indexed;
  absl::StatusOr<v1::Job> job = store_->Get(id);
  if (!job.ok()) return job.status();
  const v1::JobState from = job->state();
  if (absl::Status moved = ApplyTransition(to, reason, UnixMillisNow(), &*job);
      !moved.ok()) {
    return absl::Status(moved.code(), absl::StrCat(id, ": ", moved.message()));
  }
  if (also) also(&*job);
  v1::JobEvent event;
  *event.mutable_state_change() = job->history(job->history_size() - 1);
  if (absl::Status put = PutAndPublish(*job, std::move(event)); !put.ok()) {
    return put;
  }
  Reindex(id, from, job->state());
  return job;
}

absl::StatusOr<v1::Job> JobTable::RecordMetrics(
    const std::string& id, const v1::StepMetrics& metrics) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<v1::Job> job = store_->Get(id);
  if (!job.ok()) return job.status();
  *job->mutable_latest_metrics() = metrics;
  job->set_updated_unix_ms(UnixMillisNow());
  v1::JobEvent event;
  *event.mutable_metrics() = metrics;
  if (absl::Status put = PutAndPublish(*job, std::move(event),
                                       JobStore::Durability::kBuffered);
      !put.ok()) {
    return put;
  }
  return job;
}

absl::StatusOr<v1::Job> JobTable::AddCheckpoint(
    const std::string& id, const v1::CheckpointManifest& manifest) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<v1::Job> job = store_->Get(id);
  if (!job.ok()) return job.status();
  *job->add_checkpoints() = manifest;
  job->set_updated_unix_ms(UnixMillisNow());
  if (absl::Status put = store_->Put(*job); !put.ok()) return put;
  return job;
}

absl::StatusOr<std::shared_ptr<JobSubscription>> JobTable::Watch(
    const std::string& id, v1::Job* current) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<v1::Job> job = store_->Get(id);
  if (!job.ok()) return job.status();
  *current = *std::move(job);
  return events_.Subscribe(id);
}

absl::StatusOr<std::map<v1::JobState, int>> JobTable::CountByState() {
  absl::MutexLock lock(&mu_);
  if (absl::Status indexed = EnsureIndex(); !indexed.ok()) return indexed;
  std::map<v1::JobState, int> counts;
  for (const auto& [state, count] : counts_) {
    if (count > 0) counts[state] = count;
  }
  return counts;
}

absl::Status JobTable::PutAndPublish(const v1::Job& job, v1::JobEvent event,
                                     JobStore::Durability durability) {
  if (absl::Status put = store_->Put(job, durability); !put.ok()) return put;
  *event.mutable_job() = job;
  events_.Publish(job.id(), event);
  return absl::OkStatus();
}

}  // namespace glm
