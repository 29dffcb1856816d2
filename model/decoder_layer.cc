#include "model/decoder_layer.h"

namespace glm {

DecoderLayerSpec MakeDecoderLayerSpec(const ModelConfig& config,
                                      float indexer_loss_coeff) {
  DecoderLayerSpec spec;
  spec.rms_norm_eps = static_cast<float>(config.rms_norm_eps);
  spec.attention = MakeAttentionSpec(config, indexer_loss_coeff);
  spec.router = MakeRouterSpec(config);
  return spec;
}

void DecoderLayerForward(Backend& backend, const DecoderLayerParameters& p,
                         const DecoderLayerSpec& spec, ConstMatrixView h_in,
                         const TokenLayout& layout,
                         const IndexTensor* shared_topk, MatrixView h_out,
                         DecoderLayerActivations* acts) {
  const int64_t n = h_in.rows, hidden = h_in.cols;
  acts->attn_in = Tensor({n, hidden});
  acts->attn_rstd = Tensor({n});
  backend.RmsNormForward(h_in, p.input_layernorm.value.data(),
                         spec.rms_norm_eps, acts->attn_in.Matrix(),
                         acts->attn_rstd.data());
  acts->h_mid = Tensor({n, hidden});
  AttentionForward(backend, p.self_attn, spec.attention, acts->attn_in.Matrix(),
                   layout, shared_topk, acts->h_mid.Matrix(), &acts->attn);
  backend.Axpy(1.f, h_in, acts->h_mid.Matrix());

  acts->mlp_in = Tensor({n, hidden});
  acts->mlp_rstd = Tensor({n});
  backend.RmsNormForward(
      acts->h_mid.Matrix(), p.post_attention_layernorm.value.data(),
      spec.rms_norm_eps, acts->mlp_in.Matrix(), acts->mlp_rstd.data());
  if (p.is_moe) {
    LocalExpertDispatcher local;
    MoeForward(backend, p.moe, spec.router, acts->mlp_in.Matrix(), h_out,
               &acts->moe, spec.experts ? *spec.experts : local);
  } else {
    MlpForward(backend, p.mlp, acts->mlp_in.Matrix(), h_out,
               /*accumulate=*/false, &acts->mlp);
  }
  backend.Axpy(1.f, acts->h_mid.Matrix(), h_out);
}

void DecoderLayerBackward(Backend& backend, DecoderLayerParameters& p,
                          const DecoderLayerSpec& spec, ConstMatrixView h_in,
                          const TokenLayout& layout,
                          const DecoderLayerActivations& acts,
                          ConstMatrixView dh_out, MatrixView dh_in) {
  const int64_t n = h_in.rows, hidden = h_in.cols;
  Tensor dmlp_in({n, hidden}), dh_mid({n, hidden});
  if (p.is_moe) {
    LocalExpertDispatcher local;
    MoeBackward(backend, p.moe, spec.router, acts.mlp_in.Matrix(), acts.moe,
                dh_out, dmlp_in.Matrix(), spec.experts ? *spec.experts : local);
  } else {
    MlpBackward(backend, p.mlp, acts.mlp_in.Matrix(), acts.mlp, dh_out,
                dmlp_in.Matrix());
  }
  backend.Copy(dh_out, dh_mid.Matrix());
  backend.RmsNormBackward(
      acts.h_mid.Matrix(), p.post_attention_layernorm.value.data(),
      acts.mlp_rstd.data(), dmlp_in.Matrix(), dh_mid.Matrix(),
      p.post_attention_layernorm.grad.data());

  Tensor dattn_in({n, hidden});
  AttentionBackward(backend, p.self_attn, spec.attention, acts.attn_in.Matrix(),
                    layout, acts.attn, dh_mid.Matrix(), dattn_in.Matrix());
  backend.Axpy(1.f, dh_mid.Matrix(), dh_in);
  backend.RmsNormBackward(h_in, p.input_layernorm.value.data(),
                          acts.attn_rstd.data(), dattn_in.Matrix(), dh_in,
                          p.input_layernorm.grad.data());
}

}  // namespace glm
