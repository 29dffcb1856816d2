// Failures of data-parallel ranks end the job with a clear error instead of
// hanging: a rank whose peer never joins the rendezvous gives up at the
// rendezvous timeout, and a peer killed mid-run fails the job (max_restarts 0)
// while the surviving worker stops and takes the next job. A real coordinator
// (in-process, on loopback) and real glm-worker processes.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "coordinator/test_coordinator.h"
#include "gtest/gtest.h"
#include "worker/coordinator_client.h"
#include "worker/test_processes.h"

namespace glm {
namespace {

constexpr int64_t kHeartbeatTimeoutMs = 1500;

std::string WriteToken(const std::string& dir) {
  const std::string token = dir + "/token";
  std::ofstream(token) << TestCoordinator::kWorkerToken;
  return token;
}

TEST(RankFailureTest, PeerThatNeverJoinsFailsTheJobAtTheRendezvousTimeout) {
  TestCoordinator server("never_joins", /*heartbeat_timeout_ms=*/20000,
                         /*serve_metrics=*/false,
                         /*rendezvous_timeout_ms=*/1500);
  const std::string dir = TempDir("never_joins");
  const std::string data = WriteDocuments(dir);
  // A worker that registers, so it is given rank 0, and then never runs it.
  CoordinatorClient absent(server.ConnectAsWorker());
  ASSERT_TRUE(absent.Register(DescribeThisHost(v1::CPU, "")).ok());
  const std::string id = SubmitJob(
      server, TinyPretrainSpec(data, dir + "/save", /*world_size=*/2, 4));
  std::vector<pid_t> pids = {
      SpawnWorker(server.target(), WriteToken(dir), dir + "/worker.log")};

  const absl::Time start = absl::Now();
  const v1::Job ended =
      WatchToTheEnd(server, id, absl::Seconds(30), [](const v1::JobEvent&) {});
  const absl::Duration took = absl::Now() - start;
  StopWorkers(pids);

  ASSERT_EQ(ended.state(), v1::FAILED) << ended.DebugString();
  // The spawned worker (rank 1; the absent one holds rank 0) names itself.
  EXPECT_EQ(ended.message().rfind("rank 1 (worker-", 0), 0u) << ended.message();
  EXPECT_NE(
      ended.message().find(") failed: rank 1 could not reach its peers: "),
      std::string::npos)
      << ended.message();
  EXPECT_EQ(ended.message().find(absent.worker_id()), std::string::npos)
      << ended.message();
  EXPECT_LT(took, absl::Seconds(15));
}

TEST(RankFailureTest, AWorkerRefusesPathsOutsideItsRootsBeforeOpeningThem) {
  // The coordinator here checks no roots: the worker's own check fails the
  // rank (as when a folder was replaced by a symlink after submission).
  TestCoordinator server("worker_roots", kHeartbeatTimeoutMs);
  const std::string dir = TempDir("worker_roots");
  const std::string data = WriteDocuments(dir);
  const std::string roots = dir + "/roots";
  std::filesystem::create_directories(roots);
  std::vector<pid_t> pids = {SpawnWorker(server.target(), WriteToken(dir),
                                         dir + "/worker.log", roots)};
  server.WaitForWorkers(1);
  v1::JobSpec spec = TinyPretrainSpec(data, roots + "/save", 1, 4);
  spec.mutable_training()->set_max_restarts(0);
  const std::string id = SubmitJob(server, spec);
  const v1::Job ended =
      WatchToTheEnd(server, id, absl::Seconds(30), [](const v1::JobEvent&) {});
  StopWorkers(pids);

  ASSERT_EQ(ended.state(), v1::FAILED) << ended.DebugString();
  EXPECT_NE(
      ended.message().find("data.sources[0].path: \"" + data +
                           "\" is outside the path roots (" + roots + ")"),
      std::string::npos)
      << ended.message();
  EXPECT_FALSE(std::filesystem::exists(roots + "/save"));
}

TEST(RankFailureTest, KilledPeerFailsTheJobAndTheSurvivorTakesTheNextJob) {
  TestCoordinator server("killed_peer", kHeartbeatTimeoutMs);
  const std::string dir = TempDir("killed_peer");
  const std::string data = WriteDocuments(dir);
  const std::string token = WriteToken(dir);
  std::vector<pid_t> pids;
  for (int i = 0; i < 2; ++i) {
    pids.push_back(SpawnWorker(server.target(), token,
                               dir + "/worker" + std::to_string(i) + ".log"));
  }
  server.WaitForWorkers(2);
  const std::string id = SubmitJob(
      server, TinyPretrainSpec(data, dir + "/save", /*world_size=*/2, 40));

  bool killed = false;
  const v1::Job ended = WatchToTheEnd(server, id, absl::Seconds(30),
                                      [&](const v1::JobEvent& event) {
                                        if (!killed && event.has_metrics() &&
                                            event.metrics().iteration() == 2) {
                                          EXPECT_EQ(kill(pids[0], SIGKILL), 0);
                                          killed = true;
                                        }
                                      });
  ASSERT_TRUE(killed);
  ASSERT_EQ(ended.state(), v1::FAILED) << ended.DebugString();
  EXPECT_EQ(ended.restarts(), 0);
  // Either the survivor's collective broke or the lost rank's heartbeats
  // stopped, whichever the coordinator heard first.
  EXPECT_TRUE(ended.message().find(" failed: ") != std::string::npos ||
              ended.message().find(" sent no heartbeat for 1500 ms") !=
                  std::string::npos)
      << ended.message();

  // The surviving worker stopped its rank and is free for the next job.
  const std::string next = SubmitJob(
      server, TinyPretrainSpec(data, dir + "/next", /*world_size=*/1, 2));
  const v1::Job done = WatchToTheEnd(server, next, absl::Seconds(30),
                                     [](const v1::JobEvent&) {});
  StopWorkers(pids);
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.DebugString();
}

}  // namespace
}  // namespace glm
