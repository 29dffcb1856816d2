#include "coordinator/worker_service.h"

#include <iostream>

namespace glm {
namespace {

// How often an assignment stream looks at whether its worker or the server went
// away.
constexpr absl::Duration kStreamPoll = absl::Milliseconds(200);

}  // namespace

WorkerServiceImpl::WorkerServiceImpl(const RpcEnv& env, WorkerRegistry* workers,
                                     Scheduler* scheduler, JobTable* jobs,
                                     int64_t heartbeat_interval_ms,
                                     const std::atomic<bool>* stopping)
    : env_(env),
      workers_(workers),
      scheduler_(scheduler),
      jobs_(jobs),
      heartbeat_interval_ms_(heartbeat_interval_ms),
      stopping_(stopping) {}

void WorkerServiceImpl::ScheduleReady() {
  if (absl::Status scheduled = scheduler_->ScheduleReady(); !scheduled.ok()) {
    std::cerr << "glm-coordinator: scheduling: " << scheduled << "\n";
  }
}

grpc::Status WorkerServiceImpl::RegisterWorker(
    grpc::ServerContext* context, const v1::RegisterWorkerRequest* request,
    v1::RegisterWorkerResponse* response) {
  return GuardRpc(
      env_, *context,
      {"WorkerService/RegisterWorker", Access::kWorkerToken,
       [&] { return response->worker_id(); }},
      [&](const Caller&) {
        if (request->device_kind() == v1::DEVICE_KIND_UNSPECIFIED) {
          return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                              "device_kind: must be CPU or CUDA");
        }
        WorkerIdentity identity = workers_->Register(*request, UnixMillisNow());
        response->set_worker_id(identity.id);
        response->set_worker_secret(identity.secret);
        response->set_heartbeat_interval_ms(heartbeat_interval_ms_);
        response->set_heartbeat_timeout_ms(workers_->heartbeat_timeout_ms());
        ScheduleReady();
        return grpc::Status::OK;
      });
}

grpc::Status WorkerServiceImpl::Heartbeat(grpc::ServerContext* context,
                                          const v1::HeartbeatRequest* request,
                                          v1::HeartbeatResponse* response) {
  return GuardRpc(
      env_, *context, {"WorkerService/Heartbeat", Access::kRegisteredWorker},
      [&](const Caller& caller) {
        grpc::Status allowed = CheckCallerIs(caller, request->worker_id());
        if (allowed.ok() && !request->job_id().empty()) {
          allowed = ToGrpcStatus(workers_->CheckAssignedJob(
              request->worker_id(), request->job_id()));
        }
        if (!allowed.ok()) return allowed;
        absl::StatusOr<v1::HeartbeatResponse> answer =
            scheduler_->OnHeartbeat(*request, UnixMillisNow());
        if (!answer.ok()) return ToGrpcStatus(answer.status());
        *response = *std::move(answer);
        return grpc::Status::OK;
      });
}

grpc::Status WorkerServiceImpl::WatchAssignments(
    grpc::ServerContext* context, const v1::WatchAssignmentsRequest* request,
    grpc::ServerWriter<v1::Assignment>* writer) {
  return GuardStream(
      env_, *context,
      {"WorkerService/WatchAssignments", Access::kRegisteredWorker},
      [&](const Caller& caller) {
        grpc::Status allowed = CheckCallerIs(caller, request->worker_id());
        if (!allowed.ok()) return allowed;
        return StreamAssignments(context, request->worker_id(), writer);
      });
}

grpc::Status WorkerServiceImpl::StreamAssignments(
    grpc::ServerContext* context, const std::string& worker_id,
    grpc::ServerWriter<v1::Assignment>* writer) {
  while (!context->IsCancelled() && !stopping_->load()) {
    absl::StatusOr<WorkerRecord> worker = workers_->Get(worker_id);
    if (!worker.ok()) return ToGrpcStatus(worker.status());
    if (!worker->alive) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          worker_id + " was declared dead; register again");
    }
    std::optional<v1::Assignment> assignment =
        workers_->NextAssignment(worker_id, kStreamPoll);
    if (assignment && !writer->Write(*assignment)) {
      return grpc::Status::CANCELLED;
    }
  }
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      "assignment stream closed");
}

grpc::Status WorkerServiceImpl::CheckReporter(const Caller& caller,
                                              const std::string& worker_id,
                                              const std::string& job_id,
                                              int attempt, int rank) {
  grpc::Status allowed = CheckCallerIs(caller, worker_id);
  if (!allowed.ok()) return allowed;
  return ToGrpcStatus(
      workers_->CheckAssigned(worker_id, job_id, attempt, rank));
}

grpc::Status WorkerServiceImpl::ReportMetrics(
    grpc::ServerContext* context, const v1::ReportMetricsRequest* request,
    v1::ReportMetricsResponse* response) {
  return GuardRpc(
      env_, *context,
      {"WorkerService/ReportMetrics", Access::kRegisteredWorker},
      [&](const Caller& caller) {
        grpc::Status allowed =
            CheckReporter(caller, request->worker_id(), request->job_id(),
                          request->attempt(), request->rank());
        if (!allowed.ok()) return allowed;
        absl::StatusOr<bool> stop = scheduler_->OnMetrics(*request);
        if (!stop.ok()) return ToGrpcStatus(stop.status());
        if (!*stop && env_.metrics) {
          env_.metrics->RecordStep(request->job_id(), request->metrics());
        }
        response->set_stop_job(*stop);
        return grpc::Status::OK;
      });
}

grpc::Status WorkerServiceImpl::ReportCheckpoint(
    grpc::ServerContext* context, const v1::ReportCheckpointRequest* request,
    v1::ReportCheckpointResponse* response) {
  return GuardRpc(
      env_, *context,
      {"WorkerService/ReportCheckpoint", Access::kRegisteredWorker,
       [&] { return request->manifest().job_id(); }},
      [&](const Caller& caller) {
        const v1::CheckpointManifest& manifest = request->manifest();
        grpc::Status allowed =
            CheckReporter(caller, request->worker_id(), manifest.job_id(),
                          request->attempt(), request->rank());
        if (!allowed.ok()) return allowed;
        return ToGrpcStatus(
            jobs_->AddCheckpoint(manifest.job_id(), manifest).status());
      });
}

grpc::Status WorkerServiceImpl::ReportJobResult(
    grpc::ServerContext* context, const v1::ReportJobResultRequest* request,
    v1::ReportJobResultResponse* response) {
  return GuardRpc(env_, *context,
                  {"WorkerService/ReportJobResult", Access::kRegisteredWorker,
                   [&] { return request->job_id(); }},
                  [&](const Caller& caller) {
                    grpc::Status allowed = CheckReporter(
                        caller, request->worker_id(), request->job_id(),
                        request->attempt(), request->rank());
                    if (!allowed.ok()) return allowed;
                    absl::Status recorded = scheduler_->OnJobResult(*request);
                    if (recorded.ok())
                      ScheduleReady();  // its workers may be free now
                    return ToGrpcStatus(recorded);
                  });
}

grpc::Status WorkerServiceImpl::DeregisterWorker(
    grpc::ServerContext* context, const v1::DeregisterWorkerRequest* request,
    v1::DeregisterWorkerResponse* response) {
  return GuardRpc(
      env_, *context,
      {"WorkerService/DeregisterWorker", Access::kRegisteredWorker,
       [&] { return request->worker_id(); }},
      [&](const Caller& caller) {
        grpc::Status allowed = CheckCallerIs(caller, request->worker_id());
        if (!allowed.ok()) return allowed;
        absl::Status removed = scheduler_->OnDeregister(request->worker_id());
        if (removed.ok()) ScheduleReady();  // a restarted job may find others
        return ToGrpcStatus(removed);
      });
}

}  // namespace glm
