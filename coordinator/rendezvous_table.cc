#include "coordinator/rendezvous_table.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace glm {

void RendezvousTable::Set(const std::string& scope, const std::string& key,
                          const std::string& value) {
  absl::MutexLock lock(&mu_);
  scopes_[scope][key] = value;
}

std::optional<std::string> RendezvousTable::Get(const std::string& scope,
                                                const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto scope_it = scopes_.find(scope);
  if (scope_it == scopes_.end()) return std::nullopt;
  auto it = scope_it->second.find(key);
  if (it == scope_it->second.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<std::vector<std::string>> RendezvousTable::Wait(
    const std::string& scope, const std::vector<std::string>& keys,
    absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto missing = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // Looked up, not inserted: a wait that times out leaves no empty scope.
    auto values = scopes_.find(scope);
    std::vector<std::string> absent;
    for (const std::string& key : keys) {
      if (values == scopes_.end() || !values->second.count(key)) {
        absent.push_back(key);
      }
    }
    return absent;
  };
  auto all_set = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return missing().empty();
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&all_set), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "rendezvous ", scope, ": keys not set within ",
        absl::FormatDuration(timeout), ": ", absl::StrJoin(missing(), ", ")));
  }
  std::vector<std::string> values;
  for (const std::string& key : keys) values.push_back(scopes_[scope][key]);
  return values;
}

absl::StatusOr<int64_t> RendezvousTable::Add(const std::string& scope,
                                             const std::string& key,
                                             int64_t delta) {
  absl::MutexLock lock(&mu_);
  std::string& value = scopes_[scope][key];
  int64_t current = 0;
  if (!value.empty() && !absl::SimpleAtoi(value, &current)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rendezvous ", scope, ": key ", key, " is not an integer"));
  }
  int64_t sum = 0;
  if (__builtin_add_overflow(current, delta, &sum)) {
    return absl::OutOfRangeError(
        absl::StrCat("rendezvous ", scope, ": key ", key, " holds ", current,
                     "; adding ", delta, " leaves 64-bit integers"));
  }
  value = absl::StrCat(sum);
  return sum;
}

void RendezvousTable::DropScope(const std::string& scope) {
  absl::MutexLock lock(&mu_);
  scopes_.erase(scope);
}

}  // namespace glm
