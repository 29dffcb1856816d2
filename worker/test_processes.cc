#include "worker/test_processes.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "coordinator/job_state_machine.h"
#include "data/indexed_dataset.h"
#include "data/packed_sft_dataset.h"
#include "data/tokenizer.h"
#include "grpcpp/channel.h"
#include "gtest/gtest.h"
#include "proto/job_service.grpc.pb.h"

extern char** environ;

namespace glm {

std::string TempDir(const std::string& name) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string WriteDocuments(const std::string& dir) {
  const std::string prefix = dir + "/documents";
  auto builder = IndexedDatasetBuilder::Create(prefix, TokenDtype::kUint16);
  EXPECT_TRUE(builder.ok());
  uint32_t state = 777;
  for (int document = 0; document < 80; ++document) {
    std::vector<int32_t> ids;
    for (int i = 0; i < 24 + document % 13; ++i) {
      state = state * 1103515245u + 12345u;
      ids.push_back(static_cast<int32_t>((state >> 16) % 256));
    }
    ids.push_back(256);
    EXPECT_TRUE((*builder)->AddDocument(ids).ok());
  }
  EXPECT_TRUE((*builder)->Finish().ok());
  return prefix;
}

pid_t SpawnWorker(const std::string& target, const std::string& token_file,
                  const std::string& log, const std::string& path_roots) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> args = {
      "worker/glm-worker", "--coordinator=" + target,
      "--token-file=" + token_file, "--path-roots=" + path_roots};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ),
            0);
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

std::string SubmitJob(const TestCoordinator& server, const v1::JobSpec& spec) {
  std::shared_ptr<ClientConnection> connection = server.ConnectAsOperator();
  auto stub = v1::JobService::NewStub(connection->channel());
  v1::SubmitJobRequest submit;
  *submit.mutable_spec() = spec;
  v1::SubmitJobResponse submitted;
  grpc::Status status =
      stub->SubmitJob(connection->NewContext().get(), submit, &submitted);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return submitted.job().id();
}

std::string SubmitWithWorkers(const TestCoordinator& server,
                              const v1::JobSpec& spec, const std::string& dir,
                              int workers, std::vector<pid_t>* pids) {
  const std::string token = dir + "/token";
  std::ofstream(token) << TestCoordinator::kWorkerToken;
  for (int i = 0; i < workers; ++i) {
    pids->push_back(SpawnWorker(server.target(), token,
                                dir + "/worker" + std::to_string(i) + ".log"));
  }
  // A job is accepted once a worker that runs it has registered.
  server.WaitForWorkers(workers);
  return SubmitJob(server, spec);
}

v1::Job WatchToTheEnd(
    const TestCoordinator& server, const std::string& id,
    absl::Duration deadline,
    const std::function<void(const v1::JobEvent&)>& on_event) {
  std::shared_ptr<ClientConnection> connection = server.ConnectAsOperator();
  auto stub = v1::JobService::NewStub(connection->channel());
  std::unique_ptr<grpc::ClientContext> context =
      connection->NewContext(deadline);
  v1::WatchJobRequest request;
  request.set_id(id);
  auto reader = stub->WatchJob(context.get(), request);
  v1::JobEvent event;
  while (reader->Read(&event)) {
    on_event(event);
    if (IsTerminalState(event.job().state())) break;
  }
  context->TryCancel();
  return event.job();
}

void StopWorkers(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    kill(pid, SIGTERM);
    waitpid(pid, nullptr, 0);
  }
}

// Short chats, packed into rows of 64 tokens.
std::string WritePackedChats(const std::string& dir) {
  std::ofstream chats(dir + "/chats.jsonl");
  for (int i = 0; i < 40; ++i) {
    chats << R"({"messages": [{"role": "user", "content": "what is )" << i
          << R"( plus one?"}, {"role": "assistant", "content": ")" << i + 1
          << R"("}]})"
          << "\n";
  }
  chats.close();
  ByteTokenizer tokenizer;
  const std::string prefix = dir + "/chats";
  EXPECT_TRUE(
      PackChatJsonl(dir + "/chats.jsonl", tokenizer, 64, 8, prefix).ok());
  return prefix;
}

}  // namespace glm
