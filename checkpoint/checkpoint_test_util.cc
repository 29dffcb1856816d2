#include "checkpoint/checkpoint_test_util.h"

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "model/config.h"

namespace glm {

std::string NewTempDir() {
  const char* root = std::getenv("TEST_TMPDIR");
  std::string pattern = (root ? std::filesystem::path(root)
                              : std::filesystem::temp_directory_path()) /
                        "checkpoint_test_XXXXXX";
  return mkdtemp(pattern.data());
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

v1::ParallelLayout PipelineExpertLayout(int pp, int ep,
                                        const std::string& layout) {
  v1::ParallelLayout result;
  result.set_pp(pp);
  result.set_ep(ep);
  result.set_layout(layout);
  return result;
}

HfNameMap TinyNameMap(ExpertForm form, const v1::ParallelLayout& layout) {
  absl::StatusOr<HfNameMap> map =
      HfNameMap::Create(*PresetConfig("glm5.2-tiny"), form, layout);
  EXPECT_TRUE(map.ok()) << map.status();
  return *std::move(map);
}

}  // namespace glm
