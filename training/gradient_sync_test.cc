// Gradients in an arena (host or device) are all-reduced where they lie, one
// call per run of consecutive tensors, and end where packed copies of the
// same gradients end (bit for bit with two ranks); a data-parallel trainer
// whose weights are handed to it on an allocator takes the steps of one that
// makes its own host model, bit for bit, and both reduce with one all-reduce
// over their whole gradient arena per step.
#include "training/gradient_sync.h"

#include <cassert>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/separate_memory_allocator.h"
#include "kernels/tensor_arena.h"
#include "parallel/gloo_collectives.h"
#include "training/hashed_token_dataset.h"
#include "training/trainer.h"
#include "training/training_data.h"

namespace glm {
namespace {

// Forwards to `inner` (null: a simulated group of three, whose other two
// members hold 2x and x / 4 for each element x of this member's, summed in
// rank order) and records every float all-reduce.
class RecordingGroup : public Collectives {
 public:
  struct Call {
    const float* data;
    int64_t count;
  };

  explicit RecordingGroup(Collectives* inner = nullptr) : inner_(inner) {}

  int rank() const override { return inner_ ? inner_->rank() : 0; }
  int size() const override { return inner_ ? inner_->size() : 3; }
  absl::Status AllReduce(float* data, int64_t count, ReduceOp op) override {
    calls.push_back({data, count});
    if (inner_) return inner_->AllReduce(data, count, op);
    for (int64_t i = 0; i < count; ++i) {
      const float x = data[i];
      data[i] = (x + 2.f * x) + x / 4.f;
    }
    return absl::OkStatus();
  }
  absl::Status AllReduceSum(int64_t* data, int64_t count) override {
    return Inner()->AllReduceSum(data, count);
  }
  absl::Status Broadcast(float* data, int64_t count, int root) override {
    return Inner()->Broadcast(data, count, root);
  }
  absl::Status AllGather(const float* in, int64_t count, float* out) override {
    return Inner()->AllGather(in, count, out);
  }
  absl::Status ReduceScatter(const float* in, int64_t count, float* out,
                             ReduceOp op) override {
    return Inner()->ReduceScatter(in, count, out, op);
  }
  absl::Status AllToAllV(const float* in,
                         const std::vector<int64_t>& send_counts, float* out,
                         const std::vector<int64_t>& recv_counts) override {
    return Inner()->AllToAllV(in, send_counts, out, recv_counts);
  }
  absl::StatusOr<std::unique_ptr<PendingSend>> StartSend(const float* data,
                                                         int64_t count,
                                                         int peer) override {
    return Inner()->StartSend(data, count, peer);
  }
  absl::Status Recv(float* data, int64_t count, int peer) override {
    return Inner()->Recv(data, count, peer);
  }
  absl::Status Barrier() override { return Inner()->Barrier(); }

  std::vector<Call> calls;

 private:
  Collectives* Inner() {
    assert(inner_ != nullptr);
    return inner_;
  }
  Collectives* inner_;
};

// Values that differ by tensor, element and rank.
void Fill(int rank, std::vector<Tensor>* tensors) {
  for (size_t t = 0; t < tensors->size(); ++t) {
    Tensor host((*tensors)[t].shape(), nullptr);
    for (int64_t i = 0; i < host.numel(); ++i) {
      host.values()[i] = 0.37f * (t + 1) + 1e-3f * i - 0.71f * rank +
                         (i % 7 == 3 ? 1e-6f : 0.f);
    }
    (*tensors)[t].CopyFrom(host);
  }
}

// The same gradients twice: in an arena (shapes in order; host memory when
// `device` is null) and as host tensors of their own, with `names` the ones
// the list holds.
struct TwoLayouts {
  std::vector<Tensor> arena, host;
  std::vector<TrainableTensor> arena_list, host_list;
};

TwoLayouts MakeLayouts(Allocator* device, int rank,
                       const std::vector<std::vector<int64_t>>& shapes,
                       const std::vector<size_t>& listed) {
  TwoLayouts l;
  l.arena = ZerosInOneAllocation(device, shapes);
  for (const std::vector<int64_t>& shape : shapes) {
    l.host.emplace_back(shape, nullptr);
  }
  Fill(rank, &l.arena);
  Fill(rank, &l.host);
  for (size_t i : listed) {
    const std::string name = "t" + std::to_string(i);
    l.arena_list.push_back({name, nullptr, &l.arena[i]});
    l.host_list.push_back({name, nullptr, &l.host[i]});
  }
  return l;
}

void ExpectSameBits(const TwoLayouts& l) {
  for (size_t i = 0; i < l.arena.size(); ++i) {
    EXPECT_EQ(l.arena[i].CopyTo(nullptr).values(), l.host[i].values())
        << "tensor " << i;
  }
}

const std::vector<std::vector<int64_t>> kShapes = {
    {3, 5}, {7}, {0, 4}, {2, 2, 2}, {10}, {65}, {4, 33}};

void ExpectArenaRunsReducedWhereTheyLie(Allocator* memory) {
  // Tensor 4 is not in the list (as a routed expert is not in the dense
  // list): tensors 0-3 form one run, 5-6 another.
  TwoLayouts l = MakeLayouts(memory, 0, kShapes, {0, 1, 2, 3, 5, 6});
  Tensor own({6}, nullptr);  // an adapter, say: an allocation of its own
  Tensor own_copy({6}, nullptr);
  for (int i = 0; i < 6; ++i) own.values()[i] = own_copy.values()[i] = i - 2.5f;
  l.arena_list.push_back({"own", nullptr, &own});
  l.host_list.push_back({"own", nullptr, &own_copy});

  RecordingGroup arena_group;
  ASSERT_TRUE(AllReduceGradients(arena_group, l.arena_list).ok());
  ASSERT_EQ(arena_group.calls.size(), 3u);
  EXPECT_EQ(arena_group.calls[0].data, l.arena[0].data());
  EXPECT_EQ(arena_group.calls[0].count, 64 + 64 + 8);
  EXPECT_EQ(arena_group.calls[1].data, l.arena[5].data());
  EXPECT_EQ(arena_group.calls[1].count, 128 + 4 * 33);
  // The tensor of its own travels packed: a buffer outside both.
  EXPECT_EQ(arena_group.calls[2].count, 6);
  EXPECT_NE(arena_group.calls[2].data, own.data());

  RecordingGroup host_group;
  ASSERT_TRUE(AllReduceGradients(host_group, l.host_list).ok());
  ASSERT_EQ(host_group.calls.size(), 1u);
  EXPECT_EQ(host_group.calls[0].count, 15 + 7 + 8 + 65 + 4 * 33 + 6);

  ExpectSameBits(l);
  EXPECT_EQ(own.values(), own_copy.values());
  // Left out of the list: unchanged.
  Fill(0, &l.host);
  EXPECT_EQ(l.arena[4].CopyTo(nullptr).values(), l.host[4].values());
}

TEST(GradientSyncTest, DeviceArenaRunsAreReducedWhereTheyLie) {
  SeparateMemoryAllocator device;
  ExpectArenaRunsReducedWhereTheyLie(&device);
}

TEST(GradientSyncTest, HostArenaRunsAreReducedWhereTheyLie) {
  ExpectArenaRunsReducedWhereTheyLie(nullptr);
}

TEST(GradientSyncTest, NothingToReduceCallsNothing) {
  RecordingGroup group;
  Tensor empty({0, 3}, nullptr);
  ASSERT_TRUE(AllReduceGradients(group, {{"e", nullptr, &empty}}).ok());
  EXPECT_TRUE(group.calls.empty());
}

// Ranks on threads with Gloo: every rank ends with the same sums, and with
// two ranks they equal the packed ones bit for bit (a sum of two floats is
// the same in either order). With more, Gloo's ring adds an element's
// contributions in an order set by the element's place in the call's
// buffer, which differs between the arena and a packed copy: the sums then
// agree to rounding.
void ExpectGlooRanksMatchPacking(int ranks) {
  gloo::rendezvous::HashStore store;
  std::vector<std::vector<std::vector<float>>> sums(ranks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank) {
    threads.emplace_back([&, rank] {
      auto group = GlooCollectives::Connect(store, "dp", rank, ranks, {});
      ASSERT_TRUE(group.ok()) << group.status();
      SeparateMemoryAllocator device;
      const std::vector<size_t> listed = {0, 1, 3, 4, 6};
      TwoLayouts l = MakeLayouts(&device, rank, kShapes, listed);
      ASSERT_TRUE(AllReduceGradients(**group, l.arena_list).ok());
      ASSERT_TRUE(AllReduceGradients(**group, l.host_list).ok());
      if (ranks == 2) ExpectSameBits(l);
      for (size_t i : listed) {
        const std::vector<float> arena = l.arena[i].CopyTo(nullptr).values();
        for (size_t e = 0; e < arena.size(); ++e) {
          EXPECT_NEAR(arena[e], l.host[i].values()[e],
                      1e-6f * std::abs(l.host[i].values()[e]));
        }
        sums[rank].push_back(arena);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int rank = 1; rank < ranks; ++rank) EXPECT_EQ(sums[rank], sums[0]);
}

TEST(GradientSyncTest, TwoGlooRanksMatchPacking) {
  ExpectGlooRanksMatchPacking(2);
}

TEST(GradientSyncTest, ThreeGlooRanksAgree) { ExpectGlooRanksMatchPacking(3); }

TrainerOptions Options() {
  TrainerOptions o;
  o.model = *PresetConfig("glm5.2-tiny");
  o.train_iters = 2;
  o.global_batch_size = 4;
  o.micro_batch_size = 1;
  o.seq_length = 16;
  o.schedule = {3e-3, 3e-4, 1, 2};
  o.router_bias_update_rate = 1e-2;
  o.seed = 7;
  return o;
}

struct RankRun {
  std::vector<v1::StepMetrics> steps;
  std::map<std::string, std::vector<float>> state;
  std::vector<RecordingGroup::Call> calls;
  // The first gradient's data and the end of the last one (in Named()
  // order), and every gradient's elements.
  const float* first_grad = nullptr;
  const float* grads_end = nullptr;
  int64_t grad_elements = 0;
};

// One of two data-parallel ranks (EP2 over the same ranks when
// `expert_parallel`); `memory` (null: the trainer's own host model) is where
// the weights given to the trainer live, as they do when a worker hands over
// weights on an allocator. They are given whole: under EP2 the trainer cuts
// them to the rank's experts where they live. The backend computes in host
// memory either way.
RankRun TrainRank(gloo::rendezvous::HashStore& store, const std::string& prefix,
                  int rank, bool expert_parallel, Allocator* memory) {
  RankRun run;
  auto dp = GlooCollectives::Connect(store, prefix + "dp", rank, 2, {});
  EXPECT_TRUE(dp.ok()) << dp.status();
  if (!dp.ok()) return run;
  RecordingGroup recording(dp->get());
  std::unique_ptr<Collectives> experts, expert_data;
  std::optional<ExpertParallelRank> ep;
  if (expert_parallel) {
    experts = *GlooCollectives::Connect(store, prefix + "ep", rank, 2, {});
    expert_data = *GlooCollectives::Connect(
        store, prefix + "edp" + std::to_string(rank), 0, 1, {});
    ep = ExpertParallelRank{experts.get(), expert_data.get()};
  }
  const TrainerOptions options = Options();
  std::unique_ptr<ModelParameters> params;
  if (memory != nullptr) {
    ModelParameters host(options.model);
    host.InitRandom(options.seed);
    params = MirrorParameters(host, memory);
  }
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(
      options,
      std::make_unique<PretrainData>(
          std::make_unique<HashedTokenDataset>(options.seq_length)),
      std::move(params), std::make_unique<CpuBackend>(), &recording,
      std::nullopt, ep);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return run;
  while (!(*trainer)->Done()) {
    absl::StatusOr<v1::StepMetrics> metrics = (*trainer)->Step();
    EXPECT_TRUE(metrics.ok()) << metrics.status();
    if (!metrics.ok()) return run;
    run.steps.push_back(*metrics);
  }
  const TrainingState state = (*trainer)->State();
  for (const auto* tensors : {&state.model, &state.optimizer}) {
    for (const StateTensor& t : *tensors) {
      run.state[t.name] = t.tensor->CopyTo(nullptr).values();
    }
  }
  for (const NamedTensor& t : (*trainer)->params().Named()) {
    if (t.grad == nullptr || t.grad->empty()) continue;
    if (run.first_grad == nullptr) run.first_grad = t.grad->data();
    run.grads_end = t.grad->data() + t.grad->numel();
    run.grad_elements += t.grad->numel();
  }
  run.calls = recording.calls;
  return run;
}

std::vector<RankRun> TrainTwoRanks(bool expert_parallel, Allocator* memory) {
  gloo::rendezvous::HashStore store;
  std::vector<RankRun> runs(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      runs[rank] = TrainRank(store, "", rank, expert_parallel, memory);
    });
  }
  for (std::thread& t : threads) t.join();
  return runs;
}

// Every all-reduce of `run` but the scalars' lies inside its gradient arena:
// without experts one call per step over the whole arena, with them calls
// that start inside it.
void ExpectReducedInTheGradientArena(const RankRun& run, bool expert_parallel,
                                     const std::string& where) {
  int64_t whole_arena_calls = 0, arena_calls = 0;
  for (const RecordingGroup::Call& call : run.calls) {
    const bool inside =
        call.data >= run.first_grad && call.data + call.count <= run.grads_end;
    if (call.data == run.first_grad &&
        call.count == run.grads_end - run.first_grad) {
      ++whole_arena_calls;
    }
    if (inside) ++arena_calls;
    EXPECT_TRUE(inside || call.count <= 3) << where << ": " << call.count;
  }
  if (expert_parallel) {
    EXPECT_GT(arena_calls, 2) << where;
    EXPECT_EQ(whole_arena_calls, 0) << where;
  } else {
    EXPECT_EQ(whole_arena_calls, 2) << where;
    EXPECT_EQ(arena_calls, 2) << where;
  }
}

TEST(GradientSyncTest, TrainerReducesArenaGradientsWhereTheyLie) {
  SeparateMemoryAllocator memory;
  for (const bool expert_parallel : {false, true}) {
    const std::vector<RankRun> host = TrainTwoRanks(expert_parallel, nullptr);
    const std::vector<RankRun> arena = TrainTwoRanks(expert_parallel, &memory);
    for (int rank = 0; rank < 2; ++rank) {
      const std::string where =
          (expert_parallel ? "EP2 rank " : "DP2 rank ") + std::to_string(rank);
      ASSERT_EQ(arena[rank].steps.size(), host[rank].steps.size()) << where;
      for (size_t i = 0; i < host[rank].steps.size(); ++i) {
        EXPECT_EQ(arena[rank].steps[i].lm_loss(), host[rank].steps[i].lm_loss())
            << where;
        EXPECT_EQ(arena[rank].steps[i].grad_norm(),
                  host[rank].steps[i].grad_norm())
            << where;
      }
      EXPECT_EQ(arena[rank].state, host[rank].state) << where;
      ExpectReducedInTheGradientArena(host[rank], expert_parallel,
                                      where + " (host model)");
      ExpectReducedInTheGradientArena(arena[rank], expert_parallel, where);
    }
  }
}

}  // namespace
}  // namespace glm
