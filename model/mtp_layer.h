// The multi-token-prediction layer (DeepSeek-V3 / Megatron): position t
// combines the main model's hidden state h_t (before the final norm) with the
// embedding of token t+1, runs one decoder layer, and predicts token t+2
// through the shared lm_head.
#ifndef GLM_MODEL_MTP_LAYER_H_
#define GLM_MODEL_MTP_LAYER_H_

#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "model/decoder_layer.h"
#include "model/parameters.h"
#include "model/token_layout.h"

namespace glm {

struct MtpActivations {
  IndexTensor next_ids;  // ids[t+1] within the sequence, 0 at its last token
  Tensor embedded;       // [n, hidden]
  Tensor concat;         // [n, 2 * hidden]: enorm(embedded) | hnorm(h_main)
  Tensor e_rstd, h_rstd;
  Tensor layer_in, layer_out;  // [n, hidden]
  DecoderLayerActivations layer;
  Tensor head_in, head_rstd;  // shared_head.norm(layer_out), lm_head's input
};

// Token t+1 of each sequence, 0 at the last position (Megatron's roll fill).
std::vector<int32_t> NextTokenIds(const std::vector<int32_t>& ids,
                                  const TokenLayout& layout);

// h_main is this rank's rows of the layout's tokens, next_ids their next
// tokens (NextTokenIds of those rows, where the backend's ops read them).
// Ends at head_in, the input of the shared lm_head (its loss is the output
// head's, model/head_loss.h).
void MtpForward(Backend& backend, const MtpParameters& p,
                const Parameter& embed, const DecoderLayerSpec& spec,
                IndexTensor next_ids, const TokenLayout& layout,
                ConstMatrixView h_main, const IndexTensor* shared_topk,
                MtpActivations* acts);
// From dhead_in, the loss's gradient with respect to head_in: dh_main += ...;
// gradients of the MTP weights and the embedding accumulate.
void MtpBackward(Backend& backend, MtpParameters& p, Parameter& embed,
                 const DecoderLayerSpec& spec, const TokenLayout& layout,
                 ConstMatrixView h_main, const MtpActivations& acts,
                 ConstMatrixView dhead_in, MatrixView dh_main);

}  // namespace glm

#endif  // GLM_MODEL_MTP_LAYER_H_
