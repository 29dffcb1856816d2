// RendezvousStore against a real in-process coordinator on 127.0.0.1.
#include "worker/rendezvous_store.h"

#include <thread>

#include "coordinator/test_coordinator.h"
#include "gtest/gtest.h"

namespace glm {
namespace {

TEST(RendezvousStoreTest, RanksMeetThroughTheCoordinator) {
  TestCoordinator server("rendezvous_meet");
  RendezvousStore rank0(server.ConnectAsRegisteredWorker(),
                        "job-000001/attempt-1");
  RendezvousStore rank1(server.ConnectAsRegisteredWorker(),
                        "job-000001/attempt-1");
  RendezvousStore other_attempt(server.ConnectAsRegisteredWorker(),
                                "job-000001/attempt-2");

  std::thread late([&] {
    absl::SleepFor(absl::Milliseconds(100));
    EXPECT_TRUE(rank1.Set("nccl_id", std::string("\x00\x01\x02", 3)).ok());
  });
  absl::StatusOr<std::vector<std::string>> values =
      rank0.Wait({"nccl_id"}, absl::Seconds(5));
  late.join();
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ((*values)[0], std::string("\x00\x01\x02", 3));

  absl::StatusOr<std::optional<std::string>> got = rank0.Get("nccl_id");
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->has_value());
  EXPECT_FALSE(other_attempt.Get("nccl_id")->has_value());

  EXPECT_EQ(*rank0.Add("arrived", 1), 1);
  EXPECT_EQ(*rank1.Add("arrived", 1), 2);
}

TEST(RendezvousStoreTest, WaitTimesOutWithDeadlineExceeded) {
  TestCoordinator server("rendezvous_timeout");
  RendezvousStore store(server.ConnectAsRegisteredWorker(),
                        "job-000001/attempt-1");
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<std::string>> values =
      store.Wait({"never"}, absl::Milliseconds(200));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));
  EXPECT_EQ(values.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(values.status().message().find("never"), std::string::npos);
}

TEST(RendezvousStoreTest, OnlyRegisteredWorkersMeet) {
  TestCoordinator server("rendezvous_auth");
  RendezvousStore wrong_token(server.Connect("not-the-token"), "s");
  EXPECT_EQ(wrong_token.Set("k", "v").code(),
            absl::StatusCode::kUnauthenticated);
  RendezvousStore operator_token(server.ConnectAsOperator(), "s");
  absl::Status refused = operator_token.Set("k", "v");
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(refused.message().find("needs the worker token"), std::string::npos)
      << refused;
  // The worker token alone only registers.
  RendezvousStore unregistered(server.ConnectAsWorker(), "s");
  refused = unregistered.Set("k", "v");
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_NE(refused.message().find("glm-worker-secret"), std::string::npos)
      << refused;
  RendezvousStore registered(server.ConnectAsRegisteredWorker(), "s");
  EXPECT_FALSE(registered.Get("k")->has_value());
}

}  // namespace
}  // namespace glm
