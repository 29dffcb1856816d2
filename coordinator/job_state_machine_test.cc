#include "coordinator/job_state_machine.h"

#include <set>
#include <utility>

#include "gtest/gtest.h"

namespace glm {
namespace {

using v1::JobState;

const JobState kStates[] = {v1::JOB_STATE_UNSPECIFIED,
                            v1::PENDING,
                            v1::SCHEDULED,
                            v1::RUNNING,
                            v1::SUCCEEDED,
                            v1::FAILED,
                            v1::CANCELLED};

const std::set<std::pair<JobState, JobState>> kLegal = {
    {v1::PENDING, v1::SCHEDULED},   {v1::PENDING, v1::CANCELLED},
    {v1::PENDING, v1::FAILED},      {v1::SCHEDULED, v1::RUNNING},
    {v1::SCHEDULED, v1::PENDING},   {v1::SCHEDULED, v1::FAILED},
    {v1::SCHEDULED, v1::CANCELLED}, {v1::RUNNING, v1::SUCCEEDED},
    {v1::RUNNING, v1::FAILED},      {v1::RUNNING, v1::CANCELLED},
    {v1::RUNNING, v1::PENDING},
};

TEST(JobStateMachineTest, EveryPairIsLegalExactlyWhenListed) {
  for (JobState from : kStates) {
    for (JobState to : kStates) {
      absl::Status status = CheckTransition(from, to);
      if (kLegal.count({from, to})) {
        EXPECT_TRUE(status.ok()) << JobState_Name(from) << "->"
                                 << JobState_Name(to) << ": " << status;
      } else {
        EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition)
            << JobState_Name(from) << "->" << JobState_Name(to);
        EXPECT_NE(status.message().find(JobState_Name(from)),
                  absl::string_view::npos);
        EXPECT_NE(status.message().find(JobState_Name(to)),
                  absl::string_view::npos);
      }
    }
  }
}

TEST(JobStateMachineTest, TerminalStatesAreFinal) {
  for (JobState state : {v1::SUCCEEDED, v1::FAILED, v1::CANCELLED}) {
    EXPECT_TRUE(IsTerminalState(state));
    for (JobState to : kStates) EXPECT_FALSE(CheckTransition(state, to).ok());
  }
  for (JobState state : {v1::PENDING, v1::SCHEDULED, v1::RUNNING}) {
    EXPECT_FALSE(IsTerminalState(state));
  }
}

TEST(JobStateMachineTest, ApplyRecordsHistoryAndReason) {
  v1::Job job;
  job.set_state(v1::PENDING);
  job.add_worker_ids("worker-1");
  ASSERT_TRUE(ApplyTransition(v1::CANCELLED, "user asked", 1234, &job).ok());
  EXPECT_EQ(job.state(), v1::CANCELLED);
  ASSERT_EQ(job.history_size(), 1);
  EXPECT_EQ(job.history(0).from(), v1::PENDING);
  EXPECT_EQ(job.history(0).to(), v1::CANCELLED);
  EXPECT_EQ(job.history(0).unix_ms(), 1234);
  EXPECT_EQ(job.history(0).reason(), "user asked");
  EXPECT_EQ(job.message(), "user asked");
  EXPECT_EQ(job.worker_ids_size(), 0);
}

TEST(JobStateMachineTest, IllegalApplyLeavesJobUnchanged) {
  v1::Job job;
  job.set_state(v1::SUCCEEDED);
  absl::Status status = ApplyTransition(v1::RUNNING, "again", 1, &job);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(),
            "illegal job state transition SUCCEEDED -> RUNNING: SUCCEEDED is "
            "final");
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
  EXPECT_EQ(job.history_size(), 0);
}

}  // namespace
}  // namespace glm
