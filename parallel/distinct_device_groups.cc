#include "parallel/distinct_device_groups.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace glm {

bool DistinctDevices(const std::vector<std::string>& device_ids) {
  std::set<std::string> seen;
  for (const std::string& id : device_ids) {
    if (id.empty() || !seen.insert(id).second) return false;
  }
  return true;
}

CollectivesFactory OnDistinctDevices(KeyValueStore* store,
                                     std::string device_id,
                                     absl::Duration timeout,
                                     CollectivesFactory on_distinct_devices,
                                     CollectivesFactory otherwise) {
  return [store, device_id = std::move(device_id), timeout,
          on_distinct_devices = std::move(on_distinct_devices),
          otherwise = std::move(otherwise)](
             const std::string& key, int rank,
             int size) -> absl::StatusOr<std::unique_ptr<Collectives>> {
    // A group of one moves nothing: it stays as `otherwise` makes it.
    if (size == 1) return otherwise(key, rank, size);
    const std::string prefix = key + "/device/";
    if (absl::Status status = store->Set(absl::StrCat(prefix, rank), device_id);
        !status.ok()) {
      return status;
    }
    std::vector<std::string> keys;
    for (int member = 0; member < size; ++member) {
      keys.push_back(absl::StrCat(prefix, member));
    }
    absl::StatusOr<std::vector<std::string>> ids = store->Wait(keys, timeout);
    if (!ids.ok()) {
      return absl::Status(
          ids.status().code(),
          absl::StrCat("group ", key, ": waiting for the ",
                       "members' devices: ", ids.status().message()));
    }
    return DistinctDevices(*ids) ? on_distinct_devices(key, rank, size)
                                 : otherwise(key, rank, size);
  };
}

}  // namespace glm
