// Shared pieces of the checkpoint tests.
#ifndef GLM_CHECKPOINT_CHECKPOINT_TEST_UTIL_H_
#define GLM_CHECKPOINT_CHECKPOINT_TEST_UTIL_H_

#include <string>

#include "checkpoint/hf_name_map.h"
#include "proto/checkpoint.pb.h"

namespace glm {

// A new empty directory under the test's temporary directory.
std::string NewTempDir();
// The file's bytes ("" when it cannot be read).
std::string ReadAll(const std::string& path);
// TP = ETP = CP = 1 with the given pipeline and expert parallel sizes and
// Megatron layout string.
v1::ParallelLayout PipelineExpertLayout(int pp, int ep,
                                        const std::string& layout = "");
// The name map of glm5.2-tiny: 8 layers, layer 1 dense, index sharing freq 4
// offset 3 (layers 1, 2, 3 and 7 compute, 4-6 and 8 reuse), 8 experts, one
// MTP layer (model.layers.8).
HfNameMap TinyNameMap(ExpertForm form, const v1::ParallelLayout& layout);

}  // namespace glm

#endif  // GLM_CHECKPOINT_CHECKPOINT_TEST_UTIL_H_
