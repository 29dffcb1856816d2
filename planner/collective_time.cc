#include "planner/collective_time.h"

#include <algorithm>
#include <vector>

namespace glm {

GroupLinks::GroupLinks(const ClusterSpec& cluster, const KernelRates& rates,
                       const RankGrid& grid, int rank, GroupKind kind)
    : GroupLinks(cluster, rates, rank, GroupMembers(grid, rank, kind)) {}

GroupLinks::GroupLinks(const ClusterSpec& cluster, const KernelRates& rates,
                       int rank, const std::vector<int>& members)
    : fast_(cluster.fast_link_bandwidth * rates.fast_link),
      network_(cluster.network_bandwidth * rates.network) {
  size_ = static_cast<int>(members.size());
  in_domain_ = static_cast<int>(std::count_if(
      members.begin(), members.end(),
      [&](int member) { return SameFastDomain(cluster, rank, member); }));
}

double GroupLinks::RingBandwidth() const {
  return in_domain_ == size_ ? fast_ : network_;
}

double GroupLinks::AllGatherSeconds(double bytes) const {
  return RingSeconds(bytes, size_);
}

double GroupLinks::RingSeconds(double bytes, int members) const {
  if (members <= 1) return 0;
  return bytes * (members - 1) / members / RingBandwidth();
}

double GroupLinks::AllReduceSeconds(double bytes) const {
  return 2 * AllGatherSeconds(bytes);
}

double GroupLinks::AllToAllSeconds(double bytes) const {
  if (size_ == 1) return 0;
  const double near = bytes * (in_domain_ - 1) / size_;
  const double far = bytes * (size_ - in_domain_) / size_;
  return std::max(near / fast_, far / network_);
}

double SendSeconds(const ClusterSpec& cluster, const KernelRates& rates,
                   int from, int to, double bytes) {
  return SameFastDomain(cluster, from, to)
             ? bytes / (cluster.fast_link_bandwidth * rates.fast_link)
             : bytes / (cluster.network_bandwidth * rates.network);
}

}  // namespace glm
