#include "model/head_loss.h"

#include <algorithm>
#include <cassert>

namespace glm {
namespace {

constexpr int64_t kChunkRowMultiple = 64;

// Through logits [rows, vocab] of x's rows (their targets at `targets`):
// dx += the scaled mean loss's gradient, and the head weight's gradient
// accumulates.
void AddGradient(Backend& backend, ConstMatrixView x, Parameter& head,
                 ConstMatrixView logits, const int32_t* targets,
                 const HeadLossActivations& acts, MatrixView dx) {
  Tensor dlogits({logits.rows, logits.cols});
  backend.CrossEntropyBackward(logits, targets,
                               acts.scale / static_cast<float>(acts.count),
                               dlogits.Matrix());
  backend.LinearBackward(x, head.value.Matrix(), dlogits.Matrix(), dx,
                         head.grad.Matrix());
}

}  // namespace

int64_t FusedChunkRows(int64_t rows, int64_t vocab, int64_t chunk_bytes,
                       int64_t logit_bytes) {
  const int64_t fit = std::max<int64_t>(1, chunk_bytes / (vocab * logit_bytes));
  if (fit >= rows) return std::max<int64_t>(rows, 1);
  // Whole tiles of rows for the GEMMs where the chunk allows.
  return fit >= kChunkRowMultiple ? fit / kChunkRowMultiple * kChunkRowMultiple
                                  : fit;
}

void HeadLossForward(Backend& backend, ConstMatrixView x, Parameter& head,
                     int64_t chunk_bytes, double* sum,
                     HeadLossActivations* acts) {
  const int64_t rows = x.rows, vocab = head.value.dim(0);
  assert(chunk_bytes >= 0);
  acts->fused = chunk_bytes > 0;
  if (!acts->fused) {
    acts->logits = Tensor::ForOutput({rows, vocab});
    backend.Linear(x, head.value.Matrix(), acts->logits.Matrix(), false);
    if (acts->count > 0) {
      backend.CrossEntropyForward(acts->logits.Matrix(), acts->targets.data(),
                                  static_cast<double>(acts->count), sum);
    }
    return;
  }
  acts->dx = Tensor({rows, x.cols});
  if (acts->count == 0 || rows == 0) return;
  // In the activation type: bf16 logits as the product writes them, their
  // gradient in place (Backend::LinearCrossEntropy).
  const ElementType type = backend.ActivationType();
  const int64_t chunk = FusedChunkRows(
      rows, vocab, chunk_bytes,
      type == ElementType::kBF16 ? kBf16LogitBytes : kFp32LogitBytes);
  Tensor logits = Tensor::ForOutput({chunk, vocab}, type);
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t count = std::min(chunk, rows - r0);
    const MatrixView chunk_logits = logits.Matrix().Rows(0, count);
    const ConstMatrixView chunk_x = x.Rows(r0, count);
    const int32_t* targets = acts->targets.data() + r0;
    backend.LinearCrossEntropy(
        chunk_x, head.value.Matrix(), targets, static_cast<double>(acts->count),
        acts->scale / static_cast<float>(acts->count), chunk_logits, sum,
        acts->dx.Matrix().Rows(r0, count), head.grad.Matrix());
  }
}

ConstMatrixView HeadLossBackward(Backend& backend, ConstMatrixView x,
                                 Parameter& head,
                                 const HeadLossActivations& acts,
                                 Tensor* owned) {
  if (acts.fused) return acts.dx.Matrix();
  *owned = Tensor({x.rows, x.cols});
  if (acts.count == 0) return owned->Matrix();
  AddGradient(backend, x, head, acts.logits.Matrix(), acts.targets.data(), acts,
              owned->Matrix());
  return owned->Matrix();
}

}  // namespace glm
