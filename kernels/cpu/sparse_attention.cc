#include "kernels/cpu/sparse_attention.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/cpu/parallel.h"

namespace glm::cpu {
namespace {

float Dot(const float* a, const float* b, int64_t n) {
  float acc = 0.f;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

// Where head h of key token `token` keeps its key and value: its own row
// (key_heads == heads, the per-head form) or the token's one row that every
// head reads (key_heads == 1, the latent form).
struct KeyRows {
  int64_t heads, key_heads;
  int64_t Of(int32_t token, int64_t h) const {
    return token * key_heads + h % key_heads;
  }
};

// Probabilities of one query row (token t, head h) recomputed from its lse:
// p[j] = exp(scale q . k_j - lse), 0 on -1 slots.
void RowProbs(ConstMatrixView q, ConstMatrixView k, const int32_t* keys,
              int64_t topk, KeyRows rows, float scale, const float* lse,
              int64_t row, float* p) {
  const int32_t* selected = keys + row / rows.heads * topk;
  const int64_t h = row % rows.heads;
  for (int64_t j = 0; j < topk; ++j) {
    p[j] = selected[j] < 0
               ? 0.f
               : std::exp(scale * Dot(q.Row(row),
                                      k.Row(rows.Of(selected[j], h)), q.cols) -
                          lse[row]);
  }
}

void Forward(ConstMatrixView q, ConstMatrixView k, ConstMatrixView v,
             const int32_t* keys, int64_t topk, KeyRows rows, float scale,
             MatrixView out, float* lse) {
  assert(q.cols == k.cols && k.rows == v.rows && q.rows % rows.heads == 0);
  assert(out.rows == q.rows && out.cols == v.cols);
  ParallelFor(q.rows, q.rows * topk * (q.cols + v.cols),
              [&](int64_t begin, int64_t end) {
                std::vector<float> p(topk);
                for (int64_t row = begin; row < end; ++row) {
                  const int64_t t = row / rows.heads, h = row % rows.heads;
                  const int32_t* selected = keys + t * topk;
                  float max = -INFINITY;
                  for (int64_t j = 0; j < topk; ++j) {
                    if (selected[j] < 0) continue;
                    p[j] = scale * Dot(q.Row(row),
                                       k.Row(rows.Of(selected[j], h)), q.cols);
                    max = std::max(max, p[j]);
                  }
                  double sum = 0;
                  for (int64_t j = 0; j < topk; ++j) {
                    if (selected[j] < 0) continue;
                    p[j] = std::exp(p[j] - max);
                    sum += p[j];
                  }
                  lse[row] = sum > 0 ? max + static_cast<float>(std::log(sum))
                                     : -INFINITY;
                  float* o = out.Row(row);
                  std::fill(o, o + v.cols, 0.f);
                  for (int64_t j = 0; j < topk; ++j) {
                    if (selected[j] < 0) continue;
                    const float weight = static_cast<float>(p[j] / sum);
                    const float* value = v.Row(rows.Of(selected[j], h));
                    for (int64_t c = 0; c < v.cols; ++c)
                      o[c] += weight * value[c];
                  }
                }
              });
}

void KeyWeights(ConstMatrixView q, ConstMatrixView k, const int32_t* keys,
                int64_t topk, KeyRows rows, float scale, const float* lse,
                MatrixView weights) {
  assert(q.cols == k.cols && q.rows % rows.heads == 0);
  assert(weights.rows == q.rows / rows.heads && weights.cols == topk);
  ParallelFor(weights.rows, q.rows * topk * q.cols,
              [&](int64_t begin, int64_t end) {
                std::vector<float> p(topk);
                for (int64_t t = begin; t < end; ++t) {
                  float* w = weights.Row(t);
                  std::fill(w, w + topk, 0.f);
                  for (int64_t h = 0; h < rows.heads; ++h) {
                    RowProbs(q, k, keys, topk, rows, scale, lse,
                             t * rows.heads + h, p.data());
                    for (int64_t j = 0; j < topk; ++j) w[j] += p[j];
                  }
                }
              });
}

// Adds into dq, dk and dv (dk and dv may share rows: the latent form).
void Backward(ConstMatrixView q, ConstMatrixView k, ConstMatrixView v,
              const int32_t* keys, int64_t topk, KeyRows rows, float scale,
              const float* lse, ConstMatrixView dout, MatrixView dq,
              MatrixView dk, MatrixView dv) {
  const int64_t heads = rows.heads;
  // Pass 1, per query row: probabilities from lse, score gradients
  // ds = p (dout . v - sum_i p_i dout . v_i) scale (the sum in double, so it
  // does not need the forward's rounded output), and dq.
  std::vector<float> probs(q.rows * topk), dscore(q.rows * topk, 0.f);
  ParallelFor(
      q.rows, q.rows * topk * (q.cols + v.cols),
      [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
          const int64_t h = row % heads;
          const int32_t* selected = keys + row / heads * topk;
          float* p = probs.data() + row * topk;
          RowProbs(q, k, keys, topk, rows, scale, lse, row, p);
          float* ds = dscore.data() + row * topk;
          double weighted = 0;
          for (int64_t j = 0; j < topk; ++j) {
            if (selected[j] < 0) continue;
            ds[j] = Dot(dout.Row(row), v.Row(rows.Of(selected[j], h)), v.cols);
            weighted += double{p[j]} * ds[j];
          }
          for (int64_t j = 0; j < topk; ++j) {
            if (selected[j] < 0) continue;
            ds[j] = p[j] * (ds[j] - static_cast<float>(weighted)) * scale;
            if (dq.empty()) continue;
            const float* key = k.Row(rows.Of(selected[j], h));
            float* g = dq.Row(row);
            for (int64_t c = 0; c < q.cols; ++c) g[c] += ds[j] * key[c];
          }
        }
      });
  // Pass 2: heads [h0, h1) and columns [c0, c1) of the key rows, in query
  // order, so the sums are deterministic without atomics.
  auto add_key_grads = [&](int64_t h0, int64_t h1, int64_t c0, int64_t c1) {
    for (int64_t t = 0; t < q.rows / heads; ++t) {
      const int32_t* selected = keys + t * topk;
      for (int64_t j = 0; j < topk; ++j) {
        if (selected[j] < 0) continue;
        for (int64_t h = h0; h < h1; ++h) {
          const int64_t row = t * heads + h, key_row = rows.Of(selected[j], h);
          if (!dk.empty()) {
            const float ds = dscore[row * topk + j];
            const float* query = q.Row(row);
            float* g = dk.Row(key_row);
            for (int64_t c = c0; c < std::min(c1, q.cols); ++c)
              g[c] += ds * query[c];
          }
          if (!dv.empty()) {
            const float p = probs[row * topk + j];
            const float* d = dout.Row(row);
            float* g = dv.Row(key_row);
            for (int64_t c = c0; c < std::min(c1, v.cols); ++c)
              g[c] += p * d[c];
          }
        }
      }
    }
  };
  const int64_t work = q.rows * topk * (q.cols + v.cols);
  const int64_t cols = std::max(q.cols, v.cols);
  if (rows.key_heads == heads) {
    // One head per thread: a head's key rows are its own.
    ParallelFor(heads, work, [&](int64_t begin, int64_t end) {
      for (int64_t h = begin; h < end; ++h) add_key_grads(h, h + 1, 0, cols);
    });
  } else {
    // Every head writes the same rows: one column block per thread.
    constexpr int64_t kBlock = 32;
    ParallelFor(
        (cols + kBlock - 1) / kBlock, work, [&](int64_t begin, int64_t end) {
          add_key_grads(0, heads, begin * kBlock, std::min(cols, end * kBlock));
        });
  }
}

}  // namespace

void CheckFullQueries(const char* op, const int32_t* keys, int64_t topk,
                      int64_t full_queries, int64_t nq, int64_t nk) {
  if (full_queries == 0) return;
  auto fail = [&](int64_t t, const char* what) {
    std::fprintf(stderr,
                 "%s: full_queries %lld (queries %lld, keys %lld, top-k %lld):"
                 " %s at query %lld\n",
                 op, static_cast<long long>(full_queries),
                 static_cast<long long>(nq), static_cast<long long>(nk),
                 static_cast<long long>(topk), what, static_cast<long long>(t));
    std::abort();
  };
  if (nq != nk || full_queries > nq) fail(0, "not self-attention's queries");
  std::vector<bool> seen;
  for (int64_t t = 0; t < full_queries; ++t) {
    seen.assign(t + 1, false);
    int64_t count = 0;
    for (int64_t j = 0; j < topk; ++j) {
      const int32_t s = keys[t * topk + j];
      if (s < 0) continue;
      if (s > t || seen[s]) fail(t, "a key after the query or twice");
      seen[s] = true;
      ++count;
    }
    if (count != t + 1) fail(t, "not every key up to the query selected");
  }
}

void SparseAttentionForward(ConstMatrixView q, ConstMatrixView k,
                            ConstMatrixView v, const int32_t* keys,
                            int64_t topk, int64_t heads, float scale,
                            MatrixView out, float* lse) {
  assert(k.rows % heads == 0);
  Forward(q, k, v, keys, topk, {heads, heads}, scale, out, lse);
}

void SparseAttentionKeyWeights(ConstMatrixView q, ConstMatrixView k,
                               const int32_t* keys, int64_t topk, int64_t heads,
                               float scale, const float* lse,
                               MatrixView weights) {
  assert(k.rows % heads == 0);
  KeyWeights(q, k, keys, topk, {heads, heads}, scale, lse, weights);
}

void SparseAttentionBackward(ConstMatrixView q, ConstMatrixView k,
                             ConstMatrixView v, const int32_t* keys,
                             int64_t topk, int64_t heads, float scale,
                             ConstMatrixView /*out*/, const float* lse,
                             ConstMatrixView dout, MatrixView dq, MatrixView dk,
                             MatrixView dv) {
  assert(k.rows % heads == 0);
  Backward(q, k, v, keys, topk, {heads, heads}, scale, lse, dout, dq, dk, dv);
}

void LatentAttentionForward(ConstMatrixView q, ConstMatrixView kv,
                            const int32_t* keys, int64_t topk, int64_t heads,
                            float scale, MatrixView out, float* lse) {
  Forward(q, kv, kv.Columns(0, out.cols), keys, topk, {heads, 1}, scale, out,
          lse);
}

void LatentAttentionKeyWeights(ConstMatrixView q, ConstMatrixView kv,
                               const int32_t* keys, int64_t topk, int64_t heads,
                               float scale, const float* lse,
                               MatrixView weights) {
  KeyWeights(q, kv, keys, topk, {heads, 1}, scale, lse, weights);
}

void LatentAttentionBackward(ConstMatrixView q, ConstMatrixView kv,
                             const int32_t* keys, int64_t topk, int64_t heads,
                             float scale, const float* lse,
                             ConstMatrixView dout, MatrixView dq,
                             MatrixView dkv) {
  const int64_t dv = dout.cols;
  Backward(q, kv, kv.Columns(0, dv), keys, topk, {heads, 1}, scale, lse, dout,
           dq, dkv, dkv.empty() ? MatrixView{} : dkv.Columns(0, dv));
}

}  // namespace glm::cpu
