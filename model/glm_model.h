// The GLM-5.x causal LM on a Backend: embedding, decoder layers with MLA + DSA
// and cross-layer top-k sharing, final norm, lm_head, MTP, and the three
// training losses.
//
// Forward keeps the activations that Backward needs; Backward then fills the
// gradients of ModelParameters (accumulating) for total = lm + mtp_scale * mtp
// + indexer_loss.
#ifndef GLM_MODEL_GLM_MODEL_H_
#define GLM_MODEL_GLM_MODEL_H_

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "kernels/tensor_arena.h"
#include "model/batch.h"
#include "model/decoder_layer.h"
#include "model/mtp_layer.h"
#include "model/output_head.h"
#include "model/parameters.h"
#include "model/step_totals.h"
#include "model/token_layout.h"

namespace glm {

struct ForwardResult {
  Tensor logits;      // [tokens, vocab]
  Tensor mtp_logits;  // [tokens, vocab]; empty without MTP
  double lm_loss = 0;
  double mtp_loss = 0;
  double indexer_loss = 0;
  double total_loss = 0;
  // Per decoder layer (main layers 0-indexed, then the MTP layer), the keys
  // each query attended: [tokens, k], -1 padded, best first on computing
  // layers.
  std::vector<IndexTensor> layer_topk;
  // Per decoder layer (the same order), tokens routed to each expert, and each
  // token's experts [tokens, top_k] (both empty for dense layers; top-k and
  // experts only with LossOptions::record_selections).
  std::vector<std::vector<int64_t>> expert_load;
  std::vector<IndexTensor> expert_choice;
};

class GlmModel {
 public:
  // Neither pointer is owned; both must outlive the model.
  GlmModel(ModelParameters* params, Backend* backend, LossOptions options = {});

  // Routed experts run through `experts` (expert parallelism; not owned, must
  // outlive the model) instead of all in this process.
  void set_expert_dispatcher(ExpertDispatcher* experts) {
    spec_.experts = experts;
  }

  // With `step`, the losses and expert loads are added to it (read once for
  // the step's forwards) instead of read into the result, whose losses then
  // stay 0 and expert_load empty.
  absl::StatusOr<ForwardResult> Forward(const Batch& batch,
                                        StepTotals* step = nullptr);
  // Forward in two parts: Load checks `batch` and sends its index arrays to
  // the backend (the host's work, into the last batch's memory when the
  // sizes repeat); ForwardLoaded runs the ops over them.
  absl::Status Load(const Batch& batch);
  absl::StatusOr<ForwardResult> ForwardLoaded(StepTotals* step = nullptr);
  // Gradients of the last Forward's total loss, added to params->*.grad.
  // Frees what the forward kept.
  absl::Status Backward();
  // Told during each Backward which gradients it has finished (nothing later
  // in the pass adds to them), as it finishes them: ModelParameters'
  // HeadGradients, LayerGradients from the last layer down, then
  // EmbeddingGradients. The backend's ops that write them are queued, not
  // necessarily done. Lets a caller start summing the first over its
  // data-parallel ranks while the backward goes on. Empty: not called.
  using GradientsFinished = std::function<void(const std::vector<Tensor*>&)>;
  void set_gradients_finished(GradientsFinished finished) {
    gradients_finished_ = std::move(finished);
  }
  // A training micro batch over the loaded batch: ForwardLoaded(step), then
  // Backward.
  absl::Status TrainLoaded(StepTotals* step);
  // The host values the loaded batch's ops depend on besides the contents
  // of its index arrays (token count, sequence starts, counted targets):
  // two loads with equal shapes issue the same ops on the same memory, so
  // a step's forward and backward recorded for one (Backend::Record) may be
  // replayed for the other.
  const std::vector<int64_t>& loaded_shape() const { return loaded_shape_; }

 private:
  // ForwardLoaded, the indexer loss left to the backward when
  // indexer_loss_later (the step's sums are read after it).
  absl::StatusOr<ForwardResult> RunForward(StepTotals* step,
                                           bool indexer_loss_later);
  // The decoder layers with `spec`, into layers_ and hidden_.
  void ForwardLayers(const DecoderLayerSpec& spec);
  DecoderLayerSpec LayerBackwardSpec() const;
  const IndexTensor* SharedTopK(int i) const;
  // Under LossOptions::recompute_layers: drops a layer's activations but
  // what later layers and Record read, and runs layer i's forward again.
  static void KeepRecords(DecoderLayerActivations* acts);
  // The scores an index layer's top-k kept for a loss in the backward are
  // held across every later layer's forward and backward (a recomputed
  // layer's only across its own): past kMaxScoresKeptForBackward (a layer of
  // about 5.6k tokens at top-2048) they are dropped and that loss scores its
  // pairs again.
  static void DropLargeKeptScores(DecoderLayerActivations* acts);
  void RecomputeLayer(int i, DecoderLayerActivations* acts);
  // Adds decoder layer `index`'s top-k and routing to `result`, its expert
  // loads to `step` when given, else to `result`.
  void Record(const DecoderLayerActivations& layer, size_t index,
              StepTotals* step, ForwardResult* result) const;

  ModelParameters* params_;
  Backend* backend_;
  LossOptions options_;
  DecoderLayerSpec spec_;
  GradientsFinished gradients_finished_;

  // Set by Load.
  bool loaded_ = false;
  std::vector<int64_t> loaded_shape_;
  IndexUploader uploader_;
  HeadTargetTensors targets_;
  // Saved by Forward.
  bool has_forward_ = false;
  // The step's indexer loss sum when the forward left the loss to the
  // layers' backward; null otherwise.
  double* backward_indexer_loss_ = nullptr;
  IndexTensor op_ids_;  // ids_ where the backend's ops read them
  TokenLayout layout_;
  std::vector<Tensor>
      hidden_;  // hidden_[i] = input of layer i; hidden_[L] before norm
  std::vector<DecoderLayerActivations> layers_;
  HeadActivations head_;
};

}  // namespace glm

#endif  // GLM_MODEL_GLM_MODEL_H_
