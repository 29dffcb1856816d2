// Expert parallelism over 2 and 4 ranks (threads, each with its own Gloo
// context and its own tokens) gives the MoE outputs, input gradients and
// weight gradients of one process running every rank's tokens through all
// experts: per-token results on the rank that owns the token, expert weight
// gradients on the rank that holds the expert (each rank holds only its own),
// router and shared-expert gradients summed over the ranks.
#include "parallel/expert_parallel_dispatch.h"

#include <cmath>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "kernels/cpu/bf16_activations_backend.h"
#include "model/moe.h"
#include "model/test_model_util.h"
#include "parallel/gloo_collectives.h"
#include "parallel/place_checking_group.h"

namespace glm {
namespace {

// Keeps only `range`'s routed experts in `p` (values and gradients), as an
// expert-parallel rank holds them.
void KeepExperts(const ExpertRange& range, MoeParameters* p) {
  for (Parameter* fused : {&p->experts_gate_up, &p->experts_down}) {
    for (Tensor* t : {&fused->value, &fused->grad}) {
      std::vector<int64_t> shape = t->shape();
      const int64_t row = t->numel() / shape[0];
      shape[0] = range.count;
      Tensor kept(shape);
      std::copy_n(t->data() + range.first * row, range.count * row,
                  kept.data());
      *t = std::move(kept);
    }
  }
}

constexpr int64_t kTokensPerRank = 12;

// What one MoE layer's forward and backward produced.
struct MoeRun {
  Tensor out, dx;
  std::vector<int32_t> choice;
  MoeParameters grads;  // gradients only (values are the layer's)
};

// Parameters: the expert-parallel size, and whether the ops keep the bf16
// mode's activations (kernels/cpu/bf16_activations_backend.h: the exchanges
// then carry bf16 rows).
class ExpertParallelDispatchTest
    : public ::testing::TestWithParam<std::tuple<int, bool>> {
 protected:
  ExpertParallelDispatchTest()
      : config_(*PresetConfig("glm5.2-tiny")), params_(config_) {
    params_.InitRandom(/*seed=*/11, /*std=*/0.3f);
    for (DecoderLayerParameters& layer : params_.layers) {
      if (layer.is_moe) moe_ = &layer.moe;
    }
    std::mt19937 rng(3);
    moe_->e_score_correction_bias =
        RandomTensor({config_.n_routed_experts}, rng, 0.1f);
    const int64_t tokens = kTokensPerRank * Ranks();
    x_ = RandomTensor({tokens, config_.hidden_size}, rng);
    dout_ = RandomTensor({tokens, config_.hidden_size}, rng);
  }

  static int Ranks() { return std::get<0>(GetParam()); }
  static bool Bf16() { return std::get<1>(GetParam()); }

  // Rows [rank * kTokensPerRank, +kTokensPerRank) of `t`.
  static Tensor RankRows(const Tensor& t, int rank) {
    Tensor rows({kTokensPerRank, t.dim(1)});
    std::copy_n(t.data() + rank * kTokensPerRank * t.dim(1), rows.numel(),
                rows.data());
    return rows;
  }

  // Forward and backward of a copy of the layer on `x`, experts placed by
  // `experts`; `held` (if set) is the experts the copy keeps.
  MoeRun Run(const Tensor& x, const Tensor& dout, ExpertDispatcher& experts,
             std::optional<ExpertRange> held = std::nullopt) {
    MoeParameters p = *moe_;
    if (held) KeepExperts(*held, &p);
    MoeRun run{Tensor(x.shape()), Tensor(x.shape()), {}, {}};
    const std::unique_ptr<Backend> backend = MakeCpuTestBackend(Bf16());
    const RouterSpec spec = MakeRouterSpec(config_);
    // The layer's input as the model keeps it: in the activation type.
    Tensor input(x.shape(), nullptr, backend->ActivationType());
    backend->Copy(x.Matrix(), input.Matrix());
    MoeActivations acts;
    MoeForward(*backend, p, spec, input.Matrix(), run.out.Matrix(), &acts,
               experts);
    MoeBackward(*backend, p, spec, input.Matrix(), acts, dout.Matrix(),
                run.dx.Matrix(), experts);
    run.choice = acts.choice.values();
    run.grads = std::move(p);
    return run;
  }

  ModelConfig config_;
  ModelParameters params_;
  MoeParameters* moe_ = nullptr;
  Tensor x_, dout_;
};

// |got - expected| <= 1e-5 |expected| in L2 norm.
void ExpectNear(const float* got, const float* expected, int64_t count,
                const std::string& what) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < count; ++i) {
    diff += std::pow(double{got[i]} - expected[i], 2);
    norm += std::pow(double{expected[i]}, 2);
  }
  EXPECT_GT(norm, 0) << what;
  EXPECT_LE(std::sqrt(diff), 1e-5 * std::sqrt(norm)) << what;
}

TEST_P(ExpertParallelDispatchTest, RanksMatchOneProcessWithEveryExpert) {
  const int ep = Ranks();
  LocalExpertDispatcher local;
  const MoeRun whole = Run(x_, dout_, local);

  std::vector<MoeRun> ranks(ep);
  gloo::rendezvous::HashStore store;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ep; ++rank) {
    threads.emplace_back([&, rank] {
      absl::StatusOr<std::unique_ptr<GlooCollectives>> group =
          GlooCollectives::Connect(store, "ep", rank, ep, GlooOptions());
      ASSERT_TRUE(group.ok()) << group.status();
      ExpertParallelDispatcher dispatcher(group->get());
      ranks[rank] = Run(RankRows(x_, rank), RankRows(dout_, rank), dispatcher,
                        ExpertsOfRank(config_.n_routed_experts, ep, rank));
      EXPECT_TRUE(dispatcher.status().ok()) << dispatcher.status();
    });
  }
  for (std::thread& t : threads) t.join();

  const int64_t per_rank = config_.n_routed_experts / ep;
  const int64_t top_k = config_.num_experts_per_tok;
  int64_t remote = 0;  // slots whose expert is on another rank
  for (int rank = 0; rank < ep; ++rank) {
    const MoeRun& got = ranks[rank];
    const std::string at = "rank " + std::to_string(rank);
    ASSERT_EQ(got.choice,
              std::vector<int32_t>(
                  whole.choice.begin() + rank * kTokensPerRank * top_k,
                  whole.choice.begin() + (rank + 1) * kTokensPerRank * top_k))
        << at;
    for (int32_t e : got.choice) remote += e / per_rank != rank;
    ExpectNear(got.out.data(), RankRows(whole.out, rank).data(),
               got.out.numel(), at + " out");
    ExpectNear(got.dx.data(), RankRows(whole.dx, rank).data(), got.dx.numel(),
               at + " dx");
    // A rank holds (and gets the gradients of) its experts only.
    const ExpertRange held = ExpertsOfRank(config_.n_routed_experts, ep, rank);
    for (const Parameter MoeParameters::*fused :
         {&MoeParameters::experts_gate_up, &MoeParameters::experts_down}) {
      const Tensor& grad = (got.grads.*fused).grad;
      const int64_t slab = grad.numel() / held.count;
      ASSERT_EQ(slab * config_.n_routed_experts,
                (whole.grads.*fused).grad.numel());
      ExpectNear(grad.data(),
                 (whole.grads.*fused).grad.data() + held.first * slab,
                 grad.numel(), at + " experts");
    }
  }
  EXPECT_GT(remote, 0) << "no token crossed ranks";

  // Replicated weights: the ranks' gradients sum to one process's.
  struct Replicated {
    std::string name;
    const Tensor& (*grad)(const MoeParameters&);
  };
  const std::vector<Replicated> replicated = {
      {"gate",
       [](const MoeParameters& p) -> const Tensor& { return p.gate.grad; }},
      {"shared gate_proj",
       [](const MoeParameters& p) -> const Tensor& {
         return p.shared_experts.gate_proj.grad;
       }},
      {"shared up_proj",
       [](const MoeParameters& p) -> const Tensor& {
         return p.shared_experts.up_proj.grad;
       }},
      {"shared down_proj",
       [](const MoeParameters& p) -> const Tensor& {
         return p.shared_experts.down_proj.grad;
       }},
  };
  for (const Replicated& r : replicated) {
    std::vector<float> sum(r.grad(whole.grads).numel(), 0.f);
    for (const MoeRun& got : ranks) {
      for (size_t i = 0; i < sum.size(); ++i)
        sum[i] += r.grad(got.grads).data()[i];
    }
    ExpectNear(sum.data(), r.grad(whole.grads).data(),
               static_cast<int64_t>(sum.size()), r.name);
  }
}

// A rank whose parameters hold other experts than its share is a clear error,
// kept by the dispatcher for the caller (the layers above have no error
// path).
TEST_P(ExpertParallelDispatchTest, ParametersWithTheWrongExpertsAreAnError) {
  gloo::rendezvous::HashStore store;
  auto group = GlooCollectives::Connect(store, "ep", 0, 1, GlooOptions());
  ASSERT_TRUE(group.ok()) << group.status();
  ExpertParallelDispatcher dispatcher(group->get());
  // One rank holds all 8 experts; these parameters keep 2.
  Run(RankRows(x_, 0), RankRows(dout_, 0), dispatcher, ExpertRange{0, 2});
  EXPECT_EQ(dispatcher.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(dispatcher.status().message().find(
                "rank 0 holds 2 routed experts, not its 8 of 8"),
            std::string::npos)
      << dispatcher.status();
}

// A group whose queued exchanges have failed (on NCCL: one ran with an
// error, or outlived the timeout and the watch aborted the communicator).
class FailedQueueGroup : public PlaceCheckingGroup {
 public:
  using PlaceCheckingGroup::PlaceCheckingGroup;
  absl::Status QueuedFailure() override {
    return absl::DeadlineExceededError(
        "group ep: queued all-to-all 7 did not finish by its deadline");
  }
};

// The dispatcher reports a queued exchange's failure, found after the call
// that queued it returned, as its own: the model's pass ends with it.
TEST(ExpertParallelDispatchFailureTest, AFailedQueuedExchangeIsItsError) {
  gloo::rendezvous::HashStore store;
  auto gloo = GlooCollectives::Connect(store, "ep", 0, 1, GlooOptions());
  ASSERT_TRUE(gloo.ok()) << gloo.status();
  FailedQueueGroup group(*std::move(gloo), BufferPlace::kDevice, nullptr);
  const ExpertParallelDispatcher dispatcher(&group);
  EXPECT_EQ(dispatcher.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(dispatcher.status().message().find("queued all-to-all 7"),
            std::string::npos)
      << dispatcher.status();
}

INSTANTIATE_TEST_SUITE_P(Ranks, ExpertParallelDispatchTest,
                         ::testing::Combine(::testing::Values(2, 4),
                                            ::testing::Bool()));

}  // namespace
}  // namespace glm
