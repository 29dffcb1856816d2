// Time of one rank's part in a collective over its group, from the links the
// group's members sit on: all on the rank's fast domain (NVLink), or some
// across the network, which then paces a ring. Bandwidths are the
// cluster's per-device ones times the achieved fractions of KernelRates.
#ifndef GLM_PLANNER_COLLECTIVE_TIME_H_
#define GLM_PLANNER_COLLECTIVE_TIME_H_

#include <cstdint>
#include <vector>

#include "parallel/process_groups.h"
#include "parallel/rank_grid.h"
#include "planner/hardware.h"
#include "planner/kernel_rates.h"

namespace glm {

class GroupLinks {
 public:
  // The group of `kind` that `rank` belongs to.
  GroupLinks(const ClusterSpec& cluster, const KernelRates& rates,
             const RankGrid& grid, int rank, GroupKind kind);
  // A group of `members` (global ranks, `rank` among them).
  GroupLinks(const ClusterSpec& cluster, const KernelRates& rates, int rank,
             const std::vector<int>& members);

  int size() const { return size_; }
  // Ring all-gather or reduce-scatter of a buffer of `bytes` in all
  // (each rank holds or keeps bytes / size of it).
  double AllGatherSeconds(double bytes) const;
  // A ring of `members` ranks over this group's links (a group folded with
  // another, as Megatron's data x context ranks) passing `bytes` once.
  double RingSeconds(double bytes, int members) const;
  // Ring all-reduce of `bytes`.
  double AllReduceSeconds(double bytes) const;
  // All-to-all where the rank sends `bytes` spread evenly over the members
  // (its own share stays): what goes inside the fast domain and what
  // crosses the network move at once.
  double AllToAllSeconds(double bytes) const;

 private:
  double RingBandwidth() const;

  int size_ = 1;
  int in_domain_ = 1;  // members on this rank's fast domain, itself included
  double fast_ = 0, network_ = 0;  // achieved bytes/s
};

// A point-to-point transfer of `bytes` between two ranks.
double SendSeconds(const ClusterSpec& cluster, const KernelRates& rates,
                   int from, int to, double bytes);

}  // namespace glm

#endif  // GLM_PLANNER_COLLECTIVE_TIME_H_
