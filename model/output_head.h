// What follows the last decoder layer, shared by the whole model (GlmModel)
// and the last pipeline stage (StageModel): the final norm, lm_head and the LM
// loss, then the MTP layer and its loss when the model has one, and their
// backward into the last hidden state.
#ifndef GLM_MODEL_OUTPUT_HEAD_H_
#define GLM_MODEL_OUTPUT_HEAD_H_

#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "kernels/tensor_arena.h"
#include "model/batch.h"
#include "model/decoder_layer.h"
#include "model/head_loss.h"
#include "model/loss_sums.h"
#include "model/mtp_layer.h"
#include "model/parameters.h"
#include "model/token_layout.h"
#include "model/token_parallel.h"

namespace glm {

struct LossOptions {
  float mtp_loss_scale = 0.1f;        // Megatron's mtp_loss_scaling_factor
  float indexer_loss_coeff = 0.001f;  // 0 turns the indexer loss off
  // False leaves ForwardResult::logits and mtp_logits empty (training needs
  // only the losses; [tokens, vocab] copies are large for real vocabularies).
  bool return_logits = true;
  // False leaves ForwardResult::layer_topk and expert_choice empty (kept for
  // debugging and the oracle checks; a training step needs neither).
  bool record_selections = true;
  // Keep of each decoder layer only its input (and the selections later
  // layers and the step's records read) and run the layer's forward again in
  // the backward: Megatron's full recomputation, one layer at a time. A
  // layer's activations (about 0.4 MB per token at glm5.2-mini) then live
  // only while its backward runs, for one more forward per layer. Not with
  // an expert dispatcher (expert parallelism would exchange tokens again).
  bool recompute_layers = false;
  // The heads' losses and their gradients in the forward, a chunk of tokens
  // at a time (model/head_loss.h): no [tokens, vocab] logits are kept, and
  // the forward adds into lm_head's and the MTP layer's head gradients, so
  // every Forward must be followed by its Backward (training). No logits are
  // returned. Each chunk's logits and their gradient take at most about
  // head_chunk_bytes.
  bool fuse_head_loss = false;
  int64_t head_chunk_bytes = kDefaultHeadChunkBytes;
  // A training step (GlmModel::TrainLoaded) forms each index layer's loss in
  // the layer's backward, its KL target summed from the probabilities the
  // attention's backward forms anyway, instead of in the forward: the same
  // loss and gradients, for less work. False keeps it in the forward (the
  // bench's A/B switch, GLM_INDEXER_LOSS_IN_FORWARD=1 in a worker's
  // environment).
  bool indexer_loss_in_backward = true;
  // The micro batch's queries from this row on attend in MLA's latent space
  // (AttentionSpec::latent_from, model/mla_attention.h); 0: never.
  int64_t latent_attention_from = kDefaultLatentAttentionFrom;
  // Micro batches of more tokens than this run their routed experts (in this
  // process) in chunks of this many, and with recompute_layers form each
  // chunk's expert rows again in the backward (ExpertChunking, model/moe.h);
  // 0: never.
  int64_t expert_chunk_tokens = kDefaultExpertChunkTokens;
};

// The decoder layers' expert chunking for these options.
inline ExpertChunking ExpertChunkingOf(const LossOptions& options) {
  return {options.expert_chunk_tokens, options.recompute_layers};
}

// What the head keeps for its backward.
struct HeadActivations {
  Tensor final_normed, final_rstd;
  HeadLossActivations lm;
  std::vector<MtpActivations> mtp;  // one entry with an MTP layer
  HeadLossActivations mtp_loss;     // over the MTP layer's head_in
};

// A micro batch's head index arrays for this rank's `rows`: each row's next
// token (the MTP layer's input) and its LM and MTP targets (-1: not counted;
// MTP ones only with an MTP layer), with how many targets the whole micro
// batch counts.
struct HeadTargets {
  std::vector<int32_t> next_ids, lm, mtp;
  int64_t lm_count = 0, mtp_count = 0;
};
HeadTargets HeadTargetsOf(const Batch& batch, const TokenLayout& layout,
                          const TokenRows& rows, bool with_mtp);

// The same where the backend's ops read them.
struct HeadTargetTensors {
  IndexTensor next_ids, lm, mtp;
  int64_t lm_count = 0, mtp_count = 0;
};

// `head`'s arrays and `more` sent where `allocator` allocates in one copy
// (kernels/tensor_arena.h): the head's tensors, and *more_out (when given)
// `more`'s in order. With `uploader`, into its last allocation when the
// sizes repeat.
HeadTargetTensors UploadWithHeadTargets(
    Allocator* allocator, const HeadTargets& head,
    const std::vector<std::vector<int32_t>>& more = {},
    std::vector<IndexTensor>* more_out = nullptr,
    IndexUploader* uploader = nullptr);

// The head over this rank's `rows` of the micro batch's tokens (all of them
// on one rank); `last_hidden` holds those rows, `targets` their indices. Adds
// to `sums`' lm and mtp slots this rank's part of each loss's mean over every
// counted token of the micro batch (the MTP layer's indexer loss goes where
// spec says). `last_topk` is the last decoder layer's selection, which an MTP
// layer without its own indexer attends over.
void OutputHeadForward(Backend& backend, ModelParameters& params,
                       const DecoderLayerSpec& spec, const LossOptions& options,
                       bool with_mtp, HeadTargetTensors targets,
                       const TokenLayout& layout, const TokenRows& rows,
                       ConstMatrixView last_hidden,
                       const IndexTensor* last_topk, LossSums* sums,
                       HeadActivations* acts);

// dh += the gradient of lm_loss + mtp_loss_scale * mtp_loss with respect to
// last_hidden; the head's weight gradients accumulate.
void OutputHeadBackward(Backend& backend, ModelParameters& params,
                        const DecoderLayerSpec& spec, const TokenLayout& layout,
                        ConstMatrixView last_hidden,
                        const HeadActivations& acts, MatrixView dh);

}  // namespace glm

#endif  // GLM_MODEL_OUTPUT_HEAD_H_
