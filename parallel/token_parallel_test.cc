// Tensor and context parallelism split a micro batch's tokens (and, under
// tensor parallelism, heads and MLP columns) over ranks; added up, the ranks'
// losses, expert loads and gradients are one process's. Ranks are threads
// with Gloo groups of their own, on glm5.2-tiny (index sharing, MoE, MTP,
// sequences longer than index_topk) with a packed batch and a loss mask.
#include "model/token_parallel.h"

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "kernels/cpu/bf16_activations_backend.h"
#include "kernels/cpu/separate_memory_allocator.h"
#include "parallel/gloo_collectives.h"
#include "parallel/pipeline_test_util.h"
#include "parallel/place_checking_group.h"
#include "parallel/rank_tensors.h"
#include "parallel/stage_model.h"
#include "parallel/staged_collectives.h"
#include "parallel/tensor_parallel_shard.h"

namespace glm {
namespace {

// Two packed sequences of 20 and 27 tokens (47: ranks' parts differ by a
// token; context chunks cross the sequence boundary), longer than index_topk
// 16; the first three targets of the second are masked.
Batch TestBatch() {
  std::vector<std::vector<int32_t>> rows(2);
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < 20 + 7 * r; ++i) {
      rows[r].push_back(static_cast<int32_t>((r * 89 + i * i * 5 + 7) % 509));
    }
  }
  Batch batch = Batch::FromSequences(rows);
  batch.loss_mask.assign(batch.input_ids.size(), 1.f);
  for (int i = 20; i < 23; ++i) batch.loss_mask[i] = 0.f;
  return batch;
}

struct RankRun {
  StageLosses losses;
  std::map<std::string, Tensor> grads;
};

// A Gloo group in `place` (parallel/place_checking_group.h: with kDevice it
// takes only `memory`'s buffers, as NCCL takes a GPU's; with kHost only the
// host's).
std::unique_ptr<PlaceCheckingGroup> Join(gloo::rendezvous::Store& store,
                                         const std::string& key, int rank,
                                         int size,
                                         BufferPlace place = BufferPlace::kHost,
                                         const Allocator* memory = nullptr) {
  if (size == 1) return nullptr;
  absl::StatusOr<std::unique_ptr<GlooCollectives>> group =
      GlooCollectives::Connect(store, key, rank, size, GlooOptions());
  EXPECT_TRUE(group.ok()) << group.status();
  if (!group.ok()) return nullptr;
  return std::make_unique<PlaceCheckingGroup>(*std::move(group), place, memory);
}

// Rank `rank` of tp x cp (tensor rank fastest) runs the whole model on its
// share of the batch, forward and backward.
// `memory` (null: host) is where the backend computes, on a copy of the
// rank's weights; `place` where the groups take their buffers. The model's
// gathers and reductions reach the groups through the views for the
// backend's memory, as the trainer hands them over.
RankRun RunRank(gloo::rendezvous::Store& store, int tp, int cp, int rank,
                Allocator* memory, BufferPlace place, bool bf16) {
  const int tp_rank = rank % tp, cp_rank = rank / tp;
  std::unique_ptr<PlaceCheckingGroup> tensor =
      Join(store, absl::StrCat("tp-", cp_rank), tp_rank, tp, place, memory);
  std::unique_ptr<PlaceCheckingGroup> context =
      Join(store, absl::StrCat("cp-", tp_rank), cp_rank, cp, place, memory);
  const GroupViews tensor_views(tensor.get(), memory);
  const GroupViews context_views(context.get(), memory);
  ModelParameters params = TinyPipelineParameters();
  RankShare share;
  share.tp = tp;
  share.tp_rank = tp_rank;
  EXPECT_TRUE(params.KeepHeld(HeldTensorsOf(params.config(), share)).ok());
  const bool on_device = memory != nullptr;
  TokenParallel parallel(tensor_views.For(on_device),
                         context_views.For(on_device), tensor_views.host(),
                         context_views.host());
  const std::unique_ptr<Backend> backend = MakeCpuTestBackend(bf16, memory);
  std::unique_ptr<ModelParameters> mirror =
      memory == nullptr ? nullptr : MirrorParameters(params, memory);
  absl::StatusOr<std::vector<StageSlice>> plan =
      PlanForModel(params.config(), "", 1);
  EXPECT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<StageModel> stage = StageModel::Create(
      mirror ? mirror.get() : &params, backend.get(), {}, plan->at(0));
  EXPECT_TRUE(stage.ok()) << stage.status();
  stage->set_token_parallel(&parallel);
  StageActivations acts;
  RankRun run;
  absl::StatusOr<StageLosses> losses =
      stage->Forward(TestBatch(), Tensor(), &acts);
  EXPECT_TRUE(losses.ok()) << losses.status();
  run.losses = *losses;
  Tensor d_input;
  EXPECT_TRUE(stage->Backward(acts, Tensor(), &d_input).ok());
  if (mirror) CopyGradients(*mirror, params);
  for (const NamedTensor& named : params.Named()) {
    if (named.grad != nullptr) run.grads[named.name] = *named.grad;
  }
  EXPECT_TRUE(parallel.status().ok()) << parallel.status();
  for (PlaceCheckingGroup* group : {tensor.get(), context.get()}) {
    if (group != nullptr) {
      EXPECT_GT(group->checked(), 0);
      EXPECT_TRUE(group->Barrier().ok());
    }
  }
  return run;
}

std::vector<RankRun> RunRanks(int tp, int cp, Allocator* memory = nullptr,
                              BufferPlace place = BufferPlace::kHost,
                              bool bf16 = false) {
  gloo::rendezvous::HashStore store;
  std::vector<RankRun> runs(tp * cp);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < tp * cp; ++rank) {
    threads.emplace_back([&, rank] {
      runs[rank] = RunRank(store, tp, cp, rank, memory, place, bf16);
    });
  }
  for (std::thread& thread : threads) thread.join();
  return runs;
}

// The whole gradient from the ranks': tensor-parallel parts joined, the rest
// (and the context ranks' parts) summed.
Tensor Assemble(const std::vector<RankRun>& runs, int tp,
                const std::string& name, const Tensor& whole) {
  const int dim = TensorParallelDim(name);
  const int cp = static_cast<int>(runs.size()) / tp;
  if (dim < 0) {
    Tensor sum(whole.shape());
    for (const RankRun& run : runs) {
      for (int64_t i = 0; i < sum.numel(); ++i) {
        sum.data()[i] += run.grads.at(name).data()[i];
      }
    }
    return sum;
  }
  std::vector<float> parts;
  for (int t = 0; t < tp; ++t) {
    Tensor part = runs[t].grads.at(name);
    for (int c = 1; c < cp; ++c) {
      for (int64_t i = 0; i < part.numel(); ++i) {
        part.data()[i] += runs[c * tp + t].grads.at(name).data()[i];
      }
    }
    parts.insert(parts.end(), part.values().begin(), part.values().end());
  }
  return JoinTensorParallelParts(parts.data(), whole.shape(), dim, tp);
}

void ExpectSameAsOneRank(int tp, int cp) {
  const RankRun one = RunRanks(1, 1)[0];
  const std::vector<RankRun> runs = RunRanks(tp, cp);
  double lm = 0, mtp = 0, indexer = 0;
  for (const RankRun& run : runs) {
    lm += run.losses.lm_loss;
    mtp += run.losses.mtp_loss;
    indexer += run.losses.indexer_loss;
  }
  EXPECT_NEAR(lm, one.losses.lm_loss, 1e-5 * one.losses.lm_loss);
  EXPECT_NEAR(mtp, one.losses.mtp_loss, 1e-5 * one.losses.mtp_loss);
  EXPECT_NEAR(indexer, one.losses.indexer_loss, 1e-5 * one.losses.indexer_loss);
  EXPECT_GT(one.losses.indexer_loss, 0);
  for (size_t layer = 0; layer < one.losses.expert_load.size(); ++layer) {
    for (size_t e = 0; e < one.losses.expert_load[layer].size(); ++e) {
      int64_t load = 0;
      for (const RankRun& run : runs) load += run.losses.expert_load[layer][e];
      EXPECT_EQ(load, one.losses.expert_load[layer][e])
          << "layer " << layer << " expert " << e;
    }
  }
  for (const auto& [name, whole] : one.grads) {
    const Tensor assembled = Assemble(runs, tp, name, whole);
    double max_diff = 0, max_abs = 0;
    for (int64_t i = 0; i < whole.numel(); ++i) {
      max_diff = std::max(
          max_diff, std::abs(double{assembled.data()[i]} - whole.data()[i]));
      max_abs = std::max(max_abs, std::abs(double{whole.data()[i]}));
    }
    EXPECT_LE(max_diff, 1e-5 * max_abs) << name << " max |grad| " << max_abs;
  }
}

TEST(TokenParallelTest, TensorParallelTwoEqualsOneRank) {
  ExpectSameAsOneRank(/*tp=*/2, /*cp=*/1);
}

TEST(TokenParallelTest, ContextParallelTwoEqualsOneRank) {
  ExpectSameAsOneRank(/*tp=*/1, /*cp=*/2);
}

// With the backend's tensors apart from the host (as on a GPU), every rank's
// losses and gradients equal the host run's bit for bit: with host groups
// (Gloo, two workers on one GPU) the gathers and reductions go through host
// copies; with groups that take the device's buffers (NCCL's place) they go
// to the groups where they lie.
TEST(TokenParallelTest, SeparateBackendMemoryGivesTheHostResults) {
  SeparateMemoryAllocator memory;
  const std::vector<RankRun> host = RunRanks(2, 2);
  for (BufferPlace place : {BufferPlace::kHost, BufferPlace::kDevice}) {
    SCOPED_TRACE(place == BufferPlace::kHost ? "host groups" : "device groups");
    const std::vector<RankRun> separate = RunRanks(2, 2, &memory, place);
    ASSERT_EQ(separate.size(), host.size());
    for (size_t rank = 0; rank < host.size(); ++rank) {
      EXPECT_EQ(separate[rank].losses.lm_loss, host[rank].losses.lm_loss);
      EXPECT_EQ(separate[rank].losses.indexer_loss,
                host[rank].losses.indexer_loss);
      for (const auto& [name, grad] : host[rank].grads) {
        EXPECT_EQ(separate[rank].grads.at(name).values(), grad.values())
            << name;
      }
    }
  }
}

TEST(TokenParallelTest, TensorTimesContextParallelEqualsOneRank) {
  ExpectSameAsOneRank(/*tp=*/2, /*cp=*/2);
}

// The bf16 mode's activations (kernels/cpu/bf16_activations_backend.h)
// through tensor and context parallelism: the ranks' gathers and reductions
// of the layers' inputs and partial outputs run beside bf16 buffers, and the
// losses follow one rank's. Only the losses: each split rounds its partial
// products elsewhere, which moves this tiny model's expert choices, and with
// them its gradients.
TEST(TokenParallelTest, Bf16ActivationsFollowOneRank) {
  const RankRun one = RunRanks(1, 1, nullptr, BufferPlace::kHost, true)[0];
  for (const auto& [tp, cp] : {std::pair{2, 1}, {1, 2}, {2, 2}}) {
    SCOPED_TRACE(absl::StrCat("tp ", tp, " cp ", cp));
    double lm = 0, mtp = 0;
    for (const RankRun& run :
         RunRanks(tp, cp, nullptr, BufferPlace::kHost, true)) {
      lm += run.losses.lm_loss;
      mtp += run.losses.mtp_loss;
    }
    EXPECT_NEAR(lm, one.losses.lm_loss, 1e-3 * one.losses.lm_loss);
    EXPECT_NEAR(mtp, one.losses.mtp_loss, 1e-3 * one.losses.mtp_loss);
  }
}

// 47 tokens over tp 2 x cp 2: four runs of 12, 12, 12, 11 tokens; context
// rank 0 takes the first and last, rank 1 the middle two; each tensor rank
// takes half of its chunk's rows.
TEST(TokenParallelTest, ContextChunksPairEarlyAndLateTokens) {
  using Runs = std::vector<std::pair<int64_t, int64_t>>;
  auto runs_of = [](const TokenRows& rows) {
    Runs runs;
    for (const TokenRange& run : rows.runs)
      runs.push_back({run.begin, run.count});
    return runs;
  };
  gloo::rendezvous::HashStore store;
  std::vector<std::pair<Runs, Runs>> held(4);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 4; ++rank) {
    threads.emplace_back([&, rank] {
      const std::unique_ptr<PlaceCheckingGroup> tensor =
          Join(store, absl::StrCat("tp-", rank / 2), rank % 2, 2);
      const std::unique_ptr<PlaceCheckingGroup> context =
          Join(store, absl::StrCat("cp-", rank % 2), rank / 2, 2);
      const TokenParallel parallel(tensor.get(), context.get());
      held[rank] = {runs_of(parallel.ChunkRows(47)),
                    runs_of(parallel.LocalRows(47))};
      // No rank leaves (closing its connections) before all are connected.
      EXPECT_TRUE(tensor->Barrier().ok());
      EXPECT_TRUE(context->Barrier().ok());
    });
  }
  for (std::thread& thread : threads) thread.join();
  const Runs first_chunk = {{0, 12}, {36, 11}},
             second_chunk = {{12, 12}, {24, 12}};
  EXPECT_EQ(held[0].first, first_chunk);
  EXPECT_EQ(held[1].first, first_chunk);
  EXPECT_EQ(held[2].first, second_chunk);
  EXPECT_EQ(held[3].first, second_chunk);
  EXPECT_EQ(held[0].second, (Runs{{0, 12}}));
  EXPECT_EQ(held[1].second, (Runs{{36, 11}}));
  EXPECT_EQ(held[2].second, (Runs{{12, 12}}));
  EXPECT_EQ(held[3].second, (Runs{{24, 12}}));
}

TEST(TokenParallelTest, TooFewTokensForTheRanksAreAClearError) {
  TokenParallel one_rank(nullptr, nullptr);
  EXPECT_TRUE(one_rank.CheckTokens(1).ok());  // cp 2 needs 4 tokens
  gloo::rendezvous::HashStore store;
  std::vector<absl::Status> statuses(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      const std::unique_ptr<PlaceCheckingGroup> context =
          Join(store, "cp", rank, 2);
      statuses[rank] = TokenParallel(nullptr, context.get()).CheckTokens(3);
      EXPECT_TRUE(context->Barrier().ok());
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const absl::Status& status : statuses) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("3 tokens is too short"), std::string::npos)
        << status;
  }
}

}  // namespace
}  // namespace glm
