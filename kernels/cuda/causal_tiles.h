// Which output tiles, and which k tiles of each, the causal attention
// products compute over a [tokens, tokens] grid of query-key pairs (one
// batch a head), and in what order a persistent kernel's CTAs take them.
// Plain C++ (host and device): kernels/cuda/causal_tile_scheduler.cuh runs
// it inside CUTLASS's kernels, causal_tiles_test checks it on the CPU.
//   kLowerTriangle:  M = queries, N = keys, square tiles: (m, n) with n <= m
//                    (the diagonal ones masked by the epilogue); all of K.
//   kKeysToQuery:    M = queries, K = keys: the k tiles up to query tile
//                    m's last key (dQ = dS K).
//   kQueriesFromKey: M = keys, K = queries: the k tiles from key tile m's
//                    first query (dK = dS^T Q, dV = P^T dO).
// The triangle's tiles go out a few heads side by side (a bias tile that
// every head reads comes from L2 after the first); tiles with k ranges go
// out longest first, in waves of one tile a CTA that alternate direction (a
// CTA with a long tile in one wave gets a short one in the next), so the
// static schedule's CTAs finish within about a tile of each other.
#ifndef GLM_KERNELS_CUDA_CAUSAL_TILES_H_
#define GLM_KERNELS_CUDA_CAUSAL_TILES_H_

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define GLM_CAUSAL_TILES_FN __host__ __device__ inline
#else
#define GLM_CAUSAL_TILES_FN inline
#endif

namespace glm::cuda {

enum class CausalTiles { kLowerTriangle, kKeysToQuery, kQueriesFromKey };

// The triangle's heads side by side (a power of two; fewer where the heads
// do not divide by it).
constexpr uint64_t kCausalHeadsSideBySide = 4;

// The output tiles of a product: M and N tiles, batches (heads).
struct CausalGrid {
  uint64_t tiles_m = 0, tiles_n = 0, batches = 0;
};

struct CausalTile {
  int32_t m = -1, n = -1, batch = -1;
  bool valid = false;
};

GLM_CAUSAL_TILES_FN uint64_t CausalTileCount(CausalTiles tiles,
                                             CausalGrid grid) {
  if (tiles == CausalTiles::kLowerTriangle) {
    return grid.tiles_m * (grid.tiles_m + 1) / 2 * grid.batches;
  }
  return grid.tiles_m * grid.tiles_n * grid.batches;
}

// The tile of position `linear` in the order CTAs take them (CTA c takes
// c, c + ctas, c + 2 ctas, ...); invalid past the last.
GLM_CAUSAL_TILES_FN CausalTile CausalTileAt(CausalTiles tiles, CausalGrid grid,
                                            uint64_t linear, uint64_t ctas) {
  const uint64_t total = CausalTileCount(tiles, grid);
  if (linear >= total) return {};
  if (tiles == CausalTiles::kLowerTriangle) {
    const uint64_t triangle = grid.tiles_m * (grid.tiles_m + 1) / 2;
    uint64_t side = kCausalHeadsSideBySide;
    while (grid.batches % side != 0) side /= 2;
    const uint64_t group = linear / (triangle * side);
    const uint64_t rest = linear % (triangle * side);
    const uint64_t t = rest / side;  // row m holds tiles m(m+1)/2 ... +m
    auto m = static_cast<uint64_t>((sqrtf(8.f * t + 1.f) - 1.f) / 2.f);
    while ((m + 1) * (m + 2) / 2 <= t) ++m;
    while (m * (m + 1) / 2 > t) --m;
    return {static_cast<int32_t>(m), static_cast<int32_t>(t - m * (m + 1) / 2),
            static_cast<int32_t>(group * side + rest % side), true};
  }
  const uint64_t wave = linear / ctas, first = wave * ctas;
  const uint64_t size = total - first < ctas ? total - first : ctas;
  const uint64_t rank =
      first + (wave % 2 == 1 ? size - 1 - (linear - first) : linear - first);
  const uint64_t row = rank / (grid.tiles_n * grid.batches);
  const uint64_t rest = rank % (grid.tiles_n * grid.batches);
  const uint64_t m =
      tiles == CausalTiles::kKeysToQuery ? grid.tiles_m - 1 - row : row;
  return {static_cast<int32_t>(m), static_cast<int32_t>(rest / grid.batches),
          static_cast<int32_t>(rest % grid.batches), true};
}

// The first k tile and the k tile count of M tile m, with k_per_m k tiles to
// an M tile's extent and k_tiles in all.
GLM_CAUSAL_TILES_FN int CausalKTileStart(CausalTiles tiles, int m,
                                         int k_per_m) {
  return tiles == CausalTiles::kQueriesFromKey ? m * k_per_m : 0;
}

GLM_CAUSAL_TILES_FN int CausalKTileCount(CausalTiles tiles, int m, int k_per_m,
                                         int k_tiles) {
  if (tiles == CausalTiles::kKeysToQuery) {
    return (m + 1) * k_per_m < k_tiles ? (m + 1) * k_per_m : k_tiles;
  }
  return k_tiles - CausalKTileStart(tiles, m, k_per_m);
}

}  // namespace glm::cuda

#undef GLM_CAUSAL_TILES_FN

#endif  // GLM_KERNELS_CUDA_CAUSAL_TILES_H_
