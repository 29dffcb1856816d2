#include "kernels/cpu/rows.h"

#include <algorithm>
#include <cassert>
#include <vector>

#include "kernels/cpu/parallel.h"

namespace glm::cpu {

void GatherRows(ConstMatrixView table, const int32_t* ids, MatrixView out) {
  assert(table.cols == out.cols);
  ParallelFor(out.rows, out.rows * out.cols, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      assert(ids[i] >= 0 && ids[i] < table.rows);
      std::copy(table.Row(ids[i]), table.Row(ids[i]) + table.cols, out.Row(i));
    }
  });
}

void ScatterAddRows(ConstMatrixView src, const int32_t* rows,
                    const float* scale, MatrixView out) {
  assert(src.cols == out.cols);
  // Rows may repeat, so the loop over i stays serial; columns split across
  // threads.
  for (int64_t i = 0; i < src.rows; ++i) {
    const float s = scale ? scale[i] : 1.f;
    const float* in = src.Row(i);
    float* o = out.Row(rows[i]);
    for (int64_t c = 0; c < src.cols; ++c) o[c] += s * in[c];
  }
}

namespace {

// One source row's share of the combine's backward: dsrc[i] = scale[i] * d,
// dscale at dscale_rows[i] (null: i) = src[i] . d.
void RowBackward(ConstMatrixView src, int64_t i, const float* d,
                 const float* scale, MatrixView dsrc, MatrixView dscale,
                 const int32_t* dscale_rows) {
  if (!dsrc.empty()) {
    const float s = scale ? scale[i] : 1.f;
    float* o = dsrc.Row(i);
    for (int64_t c = 0; c < src.cols; ++c) o[c] = s * d[c];
  }
  if (!dscale.empty()) {
    const float* in = src.Row(i);
    double dot = 0;
    for (int64_t c = 0; c < src.cols; ++c) dot += double{in[c]} * d[c];
    *dscale.Row(dscale_rows ? dscale_rows[i] : i) = static_cast<float>(dot);
  }
}

}  // namespace

void ScatterAddRowsBackward(ConstMatrixView src, const int32_t* rows,
                            const float* scale, ConstMatrixView dout,
                            MatrixView dsrc, MatrixView dscale,
                            const int32_t* dscale_rows) {
  ParallelFor(src.rows, src.rows * src.cols, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      RowBackward(src, i, dout.Row(rows[i]), scale, dsrc, dscale, dscale_rows);
    }
  });
}

void GroupByExpert(const int32_t* expert, int64_t count, int64_t per_token,
                   int64_t experts, int32_t* slots, int32_t* tokens,
                   int32_t* offsets) {
  std::fill(offsets, offsets + experts + 1, 0);
  for (int64_t i = 0; i < count; ++i) {
    assert(expert[i] >= 0 && expert[i] < experts);
    ++offsets[expert[i] + 1];
  }
  for (int64_t e = 0; e < experts; ++e) offsets[e + 1] += offsets[e];
  std::vector<int32_t> next(offsets, offsets + experts);
  for (int64_t i = 0; i < count; ++i) {
    const int32_t p = next[expert[i]]++;
    slots[p] = static_cast<int32_t>(i);
    tokens[p] = static_cast<int32_t>(i / per_token);
  }
}

void TokenRows(const int32_t* slots, int64_t count, int64_t per_token,
               int32_t* token_rows) {
  std::vector<int32_t> filled(count / per_token, 0);
  for (int64_t p = 0; p < count; ++p) {
    const int64_t t = slots[p] / per_token;
    token_rows[t * per_token + filled[t]++] = static_cast<int32_t>(p);
  }
}

void AddRowGroups(ConstMatrixView src, const int32_t* sources, int64_t per_row,
                  const float* scale, MatrixView out) {
  assert(src.rows == out.rows * per_row && src.cols == out.cols);
  for (int64_t r = 0; r < out.rows; ++r) {
    float* o = out.Row(r);
    for (int64_t j = 0; j < per_row; ++j) {
      const int32_t i = sources[r * per_row + j];
      const float s = scale ? scale[i] : 1.f;
      const float* in = src.Row(i);
      for (int64_t c = 0; c < src.cols; ++c) o[c] += s * in[c];
    }
  }
}

void AddRowGroupsBackward(ConstMatrixView src, const int32_t* sources,
                          int64_t per_row, const float* scale,
                          ConstMatrixView dout, MatrixView dsrc,
                          MatrixView dscale, const int32_t* dscale_rows) {
  assert(src.rows == dout.rows * per_row && src.cols == dout.cols);
  ParallelFor(dout.rows, src.rows * src.cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t j = 0; j < per_row; ++j) {
        RowBackward(src, sources[r * per_row + j], dout.Row(r), scale, dsrc,
                    dscale, dscale_rows);
      }
    }
  });
}

void AddExpertLoads(const int32_t* offsets, int64_t experts, int32_t* loads) {
  for (int64_t e = 0; e < experts; ++e) loads[e] += offsets[e + 1] - offsets[e];
}

}  // namespace glm::cpu
