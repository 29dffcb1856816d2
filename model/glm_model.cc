#include "model/glm_model.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "model/loss_sums.h"

namespace glm {

GlmModel::GlmModel(ModelParameters* params, Backend* backend,
                   LossOptions options)
    : params_(params),
      backend_(backend),
      options_(options),
      spec_(MakeDecoderLayerSpec(params->config(), options.indexer_loss_coeff,
                                 options.latent_attention_from,
                                 ExpertChunkingOf(options))) {}

absl::StatusOr<ForwardResult> GlmModel::Forward(const Batch& batch,
                                                StepTotals* step) {
  if (absl::Status loaded = Load(batch); !loaded.ok()) return loaded;
  return ForwardLoaded(step);
}

absl::Status GlmModel::Load(const Batch& batch) {
  if (params_->mtp.size() > 1) {
    return absl::UnimplementedError(
        absl::StrCat("num_nextn_predict_layers = ", params_->mtp.size(),
                     ": only one MTP layer is supported (GLM-5.x has one)"));
  }
  if (absl::Status valid = ValidateBatch(batch, params_->config());
      !valid.ok()) {
    return valid;
  }
  if (options_.fuse_head_loss && options_.return_logits) {
    return absl::InvalidArgumentError(
        "LossOptions: fuse_head_loss keeps no logits to return; set "
        "return_logits = false");
  }
  if (options_.recompute_layers && spec_.experts != nullptr) {
    return absl::UnimplementedError(
        "recomputing layers in the backward with an expert dispatcher (expert "
        "parallelism would exchange the tokens again)");
  }
  absl::StatusOr<TokenLayout> layout =
      MakeHostTokenLayout(batch.input_ids.size(), batch.cu_seqlens);
  if (!layout.ok()) return layout.status();
  layout_ = *std::move(layout);
  const bool with_mtp = !params_->mtp.empty();
  const TokenRows rows = LocalRowsOf(nullptr, layout_.tokens);
  // Every index array of the micro batch goes up in one copy, into the last
  // one's memory when the sizes repeat.
  std::vector<IndexTensor> sent;
  targets_ = UploadWithHeadTargets(
      backend_->allocator(), HeadTargetsOf(batch, layout_, rows, with_mtp),
      {batch.input_ids, layout_.positions, layout_.seq_start}, &sent,
      &uploader_);
  op_ids_ = std::move(sent[0]);
  layout_.op_positions = std::move(sent[1]);
  layout_.op_seq_start = std::move(sent[2]);
  loaded_shape_ = {layout_.tokens, targets_.lm_count, targets_.mtp_count};
  loaded_shape_.insert(loaded_shape_.end(), batch.cu_seqlens.begin(),
                       batch.cu_seqlens.end());
  loaded_ = true;
  return absl::OkStatus();
}

absl::StatusOr<ForwardResult> GlmModel::ForwardLoaded(StepTotals* step) {
  // Recomputing layers for a step whose losses are read after the backward,
  // each layer's indexer loss is formed once, in its backward, not also here
  // where its activations are dropped.
  return RunForward(step, options_.recompute_layers && step != nullptr);
}

absl::StatusOr<ForwardResult> GlmModel::RunForward(StepTotals* step,
                                                   bool indexer_loss_later) {
  if (!loaded_) {
    return absl::FailedPreconditionError("ForwardLoaded needs a Load first");
  }
  // Activations and index arrays live where the backend's ops read them.
  AllocatorScope on_backend(backend_->allocator());
  const bool with_mtp = !params_->mtp.empty();
  const TokenRows rows = LocalRowsOf(nullptr, layout_.tokens);
  ForwardResult result;
  std::optional<LossSums> own_sums;
  LossSums& sums = step != nullptr ? step->losses()
                                   : own_sums.emplace(backend_->allocator());
  backward_indexer_loss_ =
      indexer_loss_later ? sums.at(LossSums::kIndexer) : nullptr;
  // This forward's copy of spec_, which stays as built: the indexer loss
  // goes to `sums`, here or in the backward.
  const DecoderLayerSpec spec =
      WithIndexerLoss(spec_, sums.at(LossSums::kIndexer), indexer_loss_later);
  ForwardLayers(spec);
  // Without its own indexer the MTP layer attends over the last main layer's
  // keys.
  // The head takes aliases of the loaded targets, which stay: a loaded batch
  // may run again (a recording that failed runs unrecorded).
  HeadTargetTensors targets{targets_.next_ids.Alias(), targets_.lm.Alias(),
                            targets_.mtp.Alias(), targets_.lm_count,
                            targets_.mtp_count};
  OutputHeadForward(*backend_, *params_, spec, options_, with_mtp,
                    std::move(targets), layout_, rows, hidden_.back().Matrix(),
                    layers_.empty() ? nullptr : layers_.back().attn.topk, &sums,
                    &head_);
  // Without `step`, read once the whole forward is queued: the losses and
  // expert loads come from the device together, not with a wait after every
  // op that makes one.
  if (step == nullptr) sums.ReadInto(&result);
  size_t index = 0;
  for (const DecoderLayerActivations& layer : layers_) {
    Record(layer, index++, step, &result);
  }
  if (options_.return_logits) result.logits = head_.lm.logits;
  if (with_mtp) {
    Record(head_.mtp[0].layer, index, step, &result);
    if (options_.return_logits) result.mtp_logits = head_.mtp_loss.logits;
  }
  if (spec_.experts != nullptr && !spec_.experts->status().ok()) {
    return spec_.experts->status();
  }
  result.total_loss = result.lm_loss +
                      options_.mtp_loss_scale * result.mtp_loss +
                      result.indexer_loss;
  has_forward_ = true;
  return result;
}

void GlmModel::ForwardLayers(const DecoderLayerSpec& spec) {
  const ModelConfig& config = params_->config();
  const int64_t n = layout_.tokens, hidden = config.hidden_size;
  const int layers = config.num_hidden_layers;
  hidden_.assign(layers + 1, Tensor());
  hidden_[0] = Tensor::ForOutput({n, hidden});
  backend_->EmbeddingForward(params_->embed_tokens.value.Matrix(),
                             op_ids_.data(), hidden_[0].Matrix());
  layers_.assign(layers, DecoderLayerActivations());
  for (int i = 0; i < layers; ++i) {
    hidden_[i + 1] = Tensor::ForOutput({n, hidden});
    DecoderLayerForward(*backend_, params_->layers[i], spec,
                        hidden_[i].Matrix(), layout_, SharedTopK(i),
                        hidden_[i + 1].Matrix(), &layers_[i]);
    if (options_.recompute_layers) {
      KeepRecords(&layers_[i]);
    } else {
      DropLargeKeptScores(&layers_[i]);
    }
  }
}

// 128 MiB: glm5.2-mini's five index layers keep theirs at 4k tokens (67 MB
// each).
constexpr size_t kMaxScoresKeptForBackward = size_t{128} << 20;

void GlmModel::DropLargeKeptScores(DecoderLayerActivations* acts) {
  KeptIndexerScores& kept = acts->attn.indexer.kept_scores;
  if (kept.memory.bytes() > kMaxScoresKeptForBackward) kept = {};
}

// The keys layer i attends over when it shares an earlier layer's (null for
// a computing layer, which chooses its own).
const IndexTensor* GlmModel::SharedTopK(int i) const {
  const int source = params_->config().index_sharing.SourceLayer(i + 1) - 1;
  return source < i ? layers_[source].attn.topk : nullptr;
}

// What outlives a recomputed layer's forward: the keys it chose (layers that
// share them and the MTP layer attend over them), its routing and expert
// offsets (Record).
void GlmModel::KeepRecords(DecoderLayerActivations* acts) {
  DecoderLayerActivations kept;
  const bool own_topk = acts->attn.topk == &acts->attn.own_topk;
  kept.attn.own_topk = std::move(acts->attn.own_topk);
  kept.attn.topk = acts->attn.topk;
  kept.moe.choice = std::move(acts->moe.choice);
  kept.moe.expert_offsets = std::move(acts->moe.expert_offsets);
  *acts = std::move(kept);
  if (own_topk) acts->attn.topk = &acts->attn.own_topk;
}

// Layer i's forward again, into `acts`: the same inputs and selections give
// the same activations (the backends' ops are deterministic). Where the
// forward formed the indexer loss, it is formed again for its gradients and
// goes to a sum nobody reads, having been counted.
void GlmModel::RecomputeLayer(int i, DecoderLayerActivations* acts) {
  LossSums uncounted(backend_->allocator());
  const DecoderLayerSpec spec =
      backward_indexer_loss_ != nullptr
          ? LayerBackwardSpec()
          : WithIndexerLoss(spec_, uncounted.at(LossSums::kIndexer),
                            /*in_backward=*/false);
  Tensor h_out =
      Tensor::ForOutput({layout_.tokens, params_->config().hidden_size});
  DecoderLayerForward(*backend_, params_->layers[i], spec, hidden_[i].Matrix(),
                      layout_, SharedTopK(i), h_out.Matrix(), acts);
}

void GlmModel::Record(const DecoderLayerActivations& layer, size_t index,
                      StepTotals* step, ForwardResult* result) const {
  if (options_.record_selections) {
    result->layer_topk.push_back(*layer.attn.topk);
    result->expert_choice.push_back(layer.moe.choice);
  }
  if (step != nullptr) {
    for (const IndexTensor& offsets : layer.moe.expert_offsets)
      step->AddExpertLoads(*backend_, index, offsets);
  } else {
    result->expert_load.push_back(ExpertLoad(layer.moe));
  }
}

// The layers' spec for the backward (the MTP layer's too): the indexer loss
// formed there when the forward left it (to the step's sum).
DecoderLayerSpec GlmModel::LayerBackwardSpec() const {
  return WithIndexerLoss(spec_, backward_indexer_loss_,
                         backward_indexer_loss_ != nullptr);
}

absl::Status GlmModel::TrainLoaded(StepTotals* step) {
  // The step's losses are read after the backward, which forms the indexer
  // loss from the probabilities the attention's backward forms anyway.
  absl::StatusOr<ForwardResult> forward =
      RunForward(step, step != nullptr && options_.indexer_loss_in_backward);
  if (!forward.ok()) return forward.status();
  return Backward();
}

absl::Status GlmModel::Backward() {
  if (!has_forward_) {
    return absl::FailedPreconditionError("Backward needs a Forward first");
  }
  AllocatorScope on_backend(backend_->allocator());
  const int64_t n = layout_.tokens, hidden = params_->config().hidden_size;
  Tensor dh({n, hidden});
  const DecoderLayerSpec layer_spec = LayerBackwardSpec();
  OutputHeadBackward(*backend_, *params_, layer_spec, layout_,
                     hidden_.back().Matrix(), head_, dh.Matrix());
  if (gradients_finished_) gradients_finished_(params_->HeadGradients());
  for (int i = static_cast<int>(layers_.size()) - 1; i >= 0; --i) {
    DecoderLayerActivations recomputed;
    if (options_.recompute_layers) RecomputeLayer(i, &recomputed);
    Tensor dh_in = Tensor::ForOutput({n, hidden});
    DecoderLayerBackward(*backend_, params_->layers[i], layer_spec,
                         hidden_[i].Matrix(), layout_,
                         options_.recompute_layers ? &recomputed : &layers_[i],
                         dh.Matrix(), dh_in.Matrix());
    dh = std::move(dh_in);
    // No later backward reads this layer's activations (a skip layer reads
    // its source's keys, and sources come first).
    layers_[i] = DecoderLayerActivations();
    if (gradients_finished_) gradients_finished_(params_->LayerGradients(i));
  }
  backend_->EmbeddingBackward(dh.Matrix(), op_ids_.data(),
                              params_->embed_tokens.grad.Matrix());
  if (gradients_finished_) {
    gradients_finished_(params_->EmbeddingGradients());
  }
  // What the forward kept is freed here, where the work that reads it ends
  // (a recorded micro batch frees all it allocates).
  hidden_.clear();
  layers_.clear();
  head_ = HeadActivations();
  has_forward_ = false;
  if (spec_.experts != nullptr) return spec_.experts->status();
  return absl::OkStatus();
}

}  // namespace glm
