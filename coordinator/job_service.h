// JobService: what users (glmctl) call. Thin: each handler asks the job table
// or the scheduler.
#ifndef GLM_COORDINATOR_JOB_SERVICE_H_
#define GLM_COORDINATOR_JOB_SERVICE_H_

#include <atomic>

#include "coordinator/client_quota.h"
#include "coordinator/job_table.h"
#include "coordinator/rpc_guard.h"
#include "coordinator/scheduler.h"
#include "coordinator/worker_registry.h"
#include "jobspec/path_roots.h"
#include "proto/job_service.grpc.pb.h"

namespace glm {

// What the operator configured about the jobs it accepts.
struct JobServiceOptions {
  // Every path a spec names lies under one of these (jobspec/path_roots.h);
  // empty: anywhere.
  PathRoots path_roots;
  // Open WatchJob streams one client host may hold (each holds a server
  // thread for as long as its job runs).
  int max_watches_per_client = 64;
};

class JobServiceImpl final : public v1::JobService::Service {
 public:
  // `stopping` ends open WatchJob streams when the coordinator shuts down.
  // SubmitJob refuses a spec that breaks a job-spec rule, names a path
  // outside the path roots, or that none of the live `workers` can run.
  JobServiceImpl(const RpcEnv& env, JobServiceOptions options, JobTable* jobs,
                 WorkerRegistry* workers, Scheduler* scheduler,
                 const std::atomic<bool>* stopping);

  grpc::Status SubmitJob(grpc::ServerContext* context,
                         const v1::SubmitJobRequest* request,
                         v1::SubmitJobResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context,
                      const v1::GetJobRequest* request,
                      v1::Job* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context,
                        const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status CancelJob(grpc::ServerContext* context,
                         const v1::CancelJobRequest* request,
                         v1::Job* response) override;
  grpc::Status WatchJob(grpc::ServerContext* context,
                        const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status ListCheckpoints(grpc::ServerContext* context,
                               const v1::ListCheckpointsRequest* request,
                               v1::ListCheckpointsResponse* response) override;
  grpc::Status ListAudit(grpc::ServerContext* context,
                         const v1::ListAuditRequest* request,
                         v1::ListAuditResponse* response) override;

 private:
  grpc::Status StreamJob(grpc::ServerContext* context, const std::string& id,
                         grpc::ServerWriter<v1::JobEvent>* writer);

  const RpcEnv env_;
  const JobServiceOptions options_;
  ClientQuota watches_;
  JobTable* const jobs_;
  WorkerRegistry* const workers_;
  Scheduler* const scheduler_;
  const std::atomic<bool>* const stopping_;
};

}  // namespace glm

#endif  // GLM_COORDINATOR_JOB_SERVICE_H_
