// Interleaved rotary position embedding (DeepSeek/GLM layout): pairs (x[2i],
// x[2i+1]) rotate by angle pos * theta^(-2i/R); the output is in half layout
// [x0 cos - x1 sin | x1 cos + x0 sin], as transformers'
// apply_rotary_pos_emb_interleave.
#ifndef GLM_KERNELS_CPU_ROPE_H_
#define GLM_KERNELS_CPU_ROPE_H_

#include <cstdint>

#include "kernels/tensor.h"

namespace glm::cpu {

void RopeForward(ConstMatrixView x, const int32_t* positions,
                 int64_t rows_per_position, float theta, MatrixView y);
// The transpose (inverse) rotation, half layout in, interleaved out; dx += ...
void RopeBackward(ConstMatrixView dy, const int32_t* positions,
                  int64_t rows_per_position, float theta, MatrixView dx);

}  // namespace glm::cpu

#endif  // GLM_KERNELS_CPU_ROPE_H_
