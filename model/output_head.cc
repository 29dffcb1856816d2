#include "model/output_head.h"

#include <iterator>
#include <utility>

#include "kernels/tensor_arena.h"
#include "model/loss_targets.h"

namespace glm {

HeadTargets HeadTargetsOf(const Batch& batch, const TokenLayout& layout,
                          const TokenRows& rows, bool with_mtp) {
  HeadTargets targets;
  targets.lm = rows.Select(LossTargets(batch, layout, 1, &targets.lm_count));
  if (!with_mtp) return targets;
  targets.next_ids = rows.Select(NextTokenIds(batch.input_ids, layout));
  targets.mtp = rows.Select(LossTargets(batch, layout, 2, &targets.mtp_count));
  return targets;
}

HeadTargetTensors UploadWithHeadTargets(
    Allocator* allocator, const HeadTargets& head,
    const std::vector<std::vector<int32_t>>& more,
    std::vector<IndexTensor>* more_out, IndexUploader* uploader) {
  std::vector<std::vector<int32_t>> arrays = {head.next_ids, head.lm, head.mtp};
  arrays.insert(arrays.end(), more.begin(), more.end());
  std::vector<IndexTensor> sent = uploader != nullptr
                                      ? uploader->Send(allocator, arrays)
                                      : UploadIndices(allocator, arrays);
  if (more_out != nullptr) {
    more_out->assign(std::make_move_iterator(sent.begin() + 3),
                     std::make_move_iterator(sent.end()));
  }
  return {std::move(sent[0]), std::move(sent[1]), std::move(sent[2]),
          head.lm_count, head.mtp_count};
}

void OutputHeadForward(Backend& backend, ModelParameters& params,
                       const DecoderLayerSpec& spec, const LossOptions& options,
                       bool with_mtp, HeadTargetTensors targets,
                       const TokenLayout& layout, const TokenRows& rows,
                       ConstMatrixView last_hidden,
                       const IndexTensor* last_topk, LossSums* sums,
                       HeadActivations* acts) {
  const ModelConfig& config = params.config();
  const int64_t n = rows.count();
  // Read only by the head's products.
  acts->final_normed =
      Tensor::ForOutput({n, config.hidden_size}, backend.ActivationType());
  acts->final_rstd = Tensor::ForOutput({n});
  backend.RmsNormForward(last_hidden, params.norm.value.data(),
                         spec.rms_norm_eps, acts->final_normed.Matrix(),
                         acts->final_rstd.data());
  acts->lm.targets = std::move(targets.lm);
  acts->lm.count = targets.lm_count;
  acts->lm.scale = 1.f;
  const int64_t chunk_bytes =
      options.fuse_head_loss ? options.head_chunk_bytes : 0;
  HeadLossForward(backend, acts->final_normed.Matrix(), params.OutputHead(),
                  chunk_bytes, sums->at(LossSums::kLm), &acts->lm);
  acts->mtp.clear();
  if (!with_mtp) return;
  acts->mtp.assign(1, MtpActivations());
  MtpForward(backend, params.mtp[0], params.embed_tokens, spec,
             std::move(targets.next_ids), layout, last_hidden, last_topk,
             &acts->mtp[0]);
  acts->mtp_loss.targets = std::move(targets.mtp);
  acts->mtp_loss.count = targets.mtp_count;
  acts->mtp_loss.scale = options.mtp_loss_scale;
  HeadLossForward(backend, acts->mtp[0].head_in.Matrix(), params.OutputHead(),
                  chunk_bytes, sums->at(LossSums::kMtp), &acts->mtp_loss);
}

void OutputHeadBackward(Backend& backend, ModelParameters& params,
                        const DecoderLayerSpec& spec, const TokenLayout& layout,
                        ConstMatrixView last_hidden,
                        const HeadActivations& acts, MatrixView dh) {
  Tensor owned;
  const ConstMatrixView dnormed =
      HeadLossBackward(backend, acts.final_normed.Matrix(), params.OutputHead(),
                       acts.lm, &owned);
  backend.RmsNormBackward(last_hidden, params.norm.value.data(),
                          acts.final_rstd.data(), dnormed, {}, dh,
                          params.norm.grad.data());
  if (acts.mtp.empty()) return;
  Tensor mtp_owned;
  const ConstMatrixView dhead_in =
      HeadLossBackward(backend, acts.mtp[0].head_in.Matrix(),
                       params.OutputHead(), acts.mtp_loss, &mtp_owned);
  MtpBackward(backend, params.mtp[0], params.embed_tokens, spec, layout,
              last_hidden, acts.mtp[0], dhead_in, dh);
}

}  // namespace glm
