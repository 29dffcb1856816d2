// The whole model on tiny configurations: output shapes, index sharing, losses
// computed by hand from the logits, packed-vs-separate equivalence, and
// directional finite-difference checks of every parameter's gradient (step
// 5e-3, tolerance 2e-2).
#include "model/glm_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <tuple>

#include "gtest/gtest.h"
#include "kernels/cpu/bf16_activations_backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/separate_memory_allocator.h"
#include "model/test_model_util.h"

namespace glm {
namespace {

const std::vector<int32_t> kSeqA = {3, 17, 4, 29, 8, 8, 21};
const std::vector<int32_t> kSeqB = {11, 2, 30, 5, 19};

bool IsIndexerWeight(const std::string& name) {
  return name.find(".indexer.") != std::string::npos;
}

// -log softmax(row)[target] in double.
double CrossEntropy(const float* row, int64_t vocab, int32_t target) {
  double max = row[0], sum = 0;
  for (int64_t i = 0; i < vocab; ++i) max = std::max(max, double{row[i]});
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(row[i] - max);
  return max + std::log(sum) - row[target];
}

// What StepTotals::ReadInto fills (the trainer's StageLosses has these).
struct StageLossesLike {
  double lm_loss = 0, mtp_loss = 0, indexer_loss = 0;
  std::vector<std::vector<int64_t>> expert_load;
};

class GlmModelTest : public ::testing::Test {
 protected:
  // Weights ~ N(0, 1.2 / sqrt(hidden)): activations of order one, so finite
  // differences in float resolve the gradients.
  explicit GlmModelTest(ModelConfig config = TinyTestConfig())
      : config_(config), params_(config_) {
    params_.InitRandom(
        /*seed=*/17, 1.2f / std::sqrt(static_cast<float>(config_.hidden_size)));
  }

  ForwardResult Run(const Batch& batch, LossOptions options = {}) {
    GlmModel model(&params_, &backend_, options);
    absl::StatusOr<ForwardResult> result = model.Forward(batch);
    EXPECT_TRUE(result.ok()) << result.status();
    return *std::move(result);
  }

  // Wherever a step forms the indexer loss (in the forward; in the backward
  // of a training step, its target summed from the attention backward's own
  // probabilities; in the backward of recomputed layers, formed once), the
  // step's totals and every gradient are those of the forward's loss.
  void ExpectEveryPassFormsTheSameIndexerLoss(const Batch& batch) {
    auto run = [&](bool train_step, bool recompute, StageLossesLike* totals,
                   bool loss_in_backward = true) {
      LossOptions options;
      options.recompute_layers = recompute;
      options.return_logits = false;
      options.indexer_loss_in_backward = loss_in_backward;
      params_.ZeroGrad();
      GlmModel model(&params_, &backend_, options);
      StepTotals step(backend_.allocator());
      if (train_step) {
        EXPECT_TRUE(model.Load(batch).ok());
        EXPECT_TRUE(model.TrainLoaded(&step).ok());
      } else {
        EXPECT_TRUE(model.Forward(batch, &step).ok());
        EXPECT_TRUE(model.Backward().ok());
      }
      step.ReadInto(totals);
      return GradientValues(params_);
    };
    StageLossesLike in_forward;
    const auto forward_grads = run(false, false, &in_forward);
    EXPECT_GT(in_forward.indexer_loss, 0.0);
    // (train step, recompute, a train step's loss in the backward)
    for (const auto& [train_step, recompute, in_backward] :
         {std::tuple{false, true, true}, std::tuple{true, false, true},
          std::tuple{true, true, true}, std::tuple{true, false, false}}) {
      SCOPED_TRACE(testing::Message()
                   << "train step " << train_step << ", recompute " << recompute
                   << ", loss in the backward " << in_backward);
      StageLossesLike totals;
      const auto grads = run(train_step, recompute, &totals, in_backward);
      EXPECT_NEAR(totals.indexer_loss, in_forward.indexer_loss,
                  1e-12 * in_forward.indexer_loss);
      EXPECT_EQ(totals.lm_loss, in_forward.lm_loss);
      EXPECT_EQ(totals.mtp_loss, in_forward.mtp_loss);
      ASSERT_EQ(grads.size(), forward_grads.size());
      for (size_t i = 0; i < forward_grads.size(); ++i) {
        EXPECT_TRUE(grads[i] == forward_grads[i]) << "gradient " << i;
      }
    }
  }

  // A training step's backward (its indexer loss formed there; with and
  // without recomputed layers) tells of each held gradient once, when nothing
  // later in the pass adds to it: as told, each equals its value after the
  // backward. The pass adds to gradients another pass left (a step's last
  // micro batch).
  void ExpectGradientsFinishedOnceAndFinal(const Batch& batch) {
    for (bool recompute : {false, true}) {
      SCOPED_TRACE(testing::Message() << "recompute " << recompute);
      ExpectGradientsFinishedOnceAndFinal(batch, recompute);
    }
  }
  void ExpectGradientsFinishedOnceAndFinal(const Batch& batch, bool recompute) {
    params_.ZeroGrad();
    LossOptions options;
    options.recompute_layers = recompute;
    options.return_logits = false;
    GlmModel model(&params_, &backend_, options);
    StepTotals step(backend_.allocator());
    ASSERT_TRUE(model.Load(batch).ok());
    ASSERT_TRUE(model.TrainLoaded(&step).ok());
    std::map<const Tensor*, std::vector<float>> told;
    model.set_gradients_finished([&](const std::vector<Tensor*>& grads) {
      for (Tensor* grad : grads) {
        EXPECT_TRUE(told.emplace(grad, grad->HostValues()).second)
            << "told twice";
      }
    });
    ASSERT_TRUE(model.Load(batch).ok());
    ASSERT_TRUE(model.TrainLoaded(&step).ok());
    size_t held = 0;
    for (const NamedTensor& t : params_.Named()) {
      if (t.grad == nullptr || t.grad->empty()) continue;
      ++held;
      auto it = told.find(t.grad);
      ASSERT_NE(it, told.end()) << t.name << " not told";
      EXPECT_TRUE(it->second == t.grad->HostValues()) << t.name;
    }
    EXPECT_EQ(told.size(), held);
  }

  // Analytic gradients of the total loss, then a directional check (first step
  // `eps`) of every parameter whose name passes `select`; `expected_count` of
  // them (0: any number).
  void CheckGradients(const Batch& batch, LossOptions options,
                      const std::function<bool(const std::string&)>& select,
                      double eps = 5e-3, size_t expected_count = 0) {
    params_.ZeroGrad();
    GlmModel model(&params_, &backend_, options);
    ASSERT_TRUE(model.Forward(batch).ok());
    ASSERT_TRUE(model.Backward().ok());
    std::vector<GradientTarget> targets;
    for (const NamedTensor& t : params_.Named()) {
      if (t.grad != nullptr && select(t.name))
        targets.push_back({t.name, t.value, t.grad});
    }
    ASSERT_FALSE(targets.empty());
    if (expected_count > 0) {
      ASSERT_EQ(targets.size(), expected_count);
    }
    ExpectDirectionalGradients(model, batch, targets, eps);
  }

  // Directional checks of `targets` against the total loss of `model` on
  // `batch`; a probe counts only where key choices and routing equal the
  // unperturbed run's (smaller steps, then another direction, otherwise).
  void ExpectDirectionalGradients(GlmModel& model, const Batch& batch,
                                  const std::vector<GradientTarget>& targets,
                                  double eps) {
    const Decisions base = DecisionsOf(*model.Forward(batch));
    Decisions last;
    auto loss = [&] {
      const ForwardResult r = *model.Forward(batch);
      last = DecisionsOf(r);
      return r.total_loss;
    };
    // abs_tol 1e-4: a changed order of equal key sets changes float sums
    // (~1e-7).
    glm::ExpectDirectionalGradients(loss, targets, eps, 2e-2, 1e-4,
                                    [&] { return last == base; });
  }

  // Each layer's key sets (order ignored: no loss depends on it) and expert
  // choices.
  using Decisions = std::vector<std::vector<std::vector<int32_t>>>;
  static Decisions DecisionsOf(const ForwardResult& r) {
    Decisions d;
    auto add = [&d](const IndexTensor& t) {
      d.emplace_back();
      for (int64_t i = 0; i < (t.empty() ? 0 : t.dim(0)); ++i) {
        d.back().emplace_back(t.data() + i * t.dim(1),
                              t.data() + (i + 1) * t.dim(1));
        std::sort(d.back().back().begin(), d.back().back().end());
      }
    };
    for (const IndexTensor& t : r.layer_topk) add(t);
    for (const IndexTensor& t : r.expert_choice) add(t);
    return d;
  }

  CpuBackend backend_;
  ModelConfig config_;
  ModelParameters params_;
};

TEST_F(GlmModelTest, ForwardShapesSharingAndLosses) {
  Batch batch = Batch::FromSequences({kSeqA, kSeqB});
  const ForwardResult r = Run(batch);
  const int64_t n = 12, vocab = config_.vocab_size;
  ASSERT_EQ(r.logits.shape(), (std::vector<int64_t>{n, vocab}));
  ASSERT_EQ(r.mtp_logits.shape(), (std::vector<int64_t>{n, vocab}));
  // Layer 3 (1-indexed) skips and attends over layer 2's keys; the MTP layer
  // (index 4) over the last main layer's.
  ASSERT_EQ(r.layer_topk.size(), 5u);
  EXPECT_EQ(r.layer_topk[2].values(), r.layer_topk[1].values());
  EXPECT_NE(r.layer_topk[3].values(), r.layer_topk[1].values());
  EXPECT_EQ(r.layer_topk[4].values(), r.layer_topk[3].values());
  EXPECT_TRUE(r.expert_load[0].empty());
  for (int layer = 1; layer < 5; ++layer) {
    int64_t routed = 0;
    for (int64_t load : r.expert_load[layer]) routed += load;
    EXPECT_EQ(routed, n * config_.num_experts_per_tok);
  }
  // Losses by hand: next token inside each sequence only.
  double lm = 0, mtp = 0;
  int lm_count = 0, mtp_count = 0;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t end = t < 7 ? 7 : 12;
    if (t + 1 < end)
      lm += CrossEntropy(r.logits.data() + t * vocab, vocab,
                         batch.input_ids[t + 1]),
          ++lm_count;
    if (t + 2 < end)
      mtp += CrossEntropy(r.mtp_logits.data() + t * vocab, vocab,
                          batch.input_ids[t + 2]),
          ++mtp_count;
  }
  EXPECT_NEAR(r.lm_loss, lm / lm_count, 1e-5);
  EXPECT_NEAR(r.mtp_loss, mtp / mtp_count, 1e-5);
  EXPECT_GT(r.indexer_loss, 0.0);
  EXPECT_NEAR(r.total_loss, r.lm_loss + 0.1 * r.mtp_loss + r.indexer_loss,
              1e-7);
}

TEST_F(GlmModelTest, LogitsAreOptionalAndLossesUnchanged) {
  const Batch batch = Batch::FromSequences({kSeqA, kSeqB});
  LossOptions options;
  options.return_logits = false;
  const ForwardResult without = Run(batch, options);
  const ForwardResult with = Run(batch);
  EXPECT_TRUE(without.logits.empty());
  EXPECT_TRUE(without.mtp_logits.empty());
  EXPECT_EQ(without.total_loss, with.total_loss);
}

// A step's forwards add their losses and expert loads to one StepTotals, read
// once: the same sums as reading each forward (the losses up to the order of
// the additions).
TEST_F(GlmModelTest, StepTotalsSumTheForwardsOfAStep) {
  const Batch first = Batch::FromSequences({kSeqA});
  const Batch second = Batch::FromSequences({kSeqB, kSeqA});
  const ForwardResult a = Run(first), b = Run(second);
  GlmModel model(&params_, &backend_);
  StepTotals step(backend_.allocator());
  for (const Batch* batch : {&first, &second}) {
    absl::StatusOr<ForwardResult> deferred = model.Forward(*batch, &step);
    ASSERT_TRUE(deferred.ok()) << deferred.status();
    EXPECT_EQ(deferred->lm_loss, 0.0);
    EXPECT_TRUE(deferred->expert_load.empty());
  }
  StageLossesLike totals;
  step.ReadInto(&totals);
  EXPECT_NEAR(totals.lm_loss, a.lm_loss + b.lm_loss, 1e-12 * totals.lm_loss);
  EXPECT_NEAR(totals.mtp_loss, a.mtp_loss + b.mtp_loss,
              1e-12 * totals.mtp_loss);
  EXPECT_NEAR(totals.indexer_loss, a.indexer_loss + b.indexer_loss,
              1e-12 * totals.indexer_loss);
  EXPECT_GT(totals.mtp_loss, 0.0);
  EXPECT_GT(totals.indexer_loss, 0.0);
  ASSERT_EQ(totals.expert_load.size(), a.expert_load.size());
  int moe_layers = 0;
  for (size_t layer = 0; layer < a.expert_load.size(); ++layer) {
    std::vector<int64_t> want = a.expert_load[layer];
    for (size_t e = 0; e < want.size(); ++e) want[e] += b.expert_load[layer][e];
    EXPECT_EQ(totals.expert_load[layer], want) << "layer " << layer;
    moe_layers += !want.empty();
  }
  EXPECT_GT(moe_layers, 0);
}

TEST_F(GlmModelTest, EveryPassFormsTheSameIndexerLoss) {
  ExpectEveryPassFormsTheSameIndexerLoss(Batch::FromSequences({kSeqA, kSeqB}));
}

// A micro batch's ids, positions, sequence starts and head targets go to the
// backend's memory in one copy.
TEST_F(GlmModelTest, AForwardUploadsOnce) {
  SeparateMemoryAllocator device;
  CpuBackend backend(&device);
  std::unique_ptr<ModelParameters> mirror = MirrorParameters(params_, &device);
  LossOptions options;
  options.record_selections = false;
  options.return_logits = false;
  GlmModel model(mirror.get(), &backend, options);
  const int64_t before = device.uploads();
  absl::StatusOr<ForwardResult> result =
      model.Forward(Batch::FromSequences({kSeqA, kSeqB}));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(device.uploads() - before, 1);
  EXPECT_EQ(result->lm_loss, Run(Batch::FromSequences({kSeqA, kSeqB})).lm_loss);
}

TEST_F(GlmModelTest, LossMaskDropsPredictions) {
  Batch batch = Batch::FromSequences({kSeqA});
  batch.loss_mask.assign(kSeqA.size(), 1.f);
  batch.loss_mask[2] = 0.f;  // the prediction at 2 (of token 3) does not count
  const ForwardResult r = Run(batch);
  const int64_t vocab = config_.vocab_size;
  double lm = 0;
  for (int64_t t = 0; t + 1 < 7; ++t) {
    if (t != 2)
      lm += CrossEntropy(r.logits.data() + t * vocab, vocab, kSeqA[t + 1]);
  }
  EXPECT_NEAR(r.lm_loss, lm / 5, 1e-5);
}

TEST_F(GlmModelTest, PackedSequencesEqualSeparateRuns) {
  const ForwardResult a = Run(Batch::FromSequences({kSeqA}));
  const ForwardResult b = Run(Batch::FromSequences({kSeqB}));
  const ForwardResult packed = Run(Batch::FromSequences({kSeqA, kSeqB}));
  const int64_t vocab = config_.vocab_size;
  for (int64_t t = 0; t < 12; ++t) {
    const ForwardResult& alone = t < 7 ? a : b;
    const int64_t row = t < 7 ? t : t - 7;
    for (int64_t v = 0; v < vocab; ++v) {
      ASSERT_NEAR(packed.logits.data()[t * vocab + v],
                  alone.logits.data()[row * vocab + v], 1e-5)
          << "token " << t;
      ASSERT_NEAR(packed.mtp_logits.data()[t * vocab + v],
                  alone.mtp_logits.data()[row * vocab + v], 1e-5)
          << "token " << t;
    }
  }
  // The second sequence's keys are the separate run's, shifted by its start.
  for (int layer = 0; layer < 5; ++layer) {
    const IndexTensor& keys = packed.layer_topk[layer];
    for (int64_t t = 7; t < 12; ++t) {
      for (int64_t j = 0; j < keys.dim(1); ++j) {
        const int32_t alone =
            b.layer_topk[layer].data()[(t - 7) * keys.dim(1) + j];
        EXPECT_EQ(keys.data()[t * keys.dim(1) + j], alone < 0 ? -1 : alone + 7);
      }
    }
  }
  // The mean over all predictions of both sequences (6 + 4 targets).
  EXPECT_NEAR(packed.lm_loss, (6 * a.lm_loss + 4 * b.lm_loss) / 10, 1e-5);
}

// A sample's last token is its last position's label: the model sees all but
// that token and predicts every one of them, as the longer sequence's first
// positions do (causal attention: the extra token changes nothing before it).
TEST_F(GlmModelTest, SamplesLabelTheirLastPosition) {
  const std::vector<int32_t> sample(kSeqA.begin(), kSeqA.end());
  const Batch batch = Batch::FromSamples({sample});
  ASSERT_EQ(batch.input_ids.size(), sample.size() - 1);
  ASSERT_EQ(batch.last_labels, std::vector<int32_t>{sample.back()});
  const ForwardResult whole = Run(Batch::FromSequences({sample}));
  const ForwardResult r = Run(batch);
  const int64_t vocab = config_.vocab_size, n = 6;
  double lm = 0, mtp = 0;
  for (int64_t t = 0; t < n; ++t) {
    lm += CrossEntropy(r.logits.data() + t * vocab, vocab, sample[t + 1]);
    if (t + 2 <= n) {
      mtp +=
          CrossEntropy(r.mtp_logits.data() + t * vocab, vocab, sample[t + 2]);
    }
  }
  EXPECT_NEAR(r.lm_loss, lm / n, 1e-5);
  EXPECT_NEAR(r.mtp_loss, mtp / (n - 1), 1e-5);
  // The sequence with the label as an input scores the same predictions.
  EXPECT_NEAR(r.lm_loss, whole.lm_loss, 1e-5);
  for (int64_t i = 0; i < n * vocab; ++i) {
    ASSERT_NEAR(r.logits.data()[i], whole.logits.data()[i], 1e-5) << i;
  }
}

// Indexer loss off: every other parameter against the total loss.
TEST_F(GlmModelTest, GradientsOfAllWeightsMatchFiniteDifferences) {
  LossOptions options;
  options.indexer_loss_coeff = 0.f;
  CheckGradients(
      Batch::FromSequences({kSeqA, kSeqB}), options,
      [](const std::string& name) { return !IsIndexerWeight(name); });
  for (const NamedTensor& t : params_.Named()) {
    if (!IsIndexerWeight(t.name)) continue;
    for (float g : t.grad->HostValues()) ASSERT_EQ(g, 0.f) << t.name;
  }
}

// The indexer weights learn from the indexer loss alone (the top-k choice
// itself has no gradient), so the total loss checks them.
TEST_F(GlmModelTest, IndexerWeightGradientsMatchFiniteDifferences) {
  LossOptions options;
  options.indexer_loss_coeff = 1.f;
  // Three computing layers with five indexer weights each; a small first step
  // keeps off the ReLU kinks of the index scores.
  CheckGradients(Batch::FromSequences({kSeqA, kSeqB}), options, IsIndexerWeight,
                 2e-4, 15);
}

// Two runs give bitwise-equal logits, losses and gradients (fixed partitions,
// no atomics).
TEST_F(GlmModelTest, ForwardAndBackwardAreDeterministic) {
  const Batch batch = Batch::FromSequences({kSeqA, kSeqB});
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 2; ++run) {
    params_.ZeroGrad();
    GlmModel model(&params_, &backend_);
    absl::StatusOr<ForwardResult> r = model.Forward(batch);
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(model.Backward().ok());
    std::vector<float> all = r->logits.values();
    all.push_back(static_cast<float>(r->total_loss));
    for (const NamedTensor& t : params_.Named()) {
      if (!t.grad) continue;
      const std::vector<float> grad = t.grad->HostValues();
      all.insert(all.end(), grad.begin(), grad.end());
    }
    runs.push_back(std::move(all));
  }
  EXPECT_TRUE(runs[0] == runs[1]);
}

// Every gradient of one forward and backward, with the total loss, the
// selections and expert loads the forward recorded.
struct GradientRun {
  std::vector<std::vector<float>> grads;
  ForwardResult result;
};

GradientRun RunGradients(ModelParameters& params, Backend& backend,
                         const Batch& batch, LossOptions options) {
  params.ZeroGrad();
  GlmModel model(&params, &backend, options);
  absl::StatusOr<ForwardResult> r = model.Forward(batch);
  EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(model.Backward().ok());
  GradientRun run{{}, *std::move(r)};
  for (const NamedTensor& t : params.Named()) {
    if (t.grad) run.grads.push_back(t.grad->HostValues());
  }
  return run;
}

// Recomputing each layer in the backward gives the gradients of keeping its
// activations, bitwise: the same ops on the same inputs (and the indexer loss
// counted once).
void ExpectRecomputationChangesNothing(ModelParameters& params,
                                       Backend& backend, const Batch& batch) {
  LossOptions recompute;
  recompute.recompute_layers = true;
  const GradientRun kept = RunGradients(params, backend, batch, {});
  const GradientRun again = RunGradients(params, backend, batch, recompute);
  EXPECT_EQ(again.result.total_loss, kept.result.total_loss);
  EXPECT_EQ(again.result.indexer_loss, kept.result.indexer_loss);
  EXPECT_GT(kept.result.indexer_loss, 0.0);
  EXPECT_EQ(again.result.expert_load, kept.result.expert_load);
  ASSERT_EQ(again.result.layer_topk.size(), kept.result.layer_topk.size());
  for (size_t i = 0; i < kept.result.layer_topk.size(); ++i) {
    EXPECT_EQ(again.result.layer_topk[i].values(),
              kept.result.layer_topk[i].values());
  }
  ASSERT_EQ(again.grads.size(), kept.grads.size());
  for (size_t i = 0; i < kept.grads.size(); ++i) {
    EXPECT_TRUE(again.grads[i] == kept.grads[i]) << "gradient " << i;
  }
}

// The fused head (losses and gradients in the forward, chunk by chunk) gives
// the kept head's losses and gradients: bitwise in one chunk (the same ops in
// the same order), to rounding in chunks of 5 rows (the loss sums and
// lm_head's gradient add per chunk).
TEST_F(GlmModelTest, FusedHeadLossGivesTheKeptGradients) {
  const Batch batch = Batch::FromSamples({kSeqA, kSeqB});
  LossOptions fused;
  fused.fuse_head_loss = true;
  fused.return_logits = false;
  const GradientRun kept = RunGradients(params_, backend_, batch, {});
  const GradientRun one = RunGradients(params_, backend_, batch, fused);
  fused.head_chunk_bytes = 2 * config_.vocab_size * sizeof(float) * 5;
  const GradientRun chunked = RunGradients(params_, backend_, batch, fused);
  EXPECT_TRUE(one.result.logits.empty());
  EXPECT_EQ(one.result.total_loss, kept.result.total_loss);
  EXPECT_NEAR(chunked.result.lm_loss, kept.result.lm_loss, 1e-6);
  EXPECT_NEAR(chunked.result.mtp_loss, kept.result.mtp_loss, 1e-6);
  ASSERT_EQ(one.grads.size(), kept.grads.size());
  ASSERT_EQ(chunked.grads.size(), kept.grads.size());
  for (size_t i = 0; i < kept.grads.size(); ++i) {
    EXPECT_TRUE(one.grads[i] == kept.grads[i]) << "gradient " << i;
    for (size_t j = 0; j < kept.grads[i].size(); ++j) {
      ASSERT_NEAR(chunked.grads[i][j], kept.grads[i][j],
                  1e-6 + 1e-5 * std::abs(kept.grads[i][j]))
          << "gradient " << i << " element " << j;
    }
  }
  LossOptions with_logits = fused;
  with_logits.return_logits = true;
  GlmModel model(&params_, &backend_, with_logits);
  EXPECT_EQ(model.Forward(batch).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(GlmModelTest, RecomputedLayersGiveTheSameGradients) {
  ExpectRecomputationChangesNothing(params_, backend_,
                                    Batch::FromSequences({kSeqA, kSeqB}));
}

// Relative L2 distance of all of `got`'s gradients from `want`'s.
double GradientDistance(const GradientRun& got, const GradientRun& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.grads.size(); ++i) {
    for (size_t j = 0; j < want.grads[i].size(); ++j) {
      diff += std::pow(double{got.grads[i][j]} - want.grads[i][j], 2);
      norm += std::pow(double{want.grads[i][j]}, 2);
    }
  }
  return std::sqrt(diff / norm);
}

// A micro batch longer than expert_chunk_tokens runs its routed experts a
// chunk of tokens at a time (the last chunk shorter): the unchunked losses
// and gradients to fp32 rounding (the experts' weight gradients sum by chunk)
// and the same expert loads; with recomputed layers each chunk's expert rows
// are formed again in the backward, bitwise the chunks a forward keeps.
TEST_F(GlmModelTest, ExpertChunksGiveTheWholeBatchsGradients) {
  const Batch batch = Batch::FromSequences({kSeqA, kSeqB});
  LossOptions whole, chunked;
  whole.expert_chunk_tokens = 0;
  chunked.expert_chunk_tokens = 5;  // 12 tokens: 5, 5 and 2
  ASSERT_EQ(batch.input_ids.size(), 12u);
  const GradientRun want = RunGradients(params_, backend_, batch, whole);
  const GradientRun got = RunGradients(params_, backend_, batch, chunked);
  EXPECT_NEAR(got.result.lm_loss, want.result.lm_loss, 1e-6);
  EXPECT_NEAR(got.result.indexer_loss, want.result.indexer_loss, 1e-6);
  EXPECT_EQ(got.result.expert_load, want.result.expert_load);
  EXPECT_LE(GradientDistance(got, want), 1e-6);
  chunked.recompute_layers = true;
  const GradientRun recomputed =
      RunGradients(params_, backend_, batch, chunked);
  EXPECT_EQ(recomputed.result.total_loss, got.result.total_loss);
  ASSERT_EQ(recomputed.grads.size(), got.grads.size());
  for (size_t i = 0; i < got.grads.size(); ++i)
    EXPECT_TRUE(recomputed.grads[i] == got.grads[i]) << "gradient " << i;
}

// Queries past a row attend in the latent space: the same losses and
// gradients as the per-head form to fp32 rounding (the same sums in another
// order), across a sequence boundary in the packed batch, and in the bf16
// mode to its rounding; recomputing each layer changes nothing, bitwise.
TEST_F(GlmModelTest, LatentQueriesGiveThePerHeadLossesAndGradients) {
  const Batch batch = Batch::FromSequences({kSeqA, kSeqB});
  LossOptions per_head, latent;
  per_head.latent_attention_from = 0;
  latent.latent_attention_from = 5;
  const GradientRun want = RunGradients(params_, backend_, batch, per_head);
  const GradientRun got = RunGradients(params_, backend_, batch, latent);
  EXPECT_NEAR(got.result.lm_loss, want.result.lm_loss, 1e-6);
  EXPECT_NEAR(got.result.mtp_loss, want.result.mtp_loss, 1e-6);
  EXPECT_NEAR(got.result.indexer_loss, want.result.indexer_loss, 1e-6);
  EXPECT_LE(GradientDistance(got, want), 1e-5);
  // The bf16 mode's types through the latent queries (its products' bf16
  // operands, the attention's bf16 operands and F32 key gradient).
  Bf16ActivationsCpuBackend bf16;
  const GradientRun bf16_run = RunGradients(params_, bf16, batch, latent);
  EXPECT_NEAR(bf16_run.result.lm_loss, want.result.lm_loss,
              1e-2 * want.result.lm_loss);
  latent.recompute_layers = true;
  const GradientRun recomputed = RunGradients(params_, backend_, batch, latent);
  for (size_t i = 0; i < got.grads.size(); ++i)
    EXPECT_TRUE(recomputed.grads[i] == got.grads[i]) << "gradient " << i;
}

// The bf16 mode's paths through the model (its bf16 buffers and views, the
// fused head's bf16 logits) on the CPU, kernels/cpu/bf16_activations_backend.h:
// the losses follow fp32's within bf16's rounding (its gradients do not: at
// this tiny model's near-tied indexer scores, rounding moves top-k choices);
// the fused head gives the kept head's gradients to the rounding of its
// bf16 logits (6.4e-3 relative here); recomputing each layer changes
// nothing, bitwise.
TEST_F(GlmModelTest, Bf16ActivationsFollowFp32) {
  Bf16ActivationsCpuBackend bf16;
  const Batch batch = Batch::FromSequences({kSeqA, kSeqB});
  const GradientRun fp32 = RunGradients(params_, backend_, batch, {});
  const GradientRun kept = RunGradients(params_, bf16, batch, {});
  LossOptions fused;
  fused.fuse_head_loss = true;
  fused.return_logits = false;
  const GradientRun fused_run = RunGradients(params_, bf16, batch, fused);
  for (const GradientRun* run : {&kept, &fused_run}) {
    EXPECT_NEAR(run->result.lm_loss, fp32.result.lm_loss,
                1e-2 * fp32.result.lm_loss);
    EXPECT_NEAR(run->result.mtp_loss, fp32.result.mtp_loss,
                1e-2 * fp32.result.mtp_loss);
  }
  ASSERT_EQ(fused_run.grads.size(), kept.grads.size());
  EXPECT_LT(GradientDistance(fused_run, kept), 1e-2);
  ExpectRecomputationChangesNothing(params_, bf16, batch);
}

TEST_F(GlmModelTest, GradientsAreToldOnceFinished) {
  ASSERT_FALSE(params_.mtp.empty());
  ExpectGradientsFinishedOnceAndFinal(Batch::FromSequences({kSeqA, kSeqB}));
}

// Tied embeddings: no lm_head parameter; the output projection's gradient joins
// the embedding's.
class TiedEmbeddingTest : public GlmModelTest {
 protected:
  static ModelConfig Tied() {
    ModelConfig c = TinyTestConfig();
    c.tie_word_embeddings = true;
    return c;
  }
  TiedEmbeddingTest() : GlmModelTest(Tied()) {}
};

TEST_F(TiedEmbeddingTest, SharesTheEmbeddingAndGradientsMatch) {
  for (const NamedTensor& t : params_.Named())
    EXPECT_NE(t.name, "lm_head.weight");
  LossOptions options;
  options.indexer_loss_coeff = 0.f;
  CheckGradients(Batch::FromSequences({kSeqA}), options,
                 [](const std::string& name) {
                   return name == "model.embed_tokens.weight" ||
                          name == "model.norm.weight";
                 });
}

TEST_F(TiedEmbeddingTest, GradientsAreToldOnceFinished) {
  ExpectGradientsFinishedOnceAndFinal(Batch::FromSequences({kSeqA}));
}

TEST_F(GlmModelTest, BadInputsAreClearErrors) {
  GlmModel model(&params_, &backend_);
  EXPECT_EQ(model.Backward().code(), absl::StatusCode::kFailedPrecondition);
  Batch bad_id = Batch::FromSequences({{1, 2, 32}});
  absl::StatusOr<ForwardResult> r = model.Forward(bad_id);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("input_ids[2] = 32"), std::string::npos)
      << r.status();
  Batch bad_bounds = Batch::FromSequences({{1, 2, 3}});
  bad_bounds.cu_seqlens = {0, 2, 2, 3};
  EXPECT_FALSE(model.Forward(bad_bounds).ok());
  bad_bounds.cu_seqlens = {0, 4};
  EXPECT_FALSE(model.Forward(bad_bounds).ok());
  ModelConfig two_mtp = TinyTestConfig();
  two_mtp.num_mtp_layers = 2;
  ModelParameters two_mtp_params(two_mtp);
  GlmModel two_mtp_model(&two_mtp_params, &backend_);
  EXPECT_EQ(
      two_mtp_model.Forward(Batch::FromSequences({{1, 2}})).status().code(),
      absl::StatusCode::kUnimplemented);
  Batch bad_mask = Batch::FromSequences({{1, 2, 3}});
  bad_mask.loss_mask = {1.f};
  EXPECT_FALSE(model.Forward(bad_mask).ok());
  Batch bad_label = Batch::FromSamples({{1, 2, 3}, {4, 5, 32}});
  r = model.Forward(bad_label);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("last_labels[1] = 32"), std::string::npos)
      << r.status();
  Batch missing_label = Batch::FromSamples({{1, 2, 3}, {4, 5, 6}});
  missing_label.last_labels.pop_back();
  r = model.Forward(missing_label);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("last_labels has 1 entries for 2"),
            std::string::npos)
      << r.status();
}

// The glm5.2-tiny preset: 8 layers, frequency 4, offset 3, so layers 1, 2, 3, 7
// compute and 4-6 and 8 reuse their source's keys; sequences longer than
// index_topk. Every parameter is checked (indexer loss off: the indexer
// weights' gradient is 0).
class Glm52TinyTest : public GlmModelTest {
 protected:
  Glm52TinyTest() : GlmModelTest(*PresetConfig("glm5.2-tiny")) {}
};

// glm5 without index sharing: every layer, the MTP layer too, runs its own
// indexer and forms its loss.
class Glm5TinyTest : public GlmModelTest {
 protected:
  Glm5TinyTest() : GlmModelTest(*PresetConfig("glm5-tiny")) {}
};

TEST_F(Glm5TinyTest, EveryPassFormsTheSameIndexerLossTheMtpLayersToo) {
  ASSERT_TRUE(params_.mtp[0].layer.self_attn.has_indexer);
  std::vector<int32_t> ids;
  for (int t = 0; t < 40; ++t) ids.push_back((29 * t + 5) % 512);
  ExpectEveryPassFormsTheSameIndexerLoss(Batch::FromSequences({ids}));
}

// glm5.2's index sharing: skip layers attend over a recomputed source layer's
// kept keys.
TEST_F(Glm52TinyTest, RecomputedLayersGiveTheSameGradients) {
  std::vector<int32_t> ids;
  for (int t = 0; t < 40; ++t) ids.push_back((29 * t + 5) % 512);
  ExpectRecomputationChangesNothing(params_, backend_,
                                    Batch::FromSequences({ids}));
}

TEST_F(Glm52TinyTest, GradientsAreToldOnceFinished) {
  std::vector<int32_t> ids;
  for (int t = 0; t < 40; ++t) ids.push_back((29 * t + 5) % 512);
  ExpectGradientsFinishedOnceAndFinal(Batch::FromSequences({ids}));
}

TEST_F(Glm52TinyTest, SharingFollowsPresetAndGradientsMatchFiniteDifferences) {
  std::vector<int32_t> ids;
  for (int t = 0; t < 24; ++t) ids.push_back((37 * t + 11) % 512);
  Batch batch = Batch::FromSequences({ids});
  const ForwardResult r = Run(batch);
  ASSERT_EQ(r.layer_topk.size(), 9u);
  for (int layer : {4, 5, 6})
    EXPECT_EQ(r.layer_topk[layer - 1].values(), r.layer_topk[2].values());
  EXPECT_EQ(r.layer_topk[7].values(), r.layer_topk[6].values());
  EXPECT_EQ(r.layer_topk[8].values(), r.layer_topk[7].values());  // MTP
  EXPECT_EQ(r.layer_topk[0].dim(1), 16);
  LossOptions options;
  options.indexer_loss_coeff = 0.f;
  CheckGradients(batch, options, [](const std::string&) { return true; });
}

}  // namespace
}  // namespace glm
