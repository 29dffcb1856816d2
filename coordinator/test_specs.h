// Job specs of coordinator/testdata for tests.
#ifndef GLM_COORDINATOR_TEST_SPECS_H_
#define GLM_COORDINATOR_TEST_SPECS_H_

#include <string>

#include "proto/job_spec.pb.h"

namespace glm {

// The spec in coordinator/testdata/<file_name> (protobuf JSON mapping); aborts
// the test binary when the file is missing or malformed, since every test
// depends on it.
v1::JobSpec LoadTestSpec(const std::string& file_name);

}  // namespace glm

#endif  // GLM_COORDINATOR_TEST_SPECS_H_
