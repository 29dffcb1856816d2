#include "worker/assignment_runner.h"

#include <chrono>
#include <filesystem>
#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "metrics_log/step_metrics_log.h"
#include "worker/rendezvous_store.h"
#include "worker/training_job.h"

namespace glm {

AssignmentRunner::AssignmentRunner(CoordinatorClient* client,
                                   std::function<void(const std::string&)> log,
                                   std::string device, std::string host,
                                   PathRoots path_roots)
    : client_(client),
      log_(std::move(log)),
      device_(std::move(device)),
      host_(std::move(host)),
      path_roots_(std::move(path_roots)) {}

void AssignmentRunner::Serve() {
  client_->StartHeartbeats(
      [this](const std::string& reason) {
        log_("coordinator stopped the job: " + reason);
        stop_job_ = true;
      },
      [this](const absl::Status& status) {
        log_(absl::StrCat("heartbeat failed: ", status.ToString()));
      });
  auto backoff = std::chrono::milliseconds(200);
  while (!shutdown_) {
    absl::Status status = client_->WatchAssignments(
        [this](const v1::Assignment& assignment) { Run(assignment); });
    if (shutdown_) break;
    if (CoordinatorForgotWorker(status) && RegisterAgain(status)) {
      backoff = std::chrono::milliseconds(200);
      continue;
    }
    log_(absl::StrCat("assignment stream ended (", status.ToString(),
                      "); reconnecting"));
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
  }
  client_->StopHeartbeats();
}

bool AssignmentRunner::RegisterAgain(const absl::Status& forgotten) {
  const std::string stale = client_->worker_id();
  const absl::Status registered = client_->RegisterAgain();
  log_(absl::StrCat(
      "coordinator no longer knows ", stale, " (", forgotten.ToString(), "); ",
      registered.ok() ? "registered again as " + client_->worker_id()
                      : "registering again failed: " + registered.ToString()));
  return registered.ok();
}

void AssignmentRunner::Shutdown() {
  shutdown_ = true;
  stop_job_ = true;
  client_->CancelWatch();
}

void AssignmentRunner::Run(const v1::Assignment& assignment) {
  const std::string& job = assignment.job_id();
  log_(absl::StrCat("job ", job, " attempt ", assignment.attempt(), ": rank ",
                    assignment.rank(), " of ", assignment.world_size()));
  stop_job_ = false;
  client_->SetCurrentJob(job, 0);
  // The coordinator checked the paths at submission; the files may have
  // changed since (a folder replaced by a symlink), so check before opening.
  absl::Status result = CheckSpecPaths(assignment.spec(), path_roots_,
                                       std::filesystem::current_path());
  if (result.ok()) result = Train(assignment);
  log_(absl::StrCat("job ", job, " finished: ", result.ToString()));
  absl::Status reported =
      client_->ReportJobResult(job, assignment.rank(), assignment.attempt(),
                               result.ok(), std::string(result.message()));
  if (!reported.ok())
    log_("reporting the result failed: " + reported.ToString());
  client_->SetCurrentJob("", 0);
}

absl::Status AssignmentRunner::Train(const v1::Assignment& assignment) {
  const std::string& job = assignment.job_id();
  std::unique_ptr<StepMetricsLog> step_log;
  const std::string& save_dir = assignment.spec().training().save_dir();
  if (assignment.rank() == 0 && !save_dir.empty()) {
    absl::StatusOr<std::unique_ptr<StepMetricsLog>> opened =
        StepMetricsLog::Open(StepMetricsDir(save_dir));
    if (opened.ok()) {
      step_log = *std::move(opened);
    } else {
      log_("not logging steps to disk: " + opened.status().ToString());
    }
  }
  TrainingJobHooks hooks;
  hooks.log = log_;
  hooks.on_step = [&](const v1::StepMetrics& metrics) {
    client_->SetCurrentJob(job, metrics.iteration());
    // Data-parallel ranks compute the same metrics: rank 0 reports them once.
    if (assignment.rank() != 0) return stop_job_.load();
    if (step_log) {
      if (absl::Status written = step_log->Write(metrics); !written.ok()) {
        log_("logging the step failed: " + written.ToString());
      }
    }
    absl::StatusOr<bool> stop = client_->ReportMetrics(
        job, assignment.attempt(), assignment.rank(), metrics);
    if (!stop.ok())
      log_("reporting metrics failed: " + stop.status().ToString());
    return stop_job_.load() || (stop.ok() && *stop);
  };
  hooks.on_checkpoint = [&](const v1::CheckpointManifest& manifest) {
    absl::Status reported = client_->ReportCheckpoint(
        assignment.attempt(), assignment.rank(), manifest);
    if (!reported.ok())
      log_("reporting checkpoint failed: " + reported.ToString());
  };
  RendezvousStore rendezvous(client_->connection(),
                             assignment.rendezvous().scope());
  return RunTrainingJob(assignment, hooks, &rendezvous, device_, host_);
}

}  // namespace glm
