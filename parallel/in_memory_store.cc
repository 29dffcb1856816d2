#include "parallel/in_memory_store.h"

#include "absl/strings/str_cat.h"

namespace glm {

absl::Status InMemoryStore::Set(const std::string& key,
                                const std::string& value) {
  absl::MutexLock lock(&mu_);
  values_[key] = value;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> InMemoryStore::Wait(
    const std::vector<std::string>& keys, absl::Duration timeout) {
  auto all_set = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const std::string& key : keys) {
      if (values_.count(key) == 0) return false;
    }
    return true;
  };
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithTimeout(absl::Condition(&all_set), timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("waited ", absl::FormatDuration(timeout), " for '",
                     keys[0], "'", keys.size() > 1 ? " and more" : ""));
  }
  std::vector<std::string> values;
  for (const std::string& key : keys) values.push_back(values_.at(key));
  return values;
}

}  // namespace glm
