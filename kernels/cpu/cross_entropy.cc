#include "kernels/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/parallel.h"

namespace glm::cpu {
namespace {

// log(sum exp(row)) computed stably in double.
double LogSumExp(const float* row, int64_t n) {
  const float max = *std::max_element(row, row + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double{row[i]} - max);
  return max + std::log(sum);
}

}  // namespace

double CrossEntropyForward(ConstMatrixView logits, const int32_t* targets) {
  std::vector<double> row_loss(logits.rows, 0.0);
  ParallelFor(
      logits.rows, logits.rows * logits.cols, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          if (targets[r] < 0) continue;
          row_loss[r] =
              LogSumExp(logits.Row(r), logits.cols) - logits.Row(r)[targets[r]];
        }
      });
  double total = 0;
  for (double l : row_loss) total += l;
  return total;
}

void CrossEntropyBackward(ConstMatrixView logits, const int32_t* targets,
                          float scale, MatrixView dlogits) {
  ParallelFor(logits.rows, logits.rows * logits.cols,
              [&](int64_t begin, int64_t end) {
                for (int64_t r = begin; r < end; ++r) {
                  if (targets[r] < 0) continue;
                  const float* in = logits.Row(r);
                  const double lse = LogSumExp(in, logits.cols);
                  float* d = dlogits.Row(r);
                  for (int64_t c = 0; c < logits.cols; ++c) {
                    d[c] += scale * static_cast<float>(std::exp(in[c] - lse));
                  }
                  d[targets[r]] -= scale;
                }
              });
}

}  // namespace glm::cpu
