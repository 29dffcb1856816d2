#include "kernels/cuda/causal_tiles.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace glm::cuda {
namespace {

using Tile = std::tuple<int, int, int>;  // m, n, batch

// The tiles CTAs take, in order, each checked valid and in the grid.
std::vector<Tile> Taken(CausalTiles tiles, CausalGrid grid, uint64_t ctas) {
  std::vector<Tile> taken;
  const uint64_t count = CausalTileCount(tiles, grid);
  for (uint64_t linear = 0; linear < count; ++linear) {
    const CausalTile t = CausalTileAt(tiles, grid, linear, ctas);
    EXPECT_TRUE(t.valid) << "position " << linear;
    EXPECT_GE(t.m, 0);
    EXPECT_LT(static_cast<uint64_t>(t.m), grid.tiles_m);
    EXPECT_GE(t.n, 0);
    EXPECT_LT(static_cast<uint64_t>(t.n), grid.tiles_n);
    EXPECT_GE(t.batch, 0);
    EXPECT_LT(static_cast<uint64_t>(t.batch), grid.batches);
    taken.emplace_back(t.m, t.n, t.batch);
  }
  EXPECT_FALSE(CausalTileAt(tiles, grid, count, ctas).valid);
  EXPECT_FALSE(CausalTileAt(tiles, grid, count + ctas, ctas).valid);
  return taken;
}

// Every tile the mode should compute, once.
std::set<Tile> Expected(CausalTiles tiles, CausalGrid grid) {
  std::set<Tile> expected;
  for (int b = 0; b < static_cast<int>(grid.batches); ++b) {
    for (int m = 0; m < static_cast<int>(grid.tiles_m); ++m) {
      for (int n = 0; n < static_cast<int>(grid.tiles_n); ++n) {
        if (tiles != CausalTiles::kLowerTriangle || n <= m) {
          expected.insert({m, n, b});
        }
      }
    }
  }
  return expected;
}

TEST(CausalTilesTest, EachCausalTileOnceInEveryMode) {
  for (CausalTiles tiles :
       {CausalTiles::kLowerTriangle, CausalTiles::kKeysToQuery,
        CausalTiles::kQueriesFromKey}) {
    for (uint64_t side : {1, 2, 7, 32, 40}) {
      for (uint64_t batches : {1, 3, 4, 6, 16}) {
        for (uint64_t ctas : {1, 5, 132}) {
          const CausalGrid grid{
              side, tiles == CausalTiles::kLowerTriangle ? side : 2, batches};
          const std::vector<Tile> taken = Taken(tiles, grid, ctas);
          const std::set<Tile> unique(taken.begin(), taken.end());
          EXPECT_EQ(unique.size(), taken.size()) << "a tile taken twice";
          EXPECT_EQ(unique, Expected(tiles, grid))
              << "side " << side << " batches " << batches << " ctas " << ctas;
        }
      }
    }
  }
}

// 128-row tiles over 64-wide k tiles: query tile m's last key is
// 128 (m + 1) - 1, key tile m's first query 128 m.
TEST(CausalTilesTest, KRangesCoverTheCausalPairs) {
  constexpr int kPerM = 2, kTiles = 64;
  for (int m = 0; m < 32; ++m) {
    EXPECT_EQ(CausalKTileStart(CausalTiles::kKeysToQuery, m, kPerM), 0);
    EXPECT_EQ(CausalKTileCount(CausalTiles::kKeysToQuery, m, kPerM, kTiles),
              2 * (m + 1));
    EXPECT_EQ(CausalKTileStart(CausalTiles::kQueriesFromKey, m, kPerM), 2 * m);
    EXPECT_EQ(CausalKTileCount(CausalTiles::kQueriesFromKey, m, kPerM, kTiles),
              kTiles - 2 * m);
    EXPECT_EQ(CausalKTileCount(CausalTiles::kLowerTriangle, m, kPerM, kTiles),
              kTiles);
  }
  // A partial last tile: its k range stops at the grid's last k tile.
  EXPECT_EQ(CausalKTileCount(CausalTiles::kKeysToQuery, 4, 2, 9), 9);
  EXPECT_EQ(CausalKTileCount(CausalTiles::kQueriesFromKey, 4, 2, 9), 1);
}

// glm5.2-mini's shapes on an H200: 4,096 tokens (32 tiles), 16 heads, 132
// CTAs. Each CTA's k tiles (its work) within 3% of the mean (1.6% over
// it; taking the longest-first order without turning every other wave, the
// busiest CTA would do 25% over it).
TEST(CausalTilesTest, GradientTilesBalanceTheCtas) {
  constexpr uint64_t kCtas = 132;
  const CausalGrid grid{32, 1, 16};
  for (CausalTiles tiles :
       {CausalTiles::kKeysToQuery, CausalTiles::kQueriesFromKey}) {
    std::vector<int> work(kCtas, 0);
    int total = 0;
    for (uint64_t linear = 0; linear < CausalTileCount(tiles, grid); ++linear) {
      const CausalTile t = CausalTileAt(tiles, grid, linear, kCtas);
      const int k = CausalKTileCount(tiles, t.m, 2, 64);
      work[linear % kCtas] += k;
      total += k;
    }
    const double mean = static_cast<double>(total) / kCtas;
    const int most = *std::max_element(work.begin(), work.end());
    EXPECT_LE(most, 1.03 * mean);
    // Longest first: the first wave's tiles are the longest ones.
    const CausalTile first = CausalTileAt(tiles, grid, 0, kCtas);
    EXPECT_EQ(CausalKTileCount(tiles, first.m, 2, 64), 64);
  }
}

// The triangle's first positions hold a tile of four heads side by side.
TEST(CausalTilesTest, TriangleTilesRunHeadsSideBySide) {
  const CausalGrid grid{32, 32, 16};
  for (uint64_t linear = 0; linear < 4; ++linear) {
    const CausalTile t =
        CausalTileAt(CausalTiles::kLowerTriangle, grid, linear, 132);
    EXPECT_EQ(t.m, 0);
    EXPECT_EQ(t.n, 0);
    EXPECT_EQ(t.batch, static_cast<int>(linear));
  }
  const CausalTile fifth =
      CausalTileAt(CausalTiles::kLowerTriangle, grid, 4, 132);
  EXPECT_EQ(fifth.m, 1);
  EXPECT_EQ(fifth.n, 0);
  EXPECT_EQ(fifth.batch, 0);
}

}  // namespace
}  // namespace glm::cuda
