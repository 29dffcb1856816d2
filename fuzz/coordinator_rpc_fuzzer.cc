// Every unary coordinator RPC (JobService, WorkerService, RendezvousService)
// with its request as arbitrary bytes: the first byte picks the handler, the
// rest is parsed as that handler's request message, as gRPC hands it over. The
// real handlers run in-process, authenticated, against a coordinator whose
// store lives in a temporary folder and that holds two CPU workers running a
// two-rank job, so that requests naming them reach past the lookups.
//
// Beyond no crash: a refused request says why and leaves the store and the
// rendezvous key it names as they were; a read changes nothing; an accepted
// rendezvous Add returns the key's new value. After a request that changed
// something the coordinator is built afresh (a rendezvous write: its scope put
// back), so every input meets the same state and a finding replays on its own.
//
// Job ids carry a tag drawn by each new store; a job id in an input written
// with the tag 000000 ("job-000000-000001") names the fixture's job. Worker
// ids are random: "worker-1.1" and "worker-1.2" in an input name the
// fixture's two workers. JobService calls come with the operator token,
// the others with the worker token and the identity of the worker the
// request names (the first worker when it names none).
// WatchJob and WatchAssignments are streams, which need a live call; their
// requests are a bare id, looked up as GetJob and Heartbeat look theirs up.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "coordinator/audit_log.h"
#include "coordinator/job_service.h"
#include "coordinator/job_store.h"
#include "coordinator/job_table.h"
#include "coordinator/rendezvous_service.h"
#include "coordinator/rendezvous_table.h"
#include "coordinator/scheduler.h"
#include "coordinator/worker_registry.h"
#include "coordinator/worker_service.h"
#include "grpcpp/test/server_context_test_spouse.h"
#include "jobspec/test_specs.h"
#include "rpc/bearer_token.h"
#include "rpc/worker_identity.h"

namespace glm {
namespace {

constexpr char kOperatorToken[] = "fuzz-operator-token";
constexpr char kWorkerToken[] = "fuzz-worker-token";
// How inputs name the fixture's workers.
constexpr const char* kSeedWorkerIds[] = {"worker-1.1", "worker-1.2"};
constexpr char kSeedTagPrefix[] = "job-000000-";
// The rendezvous scope and keys the fixture sets, for inputs to find.
constexpr char kScope[] = "fuzz-scope";
// Long enough that no worker of the fixture is declared dead during a run.
constexpr int64_t kHeartbeatTimeoutMs = 24 * 3600 * 1000;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "coordinator_rpc_fuzzer: %s\n", what.c_str());
  std::abort();
}

void CheckOk(const absl::Status& status, const std::string& what) {
  if (!status.ok()) Fail(what + ": " + status.ToString());
}

// The coordinator's parts as Coordinator::Start wires them, minus the server
// and the ticker: two CPU workers registered, tiny_job.json submitted and
// scheduled on them, and two rendezvous keys set.
class FuzzCoordinator {
 public:
  FuzzCoordinator() {
    const std::filesystem::path pattern =
        std::filesystem::temp_directory_path() / "glm-rpc-fuzz-XXXXXX";
    std::string folder = pattern.string();
    if (mkdtemp(folder.data()) == nullptr) Fail("mkdtemp " + folder);
    folder_ = folder;
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(folder_);
    CheckOk(store.status(), "opening the store");
    store_ = *std::move(store);
    jobs_ = std::make_unique<JobTable>(store_.get());
    workers_ = std::make_unique<WorkerRegistry>(kHeartbeatTimeoutMs);
    rendezvous_ = std::make_unique<RendezvousTable>();
    scheduler_ = std::make_unique<Scheduler>(jobs_.get(), workers_.get(),
                                             rendezvous_.get(), 300000);
    absl::StatusOr<std::unique_ptr<AuditLog>> audit =
        AuditLog::Open(store_.get(), 1000);
    CheckOk(audit.status(), "opening the audit log");
    audit_ = *std::move(audit);
    RpcEnv env;
    env.operator_token = kOperatorToken;
    env.worker_token = kWorkerToken;
    env.workers = workers_.get();
    env.audit = audit_.get();
    job_service = std::make_unique<JobServiceImpl>(
        env, JobServiceOptions(), jobs_.get(), workers_.get(), scheduler_.get(),
        &stopping_);
    worker_service = std::make_unique<WorkerServiceImpl>(
        env, workers_.get(), scheduler_.get(), jobs_.get(), 1000, &stopping_);
    rendezvous_service = std::make_unique<RendezvousServiceImpl>(
        env, rendezvous_.get(), scheduler_.get());

    v1::RegisterWorkerRequest worker;
    worker.set_hostname("fuzz");
    worker.set_device_kind(v1::CPU);
    for (int i = 0; i < 2; ++i) {
      identities_.push_back(workers_->Register(worker, UnixMillisNow()));
    }
    absl::StatusOr<v1::Job> job = jobs_->Create(LoadTestSpec("tiny_job.json"));
    CheckOk(job.status(), "submitting the fixture's job");
    CheckOk(scheduler_->ScheduleReady(), "scheduling the fixture's job");
    job_id_prefix_ = job->id().substr(0, std::string(kSeedTagPrefix).size());
    SetRendezvousKeys();
    initial_jobs_ = StoredJobs();
  }

  ~FuzzCoordinator() {
    job_service.reset();
    worker_service.reset();
    rendezvous_service.reset();
    scheduler_.reset();
    jobs_.reset();
    store_.reset();
    std::filesystem::remove_all(folder_);
  }

  // Rewrites an id written with the seeds' tag to this store's tag.
  void ResolveJobId(std::string* id) const {
    if (absl::StartsWith(*id, kSeedTagPrefix)) {
      id->replace(0, job_id_prefix_.size(), job_id_prefix_);
    }
  }

  // Rewrites a worker id an input gives as "worker-1.N" to the fixture's.
  void ResolveWorkerId(std::string* id) const {
    for (size_t i = 0; i < identities_.size(); ++i) {
      if (*id == kSeedWorkerIds[i]) *id = identities_[i].id;
    }
  }

  // The identity a call naming `worker_id` comes with.
  const WorkerIdentity& IdentityFor(const std::string& worker_id) const {
    for (const WorkerIdentity& identity : identities_) {
      if (identity.id == worker_id) return identity;
    }
    return identities_.front();
  }

  // Every stored job, serialized, in id order.
  std::vector<std::string> StoredJobs() const {
    absl::StatusOr<std::vector<v1::Job>> jobs = store_->List();
    CheckOk(jobs.status(), "listing the store");
    std::vector<std::string> serialized;
    for (const v1::Job& job : *jobs) {
      serialized.push_back(job.SerializeAsString());
    }
    return serialized;
  }
  bool StoreAsBuilt() const { return StoredJobs() == initial_jobs_; }

  // Puts the rendezvous keys of `scope` back as built: cheaper than building
  // afresh after a rendezvous write, the only state such a write changes.
  void RestoreRendezvousScope(const std::string& scope) {
    rendezvous_->DropScope(scope);
    if (scope == kScope) SetRendezvousKeys();
  }

  std::optional<std::string> RendezvousValue(const std::string& scope,
                                             const std::string& key) const {
    return rendezvous_->Get(scope, key);
  }

  std::unique_ptr<JobServiceImpl> job_service;
  std::unique_ptr<WorkerServiceImpl> worker_service;
  std::unique_ptr<RendezvousServiceImpl> rendezvous_service;

 private:
  void SetRendezvousKeys() {
    rendezvous_->Set(kScope, "counter", "5");
    rendezvous_->Set(kScope, "text", "not a number");
  }

  std::string folder_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<JobTable> jobs_;
  std::unique_ptr<WorkerRegistry> workers_;
  std::unique_ptr<RendezvousTable> rendezvous_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<AuditLog> audit_;
  std::vector<WorkerIdentity> identities_;
  std::atomic<bool> stopping_{false};
  std::string job_id_prefix_;
  std::vector<std::string> initial_jobs_;
};

// What an input's request leads to.
struct Outcome {
  grpc::Status status;
  // True when the handler may change state when it accepts the request.
  bool writes = false;
  // For a rendezvous write, the scope it writes (nothing else changes).
  std::optional<std::string> rendezvous_scope;
};

// The scope a rendezvous write request names (both have it as field 1).
template <typename Request>
std::string ScopeOf(absl::string_view bytes) {
  Request request;
  request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
  return request.scope();
}

// Fixes up what an input names before the call: job and worker ids to this
// coordinator's, and rendezvous waits to a millisecond (the fuzzer must not
// sit out a timeout; how long is the caller's choice once it is positive).
// Returns the worker id the request names ("" for none).
template <typename Request>
std::string Prepare(const FuzzCoordinator&, Request*) {
  return "";
}
std::string Prepare(const FuzzCoordinator& coordinator,
                    v1::GetJobRequest* request) {
  coordinator.ResolveJobId(request->mutable_id());
  return "";
}
std::string Prepare(const FuzzCoordinator& coordinator,
                    v1::CancelJobRequest* request) {
  coordinator.ResolveJobId(request->mutable_id());
  return "";
}
std::string Prepare(const FuzzCoordinator& coordinator,
                    v1::ListCheckpointsRequest* request) {
  coordinator.ResolveJobId(request->mutable_job_id());
  return "";
}
// A worker's request: its job and worker ids.
template <typename Request>
std::string PrepareWorkerCall(const FuzzCoordinator& coordinator,
                              std::string* job_id, Request* request) {
  if (job_id != nullptr) coordinator.ResolveJobId(job_id);
  coordinator.ResolveWorkerId(request->mutable_worker_id());
  return request->worker_id();
}
std::string Prepare(const FuzzCoordinator& coordinator,
                    v1::HeartbeatRequest* request) {
  return PrepareWorkerCall(coordinator, request->mutable_job_id(), request);
}
std::string Prepare(const FuzzCoordinator& coordinator,
                    v1::ReportMetricsRequest* request) {
  return PrepareWorkerCall(coordinator, request->mutable_job_id(), request);
}
std::string Prepare(const FuzzCoordinator& coordinator,
                    v1::ReportCheckpointRequest* request) {
  return PrepareWorkerCall(
      coordinator, request->mutable_manifest()->mutable_job_id(), request);
}
std::string Prepare(const FuzzCoordinator& coordinator,
                    v1::ReportJobResultRequest* request) {
  return PrepareWorkerCall(coordinator, request->mutable_job_id(), request);
}
std::string Prepare(const FuzzCoordinator& coordinator,
                    v1::DeregisterWorkerRequest* request) {
  return PrepareWorkerCall(coordinator, nullptr, request);
}
std::string Prepare(const FuzzCoordinator&,
                    v1::RendezvousWaitRequest* request) {
  if (request->timeout_ms() > 1) request->set_timeout_ms(1);
  return "";
}

// Authenticates a call as the operator (JobService) or as the worker named
// `worker_id` (WorkerService, RendezvousService).
template <typename Service>
void Authenticate(const FuzzCoordinator& coordinator,
                  const std::string& worker_id,
                  grpc::testing::ServerContextTestSpouse* spouse) {
  if constexpr (std::is_same_v<Service, JobServiceImpl>) {
    spouse->AddClientMetadata(kAuthorizationHeader,
                              AuthorizationValue(kOperatorToken));
  } else {
    spouse->AddClientMetadata(kAuthorizationHeader,
                              AuthorizationValue(kWorkerToken));
    const WorkerIdentity& identity = coordinator.IdentityFor(worker_id);
    spouse->AddClientMetadata(kWorkerIdHeader, identity.id);
    spouse->AddClientMetadata(kWorkerSecretHeader, identity.secret);
  }
}

// Parses `bytes` as the request of `method` of the service `service` points
// to and calls it with an authenticated context; nullopt when the bytes are
// no such message (gRPC refuses those before any handler runs).
template <typename Service, typename Request, typename Response>
std::optional<grpc::Status> Call(
    FuzzCoordinator& coordinator,
    std::unique_ptr<Service> FuzzCoordinator::*service,
    grpc::Status (Service::*method)(grpc::ServerContext*, const Request*,
                                    Response*),
    absl::string_view bytes) {
  Request request;
  if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return std::nullopt;
  }
  const std::string worker_id = Prepare(coordinator, &request);
  grpc::ServerContext context;
  grpc::testing::ServerContextTestSpouse spouse(&context);
  Authenticate<Service>(coordinator, worker_id, &spouse);
  Response response;
  return ((coordinator.*service).get()->*method)(&context, &request, &response);
}

// A rendezvous Add, checked against the key's value before and after.
std::optional<grpc::Status> CallRendezvousAdd(FuzzCoordinator& coordinator,
                                              absl::string_view bytes) {
  v1::RendezvousAddRequest request;
  if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return std::nullopt;
  }
  const std::optional<std::string> before =
      coordinator.RendezvousValue(request.scope(), request.key());
  grpc::ServerContext context;
  grpc::testing::ServerContextTestSpouse spouse(&context);
  Authenticate<RendezvousServiceImpl>(coordinator, "", &spouse);
  v1::RendezvousAddResponse response;
  const grpc::Status status =
      coordinator.rendezvous_service->Add(&context, &request, &response);
  const std::optional<std::string> after =
      coordinator.RendezvousValue(request.scope(), request.key());
  if (!status.ok() && after != before) {
    Fail("a refused Add changed " + request.scope() + "/" + request.key());
  }
  if (status.ok() && after != std::to_string(response.value())) {
    Fail("Add answered " + std::to_string(response.value()) + " but stored " +
         after.value_or("nothing"));
  }
  return status;
}

std::optional<Outcome> Dispatch(FuzzCoordinator& coordinator, uint8_t selector,
                                absl::string_view bytes) {
  using Fc = FuzzCoordinator;
  auto read = [](std::optional<grpc::Status> status) -> std::optional<Outcome> {
    if (!status) return std::nullopt;
    return Outcome{*status, false};
  };
  auto write =
      [](std::optional<grpc::Status> status) -> std::optional<Outcome> {
    if (!status) return std::nullopt;
    return Outcome{*status, true};
  };
  auto rendezvous_write = [](std::optional<grpc::Status> status,
                             std::string scope) -> std::optional<Outcome> {
    if (!status) return std::nullopt;
    return Outcome{*status, true, std::move(scope)};
  };
  Fc& c = coordinator;
  switch (selector % 15) {
    case 0:
      return write(
          Call(c, &Fc::job_service, &JobServiceImpl::SubmitJob, bytes));
    case 1:
      return read(Call(c, &Fc::job_service, &JobServiceImpl::GetJob, bytes));
    case 2:
      return read(Call(c, &Fc::job_service, &JobServiceImpl::ListJobs, bytes));
    case 3:
      return write(
          Call(c, &Fc::job_service, &JobServiceImpl::CancelJob, bytes));
    case 4:
      return read(
          Call(c, &Fc::job_service, &JobServiceImpl::ListCheckpoints, bytes));
    case 5:
      return write(Call(c, &Fc::worker_service,
                        &WorkerServiceImpl::RegisterWorker, bytes));
    case 6:
      return write(
          Call(c, &Fc::worker_service, &WorkerServiceImpl::Heartbeat, bytes));
    case 7:
      return write(Call(c, &Fc::worker_service,
                        &WorkerServiceImpl::ReportMetrics, bytes));
    case 8:
      return write(Call(c, &Fc::worker_service,
                        &WorkerServiceImpl::ReportCheckpoint, bytes));
    case 9:
      return write(Call(c, &Fc::worker_service,
                        &WorkerServiceImpl::ReportJobResult, bytes));
    case 10:
      return write(Call(c, &Fc::worker_service,
                        &WorkerServiceImpl::DeregisterWorker, bytes));
    case 11:
      return rendezvous_write(
          Call(c, &Fc::rendezvous_service, &RendezvousServiceImpl::Set, bytes),
          ScopeOf<v1::RendezvousSetRequest>(bytes));
    case 12:
      return read(
          Call(c, &Fc::rendezvous_service, &RendezvousServiceImpl::Get, bytes));
    case 13:
      return read(Call(c, &Fc::rendezvous_service, &RendezvousServiceImpl::Wait,
                       bytes));
    default:
      return rendezvous_write(CallRendezvousAdd(c, bytes),
                              ScopeOf<v1::RendezvousAddRequest>(bytes));
  }
}

}  // namespace
}  // namespace glm

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using glm::FuzzCoordinator;
  static std::unique_ptr<FuzzCoordinator> coordinator =
      std::make_unique<FuzzCoordinator>();
  if (size == 0) return 0;
  const absl::string_view bytes(reinterpret_cast<const char*>(data) + 1,
                                size - 1);
  std::optional<glm::Outcome> outcome =
      glm::Dispatch(*coordinator, data[0], bytes);
  if (!outcome) return 0;
  const bool store_as_built = coordinator->StoreAsBuilt();
  if (!outcome->status.ok()) {
    if (outcome->status.error_message().empty()) {
      glm::Fail("a request was refused without saying why");
    }
    if (!store_as_built) {
      glm::Fail("a refused request changed the store: " +
                outcome->status.error_message());
    }
  } else if (!outcome->writes && !store_as_built) {
    glm::Fail("a read changed the store");
  }
  if (store_as_built && outcome->rendezvous_scope) {
    coordinator->RestoreRendezvousScope(*outcome->rendezvous_scope);
  } else if (!store_as_built || (outcome->status.ok() && outcome->writes)) {
    coordinator = std::make_unique<FuzzCoordinator>();
  }
  return 0;
}
