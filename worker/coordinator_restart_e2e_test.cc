// A real glm-worker process outlives a restart of its coordinator (in-process,
// on the same loopback port, the same state directory): the new coordinator
// does not know the worker's id, so the worker registers again under a new id
// and takes the next job.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "coordinator/test_coordinator.h"
#include "gtest/gtest.h"
#include "worker/test_processes.h"

namespace glm {
namespace {

std::string ReadLog(const std::string& path) {
  std::ostringstream text;
  text << std::ifstream(path).rdbuf();
  return text.str();
}

TEST(CoordinatorRestartTest, WorkerRegistersAgainAndTakesTheNextJob) {
  TestCoordinator server("restart_state");
  const std::string dir = TempDir("restart_under_worker");
  const std::string data = WriteDocuments(dir);
  std::vector<pid_t> pids;
  const std::string first = SubmitWithWorkers(
      server, TinyPretrainSpec(data, dir + "/first", /*world_size=*/1, 2), dir,
      /*workers=*/1, &pids);
  const v1::Job done = WatchToTheEnd(server, first, absl::Seconds(30),
                                     [](const v1::JobEvent&) {});
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.DebugString();

  ASSERT_TRUE(server.RestartOnSamePort().ok());
  server.WaitForWorkers(1);  // the worker registers again
  const std::string next = SubmitJob(
      server, TinyPretrainSpec(data, dir + "/next", /*world_size=*/1, 2));
  const v1::Job next_done = WatchToTheEnd(server, next, absl::Seconds(30),
                                          [](const v1::JobEvent&) {});
  StopWorkers(pids);
  EXPECT_EQ(next_done.state(), v1::SUCCEEDED) << next_done.DebugString();
  const std::string log = ReadLog(dir + "/worker0.log");
  // "glm-worker worker-<32 hex digits>: registered with ..."
  const size_t at = log.find("glm-worker worker-");
  ASSERT_NE(at, std::string::npos) << log;
  const std::string first_id =
      log.substr(at + std::string("glm-worker ").size(),
                 std::string("worker-").size() + 32);
  EXPECT_NE(
      log.find("coordinator no longer knows " + first_id + " (NOT_FOUND: "),
      std::string::npos)
      << log;
  const size_t again = log.find("registered again as worker-");
  ASSERT_NE(again, std::string::npos) << log;
  EXPECT_EQ(log.find(first_id, again), std::string::npos)
      << "registered again under its old id: " << log;
}

}  // namespace
}  // namespace glm
