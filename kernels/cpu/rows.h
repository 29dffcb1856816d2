// Row gathers and scatters: embedding lookup and MoE token dispatch/combine.
#ifndef GLM_KERNELS_CPU_ROWS_H_
#define GLM_KERNELS_CPU_ROWS_H_

#include <cstdint>

#include "kernels/tensor.h"

namespace glm::cpu {

// out[i] = table[ids[i]] for i < out.rows.
void GatherRows(ConstMatrixView table, const int32_t* ids, MatrixView out);
// out[rows[i]] += scale[i] * src[i] (scale null: 1). Serial over i:
// deterministic.
void ScatterAddRows(ConstMatrixView src, const int32_t* rows,
                    const float* scale, MatrixView out);
// dsrc[i] = scale[i] * dout[rows[i]]; dscale (a column) at row
// j = dscale_rows[i] (null: i) = src[i] . dout[rows[i]] (written, not added).
void ScatterAddRowsBackward(ConstMatrixView src, const int32_t* rows,
                            const float* scale, ConstMatrixView dout,
                            MatrixView dsrc, MatrixView dscale,
                            const int32_t* dscale_rows);
// Backend::TokenRows: positions in ascending order, token by token.
void TokenRows(const int32_t* slots, int64_t count, int64_t per_token,
               int32_t* token_rows);
// Backend::AddRowGroups: serial over output rows, each row's sources in
// order.
void AddRowGroups(ConstMatrixView src, const int32_t* sources, int64_t per_row,
                  const float* scale, MatrixView out);
// Backend::AddRowGroupsBackward: ScatterAddRowsBackward's values, output row
// by output row.
void AddRowGroupsBackward(ConstMatrixView src, const int32_t* sources,
                          int64_t per_row, const float* scale,
                          ConstMatrixView dout, MatrixView dsrc,
                          MatrixView dscale, const int32_t* dscale_rows);
// Backend::GroupByExpert: a counting sort, stable by choice index.
void GroupByExpert(const int32_t* expert, int64_t count, int64_t per_token,
                   int64_t experts, int32_t* slots, int32_t* tokens,
                   int32_t* offsets);
// Backend::AddExpertLoads.
void AddExpertLoads(const int32_t* offsets, int64_t experts, int32_t* loads);

}  // namespace glm::cpu

#endif  // GLM_KERNELS_CPU_ROWS_H_
