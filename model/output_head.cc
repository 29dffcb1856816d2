#include "model/output_head.h"

#include <iterator>
#include <utility>

#include "kernels/tensor_arena.h"
#include "model/loss_targets.h"

namespace glm {
namespace {

// Adds to *sum the mean loss's part on this rank: the rows' summed loss over
// every counted token of the micro batch.
void MeanLoss(Backend& backend, ConstMatrixView logits,
              const IndexTensor& targets, int64_t count, double* sum) {
  if (count == 0) return;
  backend.CrossEntropyForward(logits, targets.data(),
                              static_cast<double>(count), sum);
}

// dlogits of a mean loss scaled by `scale`; zeros when nothing is counted.
Tensor MeanLossGradient(Backend& backend, ConstMatrixView logits,
                        const IndexTensor& targets, int64_t count,
                        float scale) {
  Tensor dlogits({logits.rows, logits.cols});
  if (count > 0) {
    backend.CrossEntropyBackward(logits, targets.data(),
                                 scale / static_cast<float>(count),
                                 dlogits.Matrix());
  }
  return dlogits;
}

}  // namespace

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
    std::vector<IndexTensor>* more_out) {
  std::vector<std::vector<int32_t>> arrays = {head.next_ids, head.lm, head.mtp};
  arrays.insert(arrays.end(), more.begin(), more.end());
  std::vector<IndexTensor> sent = UploadIndices(allocator, arrays);
  if (more_out != nullptr) {
    more_out->assign(std::make_move_iterator(sent.begin() + 3),
                     std::make_move_iterator(sent.end()));
  }
  return {std::move(sent[0]), std::move(sent[1]), std::move(sent[2]),
          head.lm_count, head.mtp_count};
}

void OutputHeadForward(Backend& backend, ModelParameters& params,
                       const DecoderLayerSpec& spec, bool with_mtp,
                       HeadTargetTensors targets, const TokenLayout& layout,
                       const TokenRows& rows, ConstMatrixView last_hidden,
                       const IndexTensor* last_topk, LossSums* sums,
                       HeadActivations* acts) {
  const ModelConfig& config = params.config();
  const int64_t n = rows.count();
  acts->final_normed = Tensor({n, config.hidden_size});
  acts->final_rstd = Tensor({n});
  backend.RmsNormForward(last_hidden, params.norm.value.data(),
                         spec.rms_norm_eps, acts->final_normed.Matrix(),
                         acts->final_rstd.data());
  acts->logits = Tensor({n, config.vocab_size});
  backend.Linear(acts->final_normed.Matrix(),
                 params.OutputHead().value.Matrix(), acts->logits.Matrix(),
                 false);
  acts->lm_targets = std::move(targets.lm);
  acts->lm_count = targets.lm_count;
  MeanLoss(backend, acts->logits.Matrix(), acts->lm_targets, acts->lm_count,
           sums->at(LossSums::kLm));
  acts->mtp.clear();
  if (!with_mtp) return;
  acts->mtp.assign(1, MtpActivations());
  MtpForward(backend, params.mtp[0], params.embed_tokens, params.OutputHead(),
             spec, std::move(targets.next_ids), layout, last_hidden, last_topk,
             &acts->mtp[0]);
  acts->mtp_targets = std::move(targets.mtp);
  acts->mtp_count = targets.mtp_count;
  MeanLoss(backend, acts->mtp[0].logits.Matrix(), acts->mtp_targets,
           acts->mtp_count, sums->at(LossSums::kMtp));
}

void OutputHeadBackward(Backend& backend, ModelParameters& params,
                        const DecoderLayerSpec& spec,
                        const LossOptions& options, const TokenLayout& layout,
                        ConstMatrixView last_hidden,
                        const HeadActivations& acts, MatrixView dh) {
  const ModelConfig& config = params.config();
  const Tensor dlogits = MeanLossGradient(backend, acts.logits.Matrix(),
                                          acts.lm_targets, acts.lm_count, 1.f);
  Tensor dnormed({acts.final_normed.dim(0), config.hidden_size});
  Parameter& head = params.OutputHead();
  backend.LinearBackward(acts.final_normed.Matrix(), head.value.Matrix(),
                         dlogits.Matrix(), dnormed.Matrix(),
                         head.grad.Matrix());
  backend.RmsNormBackward(last_hidden, params.norm.value.data(),
                          acts.final_rstd.data(), dnormed.Matrix(), dh,
                          params.norm.grad.data());
  if (acts.mtp.empty()) return;
  const Tensor mtp_dlogits =
      MeanLossGradient(backend, acts.mtp[0].logits.Matrix(), acts.mtp_targets,
                       acts.mtp_count, options.mtp_loss_scale);
  MtpBackward(backend, params.mtp[0], params.embed_tokens, params.OutputHead(),
              spec, layout, last_hidden, acts.mtp[0], mtp_dlogits.Matrix(), dh);
}

}  // namespace glm
