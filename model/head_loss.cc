#include "model/head_loss.h"

#include <algorithm>
#include <cassert>

namespace glm {
namespace {

constexpr int64_t kChunkRowMultiple = 64;

// The counted rows' loss of logits [rows, vocab] (their targets at
// `targets`), added to *sum; dlogits (zeros) gets its scaled gradient.
void ChunkLoss(Backend& backend, ConstMatrixView logits, const int32_t* targets,
               const HeadLossActivations& acts, double* sum,
               MatrixView dlogits) {
  backend.CrossEntropyForward(logits, targets, static_cast<double>(acts.count),
                              sum);
  if (dlogits.empty()) return;
  backend.CrossEntropyBackward(
      logits, targets, acts.scale / static_cast<float>(acts.count), dlogits);
}

}  // namespace

int64_t FusedChunkRows(int64_t rows, int64_t vocab, int64_t chunk_bytes) {
  const int64_t fit =
      std::max<int64_t>(1, chunk_bytes / (2 * vocab * int64_t{sizeof(float)}));
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
    acts->logits = Tensor({rows, vocab});
    backend.Linear(x, head.value.Matrix(), acts->logits.Matrix(), false);
    if (acts->count > 0) {
      ChunkLoss(backend, acts->logits.Matrix(), acts->targets.data(), *acts,
                sum, MatrixView{});
    }
    return;
  }
  acts->dx = Tensor({rows, x.cols});
  if (acts->count == 0 || rows == 0) return;
  const int64_t chunk = FusedChunkRows(rows, vocab, chunk_bytes);
  Tensor logits({chunk, vocab});
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t count = std::min(chunk, rows - r0);
    const MatrixView chunk_logits = logits.Matrix().Rows(0, count);
    const ConstMatrixView chunk_x = x.Rows(r0, count);
    backend.Linear(chunk_x, head.value.Matrix(), chunk_logits, false);
    Tensor dlogits({count, vocab});
    ChunkLoss(backend, chunk_logits, acts->targets.data() + r0, *acts, sum,
              dlogits.Matrix());
    backend.LinearBackward(chunk_x, head.value.Matrix(), dlogits.Matrix(),
                           acts->dx.Matrix().Rows(r0, count),
                           head.grad.Matrix());
  }
}

ConstMatrixView HeadLossBackward(Backend& backend, ConstMatrixView x,
                                 Parameter& head,
                                 const HeadLossActivations& acts,
                                 Tensor* owned) {
  if (acts.fused) return acts.dx.Matrix();
  *owned = Tensor({x.rows, x.cols});
  if (acts.count == 0) return owned->Matrix();
  Tensor dlogits({acts.logits.dim(0), acts.logits.dim(1)});
  backend.CrossEntropyBackward(acts.logits.Matrix(), acts.targets.data(),
                               acts.scale / static_cast<float>(acts.count),
                               dlogits.Matrix());
  backend.LinearBackward(x, head.value.Matrix(), dlogits.Matrix(),
                         owned->Matrix(), head.grad.Matrix());
  return owned->Matrix();
}

}  // namespace glm
