#include "cli/global_flags.h"

#include "gtest/gtest.h"

namespace glm {
namespace {

using Args = std::vector<std::string>;

TEST(GlobalFlagsTest, FlagsBeforeTheCommandFollowItsWords) {
  EXPECT_EQ(
      MoveLeadingFlagsAfterCommand({"--coordinator=head:7070", "--token-file=t",
                                    "submit", "-f", "job.json"}),
      (Args{"submit", "--coordinator=head:7070", "--token-file=t", "-f",
            "job.json"}));
}

TEST(GlobalFlagsTest, SharedFlagsKeepASeparateValue) {
  EXPECT_EQ(
      MoveLeadingFlagsAfterCommand(
          {"--coordinator", "head:7070", "--output", "json", "get", "job-1"}),
      (Args{"get", "job-1", "--coordinator", "head:7070", "--output", "json"}));
}

TEST(GlobalFlagsTest, MultiWordCommandsStayTogether) {
  EXPECT_EQ(MoveLeadingFlagsAfterCommand({"--help", "layout", "check"}),
            (Args{"layout", "check", "--help"}));
}

TEST(GlobalFlagsTest, ArgumentsWithoutLeadingFlagsAreUnchanged) {
  const Args args = {"submit", "-f", "job.json", "--coordinator=a:1"};
  EXPECT_EQ(MoveLeadingFlagsAfterCommand(args), args);
  EXPECT_EQ(MoveLeadingFlagsAfterCommand({"--help"}), Args{"--help"});
  EXPECT_EQ(MoveLeadingFlagsAfterCommand({}), Args{});
}

}  // namespace
}  // namespace glm
