#include "parallel/stage_model.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "model/loss_targets.h"

namespace glm {
namespace {

void AddLayer(int index, const DecoderLayerActivations& layer,
              StageLosses* losses) {
  losses->expert_load[index] = layer.moe.load;
  losses->indexer_loss += layer.attn.indexer_loss;
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
      spec_(MakeDecoderLayerSpec(params->config(), options.indexer_loss_coeff)),
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
                                                StageActivations* acts) {
  const ModelConfig& config = params_->config();
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
  acts->layers.assign(end_ - first_, DecoderLayerActivations());
  for (int i = first_; i < end_; ++i) {
    // Index sharing stays inside a stage (the layout validator checks it).
    const int source = config.index_sharing.SourceLayer(i + 1) - 1;
    const IndexTensor* shared =
        source < i ? acts->layers[source - first_].attn.topk : nullptr;
    acts->hidden.emplace_back(std::vector<int64_t>{n, hidden});
    DecoderLayerForward(*backend_, params_->layers[i], spec_,
                        acts->hidden[i - first_].Matrix(), acts->layout, shared,
                        acts->hidden.back().Matrix(),
                        &acts->layers[i - first_]);
    AddLayer(i, acts->layers[i - first_], &losses);
  }
  if (last()) {
    ForwardHead(batch.loss_mask, acts, &losses);
    if (stage_.mtp_layers == 1) ForwardMtp(batch.loss_mask, acts, &losses);
  }
  if (absl::Status status = CollectivesStatus(); !status.ok()) return status;
  return losses;
}

void StageModel::ForwardHead(const std::vector<float>& loss_mask,
                             StageActivations* acts, StageLosses* losses) {
  const ModelConfig& config = params_->config();
  const TokenRows rows = Rows(acts->layout.tokens);
  const int64_t n = rows.count();
  acts->final_normed = Tensor({n, config.hidden_size});
  acts->final_rstd = Tensor({n});
  backend_->RmsNormForward(
      acts->hidden.back().Matrix(), params_->norm.value.data(),
      spec_.rms_norm_eps, acts->final_normed.Matrix(), acts->final_rstd.data());
  acts->logits = Tensor({n, config.vocab_size});
  backend_->Linear(acts->final_normed.Matrix(),
                   params_->OutputHead().value.Matrix(), acts->logits.Matrix(),
                   false);
  // The count is over all tokens: each rank adds its rows' part of the mean.
  acts->lm_targets = IndexTensor::FromHost(rows.Select(
      LossTargets(acts->ids, loss_mask, acts->layout, 1, &acts->lm_count)));
  if (acts->lm_count > 0) {
    losses->lm_loss = backend_->CrossEntropyForward(acts->logits.Matrix(),
                                                    acts->lm_targets.data()) /
                      static_cast<double>(acts->lm_count);
  }
}

void StageModel::ForwardMtp(const std::vector<float>& loss_mask,
                            StageActivations* acts, StageLosses* losses) {
  const IndexTensor* shared =
      acts->layers.empty() ? nullptr : acts->layers.back().attn.topk;
  acts->mtp.assign(1, MtpActivations());
  MtpForward(*backend_, params_->mtp[0], params_->embed_tokens,
             params_->OutputHead(), spec_, acts->ids, acts->layout,
             acts->hidden.back().Matrix(), shared, &acts->mtp[0]);
  acts->mtp_targets = IndexTensor::FromHost(
      Rows(acts->layout.tokens)
          .Select(LossTargets(acts->ids, loss_mask, acts->layout, 2,
                              &acts->mtp_count)));
  if (acts->mtp_count > 0) {
    losses->mtp_loss =
        backend_->CrossEntropyForward(acts->mtp[0].logits.Matrix(),
                                      acts->mtp_targets.data()) /
        static_cast<double>(acts->mtp_count);
  }
  AddLayer(params_->config().num_hidden_layers, acts->mtp[0].layer, losses);
}

absl::Status StageModel::Backward(const StageActivations& acts,
                                  const Tensor& d_output, Tensor* d_input) {
  AllocatorScope on_backend(backend_->allocator());
  const int64_t n = acts.local_ids.size();
  const int64_t hidden = params_->config().hidden_size;
  Tensor dh({n, hidden});
  if (last()) {
    BackwardHead(acts, dh.Matrix());
  } else if (d_output.numel() != n * hidden) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage ", stage_.stage, ": output gradient has ",
                     d_output.numel(), " values, expected ", n, " x ", hidden));
  } else {
    dh = d_output.CopyTo(backend_->allocator());
  }
  for (int i = end_ - 1; i >= first_; --i) {
    Tensor dh_in({n, hidden});
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

void StageModel::BackwardHead(const StageActivations& acts, MatrixView dh) {
  const ModelConfig& config = params_->config();
  const int64_t n = acts.local_ids.size();
  Tensor dlogits({n, config.vocab_size}), dnormed({n, config.hidden_size});
  if (acts.lm_count > 0) {
    backend_->CrossEntropyBackward(acts.logits.Matrix(), acts.lm_targets.data(),
                                   1.f / static_cast<float>(acts.lm_count),
                                   dlogits.Matrix());
  }
  Parameter& head = params_->OutputHead();
  backend_->LinearBackward(acts.final_normed.Matrix(), head.value.Matrix(),
                           dlogits.Matrix(), dnormed.Matrix(),
                           head.grad.Matrix());
  backend_->RmsNormBackward(acts.hidden.back().Matrix(),
                            params_->norm.value.data(), acts.final_rstd.data(),
                            dnormed.Matrix(), dh, params_->norm.grad.data());
  if (acts.mtp.empty()) return;
  Tensor mtp_dlogits({n, config.vocab_size});
  if (acts.mtp_count > 0) {
    backend_->CrossEntropyBackward(
        acts.mtp[0].logits.Matrix(), acts.mtp_targets.data(),
        options_.mtp_loss_scale / static_cast<float>(acts.mtp_count),
        mtp_dlogits.Matrix());
  }
  MtpBackward(*backend_, params_->mtp[0], params_->embed_tokens,
              params_->OutputHead(), spec_, acts.layout,
              acts.hidden.back().Matrix(), acts.mtp[0], mtp_dlogits.Matrix(),
              dh);
}

}  // namespace glm
