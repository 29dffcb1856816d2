#include "parallel/stage_model.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "model/loss_sums.h"

namespace glm {
namespace {

void AddLayer(int index, const DecoderLayerActivations& layer,
              StageLosses* losses) {
  losses->expert_load[index] = ExpertLoad(layer.moe);
}

}  // namespace

absl::StatusOr<StageModel> StageModel::Create(ModelParameters* params,
                                              Backend* backend,
                                              LossOptions options,
                                              const StageSlice& stage) {
  if (stage.mtp_layers > 1 ||
      stage.mtp_layers > static_cast<int>(params->mtp.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stage ", stage.stage, ": ", stage.mtp_layers, " MTP layers; the model",
        " has ", params->mtp.size(), " and one per stage is supported"));
  }
  if (stage.mtp_layers == 1 &&
      (stage.last_layer != params->config().num_hidden_layers ||
       !stage.has_loss) &&
      !params->mtp[0].layer.self_attn.has_indexer) {
    return absl::UnimplementedError(absl::StrCat(
        "stage ", stage.stage, ": the MTP layer reuses the last decoder ",
        "layer's top-k, so it must share a stage with that layer and the "
        "loss"));
  }
  return StageModel(params, backend, options, stage);
}

StageModel::StageModel(ModelParameters* params, Backend* backend,
                       LossOptions options, const StageSlice& stage)
    : params_(params),
      backend_(backend),
      options_(options),
      spec_(MakeDecoderLayerSpec(params->config(), options.indexer_loss_coeff,
                                 options.latent_attention_from,
                                 ExpertChunkingOf(options))),
      stage_(stage),
      first_(stage.num_layers() == 0 ? 0 : stage.first_layer - 1),
      end_(stage.num_layers() == 0 ? 0 : stage.last_layer) {}

void StageModel::set_token_parallel(TokenParallel* parallel) {
  spec_.attention.parallel = parallel;
  spec_.attention.heads =
      params_->config().num_attention_heads / (parallel ? parallel->tp() : 1);
}

absl::Status StageModel::CollectivesStatus() const {
  if (spec_.experts != nullptr && !spec_.experts->status().ok()) {
    return spec_.experts->status();
  }
  if (spec_.attention.parallel != nullptr) {
    return spec_.attention.parallel->status();
  }
  return absl::OkStatus();
}

absl::StatusOr<StageLosses> StageModel::Forward(const Batch& batch,
                                                const Tensor& input,
                                                StageActivations* acts) const {
  const ModelConfig& config = params_->config();
  if (absl::Status valid = ValidateBatch(batch, config); !valid.ok()) {
    return valid;
  }
  // Activations and index arrays live where the backend's ops read them.
  AllocatorScope on_backend(backend_->allocator());
  absl::StatusOr<TokenLayout> layout =
      MakeTokenLayout(batch.input_ids.size(), batch.cu_seqlens);
  if (!layout.ok()) return layout.status();
  acts->layout = *std::move(layout);
  acts->ids = batch.input_ids;
  if (spec_.attention.parallel != nullptr) {
    if (absl::Status status =
            spec_.attention.parallel->CheckTokens(acts->layout.tokens);
        !status.ok()) {
      return status;
    }
  }
  acts->local_ids = Rows(acts->layout.tokens).Select(acts->ids);
  acts->op_local_ids = IndexTensor::FromHost(acts->local_ids);
  const int64_t n = acts->local_ids.size(), hidden = config.hidden_size;
  acts->hidden.assign(1, Tensor({n, hidden}));
  if (first()) {
    backend_->EmbeddingForward(params_->embed_tokens.value.Matrix(),
                               acts->op_local_ids.data(),
                               acts->hidden[0].Matrix());
  } else if (input.numel() != n * hidden) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage ", stage_.stage, ": input has ", input.numel(),
                     " values, expected ", n, " x ", hidden));
  } else {
    acts->hidden[0] = input.CopyTo(backend_->allocator());
  }
  StageLosses losses;
  const int all_layers = config.num_hidden_layers + params_->mtp.size();
  losses.expert_load.resize(all_layers);
  for (int i = 0; i < all_layers; ++i) {
    const DecoderLayerParameters& layer =
        i < config.num_hidden_layers
            ? params_->layers[i]
            : params_->mtp[i - config.num_hidden_layers].layer;
    if (layer.is_moe) losses.expert_load[i].assign(config.n_routed_experts, 0);
  }
  LossSums sums(backend_->allocator());
  // This forward's copy of spec_, which stays as built: the indexer loss goes
  // to `sums`, read with the forward's other losses.
  const DecoderLayerSpec spec = WithIndexerLoss(
      spec_, sums.at(LossSums::kIndexer), /*in_backward=*/false);
  acts->layers.assign(end_ - first_, DecoderLayerActivations());
  for (int i = first_; i < end_; ++i) {
    // Index sharing stays inside a stage (the layout validator checks it).
    const int source = config.index_sharing.SourceLayer(i + 1) - 1;
    const IndexTensor* shared =
        source < i ? acts->layers[source - first_].attn.topk : nullptr;
    acts->hidden.emplace_back(std::vector<int64_t>{n, hidden});
    DecoderLayerForward(*backend_, params_->layers[i], spec,
                        acts->hidden[i - first_].Matrix(), acts->layout, shared,
                        acts->hidden.back().Matrix(),
                        &acts->layers[i - first_]);
  }
  const bool with_mtp = last() && stage_.mtp_layers == 1;
  if (last()) {
    const TokenRows rows = Rows(acts->layout.tokens);
    OutputHeadForward(
        *backend_, *params_, spec, options_, with_mtp,
        UploadWithHeadTargets(
            backend_->allocator(),
            HeadTargetsOf(batch, acts->layout, rows, with_mtp)),
        acts->layout, rows, acts->hidden.back().Matrix(),
        acts->layers.empty() ? nullptr : acts->layers.back().attn.topk, &sums,
        &acts->head);
  }
  // Read once the stage's forward is queued: the losses and expert loads come
  // from the device together, not with a wait after every op that makes one.
  sums.ReadInto(&losses);
  for (int i = first_; i < end_; ++i) {
    AddLayer(i, acts->layers[i - first_], &losses);
  }
  if (with_mtp) {
    AddLayer(config.num_hidden_layers, acts->head.mtp[0].layer, &losses);
  }
  if (absl::Status status = CollectivesStatus(); !status.ok()) return status;
  return losses;
}

absl::Status StageModel::Backward(const StageActivations& acts,
                                  const Tensor& d_output, Tensor* d_input) {
  AllocatorScope on_backend(backend_->allocator());
  const int64_t n = acts.local_ids.size();
  const int64_t hidden = params_->config().hidden_size;
  Tensor dh({n, hidden});
  if (last()) {
    OutputHeadBackward(*backend_, *params_, spec_, acts.layout,
                       acts.hidden.back().Matrix(), acts.head, dh.Matrix());
  } else if (d_output.numel() != n * hidden) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage ", stage_.stage, ": output gradient has ",
                     d_output.numel(), " values, expected ", n, " x ", hidden));
  } else {
    dh = d_output.CopyTo(backend_->allocator());
  }
  for (int i = end_ - 1; i >= first_; --i) {
    Tensor dh_in = Tensor::ForOutput({n, hidden});
    DecoderLayerBackward(*backend_, params_->layers[i], spec_,
                         acts.hidden[i - first_].Matrix(), acts.layout,
                         acts.layers[i - first_], dh.Matrix(), dh_in.Matrix());
    dh = std::move(dh_in);
  }
  if (first()) {
    backend_->EmbeddingBackward(dh.Matrix(), acts.op_local_ids.data(),
                                params_->embed_tokens.grad.Matrix());
  } else {
    *d_input = std::move(dh);
  }
  return CollectivesStatus();
}

}  // namespace glm
