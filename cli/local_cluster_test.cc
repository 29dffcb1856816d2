#include "cli/local_cluster.h"

#include <signal.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace glm {
namespace {

int CountRegistrations(const std::string& log) {
  std::stringstream text;
  text << std::ifstream(log).rdbuf();
  int count = 0;
  for (absl::string_view line : absl::StrSplit(text.str(), '\n')) {
    if (line.find(": registered with ") != absl::string_view::npos) ++count;
  }
  return count;
}

// Waits up to a minute for `count` registrations in the log: Start returns
// once the coordinator has counted the workers, which may be before a worker
// has written its own line.
int WaitForRegistrations(const std::string& log, int count) {
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (CountRegistrations(log) < count && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  return CountRegistrations(log);
}

// A worker killed outright is replaced: a new process starts in its place,
// registers, and its output follows the dead one's in the same log.
TEST(LocalClusterTest, ReplacesAWorkerThatDies) {
  LocalClusterOptions options;
  options.state_dir = std::string(std::getenv("TEST_TMPDIR")) + "/cluster";
  options.workers = 2;
  options.worker_binary =
      std::string(std::getenv("TEST_SRCDIR")) + "/glm/worker/glm-worker";
  options.path_roots = {options.state_dir};
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster =
      LocalCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const pid_t untouched = (*cluster)->worker_pids()[0];
  const pid_t killed = (*cluster)->worker_pids()[1];
  ASSERT_EQ(WaitForRegistrations((*cluster)->WorkerLog(1), 1), 1);
  ASSERT_EQ(kill(killed, SIGKILL), 0);
  EXPECT_EQ(WaitForRegistrations((*cluster)->WorkerLog(1), 2), 2);
  const pid_t replacement = (*cluster)->worker_pids()[1];
  EXPECT_NE(replacement, killed);
  EXPECT_EQ(kill(replacement, 0), 0) << "the replacement runs";
  EXPECT_EQ((*cluster)->worker_pids()[0], untouched);
  // The coordinator counts the replacement; the killed worker stays counted
  // until its heartbeats time out.
  EXPECT_GE((*cluster)->alive_workers(), 2);
}

}  // namespace
}  // namespace glm
