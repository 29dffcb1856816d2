// One output head's loss: logits = x head^T over the vocabulary and the mean
// cross-entropy of the rows that have targets, its gradient scaled by `scale`
// (1 for the LM head, the MTP loss scale for the MTP head).
//
// Kept: the forward keeps the [rows, vocab] fp32 logits and the backward forms
// the gradient from them (evaluation and the transformers checks read the
// logits). Fused, for training, where every forward is followed by its
// backward: the forward runs the loss and its gradient a chunk of rows at a
// time, adds the head weight's gradient then and keeps only the gradient of x
// [rows, hidden], so the logits never exist whole (at glm5.2-mini's 154,880
// words they are 620 KB per token, twice over with their gradient).
#ifndef GLM_MODEL_HEAD_LOSS_H_
#define GLM_MODEL_HEAD_LOSS_H_

#include <cstdint>

#include "kernels/backend.h"
#include "model/parameters.h"

namespace glm {

struct HeadLossActivations {
  IndexTensor targets;  // per row, -1: not counted
  int64_t count = 0;    // targets the whole micro batch counts (the divisor)
  float scale = 1.f;
  bool fused = false;
  Tensor logits;  // [rows, vocab]: kept mode
  Tensor dx;      // [rows, hidden]: fused mode
};

// What a fused chunk's logits and their gradient take by default: 2 GiB, so
// chunks of 1,728 tokens at glm5.2-mini's 154,880 words in fp32, 6,912 in
// bf16 (GEMMs of that many rows by the whole vocabulary keep the tensor cores
// busy).
inline constexpr int64_t kDefaultHeadChunkBytes = int64_t{2} << 30;

// Rows per chunk of the fused loss: its logits and their gradient take at
// most about chunk_bytes (one row at the least), logit_bytes a word of the
// vocabulary: kFp32LogitBytes, or kBf16LogitBytes for logits in bf16, the
// activation type of the bf16 mode, whose gradient takes their place.
inline constexpr int64_t kFp32LogitBytes = 2 * 4;
inline constexpr int64_t kBf16LogitBytes = 2;
int64_t FusedChunkRows(int64_t rows, int64_t vocab, int64_t chunk_bytes,
                       int64_t logit_bytes);

// Adds this rank's part of the mean loss to *sum (device memory on a device
// backend); acts->targets, count and scale must be set. chunk_bytes > 0: the
// fused mode with chunks of that size; 0: the kept mode.
void HeadLossForward(Backend& backend, ConstMatrixView x, Parameter& head,
                     int64_t chunk_bytes, double* sum,
                     HeadLossActivations* acts);

// The gradient of the scaled loss with respect to x: the fused forward's, or
// formed here from the kept logits into *owned (adding the head weight's
// gradient). Zeros when no row is counted.
ConstMatrixView HeadLossBackward(Backend& backend, ConstMatrixView x,
                                 Parameter& head,
                                 const HeadLossActivations& acts,
                                 Tensor* owned);

}  // namespace glm

#endif  // GLM_MODEL_HEAD_LOSS_H_
