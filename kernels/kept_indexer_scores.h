// What a backend's IndexerTopK keeps of its scores for a later IndexerKlLoss
// over the same operands (Backend::IndexerTopK's keep), in memory the caller
// holds until that loss: a device backend that scores the loss's pairs as it
// scores the selection's does not score them twice.
#ifndef GLM_KERNELS_KEPT_INDEXER_SCORES_H_
#define GLM_KERNELS_KEPT_INDEXER_SCORES_H_

#include <cstdint>

#include "kernels/device_memory.h"
#include "kernels/tensor.h"

namespace glm {

// The scores of queries [first, w.rows) with every key before ld, then the
// bits of the heads whose term is positive, rows of ld each; empty where
// nothing is kept.
struct KeptIndexerScores {
  ConstMatrixView iq, ik, w;  // the operands scored
  int64_t first = 0, ld = 0;
  DeviceBuffer memory;

  bool empty() const { return memory.data() == nullptr; }
  // The memory's bytes are the holder's to write (DeviceBuffer::data() is
  // not const).
  float* scores() const { return static_cast<float*>(memory.data()); }
  uint32_t* positive_heads() const {
    return reinterpret_cast<uint32_t*>(scores() + (w.rows - first) * ld);
  }
  // Bytes kept for `rows` queries' rows of ld.
  static size_t Bytes(int64_t rows, int64_t ld) {
    return static_cast<size_t>(rows * ld) * (sizeof(float) + sizeof(uint32_t));
  }
};

}  // namespace glm

#endif  // GLM_KERNELS_KEPT_INDEXER_SCORES_H_
