// One pipeline stage of the GLM model: the embedding (first stage), decoder
// layers [first_layer, last_layer] of a StageSlice, and on the last stage the
// final norm, lm_head, LM loss and the MTP layer with its loss. A stage takes
// the previous stage's hidden states and hands its own to the next; Backward
// takes the gradient of its output and returns the gradient of its input.
// Computed as GlmModel computes the whole model, so that stages chained
// together give its losses and gradients.
//
// Activations live in a StageActivations per micro batch, so that a pipeline
// schedule can keep several micro batches in flight.
#ifndef GLM_PARALLEL_STAGE_MODEL_H_
#define GLM_PARALLEL_STAGE_MODEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "model/decoder_layer.h"
#include "model/glm_model.h"
#include "model/mtp_layer.h"
#include "model/output_head.h"
#include "model/parameters.h"
#include "model/token_layout.h"
#include "model/token_parallel.h"
#include "parallel/pipeline_layout.h"

namespace glm {

struct StageActivations {
  std::vector<int32_t> ids;        // all tokens of the micro batch
  std::vector<int32_t> local_ids;  // this rank's rows of them
  IndexTensor op_local_ids;        // the same where the backend reads them
  TokenLayout layout;
  // hidden[i]: input of the stage's i-th layer; hidden.back(): the output
  // (before the final norm on the last stage).
  std::vector<Tensor> hidden;
  std::vector<DecoderLayerActivations> layers;
  HeadActivations head;  // last stage only
};

// What one micro batch contributes on this stage; zeros for what lives on
// other stages.
struct StageLosses {
  double lm_loss = 0, mtp_loss = 0, indexer_loss = 0;
  // Every decoder layer of the model (main layers, then MTP), as
  // ForwardResult::expert_load: empty for dense layers, zeros for MoE layers
  // of other stages.
  std::vector<std::vector<int64_t>> expert_load;
};

class StageModel {
 public:
  // UNIMPLEMENTED for a stage whose MTP layer would need the top-k of a
  // decoder layer on another stage.
  static absl::StatusOr<StageModel> Create(ModelParameters* params,
                                           Backend* backend,
                                           LossOptions options,
                                           const StageSlice& stage);

  // Routed experts run through `experts` (expert parallelism; not owned, must
  // outlive the stage) instead of all in this process.
  void set_expert_dispatcher(ExpertDispatcher* experts) {
    spec_.experts = experts;
  }

  // Tensor and context parallelism (model/token_parallel.h; not owned, must
  // outlive the stage): the stage then computes this rank's rows of every
  // micro batch, and its parameters must hold this rank's tensor-parallel
  // shards (parallel/rank_tensors.h). The batch is the whole micro batch on
  // every rank of both groups.
  void set_token_parallel(TokenParallel* parallel);

  // This rank's rows of a micro batch's tokens: the rows of its input,
  // output and their gradients.
  TokenRows Rows(int64_t tokens) const {
    return LocalRowsOf(spec_.attention.parallel, tokens);
  }

  bool first() const { return stage_.has_embedding; }
  bool last() const { return stage_.has_loss; }
  int64_t hidden_size() const { return params_->config().hidden_size; }

  // `input` is the previous stage's output [rows, hidden] (ignored on the
  // first stage). Everything the forward makes goes to `acts` and the losses;
  // the stage itself is left as it was.
  absl::StatusOr<StageLosses> Forward(const Batch& batch, const Tensor& input,
                                      StageActivations* acts) const;
  // The stage's output: the next stage's input.
  static const Tensor& Output(const StageActivations& acts) {
    return acts.hidden.back();
  }
  // `d_output` is the next stage's input gradient (ignored on the last
  // stage); `d_input` receives the gradient of this stage's input (left
  // empty on the first stage). Weight gradients accumulate.
  absl::Status Backward(const StageActivations& acts, const Tensor& d_output,
                        Tensor* d_input);

 private:
  StageModel(ModelParameters* params, Backend* backend, LossOptions options,
             const StageSlice& stage);
  // OK, or the first failure of the expert or token-parallel collectives.
  absl::Status CollectivesStatus() const;

  ModelParameters* params_;
  Backend* backend_;
  LossOptions options_;
  DecoderLayerSpec spec_;
  StageSlice stage_;
  int first_ = 0, end_ = 0;  // 0-indexed decoder layers [first_, end_)
};

}  // namespace glm

#endif  // GLM_PARALLEL_STAGE_MODEL_H_
