// WorkerService: what glm-worker processes call. Thin: each handler checks
// that the caller is the registered worker its request names (and, for a
// report, that the worker was assigned the job rank it reports on), then asks
// the worker registry, the scheduler or the job table.
#ifndef GLM_COORDINATOR_WORKER_SERVICE_H_
#define GLM_COORDINATOR_WORKER_SERVICE_H_

#include <atomic>
#include <cstdint>

#include "coordinator/job_table.h"
#include "coordinator/rpc_guard.h"
#include "coordinator/scheduler.h"
#include "coordinator/worker_registry.h"
#include "proto/worker_service.grpc.pb.h"

namespace glm {

class WorkerServiceImpl final : public v1::WorkerService::Service {
 public:
  // `stopping` ends open WatchAssignments streams when the coordinator shuts
  // down.
  WorkerServiceImpl(const RpcEnv& env, WorkerRegistry* workers,
                    Scheduler* scheduler, JobTable* jobs,
                    int64_t heartbeat_interval_ms,
                    const std::atomic<bool>* stopping);

  grpc::Status RegisterWorker(grpc::ServerContext* context,
                              const v1::RegisterWorkerRequest* request,
                              v1::RegisterWorkerResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context,
                         const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;
  grpc::Status WatchAssignments(
      grpc::ServerContext* context, const v1::WatchAssignmentsRequest* request,
      grpc::ServerWriter<v1::Assignment>* writer) override;
  grpc::Status ReportMetrics(grpc::ServerContext* context,
                             const v1::ReportMetricsRequest* request,
                             v1::ReportMetricsResponse* response) override;
  grpc::Status ReportCheckpoint(
      grpc::ServerContext* context, const v1::ReportCheckpointRequest* request,
      v1::ReportCheckpointResponse* response) override;
  grpc::Status ReportJobResult(grpc::ServerContext* context,
                               const v1::ReportJobResultRequest* request,
                               v1::ReportJobResultResponse* response) override;
  grpc::Status DeregisterWorker(
      grpc::ServerContext* context, const v1::DeregisterWorkerRequest* request,
      v1::DeregisterWorkerResponse* response) override;

 private:
  grpc::Status StreamAssignments(grpc::ServerContext* context,
                                 const std::string& worker_id,
                                 grpc::ServerWriter<v1::Assignment>* writer);
  // PERMISSION_DENIED unless the caller is `worker_id` and holds `rank` of
  // `job_id`'s `attempt` (or held it, in an attempt that since ended).
  grpc::Status CheckReporter(const Caller& caller, const std::string& worker_id,
                             const std::string& job_id, int attempt, int rank);
  void ScheduleReady();

  const RpcEnv env_;
  WorkerRegistry* const workers_;
  Scheduler* const scheduler_;
  JobTable* const jobs_;
  const int64_t heartbeat_interval_ms_;
  const std::atomic<bool>* const stopping_;
};

}  // namespace glm

#endif  // GLM_COORDINATOR_WORKER_SERVICE_H_
