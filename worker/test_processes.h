// What the tests that run real glm-worker processes share: a scratch
// directory, a small byte-token dataset, a tiny pretraining spec
// (worker/tiny_pretrain_spec.h), worker
// processes started against a coordinator, and following a job to its end.
#ifndef GLM_WORKER_TEST_PROCESSES_H_
#define GLM_WORKER_TEST_PROCESSES_H_

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "coordinator/test_coordinator.h"
#include "proto/job_service.pb.h"
#include "proto/job_spec.pb.h"
#include "worker/tiny_pretrain_spec.h"

namespace glm {

// A fresh directory `name` under TEST_TMPDIR.
std::string TempDir(const std::string& name);

// Writes documents of pseudo-random byte tokens under `dir`; returns the
// dataset prefix.
std::string WriteDocuments(const std::string& dir);

// Short chats packed into rows of 64 tokens under `dir` (byte tokenizer);
// returns the packed dataset prefix (for SFT and LoRA jobs).
std::string WritePackedChats(const std::string& dir);

// Starts a glm-worker process for the coordinator at `target`, its stderr in
// `log`, with the token in `token_file` and its --path-roots (by default any
// path: the tests' files are wherever Bazel puts them, and runfiles are
// symlinks into the source tree).
pid_t SpawnWorker(const std::string& target, const std::string& token_file,
                  const std::string& log, const std::string& path_roots = "/");

// Submits `spec`; returns the job id.
std::string SubmitJob(const TestCoordinator& server, const v1::JobSpec& spec);

// Submits `spec` and starts `workers` glm-worker processes for it, their logs
// and token file in `dir`; returns the job id.
std::string SubmitWithWorkers(const TestCoordinator& server,
                              const v1::JobSpec& spec, const std::string& dir,
                              int workers, std::vector<pid_t>* pids);

// Follows the job as the coordinator streams it, passing each event to
// `on_event`, until it ends or `deadline` passes; returns the job as it stood
// last.
v1::Job WatchToTheEnd(const TestCoordinator& server, const std::string& id,
                      absl::Duration deadline,
                      const std::function<void(const v1::JobEvent&)>& on_event);

// SIGTERM to each and waits for it.
void StopWorkers(const std::vector<pid_t>& pids);

}  // namespace glm

#endif  // GLM_WORKER_TEST_PROCESSES_H_
