// A CUTLASS (Hopper) persistent tile scheduler for the causal attention
// products over a [tokens, tokens] grid of query-key pairs, one batch a head:
// it hands out only the tiles and k ranges that hold causal pairs, so one
// launch covers the whole triangle (no blocks, no masked half computed).
//   kLowerTriangle:  M = queries, N = keys: the tiles (m, n) with n <= m
//                    (square tiles; the diagonal ones masked by the
//                    epilogue); K whole (the head's width).
//   kKeysToQuery:    M = queries, K = keys: k tiles up to query tile m's
//                    last key (dQ = dS K).
//   kQueriesFromKey: M = keys, K = queries: k tiles from key tile m's first
//                    query (dK = dS^T Q, dV = P^T dO).
// Tiles with k ranges go out longest first, in waves that alternate
// direction (a CTA that gets a long one in one wave gets a short one in
// the next): the static schedule's CTAs finish within about a tile of each
// other. Triangle tiles go out a few heads side by side, so the bias tile
// that every head reads comes from L2 after the first.
#ifndef GLM_KERNELS_CUDA_CAUSAL_TILE_SCHEDULER_CUH_
#define GLM_KERNELS_CUDA_CAUSAL_TILE_SCHEDULER_CUH_

#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/gemm/kernel/sm90_tile_scheduler.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

namespace glm::cuda {

enum class CausalTiles { kLowerTriangle, kKeysToQuery, kQueriesFromKey };

// The tag GemmUniversal's TileScheduler parameter takes.
template <CausalTiles kTiles>
struct CausalScheduler {};

}  // namespace glm::cuda

namespace cutlass::gemm::kernel::detail {

template <glm::cuda::CausalTiles kTiles, class TileShape>
class CausalTileSchedulerSm90 : public PersistentTileSchedulerSm90 {
  using Base = PersistentTileSchedulerSm90;
  // k tiles a row of M tiles spans (the pair grid is square).
  static constexpr int kKTilesPerM =
      cute::size<0>(TileShape{}) / cute::size<2>(TileShape{});
  static_assert(kKTilesPerM * cute::size<2>(TileShape{}) ==
                cute::size<0>(TileShape{}));
  static_assert(kTiles != glm::cuda::CausalTiles::kLowerTriangle ||
                    cute::size<0>(TileShape{}) == cute::size<1>(TileShape{}),
                "the triangle's tiles are square");

 public:
  using Params = Base::Params;
  using WorkTileInfo = Base::WorkTileInfo;

  CUTLASS_HOST_DEVICE CausalTileSchedulerSm90() {}

  CUTLASS_DEVICE explicit CausalTileSchedulerSm90(Params const& params)
      : Base(params) {
#if defined(__CUDA_ARCH__)
    // The persistent scheduler's numbering of the CTAs.
    linear_ = params.raster_order_ == RasterOrder::AlongN
                  ? uint64_t{blockIdx.x} + uint64_t{blockIdx.y} * gridDim.x
                  : uint64_t{blockIdx.x} * gridDim.y + blockIdx.y;
    grid_ = uint64_t{gridDim.x} * gridDim.y * gridDim.z;
#endif
  }

  template <class ClusterShape>
  CUTLASS_DEVICE WorkTileInfo initial_work_tile_info(ClusterShape) {
    return get_current_work();
  }

  CUTLASS_DEVICE WorkTileInfo get_current_work() const {
    return WorkAt(linear_);
  }

  CUTLASS_DEVICE void advance_to_next_work(uint32_t count = 1) {
    linear_ += grid_ * count;
  }

  CUTLASS_DEVICE bool is_last_tile(WorkTileInfo&, uint32_t count = 1) const {
    return !WorkAt(linear_ + grid_ * count).is_valid();
  }

  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo) {
    advance_to_next_work();
    return cute::make_tuple(get_current_work(), true);
  }

  template <class Pipeline, class PipelineState>
  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo work, Pipeline&,
                                      PipelineState) {
    return fetch_next_work(work);
  }

  template <class ProblemShape, class Shape>
  CUTLASS_HOST_DEVICE static int get_work_k_tile_count(WorkTileInfo const& work,
                                                       ProblemShape problem,
                                                       Shape tile) {
    const int k_tiles = static_cast<int>(
        cute::size(cute::ceil_div(cute::get<2>(problem), cute::get<2>(tile))));
    if constexpr (kTiles == glm::cuda::CausalTiles::kKeysToQuery) {
      return cute::min(k_tiles, (work.M_idx + 1) * kKTilesPerM);
    } else if constexpr (kTiles == glm::cuda::CausalTiles::kQueriesFromKey) {
      return k_tiles - work.M_idx * kKTilesPerM;
    } else {
      return k_tiles;
    }
  }

  CUTLASS_HOST_DEVICE static uint32_t get_work_k_tile_start(
      WorkTileInfo const& work) {
    if constexpr (kTiles == glm::cuda::CausalTiles::kQueriesFromKey) {
      return static_cast<uint32_t>(work.M_idx * kKTilesPerM);
    } else {
      return 0u;
    }
  }

 private:
  CUTLASS_DEVICE WorkTileInfo WorkAt(uint64_t linear) const {
    const Params& p = scheduler_params;
    const uint64_t tiles_m = p.problem_tiles_m_, tiles_n = p.problem_tiles_n_,
                   batches = p.problem_tiles_l_;
    if constexpr (kTiles == glm::cuda::CausalTiles::kLowerTriangle) {
      const uint64_t triangle = tiles_m * (tiles_m + 1) / 2;
      if (linear >= triangle * batches)
        return WorkTileInfo::invalid_work_tile();
      const uint64_t side = batches % 4 == 0 ? 4 : batches % 2 == 0 ? 2 : 1;
      const uint64_t group = linear / (triangle * side);
      const uint64_t rest = linear % (triangle * side);
      const uint64_t t = rest / side;
      auto m = static_cast<uint64_t>((sqrtf(8.f * t + 1.f) - 1.f) / 2.f);
      while ((m + 1) * (m + 2) / 2 <= t) ++m;
      while (m * (m + 1) / 2 > t) --m;
      return {static_cast<int32_t>(m),
              static_cast<int32_t>(t - m * (m + 1) / 2),
              static_cast<int32_t>(group * side + rest % side), true};
    } else {
      const uint64_t total = tiles_m * tiles_n * batches;
      if (linear >= total) return WorkTileInfo::invalid_work_tile();
      // Rank in the longest-first order; odd waves run backwards.
      const uint64_t wave = linear / grid_, first = wave * grid_;
      const uint64_t size = cute::min(grid_, total - first);
      const uint64_t rank = first + (wave % 2 == 1 ? size - 1 - (linear - first)
                                                   : linear - first);
      const uint64_t row = rank / (tiles_n * batches),
                     rest = rank % (tiles_n * batches);
      const uint64_t m = kTiles == glm::cuda::CausalTiles::kKeysToQuery
                             ? tiles_m - 1 - row
                             : row;
      return {static_cast<int32_t>(m), static_cast<int32_t>(rest / batches),
              static_cast<int32_t>(rest % batches), true};
    }
  }

  uint64_t linear_ = 0;
  uint64_t grid_ = 1;
};

template <glm::cuda::CausalTiles kTiles, class ArchTag, class TileShape,
          class ClusterShape, uint32_t kStages, class ProblemShapeType>
struct TileSchedulerSelector<glm::cuda::CausalScheduler<kTiles>, ArchTag,
                             TileShape, ClusterShape, kStages,
                             ProblemShapeType> {
  using Scheduler = CausalTileSchedulerSm90<kTiles, TileShape>;
};

}  // namespace cutlass::gemm::kernel::detail

#endif  // GLM_KERNELS_CUDA_CAUSAL_TILE_SCHEDULER_CUH_
