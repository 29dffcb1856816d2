#include "jobspec/path_roots.h"

#include <algorithm>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/quote.h"
#include "jobspec/field_error.h"

namespace fs = std::filesystem;

namespace glm {
namespace {

// Paths are quoted whole (up to a bound): a shortened path would not say
// which one was meant.
constexpr size_t kQuotedPathBytes = 1024;

std::string QuotePath(absl::string_view path) {
  return Quote(path, kQuotedPathBytes);
}

bool HasDotDot(const fs::path& path) {
  for (const fs::path& part : path) {
    if (part == "..") return true;
  }
  return false;
}

// Compares whole components, so "/data" holds "/data/x" but not "/database".
bool IsUnder(const fs::path& path, const fs::path& root) {
  return !root.empty() &&
         std::mismatch(root.begin(), root.end(), path.begin(), path.end())
                 .first == root.end();
}

absl::Status CheckPath(const std::string& field, const std::string& value,
                       const PathRoots& roots, const fs::path& base) {
  fs::path path(value);
  if (path.is_relative()) {
    if (base.empty()) {
      return FieldError(
          field, absl::StrCat(QuotePath(value),
                              " is relative; give an absolute path under the "
                              "coordinator's path roots (",
                              FormatPathRoots(roots), ")"));
    }
    path = base / path;
  }
  if (HasDotDot(path)) {
    return FieldError(field, absl::StrCat(QuotePath(value),
                                          " has a '..' component; name the "
                                          "folder directly"));
  }
  std::error_code error;
  const fs::path resolved = fs::weakly_canonical(path, error);
  if (error) {
    return FieldError(field, absl::StrCat("cannot resolve ", QuotePath(value),
                                          ": ", error.message()));
  }
  for (const fs::path& root : roots) {
    if (IsUnder(resolved, root)) return absl::OkStatus();
  }
  const std::string where =
      resolved == path
          ? " is"
          : absl::StrCat(" resolves to ", QuotePath(resolved.string()),
                         ", which is");
  return FieldError(
      field, absl::StrCat(QuotePath(value), where, " outside the path roots (",
                          FormatPathRoots(roots), ")"));
}

}  // namespace

absl::StatusOr<PathRoots> ParsePathRoots(const std::string& list) {
  PathRoots roots;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    const fs::path root{std::string(part)};
    if (!root.is_absolute()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--path-roots: ", QuotePath(part), " is not an absolute path"));
    }
    std::error_code error;
    fs::path resolved = fs::canonical(root, error);
    if (error || !fs::is_directory(resolved, error)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--path-roots: ", QuotePath(part), " is not an existing folder"));
    }
    roots.push_back(std::move(resolved));
  }
  if (roots.empty()) {
    return absl::InvalidArgumentError(
        "--path-roots: name at least one folder ('/' allows every path)");
  }
  return roots;
}

std::string FormatPathRoots(const PathRoots& roots) {
  return absl::StrJoin(roots, ",", [](std::string* out, const fs::path& root) {
    out->append(root.string());
  });
}

std::vector<std::pair<std::string, std::string>> SpecPaths(
    const v1::JobSpec& spec) {
  std::vector<std::pair<std::string, std::string>> paths = {
      {"model.hf_checkpoint_dir", spec.model().hf_checkpoint_dir()},
      {"training.save_dir", spec.training().save_dir()},
      {"training.load_dir", spec.training().load_dir()},
      {"training.export_hf_dir", spec.training().export_hf_dir()}};
  if (spec.data().tokenizer() != "byte") {
    paths.push_back({"data.tokenizer", spec.data().tokenizer()});
  }
  for (int i = 0; i < spec.data().sources_size(); ++i) {
    paths.push_back({absl::StrCat("data.sources[", i, "].path"),
                     spec.data().sources(i).path()});
  }
  std::vector<std::pair<std::string, std::string>> set;
  for (auto& [field, value] : paths) {
    if (!value.empty()) set.emplace_back(std::move(field), std::move(value));
  }
  return set;
}

absl::Status CheckSpecPaths(const v1::JobSpec& spec, const PathRoots& roots,
                            const fs::path& base) {
  if (roots.empty()) return absl::OkStatus();
  for (const auto& [field, value] : SpecPaths(spec)) {
    if (absl::Status inside = CheckPath(field, value, roots, base);
        !inside.ok()) {
      return inside;
    }
  }
  return absl::OkStatus();
}

}  // namespace glm
