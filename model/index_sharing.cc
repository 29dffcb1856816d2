#include "model/index_sharing.h"

#include <algorithm>

namespace glm {

bool IndexSharing::IsComputingLayer(int layer) const {
  if (topk_freq <= 1) return true;
  return std::max(layer - skip_topk_offset, 0) % topk_freq == 0;
}

int IndexSharing::SourceLayer(int layer) const {
  if (IsComputingLayer(layer)) return layer;
  return layer - (layer - skip_topk_offset) % topk_freq;
}

}  // namespace glm
