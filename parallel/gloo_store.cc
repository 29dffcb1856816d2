#include "parallel/gloo_store.h"

#include "absl/strings/str_cat.h"
#include "gloo/common/error.h"

namespace glm {

GlooStore::GlooStore(KeyValueStore* store, absl::Duration timeout)
    : store_(store), timeout_(timeout) {}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  absl::Status status = store_->Set(key, std::string(data.begin(), data.end()));
  if (!status.ok()) {
    throw gloo::IoException(
        absl::StrCat("rendezvous set '", key, "': ", status.ToString()));
  }
}

std::vector<char> GlooStore::get(const std::string& key) {
  const std::string value = WaitValues({key}, timeout_)[0];
  return std::vector<char>(value.begin(), value.end());
}

void GlooStore::wait(const std::vector<std::string>& keys) {
  WaitValues(keys, timeout_);
}

void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  // Gloo passes its context timeout; a non-positive one means "default".
  WaitValues(keys, timeout.count() > 0 ? absl::FromChrono(timeout) : timeout_);
}

std::vector<std::string> GlooStore::WaitValues(
    const std::vector<std::string>& keys, absl::Duration timeout) {
  absl::StatusOr<std::vector<std::string>> values = store_->Wait(keys, timeout);
  if (!values.ok()) {
    throw gloo::IoException(absl::StrCat("rendezvous wait for '", keys[0], "'",
                                         keys.size() > 1 ? " and more" : "",
                                         ": ", values.status().ToString()));
  }
  return *std::move(values);
}

}  // namespace glm
