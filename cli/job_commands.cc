#include "cli/job_commands.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "base/command_flags.h"
#include "base/file_util.h"
#include "base/quote.h"
#include "cli/job_staging.h"
#include "cli/step_rate.h"
#include "cli/text_table.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "proto/job_service.grpc.pb.h"
#include "rpc/client_connection.h"
#include "rpc/grpc_status.h"

namespace glm {
namespace {

// What a job command's body works with once flags are parsed and the connection
// made.
struct JobCall {
  const CommandFlags& flags;
  const ClientConnection& connection;
  v1::JobService::Stub& stub;
  bool json;
};

using Body = std::function<int(const JobCall&)>;

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value && *value ? value : fallback;
}

CommandFlags NewFlags(const std::string& usage) {
  CommandFlags flags(usage);
  flags.Add("coordinator", "host:port of glm-coordinator (env GLM_COORDINATOR)",
            EnvOr("GLM_COORDINATOR", "localhost:7070"));
  flags.Add("token-file",
            "file holding the operator token (env GLM_TOKEN_FILE)",
            EnvOr("GLM_TOKEN_FILE", ""));
  flags.Add("tls-ca",
            "PEM CA certificate of the coordinator: connect with TLS (env "
            "GLM_TLS_CA)",
            EnvOr("GLM_TLS_CA", ""));
  flags.Add("output", "table (for people) or json (for scripts)", "table");
  return flags;
}

int UsageError(const std::string& command, const std::string& message,
               const CommandFlags& flags) {
  std::cerr << "glmctl " << command << ": " << message << "\n\n"
            << flags.Help();
  return kExitUsage;
}

int RpcError(const grpc::Status& status) {
  std::cerr << "glmctl: " << StatusCodeName(status.error_code()) << ": "
            << status.error_message() << "\n";
  return kExitFailure;
}

// Parses `args` (expecting `positional` positional arguments), connects, runs
// `body`.
int RunJobCommand(const std::string& command, CommandFlags flags,
                  const std::vector<std::string>& args, size_t positional,
                  const Body& body) {
  if (absl::Status parsed = flags.Parse(args); !parsed.ok()) {
    return UsageError(command, std::string(parsed.message()), flags);
  }
  if (flags.HelpRequested()) {
    std::cout << flags.Help();
    return kExitOk;
  }
  const std::string output = flags.Get("output");
  if (output != "table" && output != "json") {
    return UsageError(
        command,
        absl::StrCat("--output must be table or json, got '", output, "'"),
        flags);
  }
  if (flags.positional().size() != positional) {
    return UsageError(
        command,
        absl::StrCat("expected ", positional, " argument(s), got ",
                     flags.positional().size()),
        flags);
  }
  absl::StatusOr<ConnectionOptions> options = LoadConnectionOptions(
      flags.Get("coordinator"), flags.Get("token-file"), flags.Get("tls-ca"));
  if (!options.ok()) {
    return UsageError(command, std::string(options.status().message()), flags);
  }
  ClientConnection connection(*options);
  std::unique_ptr<v1::JobService::Stub> stub =
      v1::JobService::NewStub(connection.channel());
  return body(JobCall{flags, connection, *stub, output == "json"});
}

std::string ToJson(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  std::string json;
  // Printing our own well-formed messages cannot fail.
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return pretty ? json : json + "\n";
}

std::string FormatUnixMs(int64_t unix_ms) {
  if (unix_ms == 0) return "-";
  return absl::FormatTime("%Y-%m-%d %H:%M:%S", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

std::string StateName(v1::JobState state) { return v1::JobState_Name(state); }

int64_t TrainIters(const v1::Job& job) {
  return job.latest_metrics().train_iters() > 0
             ? job.latest_metrics().train_iters()
             : job.spec().training().train_iters();
}

std::string StepText(const v1::Job& job) {
  return absl::StrCat(job.latest_metrics().iteration(), "/", TrainIters(job));
}

std::string LossText(const v1::Job& job) {
  return job.has_latest_metrics()
             ? absl::StrFormat("%.4f", job.latest_metrics().lm_loss())
             : "-";
}

// "[##############----------]" for `done` of `total`.
std::string ProgressBar(int64_t done, int64_t total) {
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(kWidth * std::min(done, total) / total);
  return absl::StrCat("[", std::string(filled, '#'),
                      std::string(kWidth - filled, '-'), "]");
}

// "job-1 RUNNING [#####---] step 12/20 (60%) loss 5.4321 tokens/s 1234 ETA
// 1m20s", the ETA from `rate`.
std::string ProgressLine(const v1::Job& job, const StepRate& rate) {
  std::string line = absl::StrCat(job.id(), " ", StateName(job.state()));
  if (!job.has_latest_metrics()) return line;
  const v1::StepMetrics& m = job.latest_metrics();
  const int64_t total = TrainIters(job);
  if (total > 0) absl::StrAppend(&line, " ", ProgressBar(m.iteration(), total));
  absl::StrAppend(&line, " step ", StepText(job));
  if (total > 0) {
    absl::StrAppend(
        &line, absl::StrFormat(" (%.0f%%)", 100.0 * m.iteration() / total));
  }
  absl::StrAppend(&line,
                  absl::StrFormat(" loss %.4f tokens/s %.0f", m.lm_loss(),
                                  m.tokens_per_sec_per_device()));
  if (std::optional<absl::Duration> eta = rate.Remaining(total);
      eta && total > m.iteration()) {
    absl::StrAppend(&line, " ETA ",
                    absl::FormatDuration(absl::Trunc(*eta, absl::Seconds(1))));
  }
  return line;
}

absl::StatusOr<v1::JobSpec> ReadSpecFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  v1::JobSpec spec;
  auto parsed = google::protobuf::util::JsonStringToMessage(*text, &spec);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", std::string(parsed.message())));
  }
  return spec;
}

int Submit(const std::vector<std::string>& args) {
  CommandFlags flags = NewFlags("glmctl submit -f JOB.json [flags]");
  flags.Add("f", "job spec, JSON in protobuf's JSON mapping of glm.v1.JobSpec");
  flags.Add("stage-dir",
            "a folder the workers share: raw JSONL sources are tokenized (or "
            "packed) into datasets there and relative output folders placed "
            "there before submitting");
  return RunJobCommand("submit", flags, args, 0, [](const JobCall& call) {
    if (!call.flags.Has("f")) {
      std::cerr << "glmctl submit: missing -f JOB.json\n";
      return kExitUsage;
    }
    absl::StatusOr<v1::JobSpec> spec = ReadSpecFile(call.flags.Get("f"));
    if (!spec.ok()) {
      std::cerr << "glmctl submit: " << spec.status().message() << "\n";
      return kExitFailure;
    }
    if (call.flags.Has("stage-dir")) {
      namespace fs = std::filesystem;
      const fs::path stage = fs::absolute(call.flags.Get("stage-dir"));
      absl::Status staged = StageJob(
          stage, [](const std::string& path) { return fs::absolute(path); },
          &*spec, std::cerr);
      if (!staged.ok()) {
        std::cerr << "glmctl submit: " << staged.message() << "\n";
        return kExitFailure;
      }
    }
    v1::SubmitJobRequest request;
    *request.mutable_spec() = *spec;
    v1::SubmitJobResponse response;
    grpc::Status status =
        call.stub.SubmitJob(call.connection.NewContext(absl::Seconds(30)).get(),
                            request, &response);
    if (!status.ok()) return RpcError(status);
    if (call.json) {
      std::cout << ToJson(response.job(), true);
    } else {
      std::cout << "submitted " << response.job().id() << " ("
                << StateName(response.job().state()) << ")\n";
    }
    return kExitOk;
  });
}

// Every job `request` selects into `all`: the pages the coordinator returns,
// followed to the last.
grpc::Status ListAllJobs(const JobCall& call, v1::ListJobsRequest request,
                         v1::ListJobsResponse* all) {
  do {
    v1::ListJobsResponse page;
    grpc::Status status = call.stub.ListJobs(
        call.connection.NewContext(absl::Seconds(30)).get(), request, &page);
    if (!status.ok()) return status;
    for (v1::Job& job : *page.mutable_jobs()) {
      *all->add_jobs() = std::move(job);
    }
    request.set_page_token(page.next_page_token());
  } while (!request.page_token().empty());
  return grpc::Status::OK;
}

int List(const std::vector<std::string>& args) {
  CommandFlags flags = NewFlags("glmctl list [--state=S1,S2] [flags]");
  flags.Add("state",
            "only jobs in these states (comma-separated, e.g. RUNNING)");
  return RunJobCommand("list", flags, args, 0, [](const JobCall& call) {
    v1::ListJobsRequest request;
    if (call.flags.Has("state")) {
      const std::vector<std::string> names =
          absl::StrSplit(call.flags.Get("state"), ',', absl::SkipEmpty());
      for (const std::string& name : names) {
        v1::JobState state;
        if (!v1::JobState_Parse(name, &state) ||
            state == v1::JOB_STATE_UNSPECIFIED) {
          std::cerr << "glmctl list: unknown state '" << name << "'\n";
          return kExitUsage;
        }
        request.add_states(state);
      }
    }
    v1::ListJobsResponse response;
    grpc::Status status = ListAllJobs(call, request, &response);
    if (!status.ok()) return RpcError(status);
    if (call.json) {
      std::cout << ToJson(response, true);
      return kExitOk;
    }
    TextTable table(
        {"ID", "NAME", "STATE", "STEP", "LOSS", "DEVICE", "WORLD", "UPDATED"});
    for (const v1::Job& job : response.jobs()) {
      table.AddRow({job.id(), job.spec().name(), StateName(job.state()),
                    StepText(job), LossText(job), job.spec().device(),
                    absl::StrCat(job.spec().parallel().world_size()),
                    FormatUnixMs(job.updated_unix_ms())});
    }
    std::cout << table.ToString();
    return kExitOk;
  });
}

void PrintJob(const v1::Job& job) {
  const v1::ParallelSpec& p = job.spec().parallel();
  const v1::ModelSpec& model = job.spec().model();
  std::cout << "id:          " << job.id() << "\n"
            << "name:        " << job.spec().name() << "\n"
            << "state:       " << StateName(job.state())
            << (job.message().empty() ? "" : ": " + job.message()) << "\n"
            << "model:       "
            << (model.has_preset() ? "preset " + model.preset()
                                   : std::string("HF config.json"))
            << "\n"
            << "device:      " << job.spec().device() << ", world "
            << p.world_size() << " (tp " << std::max(1, p.tp()) << ", pp "
            << std::max(1, p.pp()) << ", cp " << std::max(1, p.cp()) << ", ep "
            << std::max(1, p.ep()) << ")"
            << (p.layout().empty() ? "" : ", layout " + p.layout()) << "\n"
            << "step:        " << StepText(job) << ", loss " << LossText(job)
            << "\n"
            << "workers:     "
            << (job.worker_ids().empty()
                    ? "-"
                    : absl::StrJoin(job.worker_ids(), ", "))
            << "\n"
            << "checkpoints: " << job.checkpoints_size() << "\n"
            << "created:     " << FormatUnixMs(job.created_unix_ms()) << "\n\n";
  TextTable history({"TIME", "FROM", "TO", "REASON"});
  for (const v1::StateChange& change : job.history()) {
    history.AddRow({FormatUnixMs(change.unix_ms()),
                    change.from() == v1::JOB_STATE_UNSPECIFIED
                        ? "-"
                        : StateName(change.from()),
                    StateName(change.to()), change.reason()});
  }
  std::cout << history.ToString();
}

int Get(const std::vector<std::string>& args) {
  CommandFlags flags = NewFlags("glmctl get JOB_ID [flags]");
  return RunJobCommand("get", flags, args, 1, [](const JobCall& call) {
    v1::GetJobRequest request;
    request.set_id(call.flags.positional()[0]);
    v1::Job job;
    grpc::Status status = call.stub.GetJob(
        call.connection.NewContext(absl::Seconds(30)).get(), request, &job);
    if (!status.ok()) return RpcError(status);
    if (call.json) {
      std::cout << ToJson(job, true);
    } else {
      PrintJob(job);
    }
    return kExitOk;
  });
}

int Watch(const std::vector<std::string>& args) {
  CommandFlags flags = NewFlags("glmctl watch JOB_ID [flags]");
  return RunJobCommand("watch", flags, args, 1, [](const JobCall& call) {
    v1::WatchJobRequest request;
    request.set_id(call.flags.positional()[0]);
    std::unique_ptr<grpc::ClientContext> context = call.connection.NewContext();
    std::unique_ptr<grpc::ClientReader<v1::JobEvent>> reader =
        call.stub.WatchJob(context.get(), request);
    v1::JobEvent event;
    v1::JobState last = v1::JOB_STATE_UNSPECIFIED;
    // On a terminal the progress line redraws in place; in logs and pipes
    // every step gets its own line.
    const bool terminal = isatty(STDOUT_FILENO);
    bool progress_open = false;
    StepRate rate;
    for (bool first = true; reader->Read(&event); first = false) {
      last = event.job().state();
      if (call.json) {
        std::cout << ToJson(event, false) << std::flush;
        continue;
      }
      if (event.has_state_change()) {
        if (progress_open) std::cout << "\n";
        progress_open = false;
        const v1::StateChange& change = event.state_change();
        std::cout << event.job().id() << " " << StateName(change.to())
                  << (change.reason().empty() ? "" : ": " + change.reason())
                  << "\n";
      }
      // Someone joining mid-run sees the progress so far at once.
      if (event.has_metrics() || (first && event.job().has_latest_metrics())) {
        const v1::StepMetrics& m = event.job().latest_metrics();
        rate.Observe(m.iteration(), absl::Now(),
                     absl::Milliseconds(m.step_time_ms()));
        if (terminal) {
          std::cout << "\r" << ProgressLine(event.job(), rate) << "\x1b[K";
          progress_open = true;
        } else {
          std::cout << ProgressLine(event.job(), rate) << "\n";
        }
      }
      std::cout << std::flush;
    }
    if (progress_open) std::cout << std::endl;
    grpc::Status status = reader->Finish();
    if (!status.ok()) return RpcError(status);
    return last == v1::SUCCEEDED ? kExitOk : kExitFailure;
  });
}

int Cancel(const std::vector<std::string>& args) {
  CommandFlags flags = NewFlags("glmctl cancel JOB_ID [flags]");
  flags.Add("reason", "why, recorded in the job's history",
            "cancelled by user");
  return RunJobCommand("cancel", flags, args, 1, [](const JobCall& call) {
    v1::CancelJobRequest request;
    request.set_id(call.flags.positional()[0]);
    request.set_reason(call.flags.Get("reason"));
    v1::Job job;
    grpc::Status status = call.stub.CancelJob(
        call.connection.NewContext(absl::Seconds(30)).get(), request, &job);
    if (!status.ok()) return RpcError(status);
    if (call.json) {
      std::cout << ToJson(job, true);
    } else {
      std::cout << "cancelled " << job.id() << "\n";
    }
    return kExitOk;
  });
}

int Checkpoints(const std::vector<std::string>& args) {
  CommandFlags flags = NewFlags("glmctl checkpoints JOB_ID [flags]");
  return RunJobCommand("checkpoints", flags, args, 1, [](const JobCall& call) {
    v1::ListCheckpointsRequest request;
    request.set_job_id(call.flags.positional()[0]);
    v1::ListCheckpointsResponse response;
    grpc::Status status = call.stub.ListCheckpoints(
        call.connection.NewContext(absl::Seconds(30)).get(), request,
        &response);
    if (!status.ok()) return RpcError(status);
    if (call.json) {
      std::cout << ToJson(response, true);
      return kExitOk;
    }
    TextTable table(
        {"ITERATION", "KIND", "SAMPLES", "SHARDS", "CREATED", "DIRECTORY"});
    for (const v1::CheckpointManifest& manifest : response.checkpoints()) {
      table.AddRow({absl::StrCat(manifest.iteration()), manifest.kind(),
                    absl::StrCat(manifest.consumed_samples()),
                    absl::StrCat(manifest.shards_size()),
                    FormatUnixMs(manifest.created_unix_ms()),
                    manifest.directory()});
    }
    std::cout << table.ToString();
    return kExitOk;
  });
}

// The audit entries after `after`, every page followed, into `all`.
grpc::Status ListAllAuditEntries(const JobCall& call, int64_t after,
                                 v1::ListAuditResponse* all) {
  v1::ListAuditRequest request;
  request.set_after_sequence(after);
  do {
    v1::ListAuditResponse page;
    grpc::Status status = call.stub.ListAudit(
        call.connection.NewContext(absl::Seconds(30)).get(), request, &page);
    if (!status.ok()) return status;
    for (v1::AuditEntry& entry : *page.mutable_entries()) {
      *all->add_entries() = std::move(entry);
    }
    request.set_after_sequence(page.next_after_sequence());
  } while (request.after_sequence() != 0);
  return grpc::Status::OK;
}

int Audit(const std::vector<std::string>& args) {
  CommandFlags flags = NewFlags("glmctl audit [--after=SEQ] [flags]");
  flags.Add("after", "only entries after this sequence number", "0");
  return RunJobCommand("audit", flags, args, 0, [](const JobCall& call) {
    int64_t after = 0;
    if (absl::Status parsed = call.flags.GetInt("after", &after);
        !parsed.ok()) {
      std::cerr << "glmctl audit: " << parsed.message() << "\n";
      return kExitUsage;
    }
    v1::ListAuditResponse response;
    grpc::Status status = ListAllAuditEntries(call, after, &response);
    if (!status.ok()) return RpcError(status);
    if (call.json) {
      std::cout << ToJson(response, true);
      return kExitOk;
    }
    TextTable table({"SEQ", "TIME", "ROLE", "WORKER", "CLIENT", "METHOD",
                     "SUBJECT", "OUTCOME", "MESSAGE"});
    // Subjects and messages carry what callers sent: quoted unless plain.
    for (const v1::AuditEntry& entry : response.entries()) {
      table.AddRow({absl::StrCat(entry.sequence()),
                    FormatUnixMs(entry.unix_ms()), entry.role(),
                    entry.worker_id().empty() ? "-" : entry.worker_id(),
                    entry.client(), entry.method(), Excerpt(entry.subject()),
                    entry.outcome(), Excerpt(entry.message())});
    }
    std::cout << table.ToString();
    return kExitOk;
  });
}

}  // namespace

std::vector<Command> JobCommands() {
  return {
      {"submit", "submit a job spec (JSON) to the coordinator", Submit},
      {"list", "list jobs and their progress", List},
      {"get", "show one job: spec summary, progress, history", Get},
      {"watch", "follow a job's state and steps until it ends", Watch},
      {"cancel", "cancel a job", Cancel},
      {"checkpoints", "list a job's checkpoints", Checkpoints},
      {"audit", "list the coordinator's audit log (state changes, refusals)",
       Audit},
  };
}

}  // namespace glm
