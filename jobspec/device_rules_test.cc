#include "jobspec/device_rules.h"

#include "gtest/gtest.h"
#include "jobspec/test_specs.h"

namespace glm {
namespace {

v1::JobSpec OnDevice(const std::string& device) {
  v1::JobSpec spec = LoadTestSpec("tiny_job.json");
  spec.set_device(device);
  return spec;
}

TEST(DeviceRulesTest, AWorkerRunsJobsOfItsKindOfDevice) {
  EXPECT_TRUE(ValidateForWorker(OnDevice("cpu"), "cpu").ok());
  EXPECT_TRUE(ValidateForWorker(OnDevice("cuda"), "cuda:3").ok());

  absl::StatusOr<JobPlan> plan = ValidateForWorker(OnDevice("cuda"), "cpu");
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.status().message(),
            "device: the job asks for cuda, this worker runs on cpu");
  plan = ValidateForWorker(OnDevice("cpu"), "cuda:0");
  EXPECT_EQ(plan.status().message(),
            "device: the job asks for cpu, this worker runs on cuda:0");
}

TEST(DeviceRulesTest, AWorkerChecksTheWholeSpecToo) {
  v1::JobSpec spec = OnDevice("cpu");
  spec.mutable_parallel()->set_etp(2);
  absl::StatusOr<JobPlan> plan = ValidateForWorker(spec, "cpu");
  EXPECT_EQ(plan.status().message().rfind("parallel.etp: ", 0), 0u)
      << plan.status();
}

TEST(DeviceRulesTest, WorkerDevicesAreCpuOrCudaN) {
  EXPECT_EQ(*WorkerDeviceKind("cpu"), v1::CPU);
  EXPECT_EQ(*WorkerDeviceKind("cuda:1"), v1::CUDA);
  EXPECT_EQ(WorkerDeviceKind("gpu").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DeviceRulesTest, SubmissionNeedsARegisteredWorkerOfTheJobsKind) {
  EXPECT_TRUE(CheckSomeWorkerRuns(OnDevice("cpu"), {v1::CUDA, v1::CPU}).ok());
  EXPECT_TRUE(CheckSomeWorkerRuns(OnDevice("cuda"), {v1::CUDA}).ok());

  absl::Status none = CheckSomeWorkerRuns(OnDevice("cuda"), {v1::CPU, v1::CPU});
  EXPECT_EQ(none.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(none.message(),
            "device: no registered worker runs cuda jobs (2 registered: 2 "
            "cpu, 0 cuda); start glm-worker --device=cuda:N first");
  none = CheckSomeWorkerRuns(OnDevice("cpu"), {});
  EXPECT_EQ(none.message(),
            "device: no registered worker runs cpu jobs (0 registered: 0 cpu, "
            "0 cuda); start glm-worker --device=cpu first");
}

}  // namespace
}  // namespace glm
