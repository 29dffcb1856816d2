#include "jobspec/test_specs.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "google/protobuf/util/json_util.h"

namespace glm {

v1::JobSpec LoadTestSpec(const std::string& file_name) {
  const std::string path = "jobspec/testdata/" + file_name;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  v1::JobSpec spec;
  auto parsed = google::protobuf::util::JsonStringToMessage(text.str(), &spec);
  if (!in || !parsed.ok()) {
    std::fprintf(stderr, "cannot load test spec %s: %s\n", path.c_str(),
                 parsed.ToString().c_str());
    std::abort();
  }
  return spec;
}

}  // namespace glm
