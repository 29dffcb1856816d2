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
  for (const char* bad :
       {"0", "-4", "2^26", "", "1e8", "99999999999999999999"}) {
    setenv(kPairs, bad, 1);
    absl::StatusOr<int64_t> pairs = AttentionPairsPerCall();
    EXPECT_EQ(pairs.status().code(), absl::StatusCode::kInvalidArgument)
        << "'" << bad << "'";
    EXPECT_NE(pairs.status().message().find(kPairs), absl::string_view::npos)
        << pairs.status();
  }
  unsetenv(kPairs);
}

}  // namespace
}  // namespace glm
