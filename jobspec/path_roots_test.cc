#include "jobspec/path_roots.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace fs = std::filesystem;

namespace glm {
namespace {

class PathRootsTest : public ::testing::Test {
 protected:
  PathRootsTest()
      : dir_(fs::path(std::getenv("TEST_TMPDIR")) /
             ::testing::UnitTest::GetInstance()->current_test_info()->name()) {
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "root" / "data");
    fs::create_directories(dir_ / "outside");
    // A symlink inside the root that leads out of it, and one that stays in.
    fs::create_directory_symlink(dir_ / "outside", dir_ / "root" / "escape");
    fs::create_directory_symlink(dir_ / "root" / "data",
                                 dir_ / "root" / "alias");
    roots_ = *ParsePathRoots((dir_ / "root").string());
  }

  absl::Status CheckSaveDir(const std::string& path) {
    v1::JobSpec spec;
    spec.mutable_training()->set_save_dir(path);
    return CheckSpecPaths(spec, roots_);
  }

  std::string Under(const std::string& relative) const {
    return (dir_ / relative).string();
  }

  fs::path dir_;
  PathRoots roots_;
};

TEST_F(PathRootsTest, PathsUnderARootPassEvenBeforeTheyExist) {
  EXPECT_TRUE(CheckSaveDir(Under("root/data/run1/checkpoints")).ok());
  EXPECT_TRUE(CheckSaveDir(Under("root")).ok());
  EXPECT_TRUE(CheckSaveDir(Under("root/alias/x")).ok());
}

TEST_F(PathRootsTest, EscapesAreRefusedNamingTheField) {
  absl::Status outside = CheckSaveDir(Under("outside/x"));
  EXPECT_EQ(outside.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(outside.message().rfind("training.save_dir: ", 0), 0u) << outside;
  EXPECT_NE(outside.message().find("outside the path roots"),
            std::string::npos);

  absl::Status dot_dot = CheckSaveDir(Under("root/data/../../outside"));
  EXPECT_NE(dot_dot.message().find("'..'"), std::string::npos) << dot_dot;

  absl::Status symlink = CheckSaveDir(Under("root/escape/stolen"));
  EXPECT_EQ(symlink.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(symlink.message().find("resolves to"), std::string::npos)
      << symlink;

  absl::Status relative = CheckSaveDir("checkpoints");
  EXPECT_NE(relative.message().find("is relative"), std::string::npos)
      << relative;

  // A sibling whose name starts like the root is not under it.
  fs::create_directories(Under("rootless"));
  EXPECT_FALSE(CheckSaveDir(Under("rootless/x")).ok());
}

TEST_F(PathRootsTest, EveryPathFieldIsChecked) {
  v1::JobSpec spec;
  spec.mutable_data()->set_tokenizer("byte");  // not a path
  spec.mutable_data()->add_sources()->set_path(Under("root/data/corpus"));
  spec.mutable_data()->add_sources()->set_path(Under("outside/corpus"));
  absl::Status status = CheckSpecPaths(spec, roots_);
  EXPECT_EQ(status.message().rfind("data.sources[1].path: ", 0), 0u) << status;

  for (const char* field : {"model.hf_checkpoint_dir", "training.load_dir",
                            "training.export_hf_dir", "data.tokenizer"}) {
    v1::JobSpec one;
    const std::string path = Under("outside/f");
    if (std::string(field) == "model.hf_checkpoint_dir") {
      one.mutable_model()->set_hf_checkpoint_dir(path);
    } else if (std::string(field) == "training.load_dir") {
      one.mutable_training()->set_load_dir(path);
    } else if (std::string(field) == "training.export_hf_dir") {
      one.mutable_training()->set_export_hf_dir(path);
    } else {
      one.mutable_data()->set_tokenizer(path);
    }
    status = CheckSpecPaths(one, roots_);
    EXPECT_EQ(status.message().rfind(std::string(field) + ": ", 0), 0u)
        << status;
  }
}

TEST_F(PathRootsTest, AWorkerResolvesRelativePathsAgainstItsFolder) {
  v1::JobSpec spec;
  spec.mutable_training()->set_save_dir("data/run");
  EXPECT_TRUE(CheckSpecPaths(spec, roots_, dir_ / "root").ok());
  EXPECT_FALSE(CheckSpecPaths(spec, roots_, dir_ / "outside").ok());
}

TEST_F(PathRootsTest, RootsMustBeExistingAbsoluteFolders) {
  EXPECT_FALSE(ParsePathRoots("relative").ok());
  EXPECT_FALSE(ParsePathRoots(Under("missing")).ok());
  EXPECT_FALSE(ParsePathRoots("").ok());
  absl::StatusOr<PathRoots> everything = ParsePathRoots("/");
  ASSERT_TRUE(everything.ok());
  v1::JobSpec spec;
  spec.mutable_training()->set_save_dir("/anywhere/at/all");
  EXPECT_TRUE(CheckSpecPaths(spec, *everything).ok());
  // No roots: no restriction (embedded coordinators).
  EXPECT_TRUE(CheckSpecPaths(spec, {}).ok());
}

}  // namespace
}  // namespace glm
