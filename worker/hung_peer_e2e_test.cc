// A rank whose peer hangs without closing its connections (the peer process is
// stopped, SIGSTOP) fails at the job's collective timeout with an error naming
// the group, instead of waiting out Gloo's 30 minutes. A real coordinator
// (in-process, on loopback) and real glm-worker processes; heartbeats would
// notice the stopped worker only after 20 s, so the timeout is what ends it.
#include <signal.h>
#include <sys/wait.h>

#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "coordinator/test_coordinator.h"
#include "gtest/gtest.h"
#include "worker/test_processes.h"

namespace glm {
namespace {

TEST(HungPeerTest, SurvivorFailsTheJobAtTheCollectiveTimeout) {
  TestCoordinator server("hung_peer_state", /*heartbeat_timeout_ms=*/20000);
  const std::string dir = TempDir("hung_peer");
  const std::string data = WriteDocuments(dir);
  v1::JobSpec spec =
      TinyPretrainSpec(data, dir + "/save", /*world_size=*/2, 200);
  spec.mutable_training()->set_max_restarts(0);
  spec.mutable_parallel()->set_collective_timeout_seconds(2);
  std::vector<pid_t> pids;
  const std::string id = SubmitWithWorkers(server, spec, dir, 2, &pids);

  absl::Time stopped;
  const v1::Job ended = WatchToTheEnd(
      server, id, absl::Seconds(30), [&](const v1::JobEvent& event) {
        if (stopped == absl::Time() && event.has_metrics() &&
            event.metrics().iteration() == 2) {
          EXPECT_EQ(kill(pids[0], SIGSTOP), 0);
          stopped = absl::Now();
        }
      });
  const absl::Duration took = absl::Now() - stopped;
  kill(pids[0], SIGKILL);  // a stopped process ignores SIGTERM until resumed
  waitpid(pids[0], nullptr, 0);
  StopWorkers({pids[1]});

  ASSERT_NE(stopped, absl::Time());
  ASSERT_EQ(ended.state(), v1::FAILED) << ended.DebugString();
  EXPECT_NE(ended.message().find(" failed: "), std::string::npos)
      << ended.message();
  EXPECT_NE(ended.message().find("group "), std::string::npos)
      << ended.message();
  EXPECT_NE(ended.message().find("Timed out"), std::string::npos)
      << ended.message();
  EXPECT_GE(took, absl::Seconds(2));
  EXPECT_LT(took, absl::Seconds(15));
}

}  // namespace
}  // namespace glm
