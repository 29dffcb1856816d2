// A CUTLASS (Hopper) persistent tile scheduler for the causal attention
// products: it hands a kernel's CTAs only the tiles and k ranges that hold
// causal pairs (kernels/cuda/causal_tiles.h says which, and in what order),
// so one launch covers a whole [tokens, tokens] grid with no masked half.
#ifndef GLM_KERNELS_CUDA_CAUSAL_TILE_SCHEDULER_CUH_
#define GLM_KERNELS_CUDA_CAUSAL_TILE_SCHEDULER_CUH_

#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/gemm/kernel/sm90_tile_scheduler.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "kernels/cuda/causal_tiles.h"

namespace glm::cuda {

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
    return glm::cuda::CausalKTileCount(kTiles, work.M_idx, kKTilesPerM,
                                       k_tiles);
  }

  CUTLASS_HOST_DEVICE static uint32_t get_work_k_tile_start(
      WorkTileInfo const& work) {
    return static_cast<uint32_t>(
        glm::cuda::CausalKTileStart(kTiles, work.M_idx, kKTilesPerM));
  }

 private:
  CUTLASS_DEVICE WorkTileInfo WorkAt(uint64_t linear) const {
    const Params& p = scheduler_params;
    const glm::cuda::CausalTile tile = glm::cuda::CausalTileAt(
        kTiles, {p.problem_tiles_m_, p.problem_tiles_n_, p.problem_tiles_l_},
        linear, grid_);
    if (!tile.valid) return WorkTileInfo::invalid_work_tile();
    return {tile.m, tile.n, tile.batch, true};
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
