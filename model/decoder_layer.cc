#include "model/decoder_layer.h"

namespace glm {
namespace {

// The tensor group splitting the dense MLP's intermediate columns, or null.
TokenParallel* TensorSplit(const DecoderLayerSpec& spec) {
  TokenParallel* parallel = spec.attention.parallel;
  return parallel != nullptr && parallel->tp() > 1 ? parallel : nullptr;
}

// Column-parallel gate/up and row-parallel down over the gathered chunk
// (sequence parallelism around a tensor-parallel MLP).
void SplitMlpForward(Backend& backend, const MlpParameters& p,
                     TokenParallel& parallel, int64_t tokens, ConstMatrixView x,
                     MatrixView out, DecoderLayerActivations* acts) {
  acts->mlp_chunk_in = parallel.GatherChunk(x, tokens);
  Tensor partial = Tensor::ForOutput({acts->mlp_chunk_in.dim(0), out.cols});
  MlpForward(backend, p, acts->mlp_chunk_in.Matrix(), {}, partial.Matrix(),
             &acts->mlp);
  backend.Copy(parallel.ReduceScatterChunk(partial.Matrix(), tokens).Matrix(),
               out);
}

void SplitMlpBackward(Backend& backend, MlpParameters& p,
                      TokenParallel& parallel, int64_t tokens,
                      const DecoderLayerActivations& acts, ConstMatrixView dout,
                      MatrixView dx) {
  const Tensor dout_chunk = parallel.GatherChunk(dout, tokens);
  ConstMatrixView x = acts.mlp_chunk_in.Matrix();
  Tensor dx_chunk({x.rows, x.cols});
  MlpBackward(backend, p, x, acts.mlp, dout_chunk.Matrix(), dx_chunk.Matrix());
  backend.Axpy(
      1.f, parallel.ReduceScatterChunk(dx_chunk.Matrix(), tokens).Matrix(), dx);
}

// The dtype of the layer's normed inputs: the backend's activation type where
// only products (and expert parallelism's dispatch, whose exchanges carry
// rows of that type) read them; F32 where the tensor group gathers the chunk,
// which moves float32.
ElementType AttentionInputType(Backend& backend, const DecoderLayerSpec& spec) {
  const TokenParallel* parallel = spec.attention.parallel;
  return parallel != nullptr && parallel->tp() > 1 ? ElementType::kF32
                                                   : backend.ActivationType();
}
ElementType MlpInputType(Backend& backend, const DecoderLayerParameters& p,
                         const DecoderLayerSpec& spec) {
  return !p.is_moe && TensorSplit(spec) != nullptr ? ElementType::kF32
                                                   : backend.ActivationType();
}

}  // namespace

DecoderLayerSpec MakeDecoderLayerSpec(const ModelConfig& config,
                                      float indexer_loss_coeff,
                                      int64_t latent_attention_from,
                                      const ExpertChunking& expert_chunking) {
  DecoderLayerSpec spec;
  spec.rms_norm_eps = static_cast<float>(config.rms_norm_eps);
  spec.attention = MakeAttentionSpec(config, indexer_loss_coeff);
  spec.attention.latent_from = latent_attention_from;
  spec.router = MakeRouterSpec(config);
  spec.expert_chunking = expert_chunking;
  return spec;
}

DecoderLayerSpec WithIndexerLoss(const DecoderLayerSpec& spec,
                                 double* indexer_loss_sum, bool in_backward) {
  DecoderLayerSpec copy = spec;
  copy.attention.indexer_loss_sum = indexer_loss_sum;
  copy.attention.indexer_loss_in_backward = in_backward;
  return copy;
}

void DecoderLayerForward(Backend& backend, const DecoderLayerParameters& p,
                         const DecoderLayerSpec& spec, ConstMatrixView h_in,
                         const TokenLayout& layout,
                         const IndexTensor* shared_topk, MatrixView h_out,
                         DecoderLayerActivations* acts) {
  const int64_t n = h_in.rows, hidden = h_in.cols;
  acts->attn_in =
      Tensor::ForOutput({n, hidden}, AttentionInputType(backend, spec));
  acts->attn_rstd = Tensor::ForOutput({n});
  backend.RmsNormForward(h_in, p.input_layernorm.value.data(),
                         spec.rms_norm_eps, acts->attn_in.Matrix(),
                         acts->attn_rstd.data());
  // The attention's residual sum is formed by its output product.
  acts->h_mid = Tensor::ForOutput({n, hidden});
  AttentionForward(backend, p.self_attn, spec.attention, acts->attn_in.Matrix(),
                   layout, shared_topk, /*residual=*/h_in, acts->h_mid.Matrix(),
                   &acts->attn);

  acts->mlp_in = Tensor::ForOutput({n, hidden}, MlpInputType(backend, p, spec));
  acts->mlp_rstd = Tensor::ForOutput({n});
  backend.RmsNormForward(
      acts->h_mid.Matrix(), p.post_attention_layernorm.value.data(),
      spec.rms_norm_eps, acts->mlp_in.Matrix(), acts->mlp_rstd.data());
  ConstMatrixView h_mid = acts->h_mid.Matrix();
  if (p.is_moe) {
    // The MoE's residual is added after its routed rows (the shared experts'
    // product forming it would round the sum in another order: the CPU's
    // data-parallel steps against one process's then differ past their
    // test's limits, a routing decision tipped).
    if (spec.experts != nullptr) {
      MoeForward(backend, p.moe, spec.router, acts->mlp_in.Matrix(), h_out,
                 &acts->moe, *spec.experts);
    } else {
      MoeForward(backend, p.moe, spec.router, acts->mlp_in.Matrix(), h_out,
                 &acts->moe, spec.expert_chunking);
    }
    backend.Axpy(1.f, h_mid, h_out);
  } else if (TokenParallel* split = TensorSplit(spec)) {
    SplitMlpForward(backend, p.mlp, *split, layout.tokens,
                    acts->mlp_in.Matrix(), h_out, acts);
    backend.Axpy(1.f, h_mid, h_out);
  } else {
    MlpForward(backend, p.mlp, acts->mlp_in.Matrix(), h_mid, h_out, &acts->mlp);
  }
}

namespace {

// The MLP half of a layer's backward (the MLP or MoE, then the post-attention
// norm with its residual): writes dh_mid.
void MlpHalfBackward(Backend& backend, DecoderLayerParameters& p,
                     const DecoderLayerSpec& spec, const TokenLayout& layout,
                     const DecoderLayerActivations& acts,
                     ConstMatrixView dh_out, MatrixView dh_mid) {
  const int64_t n = dh_out.rows, hidden = dh_out.cols;
  Tensor dmlp_in({n, hidden});
  if (p.is_moe) {
    if (spec.experts != nullptr) {
      MoeBackward(backend, p.moe, spec.router, acts.mlp_in.Matrix(), acts.moe,
                  dh_out, dmlp_in.Matrix(), *spec.experts);
    } else {
      MoeBackward(backend, p.moe, spec.router, acts.mlp_in.Matrix(), acts.moe,
                  dh_out, dmlp_in.Matrix(), spec.expert_chunking);
    }
  } else if (TokenParallel* split = TensorSplit(spec)) {
    SplitMlpBackward(backend, p.mlp, *split, layout.tokens, acts, dh_out,
                     dmlp_in.Matrix());
  } else {
    MlpBackward(backend, p.mlp, acts.mlp_in.Matrix(), acts.mlp, dh_out,
                dmlp_in.Matrix());
  }
  backend.RmsNormBackward(
      acts.h_mid.Matrix(), p.post_attention_layernorm.value.data(),
      acts.mlp_rstd.data(), dmlp_in.Matrix(), /*residual=*/dh_out, dh_mid,
      p.post_attention_layernorm.grad.data());
}

// The attention half (the attention, then the input norm with its residual).
void AttentionHalfBackward(Backend& backend, DecoderLayerParameters& p,
                           const DecoderLayerSpec& spec, ConstMatrixView h_in,
                           const TokenLayout& layout,
                           const DecoderLayerActivations& acts,
                           ConstMatrixView dh_mid, MatrixView dh_in) {
  Tensor dattn_in({h_in.rows, h_in.cols});
  AttentionBackward(backend, p.self_attn, spec.attention, acts.attn_in.Matrix(),
                    layout, acts.attn, dh_mid, dattn_in.Matrix());
  backend.RmsNormBackward(h_in, p.input_layernorm.value.data(),
                          acts.attn_rstd.data(), dattn_in.Matrix(),
                          /*residual=*/dh_mid, dh_in,
                          p.input_layernorm.grad.data());
}

}  // namespace

void DecoderLayerBackward(Backend& backend, DecoderLayerParameters& p,
                          const DecoderLayerSpec& spec, ConstMatrixView h_in,
                          const TokenLayout& layout,
                          const DecoderLayerActivations& acts,
                          ConstMatrixView dh_out, MatrixView dh_in) {
  // Written by the norms' backward, each with its residual branch's gradient.
  Tensor dh_mid = Tensor::ForOutput({h_in.rows, h_in.cols});
  MlpHalfBackward(backend, p, spec, layout, acts, dh_out, dh_mid.Matrix());
  AttentionHalfBackward(backend, p, spec, h_in, layout, acts, dh_mid.Matrix(),
                        dh_in);
}

void DecoderLayerBackward(Backend& backend, DecoderLayerParameters& p,
                          const DecoderLayerSpec& spec, ConstMatrixView h_in,
                          const TokenLayout& layout,
                          DecoderLayerActivations* acts, ConstMatrixView dh_out,
                          MatrixView dh_in) {
  Tensor dh_mid = Tensor::ForOutput({h_in.rows, h_in.cols});
  MlpHalfBackward(backend, p, spec, layout, *acts, dh_out, dh_mid.Matrix());
  // What only the MLP half reads.
  acts->h_mid = Tensor();
  acts->mlp_in = Tensor();
  acts->mlp_rstd = Tensor();
  acts->mlp = MlpActivations();
  acts->mlp_chunk_in = Tensor();
  acts->moe = MoeActivations();
  AttentionHalfBackward(backend, p, spec, h_in, layout, *acts, dh_mid.Matrix(),
                        dh_in);
}

}  // namespace glm
