#include "cli/local_command.h"

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "base/command_flags.h"
#include "base/file_util.h"
#include "cli/job_staging.h"
#include "cli/local_cluster.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "jobspec/path_roots.h"
#include "kernels/backend_factory.h"
#include "proto/job_service.grpc.pb.h"
#include "rpc/grpc_status.h"
#include "training/log_line.h"

namespace glm {

extern const char kDefaultLocalJob[];

namespace {

namespace fs = std::filesystem;

CommandFlags DeclareFlags() {
  CommandFlags flags("glmctl local [--job=FILE] [--workers=N] [flags]");
  flags.Add(
      "job",
      "job spec JSON; default: pretrain glm5.2-tiny on the shipped corpus "
      "(examples/pretrain.json)");
  flags.Add("workers", "workers to start (default: the job's world size)");
  flags.Add("device",
            "cpu, or cuda: one worker per visible GPU (sets the job's device)");
  flags.Add("state-dir",
            "folder for the coordinator's job store, data, checkpoints, "
            "exports and logs",
            "glm-local");
  flags.Add("steps", "override training.train_iters");
  flags.Add("worker-binary", "glm-worker to run (default: beside glmctl)");
  return flags;
}

// Where relative paths of the user point: the directory `bazel run` was
// started from, else the current one.
fs::path UserDirectory() {
  const char* dir = std::getenv("BUILD_WORKING_DIRECTORY");
  return dir != nullptr ? fs::path(dir) : fs::current_path();
}

// Shipped files (data/corpus/...) resolve against the source tree when run
// with `bazel run`, then against glmctl's runfiles; anything else against the
// user's directory.
fs::path ResolveInput(const std::string& path) {
  if (fs::path(path).is_absolute()) return path;
  std::vector<fs::path> roots;
  if (const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY")) {
    roots.push_back(workspace);
  }
  roots.push_back(fs::read_symlink("/proc/self/exe").string() +
                  ".runfiles/glm");
  for (const fs::path& root : roots) {
    if (fs::exists(root / path)) return root / path;
  }
  return UserDirectory() / path;
}

// Where the local cluster's job may read and write: the state folder (staged
// data, outputs named relatively) and the folder of each other path the staged
// spec names, which the user chose on their own machine (a path's own folder
// when it is one, else the folder holding it: a tokenizer model, a dataset
// prefix, an output folder not made yet).
absl::StatusOr<PathRoots> LocalPathRoots(const fs::path& state_dir,
                                         const v1::JobSpec& spec) {
  std::error_code error;
  fs::create_directories(state_dir, error);
  PathRoots roots = {fs::canonical(state_dir, error)};
  if (error) {
    return absl::InternalError(absl::StrCat(
        "cannot create ", state_dir.string(), ": ", error.message()));
  }
  for (const auto& [field, value] : SpecPaths(spec)) {
    const fs::path path = fs::weakly_canonical(value, error);
    if (error) continue;  // the coordinator refuses it, naming the field
    const fs::path folder =
        fs::is_directory(path, error) ? path : path.parent_path();
    fs::create_directories(folder, error);
    fs::path root = fs::canonical(folder, error);
    if (!error) roots.push_back(std::move(root));
  }
  return roots;
}

absl::StatusOr<v1::JobSpec> LoadSpec(const CommandFlags& flags) {
  std::string json = kDefaultLocalJob;
  if (flags.Has("job")) {
    absl::StatusOr<std::string> content =
        ReadFile(ResolveInput(flags.Get("job")).string());
    if (!content.ok()) return content.status();
    json = *content;
  }
  v1::JobSpec spec;
  const auto parsed = google::protobuf::util::JsonStringToMessage(json, &spec);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flags.Has("job") ? flags.Get("job") : "default job", ": ",
                     parsed.message().as_string()));
  }
  if (flags.Has("steps")) {
    int64_t steps = 0;
    if (absl::Status status = flags.GetInt("steps", &steps); !status.ok()) {
      return status;
    }
    v1::TrainingSpec& training = *spec.mutable_training();
    training.set_train_iters(steps);
    training.set_lr_decay_iters(steps);
    training.set_warmup_iters(std::min(training.warmup_iters(), steps));
  }
  return spec;
}

struct JobOutcome {
  v1::Job job;
  double first_loss = 0;
  double last_loss = 0;
};

absl::StatusOr<JobOutcome> SubmitAndFollow(const ConnectionOptions& connection,
                                           const v1::JobSpec& spec,
                                           std::ostream& out) {
  ClientConnection channel(connection);
  auto stub = v1::JobService::NewStub(channel.channel());
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  v1::SubmitJobResponse response;
  grpc::Status status = stub->SubmitJob(
      channel.NewContext(absl::Seconds(30)).get(), request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  out << "job " << response.job().id() << " submitted\n";

  v1::WatchJobRequest watch;
  watch.set_id(response.job().id());
  auto context = channel.NewContext();
  auto reader = stub->WatchJob(context.get(), watch);
  JobOutcome outcome;
  v1::JobEvent event;
  bool first_metrics = true;
  while (reader->Read(&event)) {
    outcome.job = event.job();
    if (event.has_state_change()) {
      const v1::StateChange& change = event.state_change();
      out << "job " << event.job().id() << ": "
          << v1::JobState_Name(change.to())
          << (change.reason().empty() ? "" : " (" + change.reason() + ")")
          << "\n";
    }
    if (event.has_metrics()) {
      const v1::StepMetrics& metrics = event.metrics();
      if (first_metrics) outcome.first_loss = metrics.lm_loss();
      first_metrics = false;
      outcome.last_loss = metrics.lm_loss();
      out << FormatLogLine(metrics, spec.training().global_batch_size())
          << std::endl;
    }
  }
  status = reader->Finish();
  if (!status.ok()) return FromGrpcStatus(status);
  return outcome;
}

void PrintSummary(const JobOutcome& outcome, const LocalCluster& cluster,
                  int workers, const fs::path& state_dir,
                  const v1::TrainingSpec& training, std::ostream& out) {
  out << "\njob " << outcome.job.id() << " "
      << v1::JobState_Name(outcome.job.state());
  if (!outcome.job.message().empty()) out << ": " << outcome.job.message();
  out << "\n  lm loss: " << outcome.first_loss << " -> " << outcome.last_loss
      << "\n";
  for (const v1::CheckpointManifest& checkpoint : outcome.job.checkpoints()) {
    out << "  checkpoint: " << checkpoint.directory() << " (iteration "
        << checkpoint.iteration() << ")\n";
  }
  if (!training.export_hf_dir().empty() &&
      fs::exists(training.export_hf_dir())) {
    out << "  HF export: " << training.export_hf_dir() << "\n";
  }
  out << "  job store: " << (state_dir / "coordinator").string() << "\n";
  for (int i = 0; i < workers; ++i) {
    out << "  worker " << i << " log: " << cluster.WorkerLog(i) << "\n";
  }
}

int RunLocal(const std::vector<std::string>& args) {
  CommandFlags flags = DeclareFlags();
  if (absl::Status parsed = flags.Parse(args); !parsed.ok()) {
    std::cerr << "glmctl local: " << parsed.message() << "\n" << flags.Help();
    return kExitUsage;
  }
  if (flags.HelpRequested()) {
    std::cout << flags.Help();
    return kExitOk;
  }
  absl::StatusOr<v1::JobSpec> spec = LoadSpec(flags);
  if (!spec.ok()) {
    std::cerr << "glmctl local: " << spec.status().message() << "\n";
    return kExitUsage;
  }
  int workers = std::max(1, spec->parallel().world_size());
  if (flags.Has("workers")) {
    if (absl::Status status = flags.GetInt("workers", &workers); !status.ok()) {
      std::cerr << "glmctl local: " << status.message() << "\n";
      return kExitUsage;
    }
  }
  int gpus = 0;
  if (flags.Has("device")) spec->set_device(flags.Get("device"));
  if (spec->device() == "cuda") {
    absl::StatusOr<int> count = CudaDeviceCount();
    if (!count.ok()) {
      std::cerr << "glmctl local: --device=cuda: " << count.status().message()
                << "\n";
      return kExitFailure;
    }
    gpus = *count;
    if (!flags.Has("workers")) workers = std::max(workers, gpus);
  }
  const fs::path state_dir =
      fs::absolute(UserDirectory() / flags.Get("state-dir"));
  if (absl::Status staged =
          StageJob(state_dir, ResolveInput, &*spec, std::cout);
      !staged.ok()) {
    std::cerr << "glmctl local: " << staged.message() << "\n";
    return kExitFailure;
  }
  absl::StatusOr<std::string> worker_binary = flags.Has("worker-binary")
                                                  ? flags.Get("worker-binary")
                                                  : FindWorkerBinary();
  if (!worker_binary.ok()) {
    std::cerr << "glmctl local: " << worker_binary.status().message() << "\n";
    return kExitFailure;
  }
  absl::StatusOr<PathRoots> path_roots = LocalPathRoots(state_dir, *spec);
  if (!path_roots.ok()) {
    std::cerr << "glmctl local: " << path_roots.status().message() << "\n";
    return kExitFailure;
  }
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster =
      LocalCluster::Start({state_dir.string(), workers, *worker_binary, gpus,
                           *std::move(path_roots)});
  if (!cluster.ok()) {
    std::cerr << "glmctl local: " << cluster.status().message() << "\n";
    return kExitFailure;
  }
  std::cout << "local cluster: coordinator on "
            << (*cluster)->connection().target << ", " << workers
            << (gpus > 0 ? absl::StrCat(" worker(s) on ", gpus, " GPU(s)")
                         : std::string(" CPU worker(s)"))
            << ", state in " << state_dir.string() << "\n";
  absl::StatusOr<JobOutcome> outcome =
      SubmitAndFollow((*cluster)->connection(), *spec, std::cout);
  if (!outcome.ok()) {
    std::cerr << "glmctl local: " << outcome.status().ToString() << "\n";
    return kExitFailure;
  }
  PrintSummary(*outcome, **cluster, workers, state_dir, spec->training(),
               std::cout);
  return outcome->job.state() == v1::SUCCEEDED ? kExitOk : kExitFailure;
}

}  // namespace

std::vector<Command> LocalCommands() {
  return {{"local",
           "run a job on a one-machine cluster (embedded coordinator + CPU "
           "workers)",
           RunLocal}};
}

}  // namespace glm
