#include <cuda_bf16.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/fragment_sums.cuh"
#include "kernels/cuda/latent_attention.cuh"

namespace glm::cuda {
namespace {

// mma.sync m16n8k16: the heads are the 16 rows; eight warps split a tile's 64
// keys for the scores (8 each) and the output's columns for the products
// over keys. In the backward, four warps form the queries' gradient and four
// the keys' (16 keys each: the product's rows). Eight warps ran 10% faster
// than four (run79 against run78 on an H100: 0.93 against 1.03 us a query
// forward).
constexpr int kHeadRows = 16;
constexpr int kTileKeys = 64;
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kScoreKeys = kTileKeys / kWarps;
constexpr int kGradientWarps = 4;
constexpr int kMaxD = 576, kMaxDv = 512;
// Shared rows are padded by 16 bytes: with d a multiple of 64, consecutive
// rows then start 16 bytes apart in the banks and ldmatrix's eight row reads
// are conflict-free.
constexpr int kPad = 8;
constexpr int kTileLd = kTileKeys + kPad;
constexpr size_t kMaxSharedBytes = 227 * 1024;  // sm_90's opt-in limit
constexpr float kLog2e = 1.4426950408889634f;

using bf16 = __nv_bfloat16;

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void LoadFragments(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(p)));
}

__device__ __forceinline__ void LoadFragmentsTransposed(uint32_t (&r)[4],
                                                        const bf16* p) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(SharedAddress(p)));
}

// c += a b for a 16x16 bf16 A, a 16x8 bf16 B (b0, b1) and fp32 C.
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4],
                                    uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The key tiles arrive by the copy engine (TMA's bulk copies, one a row),
// counted on a shared-memory barrier, which leaves the threads free of the
// 36 16-byte copies each a tile asked of them. The forward's rate did not
// move (2.3-2.5 TB/s of rows with either, run79 on an H100, run80 on an
// H200, from L2 or from memory alike): what holds it is still to be found.
__device__ __forceinline__ void InitBarrier(uint64_t* barrier) {
  asm volatile(
      "mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(SharedAddress(barrier)));
}
// The barrier's phase completes once `bytes` more have arrived.
__device__ __forceinline__ void ExpectBytes(uint64_t* barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                   SharedAddress(barrier)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void BulkCopy(bf16* to, const bf16* from,
                                         uint32_t bytes, uint64_t* barrier) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
      "[%0], [%1], %2, [%3];\n" ::"r"(SharedAddress(to)),
      "l"(from), "r"(bytes), "r"(SharedAddress(barrier))
      : "memory");
}
__device__ __forceinline__ void WaitBarrier(uint64_t* barrier,
                                            uint32_t parity) {
  asm volatile(
      "{\n .reg .pred done;\n"
      "WAIT_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra WAIT_%=;\n}\n" ::"r"(SharedAddress(barrier)),
      "r"(parity)
      : "memory");
}

// The kernels' operands and the layout of their shared memory.
struct LatentArgs {
  ConstMatrixView q, kv, out, dout;         // out: the backward's input
  MatrixView written_out, dq, key_weights;  // written_out: the forward's
  const int32_t* keys;
  const float* lse_in;
  float* lse_out;
  float* dkv;  // fp32 [nk, dkv_ld], accumulated with atomics
  int64_t dkv_ld;
  int topk, heads, d, dv;
  float scale;
};

struct SharedLayout {
  int q_ld, dout_ld;
  size_t barriers, keys, q, tiles, probs, dscores, dout, row_stats, partials,
      score_parts, total;
};

// Scores split by columns (the forward's experiment, ScoresByColumns): warp w
// multiplies query columns of group w % 4 (a quarter of d's k16 steps, nine
// at d = 576, its A fragments in registers for the whole query) by tile keys
// [32 (w / 4), +32); the groups' partial [16 x 64] tiles are summed through
// shared memory. The query is read from shared memory once a query, not once
// a tile and warp (147 KB a tile at glm5.2-mini's shapes).
constexpr int kColumnGroups = 4;
constexpr int kGroupSteps = kMaxD / 16 / kColumnGroups;
constexpr int kGroupKeys = kTileKeys / (kWarps / kColumnGroups);
constexpr int kPartLd = kTileKeys + 4;  // floats

SharedLayout LayoutFor(int64_t topk, int64_t d, int64_t dv, bool backward,
                       bool scores_by_columns) {
  SharedLayout l{};
  l.q_ld = static_cast<int>(d) + kPad;
  l.dout_ld = static_cast<int>(dv) + kPad;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t start = at;
    at += (bytes + 15) / 16 * 16;
    return start;
  };
  l.barriers = take(2 * sizeof(uint64_t));  // one per tile buffer
  l.keys = take(topk * sizeof(int32_t));
  l.q = take(size_t{kHeadRows} * l.q_ld * sizeof(bf16));
  l.tiles = take(size_t{2} * kTileKeys * l.q_ld * sizeof(bf16));
  l.probs = take(size_t{kHeadRows} * kTileLd * sizeof(bf16));
  l.partials = take(size_t{kWarps} * kHeadRows * sizeof(float));
  // Per head row: the forward's nothing; the backward's lse (log2 domain)
  // and the sum of dout * out.
  l.row_stats = take(backward ? 2 * kHeadRows * sizeof(float) : 0);
  l.dscores = take(backward ? size_t{kHeadRows} * kTileLd * sizeof(bf16) : 0);
  l.dout = take(backward ? size_t{kHeadRows} * l.dout_ld * sizeof(bf16) : 0);
  l.score_parts = take(scores_by_columns ? size_t{kColumnGroups} * kHeadRows *
                                               kPartLd * sizeof(float)
                                         : 0);
  l.total = at;
  return l;
}

struct Shared {
  uint64_t* barriers;
  int32_t* keys;
  bf16 *q, *tiles, *probs, *dscores, *dout;
  float *row_stats, *partials, *score_parts;
};

__device__ Shared Carve(char* base, const SharedLayout& l) {
  Shared s;
  s.barriers = reinterpret_cast<uint64_t*>(base + l.barriers);
  s.keys = reinterpret_cast<int32_t*>(base + l.keys);
  s.q = reinterpret_cast<bf16*>(base + l.q);
  s.tiles = reinterpret_cast<bf16*>(base + l.tiles);
  s.probs = reinterpret_cast<bf16*>(base + l.probs);
  s.partials = reinterpret_cast<float*>(base + l.partials);
  s.row_stats = reinterpret_cast<float*>(base + l.row_stats);
  s.dscores = reinterpret_cast<bf16*>(base + l.dscores);
  s.dout = reinterpret_cast<bf16*>(base + l.dout);
  s.score_parts = reinterpret_cast<float*>(base + l.score_parts);
  return s;
}

// The query's head rows [0, heads) of a bf16 view into shared rows (ld
// apart), zeros for rows [heads, 16): padded heads then add nothing.
__device__ void LoadHeadRows(const ConstMatrixView& m, int64_t first_row,
                             int heads, int cols, int ld, bf16* to) {
  const int chunks = cols / 8;
  for (int i = threadIdx.x; i < kHeadRows * chunks; i += kThreads) {
    const int r = i / chunks, c = (i % chunks) * 8;
    const bf16* from = &Bf16At(m, first_row + (r < heads ? r : 0), c);
    CopyChunk(to + r * ld + c, from, r < heads);
  }
}

// Key token of the tile's column `col` (-1 for none).
__device__ __forceinline__ int32_t TileKey(const LatentArgs& a,
                                           const int32_t* keys, int tile,
                                           int col) {
  const int slot = tile * kTileKeys + col;
  return slot < a.topk ? keys[slot] : -1;
}

// Key tiles of a query: ceil(topk / 64).
__device__ __forceinline__ int TileCount(const LatentArgs& a) {
  return (a.topk + kTileKeys - 1) / kTileKeys;
}

// Warp 0 starts key tile `tile` (slots [64 tile, 64 tile + 64)) into shared
// buffer `to`, its arrival counted on `barrier`: a bulk copy per selected
// row; a -1 slot, or one past topk, gets a zero row (stored by the lane, made
// visible to the copy engine's later writes of the buffer by the fence).
__device__ void IssueKeyTile(const LatentArgs& a, const int32_t* keys, int tile,
                             int ld, bf16* to, uint64_t* barrier) {
  const int lane = threadIdx.x % 32;
  const uint32_t row_bytes = a.d * sizeof(bf16);
  int32_t key[kTileKeys / 32];
  int valid = 0;
  for (int i = 0; i < kTileKeys / 32; ++i) {
    key[i] = TileKey(a, keys, tile, lane + 32 * i);
    valid += key[i] >= 0;
  }
  valid = WarpSum(valid);
  for (int i = 0; i < kTileKeys / 32; ++i) {
    if (key[i] >= 0) continue;
    uint4* row = reinterpret_cast<uint4*>(to + (lane + 32 * i) * ld);
    for (int c = 0; c < a.d / 8; ++c) row[c] = make_uint4(0, 0, 0, 0);
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncwarp();
  if (lane == 0) ExpectBytes(barrier, valid * row_bytes);
  __syncwarp();
  for (int i = 0; i < kTileKeys / 32; ++i) {
    if (key[i] < 0) continue;
    BulkCopy(to + (lane + 32 * i) * ld, &Bf16At(a.kv, key[i], 0), row_bytes,
             barrier);
  }
}

// The warp's scores: rows(a) . tile rows for its 8 tile keys [8 warp, 8 warp +
// 8) over columns [0, k) (a multiple of 64), a 16 x k shared operand (ld
// a_ld) against the tile (ld tile_ld). Four independent sums over the k
// steps keep four products in flight.
__device__ __forceinline__ void WarpScores(const bf16* a, int a_ld,
                                           const bf16* tile, int tile_ld, int k,
                                           float (&acc)[4]) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const bf16* a_row =
      a + (lane % 8 + 8 * ((lane / 8) % 2)) * a_ld + 8 * (lane / 16);
  // x4 over the key rows: columns k0, k0 + 8, k0 + 16, k0 + 24, i.e. the
  // (b0, b1) of k steps k0 and k0 + 16.
  const bf16* b_row =
      tile + (kScoreKeys * warp + lane % 8) * tile_ld + 8 * (lane / 8);
  float part[4][4] = {};
  for (int k0 = 0; k0 < k; k0 += 64) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      uint32_t bf[4];
      LoadFragments(bf, b_row + k0 + 32 * half);
#pragma unroll
      for (int step = 0; step < 2; ++step) {
        uint32_t af[4];
        LoadFragments(af, a_row + k0 + 32 * half + 16 * step);
        Mma(part[2 * half + step], af, bf[2 * step], bf[2 * step + 1]);
      }
    }
  }
  for (int e = 0; e < 4; ++e)
    acc[e] = (part[0][e] + part[1][e]) + (part[2][e] + part[3][e]);
}

// acc[nt] += P . B: P a 16 x 64 shared operand (the tile's keys as its
// columns), B the 64 x n block of `b` (rows ld apart) at column `n0`: nt
// counts n8 tiles, kTiles of them.
template <int kTiles>
__device__ __forceinline__ void ProductOverKeys(const bf16* p, const bf16* b,
                                                int b_ld, int n0, int tiles,
                                                float (&acc)[kTiles][4]) {
  const int lane = threadIdx.x % 32;
  const bf16* p_row =
      p + (lane % 8 + 8 * ((lane / 8) % 2)) * kTileLd + 8 * (lane / 16);
  const bf16* b_row =
      b + (lane % 8 + 8 * ((lane / 8) % 2)) * b_ld + n0 + 8 * (lane / 16);
  for (int k0 = 0; k0 < kTileKeys; k0 += 16) {
    uint32_t af[4];
    LoadFragments(af, p_row + k0);
#pragma unroll
    for (int nt = 0; nt < kTiles; nt += 2) {
      if (nt >= tiles) continue;  // unrolled: acc stays in registers
      uint32_t bf[4];
      LoadFragmentsTransposed(bf, b_row + k0 * b_ld + 8 * nt);
      Mma(acc[nt], af, bf[0], bf[1]);
      Mma(acc[nt + 1], af, bf[2], bf[3]);
    }
  }
}

// Fragment coordinates of lane's accumulator element e (0..3) of n8 tile nt:
// row (head) and column; ScoreCol: the tile column of the warp's score e.
__device__ __forceinline__ int FragmentRow(int e) {
  return threadIdx.x % 32 / 4 + 8 * (e / 2);
}
__device__ __forceinline__ int FragmentCol(int nt, int e) {
  return 8 * nt + 2 * (threadIdx.x % 4) + e % 2;
}
__device__ __forceinline__ int ScoreCol(int e) {
  return kScoreKeys * (threadIdx.x / 32) + FragmentCol(0, e);
}

// Maximum over the quad of lanes that share a fragment row.
__device__ __forceinline__ float QuadMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float QuadSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Each row's partials (lane's rows g and g + 8) combined over the warps, in
// warp order, starting from `start`. Ends with a barrier, so `partials` may
// be reused after it.
template <typename Combine>
__device__ void AcrossWarps(float* partials, const float (&mine)[2],
                            float start, Combine combine, float (&total)[2]) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane % 4 == 0) {
    partials[warp * kHeadRows + lane / 4] = mine[0];
    partials[warp * kHeadRows + lane / 4 + 8] = mine[1];
  }
  __syncthreads();
  for (int i = 0; i < 2; ++i) {
    total[i] = start;
    for (int w = 0; w < kWarps; ++w)
      total[i] = combine(total[i], partials[w * kHeadRows + lane / 4 + 8 * i]);
  }
  __syncthreads();
}
__device__ void RowTotals(float* partials, const float (&mine)[2],
                          float (&total)[2]) {
  AcrossWarps(
      partials, mine, 0.f, [](float a, float b) { return a + b; }, total);
}
__device__ void RowMaxima(float* partials, const float (&mine)[2],
                          float (&total)[2]) {
  AcrossWarps(
      partials, mine, -INFINITY, [](float a, float b) { return fmaxf(a, b); },
      total);
}

// Writes two adjacent bf16 values of a shared row.
__device__ __forceinline__ void StorePair(bf16* at, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(at) = __floats2bfloat162_rn(a, b);
}

// The warp's four values of a [head][tile key] score tile (ScoreCol's
// columns), in bf16.
__device__ __forceinline__ void StoreScores(bf16* tile, const float (&v)[4]) {
  StorePair(tile + FragmentRow(0) * kTileLd + ScoreCol(0), v[0], v[1]);
  StorePair(tile + FragmentRow(2) * kTileLd + ScoreCol(0), v[2], v[3]);
}

// k16 steps of a column group: a quarter of d's, rounded up.
__device__ __forceinline__ int GroupSteps(int d) {
  return (d / 16 + kColumnGroups - 1) / kColumnGroups;
}

// The warp's column group's A fragments of the query's head rows (shared,
// ld q_ld), a k16 step each; zeros past d.
__device__ void LoadGroupFragments(const bf16* q, int q_ld, int d,
                                   uint32_t (&qa)[kGroupSteps][4]) {
  const int lane = threadIdx.x % 32, group = threadIdx.x / 32 % kColumnGroups;
  const int steps = GroupSteps(d);
  const bf16* a_row =
      q + (lane % 8 + 8 * ((lane / 8) % 2)) * q_ld + 8 * (lane / 16);
#pragma unroll
  for (int s = 0; s < kGroupSteps; ++s) {
    const int col = 16 * (group * steps + s);
    if (s < steps && col < d) {
      LoadFragments(qa[s], a_row + col);
    } else {
      for (uint32_t& r : qa[s]) r = 0u;
    }
  }
}

// WarpScores' result (the warp's 8 keys, its fragment layout) from the
// column groups' products: the warp multiplies its group's columns by its
// 32 tile keys, stores the partial tile, and after a barrier sums the four
// groups' partials (in group order) at WarpScores' places.
__device__ void ScoresByColumns(const uint32_t (&qa)[kGroupSteps][4], int d,
                                const bf16* tile, int tile_ld, float* parts,
                                float (&score)[4]) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int group = warp % kColumnGroups,
            keys0 = kGroupKeys * (warp / kColumnGroups);
  const int steps = GroupSteps(d);
  // x4 over 16 key rows: (keys 0-7, k 0-7), (0-7, 8-15), (8-15, 0-7),
  // (8-15, 8-15): the (b0, b1) of two n8 tiles at one k16 step.
  const bf16* b_row = tile + (keys0 + lane % 8 + 8 * (lane / 16)) * tile_ld +
                      8 * ((lane / 8) % 2);
  float acc[kGroupKeys / 8][4] = {};
#pragma unroll
  for (int s = 0; s < kGroupSteps; ++s) {
    const int col = 16 * (group * steps + s);
    if (s >= steps || col >= d) break;
#pragma unroll
    for (int pair = 0; pair < kGroupKeys / 16; ++pair) {
      uint32_t bf[4];
      LoadFragments(bf, b_row + 16 * pair * tile_ld + col);
      Mma(acc[2 * pair], qa[s], bf[0], bf[1]);
      Mma(acc[2 * pair + 1], qa[s], bf[2], bf[3]);
    }
  }
  float* mine = parts + group * kHeadRows * kPartLd;
#pragma unroll
  for (int nt = 0; nt < kGroupKeys / 8; ++nt) {
    for (int e = 0; e < 4; e += 2) {
      float* at = mine + FragmentRow(e) * kPartLd + keys0 + FragmentCol(nt, e);
      *reinterpret_cast<float2*>(at) = make_float2(acc[nt][e], acc[nt][e + 1]);
    }
  }
  __syncthreads();
  for (int e = 0; e < 4; ++e) {
    float sum = 0.f;
    for (int g = 0; g < kColumnGroups; ++g)
      sum += parts[(g * kHeadRows + FragmentRow(e)) * kPartLd + ScoreCol(e)];
    score[e] = sum;
  }
}

// Starts the query's loads: its keys, its head rows, and key tile 0.
__device__ void StartQuery(const LatentArgs& a, const Shared& s, int q_ld,
                           int64_t t) {
  for (int j = threadIdx.x; j < a.topk; j += kThreads)
    s.keys[j] = a.keys[t * a.topk + j];
  LoadHeadRows(a.q, t * a.heads, a.heads, a.d, q_ld, s.q);
  CommitCopies();
  if (threadIdx.x == 0) {
    for (int b = 0; b < 2; ++b) InitBarrier(&s.barriers[b]);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();  // the keys and the barriers, for the tile copies
  if (threadIdx.x < 32) IssueKeyTile(a, s.keys, 0, q_ld, s.tiles, s.barriers);
}

// Waits for tile `tile` after starting tile + 1's copies into the other
// buffer (free: the loop's last barrier follows every read of it); returns
// the tile's buffer. Buffer b's k-th tile completes its barrier's phase k.
__device__ const bf16* NextTile(const LatentArgs& a, const Shared& s, int q_ld,
                                int tile, int tiles) {
  const size_t buffer = size_t{kTileKeys} * q_ld;
  if (tile + 1 < tiles && threadIdx.x < 32) {
    const int next = (tile + 1) % 2;
    IssueKeyTile(a, s.keys, tile + 1, q_ld, s.tiles + next * buffer,
                 &s.barriers[next]);
  }
  WaitCopies<0>();  // the head rows (at the first tile)
  WaitBarrier(&s.barriers[tile % 2], (tile / 2) % 2);
  __syncthreads();
  return s.tiles + (tile % 2) * buffer;
}

template <bool kScoresByColumns>
__global__ void __launch_bounds__(kThreads, 1)
    ForwardKernel(LatentArgs a, SharedLayout layout) {
  extern __shared__ __align__(16) char shared[];
  const Shared s = Carve(shared, layout);
  const int64_t t = blockIdx.x;
  const int warp = threadIdx.x / 32, q_ld = layout.q_ld;
  const int tiles = TileCount(a);
  constexpr int kValueTiles = kMaxDv / kWarps / 8;  // n8 tiles of a warp
  const int value_tiles = a.dv / kWarps / 8, value_col0 = warp * a.dv / kWarps;
  StartQuery(a, s, q_ld, t);
  float o[kValueTiles][4] = {};
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
  uint32_t qa[kScoresByColumns ? kGroupSteps : 1][4];
  for (int tile = 0; tile < tiles; ++tile) {
    const bf16* keys_tile = NextTile(a, s, q_ld, tile, tiles);
    float score[4];
    if constexpr (kScoresByColumns) {
      if (tile == 0) LoadGroupFragments(s.q, q_ld, a.d, qa);
      ScoresByColumns(qa, a.d, keys_tile, q_ld, s.score_parts, score);
    } else {
      WarpScores(s.q, q_ld, keys_tile, q_ld, a.d, score);
    }
    // Scores in the log2 domain; -inf where there is no key.
    float tile_max[2] = {-INFINITY, -INFINITY};
    for (int e = 0; e < 4; ++e) {
      float& x = score[e];
      x = TileKey(a, s.keys, tile, ScoreCol(e)) >= 0 ? x * a.scale * kLog2e
                                                     : -INFINITY;
      tile_max[e / 2] = fmaxf(tile_max[e / 2], x);
    }
    for (float& m : tile_max) m = QuadMax(m);
    float block_max[2];
    RowMaxima(s.partials, tile_max, block_max);
    float rescale[2], base[2];
    for (int i = 0; i < 2; ++i) {
      const float next = fmaxf(row_max[i], block_max[i]);
      base[i] = next == -INFINITY ? 0.f : next;
      rescale[i] = exp2f(row_max[i] - base[i]);
      row_max[i] = next;
      row_sum[i] *= rescale[i];
    }
    float p[4];
    for (int e = 0; e < 4; ++e) {
      p[e] = exp2f(score[e] - base[e / 2]);
      row_sum[e / 2] += p[e];
    }
    StoreScores(s.probs, p);
#pragma unroll
    for (int nt = 0; nt < kValueTiles; ++nt) {
      for (int e = 0; e < 4; ++e) o[nt][e] *= rescale[e / 2];
    }
    __syncthreads();  // every warp's probabilities
    ProductOverKeys<kValueTiles>(s.probs, keys_tile, q_ld, value_col0,
                                 value_tiles, o);
    __syncthreads();  // the buffer and probabilities are rewritten next
  }
  float mine[2] = {QuadSum(row_sum[0]), QuadSum(row_sum[1])}, total[2];
  RowTotals(s.partials, mine, total);
  const int heads = a.heads;
#pragma unroll
  for (int nt = 0; nt < kValueTiles; ++nt) {
    for (int e = 0; e < 4; e += 2) {
      const int row = FragmentRow(e);
      if (nt >= value_tiles || row >= heads) continue;
      const float inverse = total[e / 2] > 0.f ? 1.f / total[e / 2] : 0.f;
      bf16* at = &Bf16At(a.written_out, t * heads + row,
                         value_col0 + FragmentCol(nt, e));
      StorePair(at, o[nt][e] * inverse, o[nt][e + 1] * inverse);
    }
  }
  if (threadIdx.x % 4 == 0 && warp == 0) {
    for (int i = 0; i < 2; ++i) {
      const int row = FragmentRow(2 * i);
      if (row >= heads) continue;
      a.lse_out[t * heads + row] =
          total[i] > 0.f ? (row_max[i] + log2f(total[i])) / kLog2e : -INFINITY;
    }
  }
}

// The backward's per-row statistics: lse in the log2 domain and
// sum(dout * out), one warp per four rows.
__device__ void RowStatistics(const LatentArgs& a, int64_t t, float* stats) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int r = warp; r < kHeadRows; r += kWarps) {
    float acc = 0.f;
    if (r < a.heads) {
      const int64_t row = t * a.heads + r;
      for (int c = lane; c < a.dv; c += 32)
        acc += Load(a.out, row, c) * Load(a.dout, row, c);
    }
    acc = WarpSum(acc);
    if (lane == 0) {
      stats[r] = r < a.heads ? a.lse_in[t * a.heads + r] * kLog2e : 0.f;
      stats[kHeadRows + r] = acc;
    }
  }
}

// The tile's key gradient rows of keys [16 block, 16 block + 16): [dS^T P^T]
// [q ; dout] over the heads, 64 columns at a time, added to the fp32 buffer.
__device__ void AddKeyGradients(const LatentArgs& a, const Shared& s, int q_ld,
                                int dout_ld, int tile, int block) {
  const int lane = threadIdx.x % 32;
  // A = dS^T or P^T (keys as rows, heads as k) read transposed from the
  // [head][key] tiles; B = q or dout rows (heads as k).
  const int a_offset = (lane % 8 + 8 * (lane / 16)) * kTileLd + 16 * block +
                       8 * ((lane / 8) % 2);
  const int b_row = lane % 8 + 8 * ((lane / 8) % 2), b_col = 8 * (lane / 16);
  uint32_t ds_frag[4], p_frag[4];
  LoadFragmentsTransposed(ds_frag, s.dscores + a_offset);
  LoadFragmentsTransposed(p_frag, s.probs + a_offset);
  const int32_t key_lo = TileKey(a, s.keys, tile, 16 * block + lane / 4),
                key_hi = TileKey(a, s.keys, tile, 16 * block + lane / 4 + 8);
  for (int c0 = 0; c0 < a.d; c0 += 64) {
    float acc[8][4] = {};
    for (int nt = 0; nt < 8; nt += 2) {
      uint32_t bf[4];
      LoadFragmentsTransposed(bf, s.q + b_row * q_ld + c0 + 8 * nt + b_col);
      Mma(acc[nt], ds_frag, bf[0], bf[1]);
      Mma(acc[nt + 1], ds_frag, bf[2], bf[3]);
      if (c0 < a.dv) {
        LoadFragmentsTransposed(bf,
                                s.dout + b_row * dout_ld + c0 + 8 * nt + b_col);
        Mma(acc[nt], p_frag, bf[0], bf[1]);
        Mma(acc[nt + 1], p_frag, bf[2], bf[3]);
      }
    }
    for (int nt = 0; nt < 8; ++nt) {
      AddFragmentQuads(a.dkv, a.dkv_ld, key_lo, key_hi, c0 + 8 * nt, acc[nt]);
    }
  }
}

__global__ void __launch_bounds__(kThreads, 1)
    BackwardKernel(LatentArgs a, SharedLayout layout) {
  extern __shared__ __align__(16) char shared[];
  const Shared s = Carve(shared, layout);
  const int64_t t = blockIdx.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int q_ld = layout.q_ld, dout_ld = layout.dout_ld;
  const int tiles = TileCount(a);
  // n8 tiles of a dq warp's columns.
  constexpr int kQueryTiles = kMaxD / kGradientWarps / 8;
  const bool dq_warp = warp < kGradientWarps;
  const int query_tiles = a.d / kGradientWarps / 8,
            query_col0 = warp % kGradientWarps * a.d / kGradientWarps;
  LoadHeadRows(a.dout, t * a.heads, a.heads, a.dv, dout_ld, s.dout);
  StartQuery(a, s, q_ld, t);
  RowStatistics(a, t, s.row_stats);
  const float* lse2 = s.row_stats;
  const float* out_dot = s.row_stats + kHeadRows;
  float dq[kQueryTiles][4] = {};
  const bool want_weights = a.key_weights.data != nullptr;
  for (int tile = 0; tile < tiles; ++tile) {
    const bf16* keys_tile = NextTile(a, s, q_ld, tile, tiles);
    float score[4], dprob[4], p[4], ds[4];
    WarpScores(s.q, q_ld, keys_tile, q_ld, a.d, score);
    WarpScores(s.dout, dout_ld, keys_tile, q_ld, a.dv, dprob);
    for (int e = 0; e < 4; ++e) {
      const int row = FragmentRow(e);
      const bool valid =
          row < a.heads && TileKey(a, s.keys, tile, ScoreCol(e)) >= 0;
      p[e] = valid ? exp2f(score[e] * a.scale * kLog2e - lse2[row]) : 0.f;
      ds[e] = p[e] * (dprob[e] - out_dot[row]) * a.scale;
    }
    StoreScores(s.probs, p);
    StoreScores(s.dscores, ds);
    if (want_weights) {
      // The heads' sum per key: the fragment's two rows, then the eight
      // lanes that share the column, in a fixed butterfly.
      for (int e = 0; e < 2; ++e) {
        float w = p[e] + p[e + 2];
        for (int offset = 4; offset < 32; offset *= 2)
          w += __shfl_xor_sync(0xffffffffu, w, offset);
        const int slot = tile * kTileKeys + ScoreCol(e);
        if (lane < 4 && slot < a.topk) Store(a.key_weights, t, slot, w);
      }
    }
    __syncthreads();  // every warp's probabilities and score gradients
    if (dq_warp) {
      ProductOverKeys<kQueryTiles>(s.dscores, keys_tile, q_ld, query_col0,
                                   query_tiles, dq);
    } else if (a.dkv != nullptr) {
      AddKeyGradients(a, s, q_ld, dout_ld, tile, warp - kGradientWarps);
    }
    __syncthreads();  // the buffer and the tiles are rewritten next
  }
  if (a.dq.data == nullptr || !dq_warp) return;
#pragma unroll
  for (int nt = 0; nt < kQueryTiles; ++nt) {
    for (int e = 0; e < 4; ++e) {
      const int row = FragmentRow(e);
      if (nt < query_tiles && row < a.heads)
        Store(a.dq, t * a.heads + row, query_col0 + FragmentCol(nt, e),
              dq[nt][e]);
    }
  }
}

bool Bf16Rows(ConstMatrixView m) {
  return ChunkAlignedRows(m, ElementType::kBF16);
}

LatentArgs ArgsFor(ConstMatrixView q, ConstMatrixView kv, const int32_t* keys,
                   int64_t topk, int64_t heads, float scale,
                   ConstMatrixView out) {
  LatentArgs a{};
  a.q = q;
  a.kv = kv;
  a.out = out;
  a.keys = keys;
  a.topk = static_cast<int>(topk);
  a.heads = static_cast<int>(heads);
  a.d = static_cast<int>(q.cols);
  a.dv = static_cast<int>(out.cols);
  a.scale = scale;
  return a;
}

template <typename Kernel>
void Launch(CudaContext& ctx, Kernel kernel, const LatentArgs& a,
            const SharedLayout& layout, int64_t nq) {
  GLM_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(layout.total)));
  kernel<<<static_cast<unsigned int>(nq), kThreads, layout.total,
           ctx.stream()>>>(a, layout);
  GLM_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool LatentAttentionSupported(ConstMatrixView q, ConstMatrixView kv,
                              ConstMatrixView out, ConstMatrixView dout,
                              int64_t topk, int64_t heads,
                              bool scores_by_columns) {
  const int64_t d = q.cols, dv = out.cols;
  const bool shapes = heads >= 1 && heads <= kHeadRows && d % 64 == 0 &&
                      d <= kMaxD && kv.cols == d && dv % 64 == 0 &&
                      dv <= std::min<int64_t>(d, kMaxDv) && topk >= 1 &&
                      q.rows / heads <= INT32_MAX;
  const bool types = Bf16Rows(q) && Bf16Rows(kv) &&
                     out.dtype == ElementType::kBF16 && out.stride % 2 == 0 &&
                     AlignedTo(out.data, 4) && (dout.empty() || Bf16Rows(dout));
  const bool backward = !dout.empty();
  return shapes && types &&
         LayoutFor(topk, d, dv, backward, scores_by_columns && !backward)
                 .total <= kMaxSharedBytes;
}

void LatentAttentionForward(CudaContext& ctx, ConstMatrixView q,
                            ConstMatrixView kv, const int32_t* keys,
                            int64_t topk, int64_t heads, float scale,
                            MatrixView out, float* lse,
                            bool scores_by_columns) {
  assert(
      LatentAttentionSupported(q, kv, out, {}, topk, heads, scores_by_columns));
  assert(q.rows % heads == 0 && out.rows == q.rows);
  const int64_t nq = q.rows / heads;
  if (nq == 0) return;
  LatentArgs a = ArgsFor(q, kv, keys, topk, heads, scale, out);
  a.written_out = out;
  a.lse_out = lse;
  const SharedLayout layout =
      LayoutFor(topk, q.cols, out.cols, false, scores_by_columns);
  if (scores_by_columns) {
    Launch(ctx, ForwardKernel<true>, a, layout, nq);
  } else {
    Launch(ctx, ForwardKernel<false>, a, layout, nq);
  }
}

void LatentAttentionBackward(CudaContext& ctx, ConstMatrixView q,
                             ConstMatrixView kv, const int32_t* keys,
                             int64_t topk, int64_t heads, float scale,
                             ConstMatrixView out, const float* lse,
                             ConstMatrixView dout, MatrixView dq,
                             MatrixView dkv, MatrixView key_weights) {
  assert(LatentAttentionSupported(q, kv, out, dout, topk, heads, false));
  assert(dq.empty() || (dq.rows == q.rows && dq.cols == q.cols));
  assert(dkv.empty() || (dkv.rows == kv.rows && dkv.cols == kv.cols));
  const int64_t nq = q.rows / heads;
  LatentArgs a = ArgsFor(q, kv, keys, topk, heads, scale, out);
  a.dout = dout;
  a.dq = dq;
  a.key_weights = key_weights;
  a.lse_in = lse;
  // The key gradient's fp32 sums: dkv itself when it is F32 with 16-byte
  // aligned quads, else scratch converted into it after.
  const bool direct = dkv.dtype == ElementType::kF32 && dkv.stride % 4 == 0 &&
                      AlignedTo(dkv.data, 16);
  MatrixView sums = dkv;
  if (!dkv.empty() && !direct) {
    sums = {static_cast<float*>(ctx.Scratch(kv.rows * kv.cols * sizeof(float))),
            kv.rows, kv.cols, kv.cols};
  }
  if (!dkv.empty()) {
    Zero(ctx, sums);
    a.dkv = sums.data;
    a.dkv_ld = sums.stride;
  }
  if (nq > 0) {
    Launch(ctx, BackwardKernel, a,
           LayoutFor(topk, q.cols, out.cols, true, false), nq);
  }
  if (!dkv.empty() && !direct) Copy(ctx, sums, dkv);
}

}  // namespace glm::cuda
