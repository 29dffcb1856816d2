#include "parallel/rank_grid.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace glm {
namespace {

absl::Status CheckPositive(const GridSpec& spec) {
  const std::pair<const char*, int> sizes[] = {
      {"world", spec.world}, {"tp", spec.tp}, {"pp", spec.pp},
      {"cp", spec.cp},       {"ep", spec.ep}, {"etp", spec.etp}};
  for (const auto& [name, size] : sizes) {
    if (size < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("grid constraint ", name, " >= 1 violated: got ", size));
    }
  }
  if (spec.world > kMaxWorld) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grid constraint world <= ", kMaxWorld, " violated: got ", spec.world));
  }
  if (spec.num_experts < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grid constraint num_experts >= 0 violated: got ", spec.num_experts));
  }
  return absl::OkStatus();
}

absl::Status CheckDivides(const GridSpec& spec) {
  const int64_t dense = int64_t{spec.tp} * spec.cp * spec.pp;
  if (spec.world % dense != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("grid constraint world % (tp*cp*pp) == 0 violated: world ",
                     spec.world, " is not divisible by tp*cp*pp = ", spec.tp,
                     "*", spec.cp, "*", spec.pp, " = ", dense));
  }
  const int64_t expert = int64_t{spec.etp} * spec.ep * spec.pp;
  if (spec.world % expert != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grid constraint world % (etp*ep*pp) == 0 violated: world ", spec.world,
        " is not divisible by etp*ep*pp = ", spec.etp, "*", spec.ep, "*",
        spec.pp, " = ", expert));
  }
  if (spec.num_experts > 0 && spec.num_experts % spec.ep != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "grid constraint num_experts % ep == 0 violated: ", spec.num_experts,
        " experts do not divide over ep ", spec.ep));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RankGrid> BuildRankGrid(const GridSpec& spec) {
  if (absl::Status s = CheckPositive(spec); !s.ok()) return s;
  if (absl::Status s = CheckDivides(spec); !s.ok()) return s;
  RankGrid grid;
  grid.dp = spec.world / (spec.tp * spec.cp * spec.pp);
  grid.edp = spec.world / (spec.etp * spec.ep * spec.pp);
  grid.ranks.reserve(spec.world);
  for (int rank = 0; rank < spec.world; ++rank) {
    RankCoordinates c;
    c.rank = rank;
    c.tp = rank % spec.tp;
    c.cp = rank / spec.tp % spec.cp;
    c.dp = rank / (spec.tp * spec.cp) % grid.dp;
    c.pp = rank / (spec.tp * spec.cp * grid.dp);
    c.etp = rank % spec.etp;
    c.ep = rank / spec.etp % spec.ep;
    c.edp = rank / (spec.etp * spec.ep) % grid.edp;
    grid.ranks.push_back(c);
  }
  return grid;
}

}  // namespace glm
