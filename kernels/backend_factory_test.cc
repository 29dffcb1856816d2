#include "kernels/backend_factory.h"

#include <cstdlib>

#include "gtest/gtest.h"
#include "kernels/attention_pairs.h"

namespace glm {
namespace {

constexpr char kPairs[] = "GLM_ATTENTION_PAIRS_PER_CALL";

TEST(BackendFactoryTest, AttentionPairsPerCallDefaultsWhenUnset) {
  unsetenv(kPairs);
  absl::StatusOr<int64_t> pairs = AttentionPairsPerCall();
  ASSERT_TRUE(pairs.ok()) << pairs.status();
  EXPECT_EQ(*pairs, kDefaultAttentionPairsPerCall);
}

TEST(BackendFactoryTest, AttentionPairsPerCallReadsAWholeNumber) {
  setenv(kPairs, "67108864", 1);
  absl::StatusOr<int64_t> pairs = AttentionPairsPerCall();
  unsetenv(kPairs);
  ASSERT_TRUE(pairs.ok()) << pairs.status();
  EXPECT_EQ(*pairs, int64_t{1} << 26);
}

TEST(BackendFactoryTest, AttentionPairsPerCallRefusesOtherValues) {
  for (const char* bad : {"0", "-4", "2^26", "1e8", "99999999999999999999"}) {
    setenv(kPairs, bad, 1);
    absl::StatusOr<int64_t> pairs = AttentionPairsPerCall();
    EXPECT_EQ(pairs.status().code(), absl::StatusCode::kInvalidArgument)
        << "'" << bad << "'";
    EXPECT_NE(pairs.status().message().find(kPairs), absl::string_view::npos)
        << pairs.status();
  }
  unsetenv(kPairs);
}

// A switch set to anything but 0 or 1 fails the backend, naming it, rather
// than leaving it off unnoticed.
TEST(BackendFactoryTest, ASwitchOfAnotherValueIsAnError) {
  setenv("GLM_OP_TIMES", "yes", 1);
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      MakeBackend("cpu", "", /*deterministic=*/true);
  unsetenv("GLM_OP_TIMES");
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(backend.status().message().find("GLM_OP_TIMES"),
            absl::string_view::npos)
      << backend.status();
  EXPECT_TRUE(MakeBackend("cpu", "", true).ok());
}

}  // namespace
}  // namespace glm
