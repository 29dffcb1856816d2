#include "base/environment.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace glm {
namespace {

constexpr char kName[] = "GLM_ENVIRONMENT_TEST_VALUE";

// "1" on, "0" off, unset or empty the fallback (off unless given).
TEST(EnvironmentTest, SwitchIsOnAtOneOffAtZeroElseItsFallback) {
  unsetenv(kName);
  EXPECT_FALSE(*EnvironmentSwitch(kName));
  for (const bool fallback : {false, true}) {
    unsetenv(kName);
    EXPECT_EQ(*EnvironmentSwitch(kName, fallback), fallback);
    for (const auto& [text, on] :
         {std::pair{"", fallback}, std::pair{"0", false},
          std::pair{"1", true}}) {
      setenv(kName, text, 1);
      absl::StatusOr<bool> value = EnvironmentSwitch(kName, fallback);
      ASSERT_TRUE(value.ok()) << value.status();
      EXPECT_EQ(*value, on) << "'" << text << "', fallback " << fallback;
    }
  }
  setenv(kName, "", 1);
  EXPECT_FALSE(*EnvironmentSwitch(kName));
  unsetenv(kName);
}

TEST(EnvironmentTest, SwitchRefusesOtherValues) {
  for (const char* text : {"true", "yes", "2", " 1", "on"}) {
    setenv(kName, text, 1);
    absl::StatusOr<bool> value = EnvironmentSwitch(kName);
    EXPECT_EQ(value.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(value.status().message().find(kName), absl::string_view::npos);
  }
  unsetenv(kName);
}

TEST(EnvironmentTest, WholeNumberOrFallback) {
  unsetenv(kName);
  EXPECT_EQ(*EnvironmentWholeNumber(kName, 0, 42), 42);
  setenv(kName, "", 1);
  EXPECT_EQ(*EnvironmentWholeNumber(kName, 0, 42), 42);
  setenv(kName, "16384", 1);
  EXPECT_EQ(*EnvironmentWholeNumber(kName, 0, 42), 16384);
  setenv(kName, "0", 1);
  EXPECT_EQ(*EnvironmentWholeNumber(kName, 0, 42), 0);
  unsetenv(kName);
}

TEST(EnvironmentTest, WholeNumberRefusesOtherValues) {
  for (const char* text : {"-1", "0", "1e4", "16k", "99999999999999999999"}) {
    setenv(kName, text, 1);
    absl::StatusOr<int64_t> value = EnvironmentWholeNumber(kName, 1, 42);
    EXPECT_EQ(value.status().code(), absl::StatusCode::kInvalidArgument)
        << "'" << text << "'";
    EXPECT_NE(value.status().message().find(kName), absl::string_view::npos);
  }
  unsetenv(kName);
}

}  // namespace
}  // namespace glm
