// Control-plane load: one glm-coordinator process on 127.0.0.1, clients
// following jobs with WatchJob and operators that each, in a closed loop,
// submit a job, get it, list the first page of jobs and cancel the job, for a
// bounded time. Prints p50/p99 of each call, the errors (there should be
// none) and the coordinator's resident memory sampled every second.
//
//   bazel run -c opt //bench:control_plane_bench -- [--duration-s=60]
//       [--watchers=50] [--submitters=20]
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/atomic_file.h"
#include "base/command_flags.h"
#include "base/file_util.h"
#include "coordinator/coordinator_process.h"
#include "grpcpp/grpcpp.h"
#include "proto/job_service.grpc.pb.h"
#include "rpc/client_connection.h"
#include "worker/coordinator_client.h"
#include "worker/tiny_pretrain_spec.h"

namespace glm {
namespace {

constexpr char kOperatorToken[] = "bench-operator-token";
constexpr char kWorkerToken[] = "bench-worker-token";
constexpr absl::Duration kCallTimeout = absl::Seconds(10);
constexpr const char* kCalls[] = {"SubmitJob", "GetJob", "ListJobs",
                                  "CancelJob"};

struct BenchOptions {
  absl::Duration duration;
  int watchers = 0;
  int submitters = 0;
};

// Calls' latencies in milliseconds by call name (overall and by window of
// the run, to show a trend), and the errors.
class Tally {
 public:
  // The run in `windows` windows of `window`; calls that start after the run
  // (a submitter finishing its loop) count in the last.
  Tally(absl::Duration window, int windows)
      : window_(window), windows_(windows) {}

  // Times `call` (a gRPC call returning its status) under `name`.
  template <typename Call>
  grpc::Status Time(const std::string& name, Call call) {
    const absl::Time start = absl::Now();
    grpc::Status status = call();
    if (!status.ok()) {
      AddError(name, status);
    } else {
      Add(name, start, absl::ToDoubleMilliseconds(absl::Now() - start));
    }
    return status;
  }
  void AddError(const std::string& call, const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    if (errors_.size() < 10) {
      errors_.push_back(absl::StrCat(call, ": ", status.error_code(), " ",
                                     status.error_message()));
    }
    ++error_count_;
  }
  void Print(absl::Duration duration) {
    absl::MutexLock lock(&mu_);
    std::cout << absl::StrFormat("%-10s %9s %9s %9s %9s %9s\n", "call", "calls",
                                 "per s", "p50 ms", "p99 ms", "max ms");
    for (const char* call : kCalls) {
      std::vector<double> ms = Merged(call);
      if (ms.empty()) continue;
      std::cout << absl::StrFormat(
          "%-10s %9d %9.1f %9.2f %9.2f %9.2f\n", call, ms.size(),
          ms.size() / absl::ToDoubleSeconds(duration), Percentile(ms, 0.50),
          Percentile(ms, 0.99), ms.back());
    }
    PrintWindows();
    std::cout << "errors: " << error_count_ << "\n";
    for (const std::string& error : errors_) std::cout << "  " << error << "\n";
  }
  int64_t error_count() {
    absl::MutexLock lock(&mu_);
    return error_count_;
  }

 private:
  void Add(const std::string& call, absl::Time start, double ms) {
    absl::MutexLock lock(&mu_);
    std::vector<std::vector<double>>& windows = latencies_[call];
    windows.resize(windows_);
    const int64_t window = (start - start_) / window_;
    windows[std::min<int64_t>(window, windows_ - 1)].push_back(ms);
  }

  // Every latency of `call`, sorted.
  std::vector<double> Merged(const std::string& call)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<double> all;
    for (const std::vector<double>& ms : latencies_[call]) {
      all.insert(all.end(), ms.begin(), ms.end());
    }
    std::sort(all.begin(), all.end());
    return all;
  }

  // p50/p99 of each call by window.
  void PrintWindows() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::cout << "p50/p99 ms by " << absl::FormatDuration(window_)
              << " of the run:\n";
    for (const char* call : kCalls) {
      std::cout << absl::StrFormat("%-10s", call);
      for (std::vector<double> ms : latencies_[call]) {
        std::sort(ms.begin(), ms.end());
        if (ms.empty()) continue;
        std::cout << absl::StrFormat(" %.0f/%.0f", Percentile(ms, 0.50),
                                     Percentile(ms, 0.99));
      }
      std::cout << "\n";
    }
  }

  static double Percentile(const std::vector<double>& sorted, double q) {
    const size_t at = static_cast<size_t>(q * sorted.size());
    return sorted[std::min(at, sorted.size() - 1)];
  }

  const absl::Time start_ = absl::Now();
  const absl::Duration window_;
  const int windows_;
  absl::Mutex mu_;
  // By call, then by window: latencies in milliseconds.
  std::map<std::string, std::vector<std::vector<double>>> latencies_
      ABSL_GUARDED_BY(mu_);
  std::vector<std::string> errors_ ABSL_GUARDED_BY(mu_);
  int64_t error_count_ ABSL_GUARDED_BY(mu_) = 0;
};

// The id of the job submitted last, for watchers to follow.
class NewestJob {
 public:
  void Set(const std::string& id) {
    absl::MutexLock lock(&mu_);
    id_ = id;
  }
  std::string Get() {
    absl::MutexLock lock(&mu_);
    return id_;
  }

 private:
  absl::Mutex mu_;
  std::string id_ ABSL_GUARDED_BY(mu_);
};

// A small CPU job (never run: the bench's worker only holds it).
v1::JobSpec Spec(const std::string& root, const std::string& name) {
  v1::JobSpec spec = TinyPretrainSpec(root + "/documents",
                                      root + "/checkpoints/" + name, 1, 10);
  spec.set_name(name);
  return spec;
}

// Submit, get, list (first page), cancel, until `stop`.
void Submitter(const std::string& target, const std::string& root, int index,
               const std::atomic<bool>& stop, NewestJob* newest, Tally* tally) {
  std::shared_ptr<ClientConnection> connection =
      PlaintextConnection(target, kOperatorToken);
  auto stub = v1::JobService::NewStub(connection->channel());
  for (int i = 0; !stop; ++i) {
    v1::SubmitJobRequest submit;
    *submit.mutable_spec() = Spec(root, absl::StrCat("load-", index, "-", i));
    v1::SubmitJobResponse submitted;
    if (!tally
             ->Time("SubmitJob",
                    [&] {
                      return stub->SubmitJob(
                          connection->NewContext(kCallTimeout).get(), submit,
                          &submitted);
                    })
             .ok()) {
      continue;
    }
    newest->Set(submitted.job().id());
    v1::GetJobRequest get;
    get.set_id(submitted.job().id());
    v1::Job job;
    tally->Time("GetJob", [&] {
      return stub->GetJob(connection->NewContext(kCallTimeout).get(), get,
                          &job);
    });
    v1::ListJobsRequest list;
    v1::ListJobsResponse page;
    tally->Time("ListJobs", [&] {
      return stub->ListJobs(connection->NewContext(kCallTimeout).get(), list,
                            &page);
    });
    v1::CancelJobRequest cancel;
    cancel.set_id(submitted.job().id());
    tally->Time("CancelJob", [&] {
      return stub->CancelJob(connection->NewContext(kCallTimeout).get(), cancel,
                             &job);
    });
  }
}

// Follows the newest job with WatchJob until it ends (its submitter cancels
// it), then the next newest, until `stop`. Counts the events.
void Watcher(const std::string& target, const std::atomic<bool>& stop,
             NewestJob* newest, std::atomic<int64_t>* events, Tally* tally) {
  std::shared_ptr<ClientConnection> connection =
      PlaintextConnection(target, kOperatorToken);
  auto stub = v1::JobService::NewStub(connection->channel());
  std::string last;
  while (!stop) {
    const std::string id = newest->Get();
    if (id.empty() || id == last) {
      absl::SleepFor(absl::Milliseconds(5));
      continue;
    }
    last = id;
    std::unique_ptr<grpc::ClientContext> context =
        connection->NewContext(kCallTimeout);
    v1::WatchJobRequest request;
    request.set_id(id);
    auto reader = stub->WatchJob(context.get(), request);
    v1::JobEvent event;
    while (reader->Read(&event)) {
      ++*events;
      if (event.job().state() == v1::CANCELLED) break;
    }
    context->TryCancel();
    grpc::Status status = reader->Finish();
    if (!status.ok() && status.error_code() != grpc::StatusCode::CANCELLED) {
      tally->AddError("WatchJob", status);
    }
  }
}

// The coordinator's VmRSS in MiB every second until `stop`.
std::vector<double> SampleMemory(const CoordinatorProcess& coordinator,
                                 const std::atomic<bool>& stop) {
  std::vector<double> mib;
  while (!stop) {
    absl::StatusOr<int64_t> kib = coordinator.ResidentKib();
    if (kib.ok()) mib.push_back(*kib / 1024.0);
    absl::SleepFor(absl::Seconds(1));
  }
  return mib;
}

void PrintMemory(const std::vector<double>& mib) {
  if (mib.empty()) return;
  std::cout << "coordinator VmRSS (MiB), every 5 s:";
  for (size_t s = 0; s < mib.size(); s += 5) {
    std::cout << absl::StrFormat(" %.1f", mib[s]);
  }
  const size_t after_warmup = std::min<size_t>(10, mib.size() - 1);
  std::cout << absl::StrFormat(
      "\nVmRSS: %.1f at start, %.1f after %d s, %.1f at the end, %.1f max\n",
      mib.front(), mib[after_warmup], after_warmup, mib.back(),
      *std::max_element(mib.begin(), mib.end()));
}

// A worker for CPU jobs must be registered before one is accepted; it
// heartbeats and holds whatever it is assigned until that is cancelled.
absl::Status RegisterHoldingWorker(CoordinatorClient* worker) {
  absl::Status registered =
      worker->Register(DescribeThisHost(v1::CPU, "127.0.0.1:0"));
  if (registered.ok()) {
    worker->StartHeartbeats([](const std::string&) {},
                            [](const absl::Status&) {});
  }
  return registered;
}

// Runs the load against `coordinator`; returns the number of errors.
int64_t RunLoad(const CoordinatorProcess& coordinator, const std::string& root,
                const BenchOptions& options) {
  CoordinatorClient worker(
      PlaintextConnection(coordinator.target(), kWorkerToken));
  if (absl::Status s = RegisterHoldingWorker(&worker); !s.ok()) {
    std::cerr << "cannot register a worker: " << s << "\n";
    return 1;
  }
  // Six windows of the run (10 s of a minute).
  Tally tally(options.duration / 6, 6);
  NewestJob newest;
  std::atomic<int64_t> events{0};
  std::atomic<bool> stop{false};
  std::vector<double> memory;
  std::thread sampler([&] { memory = SampleMemory(coordinator, stop); });
  std::vector<std::thread> clients;
  for (int w = 0; w < options.watchers; ++w) {
    clients.emplace_back(
        [&] { Watcher(coordinator.target(), stop, &newest, &events, &tally); });
  }
  for (int s = 0; s < options.submitters; ++s) {
    clients.emplace_back([&, s] {
      Submitter(coordinator.target(), root, s, stop, &newest, &tally);
    });
  }
  absl::SleepFor(options.duration);
  stop = true;
  for (std::thread& client : clients) client.join();
  sampler.join();
  worker.StopHeartbeats();
  tally.Print(options.duration);
  std::cout << "WatchJob events received: " << events << "\n";
  PrintMemory(memory);
  return tally.error_count();
}

// The glm-coordinator binary: the flag's, else the one in this binary's
// runfiles (run from bazel-bin rather than with `bazel run`).
std::string CoordinatorBinary(const std::string& flag, const char* argv0) {
  if (FileExists(flag)) return flag;
  return absl::StrCat(argv0, ".runfiles/glm/", flag);
}

absl::StatusOr<std::unique_ptr<CoordinatorProcess>> StartCoordinator(
    const std::string& binary, const std::string& root) {
  CoordinatorProcessOptions options;
  options.binary = binary;
  options.state_dir = root + "/state";
  options.operator_token_file = root + "/operator_token";
  options.worker_token_file = root + "/worker_token";
  options.path_roots = root;
  options.log = root + "/coordinator.log";
  for (const auto& [file, token] :
       {std::pair{options.operator_token_file, kOperatorToken},
        std::pair{options.worker_token_file, kWorkerToken}}) {
    if (absl::Status s = WriteFileAtomically(file, token); !s.ok()) return s;
  }
  return CoordinatorProcess::Start(options);
}

void PrintMachine(const BenchOptions& options, pid_t coordinator) {
  std::cout << "control-plane load: " << absl::FormatDuration(options.duration)
            << ", " << options.watchers << " watchers, " << options.submitters
            << " submitters, one glm-coordinator (pid " << coordinator
            << ") on 127.0.0.1, " << std::thread::hardware_concurrency()
            << " CPUs\n";
}

int Main(int argc, char** argv) {
  CommandFlags flags(
      "control_plane_bench [--duration-s=60] [--watchers=50] "
      "[--submitters=20] [--coordinator=PATH] [--work-dir=DIR]");
  flags.Add("duration-s", "how long the load runs", "60");
  flags.Add("watchers", "clients following jobs with WatchJob", "50");
  flags.Add("submitters", "operators submitting, getting, listing, cancelling",
            "20");
  flags.Add("coordinator", "the glm-coordinator binary",
            "coordinator/glm-coordinator");
  flags.Add("work-dir",
            "the coordinator's store and files (a new one in /tmp "
            "when not given)");
  int64_t seconds = 0;
  BenchOptions options;
  absl::Status status =
      flags.Parse(std::vector<std::string>(argv + 1, argv + argc));
  if (status.ok()) status = flags.GetInt("duration-s", &seconds);
  if (status.ok()) status = flags.GetInt("watchers", &options.watchers);
  if (status.ok()) status = flags.GetInt("submitters", &options.submitters);
  if (flags.HelpRequested() || !status.ok()) {
    std::cerr << status.message() << "\n" << flags.Help();
    return kExitUsage;
  }
  options.duration = absl::Seconds(seconds);
  std::string root = flags.Get("work-dir");
  if (root.empty()) {
    char pattern[] = "/tmp/control_plane_bench_XXXXXX";
    if (mkdtemp(pattern) == nullptr) {
      std::cerr << "cannot create a directory in /tmp\n";
      return kExitFailure;
    }
    root = pattern;
  }
  absl::StatusOr<std::unique_ptr<CoordinatorProcess>> coordinator =
      StartCoordinator(CoordinatorBinary(flags.Get("coordinator"), argv[0]),
                       root);
  if (!coordinator.ok()) {
    std::cerr << coordinator.status() << "\n";
    return kExitFailure;
  }
  PrintMachine(options, (*coordinator)->pid());
  return RunLoad(**coordinator, root, options) == 0 ? kExitOk : kExitFailure;
}

}  // namespace
}  // namespace glm

int main(int argc, char** argv) { return glm::Main(argc, argv); }
