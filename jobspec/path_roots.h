// Where a job's files may be. An operator names root folders (the
// coordinator's and each worker's --path-roots); every path a job spec names
// (data sources, the tokenizer model, the HF checkpoint to start from, the
// save, load and export folders) must lie under one of them once symlinks are
// followed, so a job can neither read nor write anywhere else on the
// machines it runs on. The coordinator checks at submission, each worker again
// right before it opens anything (the files may have changed in between).
#ifndef GLM_JOBSPEC_PATH_ROOTS_H_
#define GLM_JOBSPEC_PATH_ROOTS_H_

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/job_spec.pb.h"

namespace glm {

// Canonical absolute folders; empty: any path is allowed (embedded
// coordinators in tests; the daemons require --path-roots).
using PathRoots = std::vector<std::filesystem::path>;

// `list`: absolute folders separated by commas ("/data,/checkpoints"; "/"
// allows everything). Each must exist; it is kept with its symlinks resolved.
absl::StatusOr<PathRoots> ParsePathRoots(const std::string& list);

// "DIR,DIR,...": what ParsePathRoots reads back.
std::string FormatPathRoots(const PathRoots& roots);

// The spec's path fields that are set, as (field path, value): data.tokenizer
// only when it names a model file (not "byte").
std::vector<std::pair<std::string, std::string>> SpecPaths(
    const v1::JobSpec& spec);

// OK when every path of the spec resolves under one of `roots`; otherwise
// INVALID_ARGUMENT naming the field: a relative path (relative to what would
// differ between machines), a ".." component, or a path that resolves
// (following symlinks as far as it exists) outside every root. Relative paths
// resolve against `base` when it is given (a worker's working folder).
absl::Status CheckSpecPaths(const v1::JobSpec& spec, const PathRoots& roots,
                            const std::filesystem::path& base = {});

}  // namespace glm

#endif  // GLM_JOBSPEC_PATH_ROOTS_H_
