// Choosing a group's transport by where its members compute: a group whose
// members each have a device of their own (NCCL's case: one rank per GPU)
// connects one way, a group where any two members share a device, or any has
// none (two workers on one GPU, CPU ranks), the other. Every member publishes
// its device's identity in the group's rendezvous and reads all of them, so
// all members decide alike.
#ifndef GLM_PARALLEL_DISTINCT_DEVICE_GROUPS_H_
#define GLM_PARALLEL_DISTINCT_DEVICE_GROUPS_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "collectives/collectives.h"
#include "parallel/key_value_store.h"

namespace glm {

// Whether `device_ids` (one per member; empty: no device) name a device for
// every member and no device twice.
bool DistinctDevices(const std::vector<std::string>& device_ids);

// Connects a group of two or more by `on_distinct_devices` where
// DistinctDevices holds for its members' published `device_id`s, else (and a
// group of one) by `otherwise`; `store` (not owned) must outlive the
// factory. A member that does not publish within
// `timeout` is an error naming the group.
CollectivesFactory OnDistinctDevices(KeyValueStore* store,
                                     std::string device_id,
                                     absl::Duration timeout,
                                     CollectivesFactory on_distinct_devices,
                                     CollectivesFactory otherwise);

}  // namespace glm

#endif  // GLM_PARALLEL_DISTINCT_DEVICE_GROUPS_H_
