// Job specs of jobspec/testdata for tests.
#ifndef GLM_JOBSPEC_TEST_SPECS_H_
#define GLM_JOBSPEC_TEST_SPECS_H_

#include <string>

#include "proto/job_spec.pb.h"

namespace glm {

// The spec in jobspec/testdata/<file_name> (protobuf JSON mapping); aborts
// the test binary when the file is missing or malformed, since every test
// depends on it.
v1::JobSpec LoadTestSpec(const std::string& file_name);

}  // namespace glm

#endif  // GLM_JOBSPEC_TEST_SPECS_H_
