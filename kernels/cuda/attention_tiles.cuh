// Tiles for sparse attention when the selection is dense (each query selects
// a large share of the keys it could, as DSA's top-2048 does at 4k tokens):
// a block takes 32 rows (query tokens, or key tokens for the key-side
// gradients) of one head and walks the 32-wide column tiles that any of its
// rows selected, so each key's (or query's) row is loaded once per tile of
// 32 rows instead of once per row. Which (row, column) pairs are selected
// comes from per-row lists sorted by column: the walk keeps one position per
// row and advances it tile by tile, so building a tile's map costs the
// entries it holds.
//
// Every function here is called by all threads of a kTileThreads-thread block
// and synchronizes it.
#ifndef GLM_KERNELS_CUDA_ATTENTION_TILES_CUH_
#define GLM_KERNELS_CUDA_ATTENTION_TILES_CUH_

#include <cstdint>

namespace glm::cuda::tiles {

constexpr int kTileRows = 32;
constexpr int kTileCols = 32;
// Feature columns staged in shared memory at a time.
constexpr int kChunk = 32;
constexpr int kTileThreads = 256;
// Padded row pitch of staged tiles (no shared-memory bank conflicts).
constexpr int kPitch = kChunk + 1;
constexpr int kScorePitch = kTileCols + 1;
constexpr uint32_t kNoColumn = 0xffffffffu;

// Per-row lists of selected columns, ascending, each entry with a payload
// (the slot it came from). Row r's entries are [offsets[r], offsets[r+1]), or
// [r*width, (r+1)*width) without offsets. A column of kNoColumn ends a list.
struct RowLists {
  const uint32_t* columns = nullptr;
  const int32_t* payloads = nullptr;
  const int32_t* offsets = nullptr;
  int64_t width = 0;

  __device__ int64_t Begin(int64_t r) const {
    return offsets != nullptr ? offsets[r] : r * width;
  }
  __device__ int64_t End(int64_t r) const {
    return offsets != nullptr ? offsets[r + 1] : (r + 1) * width;
  }
};

// Shared state of a walk over column tiles for the block's rows.
struct Walk {
  int64_t next[kTileRows];  // each row's first entry not yet in a tile
  int64_t end[kTileRows];
  int32_t map[kTileRows * kTileCols];  // payload, or -1: not selected
  uint32_t smallest;
};

// Positions the walk at the start of rows [first, first + kTileRows) (rows
// at or past `rows` have no entries).
__device__ inline void StartWalk(const RowLists& lists, int64_t first,
                                 int64_t rows, Walk& walk) {
  for (int i = threadIdx.x; i < kTileRows; i += kTileThreads) {
    const bool valid = first + i < rows;
    walk.next[i] = valid ? lists.Begin(first + i) : 0;
    walk.end[i] = valid ? lists.End(first + i) : 0;
  }
  __syncthreads();
}

// The next column tile holding an entry of some row: writes its first column
// to *tile and fills walk.map; false when every row's list is done.
__device__ inline bool NextTile(const RowLists& lists, Walk& walk,
                                uint32_t* tile) {
  if (threadIdx.x == 0) walk.smallest = kNoColumn;
  for (int i = threadIdx.x; i < kTileRows * kTileCols; i += kTileThreads) {
    walk.map[i] = -1;
  }
  __syncthreads();
  if (threadIdx.x < kTileRows) {
    const int i = threadIdx.x;
    const uint32_t column =
        walk.next[i] < walk.end[i] ? lists.columns[walk.next[i]] : kNoColumn;
    atomicMin(&walk.smallest, column);  // a minimum: order does not matter
  }
  __syncthreads();
  const uint32_t smallest = walk.smallest;
  if (smallest == kNoColumn) return false;
  const uint32_t start = smallest / kTileCols * kTileCols;
  *tile = start;
  // One warp per row: a row has at most kTileCols (distinct) entries in the
  // tile, the next ones of its list.
  const int lane = threadIdx.x % 32;
  for (int i = threadIdx.x / 32; i < kTileRows; i += kTileThreads / 32) {
    const int64_t at = walk.next[i] + lane;
    const uint32_t column = at < walk.end[i] ? lists.columns[at] : kNoColumn;
    const bool inside = column < start + kTileCols;
    if (inside) walk.map[i * kTileCols + (column - start)] = lists.payloads[at];
    const unsigned taken = __ballot_sync(0xffffffffu, inside);
    if (lane == 0) walk.next[i] += __popc(taken);
  }
  __syncthreads();
  return true;
}

// scores[i][j] = row(i) . col(j) over `dims` features, for the tile's 32 x 32
// pairs; row(i) / col(j) return a feature row or nullptr (no such row: 0).
// rows_stage and cols_stage hold kTileRows * kPitch floats each.
template <typename RowOf, typename ColOf>
__device__ void ScoreTile(RowOf row_of, ColOf col_of, int64_t dims,
                          float* rows_stage, float* cols_stage, float* scores) {
  const int i = threadIdx.x / 8, j0 = threadIdx.x % 8;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int64_t c0 = 0; c0 < dims; c0 += kChunk) {
    const int width = static_cast<int>(dims - c0 < kChunk ? dims - c0 : kChunk);
    for (int e = threadIdx.x; e < kTileRows * kChunk; e += kTileThreads) {
      const int a = e / kChunk, c = e % kChunk;
      const float* r = row_of(a);
      const float* k = col_of(a);
      rows_stage[a * kPitch + c] = r != nullptr && c < width ? r[c0 + c] : 0.f;
      cols_stage[a * kPitch + c] = k != nullptr && c < width ? k[c0 + c] : 0.f;
    }
    __syncthreads();
    for (int c = 0; c < width; ++c) {
      const float x = rows_stage[i * kPitch + c];
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        acc[m] += x * cols_stage[(j0 + 8 * m) * kPitch + c];
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int m = 0; m < 4; ++m) scores[i * kScorePitch + j0 + 8 * m] = acc[m];
  __syncthreads();
}

// acc[i][c] += sum over j of weights[i][j] * col(j)[c] for c < dims; acc is
// kTileRows rows of `dims` floats, weights kTileRows rows of kScorePitch.
// cols_stage holds kTileCols * kPitch floats.
template <typename ColOf>
__device__ void AccumulateTile(const float* weights, ColOf col_of, int64_t dims,
                               float* cols_stage, float* acc) {
  const int c = threadIdx.x % 32;  // kChunk == 32: one lane per column
  for (int64_t c0 = 0; c0 < dims; c0 += kChunk) {
    const int width = static_cast<int>(dims - c0 < kChunk ? dims - c0 : kChunk);
    for (int e = threadIdx.x; e < kTileCols * kChunk; e += kTileThreads) {
      const int a = e / kChunk, f = e % kChunk;
      const float* k = col_of(a);
      cols_stage[a * kPitch + f] = k != nullptr && f < width ? k[c0 + f] : 0.f;
    }
    __syncthreads();
    for (int i = threadIdx.x / 32; i < kTileRows; i += kTileThreads / 32) {
      float sum = 0.f;
#pragma unroll 8
      for (int j = 0; j < kTileCols; ++j) {
        sum += weights[i * kScorePitch + j] * cols_stage[j * kPitch + c];
      }
      if (c < width) acc[i * dims + c0 + c] += sum;
    }
    __syncthreads();
  }
}

}  // namespace glm::cuda::tiles

#endif  // GLM_KERNELS_CUDA_ATTENTION_TILES_CUH_
