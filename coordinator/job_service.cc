#include "coordinator/job_service.h"

#include <algorithm>
#include <iostream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/job_state_machine.h"
#include "jobspec/device_rules.h"
#include "jobspec/job_spec_validator.h"

namespace glm {
namespace {

// How often a watch stream looks at whether its client or the server went away.
constexpr absl::Duration kWatchPoll = absl::Milliseconds(200);

// A page of jobs stays well under gRPC's 4 MiB message limit (without full
// manifests) and cheap to read from the store.
constexpr int kDefaultListPageSize = 100;
constexpr int kMaxListPageSize = 1000;
// Job ids are short; a longer page token was not one of ours.
constexpr size_t kMaxPageTokenBytes = 256;

// A request's page_size as the page's length.
absl::StatusOr<int> PageSize(int32_t requested) {
  if (requested < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must not be negative, got ", requested));
  }
  if (requested == 0) return kDefaultListPageSize;
  return std::min(requested, kMaxListPageSize);
}

absl::StatusOr<int> ListJobsPageSize(const v1::ListJobsRequest& request) {
  if (request.page_token().size() > kMaxPageTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_token: ", request.page_token().size(),
                     " bytes; pass a response's next_page_token"));
  }
  return PageSize(request.page_size());
}

}  // namespace

JobServiceImpl::JobServiceImpl(const RpcEnv& env, JobServiceOptions options,
                               JobTable* jobs, WorkerRegistry* workers,
                               Scheduler* scheduler,
                               const std::atomic<bool>* stopping)
    : env_(env),
      options_(std::move(options)),
      watches_(options_.max_watches_per_client, "WatchJob streams",
               "--max-watches-per-client"),
      jobs_(jobs),
      workers_(workers),
      scheduler_(scheduler),
      stopping_(stopping) {}

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext* context,
                                       const v1::SubmitJobRequest* request,
                                       v1::SubmitJobResponse* response) {
  return GuardRpc(
      env_, *context,
      {"JobService/SubmitJob", Access::kOperator,
       [&] { return response->job().id(); }},
      [&](const Caller&) {
        absl::StatusOr<JobPlan> plan = ValidateJobSpec(request->spec());
        if (!plan.ok()) return ToGrpcStatus(plan.status());
        if (absl::Status inside =
                CheckSpecPaths(request->spec(), options_.path_roots);
            !inside.ok()) {
          return ToGrpcStatus(inside);
        }
        if (absl::Status runnable =
                CheckSomeWorkerRuns(request->spec(), workers_->AliveKinds());
            !runnable.ok()) {
          return ToGrpcStatus(runnable);
        }
        absl::StatusOr<v1::Job> job = jobs_->Create(request->spec());
        if (!job.ok()) return ToGrpcStatus(job.status());
        if (absl::Status scheduled = scheduler_->ScheduleReady();
            !scheduled.ok()) {
          std::cerr << "glm-coordinator: scheduling: " << scheduled << "\n";
        }
        absl::StatusOr<v1::Job> now = jobs_->Get(job->id());
        *response->mutable_job() = now.ok() ? *now : *job;
        return grpc::Status::OK;
      });
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext* context,
                                    const v1::GetJobRequest* request,
                                    v1::Job* response) {
  return GuardRpc(env_, *context, {"JobService/GetJob", Access::kOperator},
                  [&](const Caller&) {
                    absl::StatusOr<v1::Job> job = jobs_->Get(request->id());
                    if (!job.ok()) return ToGrpcStatus(job.status());
                    *response = *std::move(job);
                    return grpc::Status::OK;
                  });
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext* context,
                                      const v1::ListJobsRequest* request,
                                      v1::ListJobsResponse* response) {
  return GuardRpc(env_, *context, {"JobService/ListJobs", Access::kOperator},
                  [&](const Caller&) {
                    absl::StatusOr<int> page_size = ListJobsPageSize(*request);
                    if (!page_size.ok())
                      return ToGrpcStatus(page_size.status());
                    std::vector<v1::JobState> states;
                    for (int state : request->states()) {
                      states.push_back(static_cast<v1::JobState>(state));
                    }
                    absl::StatusOr<JobStore::Page> page = jobs_->ListPage(
                        states, request->page_token(), *page_size);
                    if (!page.ok()) return ToGrpcStatus(page.status());
                    for (v1::Job& job : page->jobs) {
                      if (!request->full_manifests()) {
                        for (v1::CheckpointManifest& manifest :
                             *job.mutable_checkpoints()) {
                          manifest.clear_tensors();
                          manifest.clear_shards();
                        }
                      }
                      *response->add_jobs() = std::move(job);
                    }
                    response->set_next_page_token(page->next_after);
                    return grpc::Status::OK;
                  });
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext* context,
                                       const v1::CancelJobRequest* request,
                                       v1::Job* response) {
  return GuardRpc(env_, *context,
                  {"JobService/CancelJob", Access::kOperator,
                   [&] { return request->id(); }},
                  [&](const Caller&) {
                    absl::StatusOr<v1::Job> job =
                        scheduler_->Cancel(request->id(), request->reason());
                    if (!job.ok()) return ToGrpcStatus(job.status());
                    *response = *std::move(job);
                    return grpc::Status::OK;
                  });
}

grpc::Status JobServiceImpl::WatchJob(
    grpc::ServerContext* context, const v1::WatchJobRequest* request,
    grpc::ServerWriter<v1::JobEvent>* writer) {
  return GuardStream(env_, *context, {"JobService/WatchJob", Access::kOperator},
                     [&](const Caller&) {
                       absl::StatusOr<ClientQuota::Slot> slot =
                           watches_.Acquire(ClientHost(context->peer()));
                       if (!slot.ok()) return ToGrpcStatus(slot.status());
                       return StreamJob(context, request->id(), writer);
                     });
}

grpc::Status JobServiceImpl::StreamJob(
    grpc::ServerContext* context, const std::string& id,
    grpc::ServerWriter<v1::JobEvent>* writer) {
  v1::JobEvent first;
  absl::StatusOr<std::shared_ptr<JobSubscription>> subscription =
      jobs_->Watch(id, first.mutable_job());
  if (!subscription.ok()) return ToGrpcStatus(subscription.status());
  const v1::Job& current = first.job();
  if (current.history_size() > 0) {
    *first.mutable_state_change() = current.history(current.history_size() - 1);
  }
  bool ended = IsTerminalState(current.state());
  if (!writer->Write(first)) return grpc::Status::CANCELLED;
  while (!ended) {
    if (context->IsCancelled() || stopping_->load()) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "watch ended before the job did");
    }
    std::optional<v1::JobEvent> event = (*subscription)->Next(kWatchPoll);
    if (!event) continue;
    ended = IsTerminalState(event->job().state());
    if (!writer->Write(*event)) return grpc::Status::CANCELLED;
  }
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListCheckpoints(
    grpc::ServerContext* context, const v1::ListCheckpointsRequest* request,
    v1::ListCheckpointsResponse* response) {
  return GuardRpc(env_, *context,
                  {"JobService/ListCheckpoints", Access::kOperator},
                  [&](const Caller&) {
                    absl::StatusOr<v1::Job> job = jobs_->Get(request->job_id());
                    if (!job.ok()) return ToGrpcStatus(job.status());
                    *response->mutable_checkpoints() = job->checkpoints();
                    return grpc::Status::OK;
                  });
}

grpc::Status JobServiceImpl::ListAudit(grpc::ServerContext* context,
                                       const v1::ListAuditRequest* request,
                                       v1::ListAuditResponse* response) {
  return GuardRpc(
      env_, *context, {"JobService/ListAudit", Access::kOperator},
      [&](const Caller&) {
        absl::StatusOr<int> page_size = PageSize(request->page_size());
        if (!page_size.ok()) return ToGrpcStatus(page_size.status());
        // One more than the page tells whether another page follows.
        absl::StatusOr<std::vector<v1::AuditEntry>> entries =
            env_.audit->List(request->after_sequence(), *page_size + 1);
        if (!entries.ok()) return ToGrpcStatus(entries.status());
        const bool more = static_cast<int>(entries->size()) > *page_size;
        if (more) entries->pop_back();
        for (v1::AuditEntry& entry : *entries) {
          *response->add_entries() = std::move(entry);
        }
        if (more) {
          response->set_next_after_sequence(
              response->entries(response->entries_size() - 1).sequence());
        }
        return grpc::Status::OK;
      });
}

}  // namespace glm
