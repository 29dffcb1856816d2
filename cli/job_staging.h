// Makes a job spec ready for workers that share a file system with a stage
// folder: raw JSONL sources become datasets under STAGE/data (text tokenized
// for pretraining as `glmctl data preprocess` does, chats packed for SFT and
// LoRA as `glmctl data pack` does), and relative output folders (save, load,
// export) and a relative starting checkpoint are placed under STAGE; other
// input paths are made absolute. What
// `glmctl local` and `glmctl submit --stage-dir` do before submitting.
#ifndef GLM_CLI_JOB_STAGING_H_
#define GLM_CLI_JOB_STAGING_H_

#include <filesystem>
#include <functional>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "proto/job_spec.pb.h"

namespace glm {

// `stage_dir` must be absolute. `resolve_input` maps a spec's input path (a
// JSONL source, the tokenizer model) to the file to read. Prints a line per
// dataset made to `out`.
absl::Status StageJob(
    const std::filesystem::path& stage_dir,
    const std::function<std::filesystem::path(const std::string&)>&
        resolve_input,
    v1::JobSpec* spec, std::ostream& out);

}  // namespace glm

#endif  // GLM_CLI_JOB_STAGING_H_
