#include "model/mtp_layer.h"

namespace glm {

std::vector<int32_t> NextTokenIds(const std::vector<int32_t>& ids,
                                  const TokenLayout& layout) {
  std::vector<int32_t> next(ids.size(), 0);
  for (int64_t t = 0; t < layout.tokens; ++t) {
    if (t + 1 < layout.seq_end[t]) next[t] = ids[t + 1];
  }
  return next;
}

void MtpForward(Backend& backend, const MtpParameters& p,
                const Parameter& embed, const DecoderLayerSpec& spec,
                IndexTensor next_ids, const TokenLayout& layout,
                ConstMatrixView h_main, const IndexTensor* shared_topk,
                MtpActivations* acts) {
  const int64_t n = h_main.rows, hidden = h_main.cols;
  // h_main holds this rank's rows (all of them without token parallelism).
  acts->next_ids = std::move(next_ids);
  acts->embedded = Tensor::ForOutput({n, hidden});
  backend.EmbeddingForward(embed.value.Matrix(), acts->next_ids.data(),
                           acts->embedded.Matrix());
  // The norms' outputs are read only by products (eh_proj, the head).
  acts->concat = Tensor::ForOutput({n, 2 * hidden}, backend.ActivationType());
  acts->e_rstd = Tensor::ForOutput({n});
  acts->h_rstd = Tensor::ForOutput({n});
  MatrixView concat = acts->concat.Matrix();
  backend.RmsNormForward(acts->embedded.Matrix(), p.enorm.value.data(),
                         spec.rms_norm_eps, concat.Columns(0, hidden),
                         acts->e_rstd.data());
  backend.RmsNormForward(h_main, p.hnorm.value.data(), spec.rms_norm_eps,
                         concat.Columns(hidden, hidden), acts->h_rstd.data());
  acts->layer_in = Tensor::ForOutput({n, hidden});
  backend.Linear(concat, p.eh_proj.value.Matrix(), acts->layer_in.Matrix(),
                 false);
  acts->layer_out = Tensor::ForOutput({n, hidden});
  DecoderLayerForward(backend, p.layer, spec, acts->layer_in.Matrix(), layout,
                      shared_topk, acts->layer_out.Matrix(), &acts->layer);
  acts->head_in = Tensor::ForOutput({n, hidden}, backend.ActivationType());
  acts->head_rstd = Tensor::ForOutput({n});
  backend.RmsNormForward(acts->layer_out.Matrix(),
                         p.shared_head_norm.value.data(), spec.rms_norm_eps,
                         acts->head_in.Matrix(), acts->head_rstd.data());
}

void MtpBackward(Backend& backend, MtpParameters& p, Parameter& embed,
                 const DecoderLayerSpec& spec, const TokenLayout& layout,
                 ConstMatrixView h_main, const MtpActivations& acts,
                 ConstMatrixView dhead_in, MatrixView dh_main) {
  const int64_t n = h_main.rows, hidden = h_main.cols;
  Tensor dlayer_out({n, hidden});
  Tensor dlayer_in = Tensor::ForOutput({n, hidden});
  backend.RmsNormBackward(acts.layer_out.Matrix(),
                          p.shared_head_norm.value.data(),
                          acts.head_rstd.data(), dhead_in, {},
                          dlayer_out.Matrix(), p.shared_head_norm.grad.data());
  DecoderLayerBackward(backend, p.layer, spec, acts.layer_in.Matrix(), layout,
                       acts.layer, dlayer_out.Matrix(), dlayer_in.Matrix());
  Tensor dconcat({n, 2 * hidden}), dembedded({n, hidden});
  backend.LinearBackward(acts.concat.Matrix(), p.eh_proj.value.Matrix(),
                         dlayer_in.Matrix(), dconcat.Matrix(),
                         p.eh_proj.grad.Matrix());
  ConstMatrixView dcat = dconcat.Matrix();
  backend.RmsNormBackward(acts.embedded.Matrix(), p.enorm.value.data(),
                          acts.e_rstd.data(), dcat.Columns(0, hidden), {},
                          dembedded.Matrix(), p.enorm.grad.data());
  backend.EmbeddingBackward(dembedded.Matrix(), acts.next_ids.data(),
                            embed.grad.Matrix());
  backend.RmsNormBackward(h_main, p.hnorm.value.data(), acts.h_rstd.data(),
                          dcat.Columns(hidden, hidden), {}, dh_main,
                          p.hnorm.grad.data());
}

}  // namespace glm
