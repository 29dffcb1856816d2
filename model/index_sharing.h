// GLM-5.2 cross-layer top-k index sharing: which decoder layers run their own
// DSA indexer ("computing" layers) and which reuse another layer's top-k
// ("skip" layers).
//
// Layers are 1-indexed (Megatron's layer_number). With frequency F and offset
// O, layer n computes iff max(n - O, 0) % F == 0; a skip layer reuses the top-k
// of n - ((n - O) % F), the nearest computing layer below it. F = 1 means every
// layer computes (GLM-5, GLM-5.1). This matches transformers' `indexer_types`.
#ifndef GLM_MODEL_INDEX_SHARING_H_
#define GLM_MODEL_INDEX_SHARING_H_

namespace glm {

struct IndexSharing {
  int topk_freq = 1;
  int skip_topk_offset = 2;

  // True when 1-indexed `layer` runs its own indexer.
  bool IsComputingLayer(int layer) const;
  // The computing layer whose top-k `layer` uses (itself when computing).
  int SourceLayer(int layer) const;
};

}  // namespace glm

#endif  // GLM_MODEL_INDEX_SHARING_H_
