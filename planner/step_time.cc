#include "planner/step_time.h"

#include <algorithm>
#include <vector>

#include "kernels/attention_pairs.h"
#include "planner/activation_memory.h"
#include "planner/collective_time.h"
#include "planner/rank_tensor_list.h"
#include "training/flops.h"

namespace glm {
namespace {

// A rank's forward multiply-adds of one micro batch of one stage, by the
// kernel that runs them, and the seconds of its attention and indexer
// kernels, by pass.
struct StageWork {
  double gemm = 0, experts = 0;
  double up_projections = 0;  // what selective recomputation redoes
  double attention_forward = 0, attention_backward = 0;
  double indexer_forward = 0;   // scores and top-k, recomputed with the layer
  double indexer_backward = 0;  // Megatron's: the scoring's backward
  double indexer_loss = 0;      // this trainer's KL loss, once a micro batch
};

// Per token: the MLA down-projections (every tensor rank runs them on its
// chunk), the up-projections, and the routed experts.
double DownProjectionMacs(const ModelConfig& m) {
  return static_cast<double>(m.hidden_size) *
         (m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim);
}
double UpProjectionMacs(const ModelConfig& m) {
  return static_cast<double>(m.num_attention_heads) *
         (m.q_lora_rank * m.QkHeadDim() +
          m.kv_lora_rank * (m.qk_nope_head_dim + m.v_head_dim));
}
double RoutedMacs(const ModelConfig& m) {
  return 3.0 * m.hidden_size * m.moe_intermediate_size * m.num_experts_per_tok;
}

bool IsMoe(const ModelConfig& m, int layer) {
  return layer > m.num_hidden_layers || m.IsMoeLayer(layer);
}

// Query-key pairs of a sequence's first `queries` queries over their causal
// keys.
double CausalPairs(int64_t queries) {
  return static_cast<double>(queries) * (queries + 1) / 2;
}

// Keys queries [from, to) of a sequence select: min(topk, t + 1) each.
double SelectedKeys(int64_t from, int64_t to, int64_t topk) {
  const int64_t growing_end = std::clamp(topk, from, to);
  return CausalPairs(growing_end) - CausalPairs(from) +
         static_cast<double>(to - growing_end) * topk;
}

// The per-head backward's pairs of a sequence's first `queries` queries as
// this trainer's cuDNN calls take them (CudnnAttention::CallChunks): calls
// of pairs_per_call / queries queries each, the first over its causal keys,
// each later one masked over every key up to its last query.
struct PerHeadBackwardPairs {
  double first_call = 0, later_calls = 0;
};
PerHeadBackwardPairs BackwardPairsOf(int64_t queries, int64_t pairs_per_call) {
  if (queries == 0) return {};
  const int64_t rows = QueriesPerAttentionCall(pairs_per_call, queries);
  const int64_t calls = (queries + rows - 1) / rows;
  PerHeadBackwardPairs pairs;
  pairs.first_call = CausalPairs(std::min(rows, queries));
  if (calls > 1) {
    // Calls 2..calls-1 end at 2, 3, ... calls-1 times rows queries; the
    // last at `queries`.
    const double r = static_cast<double>(rows);
    pairs.later_calls =
        r * r * (static_cast<double>(calls - 1) * calls / 2 - 1) +
        static_cast<double>(queries - (calls - 1) * rows) * queries;
  }
  return pairs;
}

// The dense indexer loss scores every key of its call while each query
// selects at least one in this many (DenseKlApplies, kernels/cuda/
// indexer.cu); past that the sparse loss takes the selected keys.
constexpr int64_t kDenseIndexerLossKeysPerSelected = 8;

// This trainer's attention and indexer kernels of `layer` for one micro
// batch on a rank (rates of kernel_rates.h). Tensor ranks split the heads and
// context ranks the queries of the attention; the indexer runs on the whole
// chunk of every tensor rank.
void AddTrainerAttention(const PlanJob& job, const Split& split,
                         const DeviceSpec& device, const KernelRates& rates,
                         int layer, bool has_indexer, StageWork* work) {
  const ModelConfig& m = job.model;
  const double peak = device.matmul_flops;
  const double bandwidth = device.memory_bandwidth;
  const double tp = split.tp, cp = split.cp;
  const double head_macs = static_cast<double>(m.num_attention_heads) *
                           (m.QkHeadDim() + m.v_head_dim);
  const double row_bytes =
      static_cast<double>(m.kv_lora_rank + m.qk_rope_head_dim) *
      (job.precision == Precision::kFp32Bf16Copies ? 2 : 4);
  const bool latent = LatentQueries(job, split, layer) > 0;
  for (int64_t s = 0; s < job.micro_batch_size; ++s) {
    // The sequence's queries before the micro batch's latent_from.
    const int64_t per_head =
        latent ? std::clamp<int64_t>(
                     job.latent_attention_from - s * job.seq_length, 0,
                     job.seq_length)
               : job.seq_length;
    const PerHeadBackwardPairs backward =
        BackwardPairsOf(per_head, job.attention_pairs_per_call);
    const double latent_bytes =
        SelectedKeys(per_head, job.seq_length, m.index_topk) * row_bytes;
    work->attention_forward +=
        (2 * head_macs * CausalPairs(per_head) /
             (peak * rates.per_head_attention) +
         latent_bytes / (bandwidth * rates.latent_attention_forward)) /
        (tp * cp);
    work->attention_backward +=
        (4 * head_macs *
             (backward.first_call / rates.per_head_attention +
              backward.later_calls / rates.per_head_attention_later_calls) /
             peak +
         latent_bytes / (bandwidth * rates.latent_attention_backward)) /
        (tp * cp);
  }
  if (!has_indexer) return;
  const double sequences = static_cast<double>(job.micro_batch_size);
  const double score_macs =
      static_cast<double>(m.index_n_heads) * m.index_head_dim;
  const double pairs = CausalPairs(job.seq_length) * sequences;
  work->indexer_forward +=
      2 * score_macs * pairs / (peak * rates.indexer_scores) / cp;
  if (TokenShareOf(job, split).all <=
      kDenseIndexerLossKeysPerSelected * m.index_topk) {
    work->indexer_loss +=
        2 * score_macs * pairs / (peak * rates.indexer_loss_dense) / cp;
  } else {
    // Each selected key's fp32 row read twice and its gradient row added.
    const double key_bytes = 3.0 * m.index_head_dim * 4;
    const double keys =
        SelectedKeys(0, job.seq_length, m.index_topk) * sequences;
    work->indexer_loss +=
        keys * key_bytes / (bandwidth * rates.indexer_loss_sparse) / cp;
  }
}

// Megatron's DSA kernels of `layer`: training/flops.h's attention core over
// the selected keys and the indexer (projections and scoring), forward and
// twice that backward, at the published sparse rates.
void AddSparseAttention(const PlanJob& job, const Split& split,
                        const DeviceSpec& device, const KernelRates& rates,
                        const ForwardMacs& f, StageWork* work) {
  const double sequences = static_cast<double>(job.micro_batch_size);
  const double peak = device.matmul_flops;
  const double attention = f.attention_core * sequences / (split.tp * split.cp);
  const double indexer = f.indexer * sequences / split.cp;
  work->attention_forward +=
      2 * attention / (peak * rates.sparse_attention_forward);
  work->attention_backward +=
      4 * attention / (peak * rates.sparse_attention_backward);
  work->indexer_forward += 2 * indexer / (peak * rates.sparse_indexer);
  work->indexer_backward += 4 * indexer / (peak * rates.sparse_indexer);
}

// One decoder layer on one rank: tensor ranks split heads and the dense
// MLP, context ranks the queries; both split the tokens of what runs
// between layers; the down-projections and the indexer run on the whole
// chunk of every tensor rank; the busiest expert rank runs the imbalance
// times the mean of routed rows.
void AddLayer(const PlanJob& job, const Split& split, const DeviceSpec& device,
              const KernelRates& rates, int layer, StageWork* work) {
  const ModelConfig& m = job.model;
  const double tokens = static_cast<double>(job.tokens_per_micro_batch());
  const double sequences = static_cast<double>(job.micro_batch_size);
  const ForwardMacs f = DecoderLayerForwardMacs(m, layer, job.seq_length);
  const double tp = split.tp, cp = split.cp;
  const double down = DownProjectionMacs(m) * tokens;
  const double routed = IsMoe(m, layer) ? RoutedMacs(m) * tokens : 0.0;
  const double imbalance = split.ep > 1 ? job.routing_imbalance : 1.0;
  work->gemm += (f.attention_projections * sequences - down) / (tp * cp) +
                down / cp + (f.mlp * sequences - routed) / (tp * cp);
  work->experts += routed / (tp * cp) * imbalance;
  work->up_projections += UpProjectionMacs(m) * tokens / (tp * cp);
  if (!IsTrainerStore(job.precision)) {
    AddSparseAttention(job, split, device, rates, f, work);
    return;
  }
  // training/flops.h's indexer count is its projections, GEMMs here, and
  // its scores over every causal pair, which the indexer's kernels run.
  const double scores = static_cast<double>(m.index_n_heads) *
                        m.index_head_dim * CausalPairs(job.seq_length);
  if (f.indexer > 0) work->gemm += (f.indexer - scores) * sequences / cp;
  AddTrainerAttention(job, split, device, rates, layer, f.indexer > 0, work);
}

StageWork WorkOf(const PlanJob& job, const Split& split,
                 const DeviceSpec& device, const KernelRates& rates,
                 const StageSlice& stage) {
  const ModelConfig& m = job.model;
  StageWork work;
  for (int layer = stage.first_layer; layer > 0 && layer <= stage.last_layer;
       ++layer) {
    AddLayer(job, split, device, rates, layer, &work);
  }
  if (!stage.has_loss) return work;
  const double tokens = static_cast<double>(job.tokens_per_micro_batch());
  const double logits = static_cast<double>(m.hidden_size) * m.vocab_size *
                        tokens / (split.tp * split.cp);
  work.gemm += logits;
  for (int k = 1; k <= stage.mtp_layers; ++k) {
    AddLayer(job, split, device, rates, m.num_hidden_layers + k, &work);
    // eh_proj and the MTP head's logits.
    work.gemm +=
        (2.0 * m.hidden_size * m.hidden_size * tokens) / (split.tp * split.cp) +
        logits;
  }
  return work;
}

// Compute and recomputation seconds of `work` forward and backward.
void AddCompute(const PlanJob& job, const Split& split,
                const DeviceSpec& device, const KernelRates& rates,
                const StageWork& work, MicroBatchTime* time) {
  const double peak = device.matmul_flops;
  auto seconds = [&](double m, double rate) { return 2 * m / (peak * rate); };
  // Backward is twice the forward's work (training/flops.h).
  time->gemm += 3 * seconds(work.gemm, rates.gemm);
  time->experts += 3 * seconds(work.experts, rates.grouped_gemm);
  time->attention += work.attention_forward + work.attention_backward;
  time->indexer += work.indexer_forward + work.indexer_backward;
  time->indexer_loss += work.indexer_loss;
  if (job.recompute == Recompute::kFull) {
    // Routed experts in chunks run each chunk's forward once more, in the
    // chunk's backward, where its dropped rows are formed again.
    const int expert_forwards =
        ExpertChunksOf(job, split).formed_in_backward ? 2 : 1;
    time->recompute +=
        seconds(work.gemm, rates.gemm) +
        expert_forwards * seconds(work.experts, rates.grouped_gemm) +
        work.attention_forward + work.indexer_forward;
  } else if (job.recompute == Recompute::kSelective) {
    time->recompute += seconds(work.up_projections, rates.gemm);
  }
}

// The collectives inside a stage's layers for one micro batch, forward and
// backward (and the forward again under full recomputation).
void AddLayerCollectives(const PlanJob& job, const SplitPlan& plan,
                         const ClusterSpec& cluster, const KernelRates& rates,
                         int rank, const StageSlice& stage,
                         MicroBatchTime* time) {
  const ModelConfig& m = job.model;
  const Split& split = plan.split;
  const TokenShare t = TokenShareOf(job, split);
  const double element = static_cast<double>(ElementBytes(job.precision));
  const GroupLinks tensor(cluster, rates, plan.grid, rank, GroupKind::kTp);
  const GroupLinks context(cluster, rates, plan.grid, rank, GroupKind::kCp);
  const GroupLinks experts(cluster, rates, plan.grid, rank, GroupKind::kEp);
  // Expert tensor parallelism (Megatron's): consecutive ranks of the expert
  // grid split each expert's intermediate and share their tokens.
  std::vector<int> etp_members;
  for (int r = rank - rank % split.etp; r < rank - rank % split.etp + split.etp;
       ++r) {
    etp_members.push_back(r);
  }
  const GroupLinks expert_tensor(cluster, rates, rank, etp_members);
  const int passes = job.recompute == Recompute::kFull ? 3 : 2;
  const double chunk = static_cast<double>(t.chunk) * m.hidden_size * element;
  auto layer = [&](int n) {
    // Sequence parallelism gathers each block's input over the tensor
    // ranks and reduce-scatters its output: attention, and the dense MLP.
    const int blocks = IsMoe(m, n) ? 1 : 2;
    time->tensor_parallel +=
        passes * blocks * 2 * tensor.AllGatherSeconds(chunk);
    // Context ranks gather every chunk's latent keys (and indexer keys).
    const bool indexer = n <= m.num_hidden_layers
                             ? m.index_sharing.IsComputingLayer(n)
                             : m.index_sharing.topk_freq <= 1;
    const double keys = static_cast<double>(t.all) *
                        (m.kv_lora_rank + m.qk_rope_head_dim +
                         (indexer ? m.index_head_dim : 0)) *
                        element;
    time->context_parallel += passes * context.AllGatherSeconds(keys);
    // Dispatch and combine, forward and backward.
    if (IsMoe(m, n)) {
      const double rows =
          static_cast<double>(t.routed) * m.hidden_size * element;
      time->expert_parallel += passes * 2 * experts.AllToAllSeconds(rows);
      // The expert-tensor ranks gather each other's rows and reduce-scatter
      // the outputs.
      time->expert_parallel +=
          passes * 2 * expert_tensor.AllGatherSeconds(rows * split.etp);
    }
  };
  for (int n = stage.first_layer; n > 0 && n <= stage.last_layer; ++n) {
    layer(n);
  }
  for (int k = 1; k <= stage.mtp_layers; ++k) layer(m.num_hidden_layers + k);
}

// Bytes of weights and gradients a micro batch moves: every weight read in
// forward and again in backward, every gradient read and written as it
// accumulates (none for frozen weights). Where the store keeps bf16 copies
// of the product weights, products read those instead of the fp32 values
// (half their bytes). Small micro batches make layers
// weight-bandwidth-bound.
double WeightTraffic(const StateBytes& state) {
  return 2.0 * static_cast<double>(state.weights - state.copies) +
         2.0 * static_cast<double>(state.gradients);
}

// Bytes the memory-bound kernels of a stage's micro batch move: every
// activation its layers form (those a step without recomputation keeps)
// written in forward, read and its gradient written in backward, and what
// recomputation drops written once more when it is formed again.
double MemoryBoundBytes(const PlanJob& job, const Split& split,
                        const StageSlice& stage) {
  absl::StatusOr<StageActivationBytes> kept =
      StageActivationMemory(job, split, stage);
  if (!kept.ok()) return 0;
  const double kept_bytes = static_cast<double>(kept->saved_bytes());
  if (job.recompute == Recompute::kNone) return 3 * kept_bytes;
  PlanJob kept_whole = job;
  kept_whole.recompute = Recompute::kNone;
  absl::StatusOr<StageActivationBytes> whole =
      StageActivationMemory(kept_whole, split, stage);
  if (!whole.ok()) return 3 * kept_bytes;
  const double formed = static_cast<double>(whole->saved_bytes());
  return 3 * formed + (formed - kept_bytes);
}

MicroBatchTime RankMicroBatch(const PlanJob& job, const SplitPlan& plan,
                              const ClusterSpec& cluster,
                              const KernelRates& rates,
                              const RankMemory& memory, int rank) {
  const int pp_rank = memory.pp_rank;
  MicroBatchTime time;
  const double bandwidth = cluster.device.memory_bandwidth * rates.memory;
  time.memory += WeightTraffic(memory.state) / bandwidth;
  for (const StageSlice& stage : plan.StagesOf(pp_rank)) {
    AddCompute(job, plan.split, cluster.device, rates,
               WorkOf(job, plan.split, cluster.device, rates, stage), &time);
    AddLayerCollectives(job, plan, cluster, rates, rank, stage, &time);
    time.memory += MemoryBoundBytes(job, plan.split, stage) / bandwidth;
    if (plan.split.pp > 1) {
      // The output forward and its gradient back, to and from neighbours.
      const int next = rank + plan.world / plan.split.pp;
      const double hidden = static_cast<double>(
          TokenShareOf(job, plan.split).local * job.model.hidden_size *
          ElementBytes(job.precision));
      time.pipeline_send +=
          2 * SendSeconds(cluster, rates, rank, next % plan.world, hidden);
    }
  }
  return time;
}

const RankCoordinates& FirstRankOf(const SplitPlan& plan, int pp_rank) {
  for (const RankCoordinates& c : plan.grid.ranks) {
    if (c.pp == pp_rank) return c;
  }
  return plan.grid.ranks.front();
}

// The exchanges after the micro batches, in seconds: Megatron reduce-
// scatters bf16 gradients and all-gathers bf16 weights over data x context
// ranks (routed experts over expert-data ranks), mostly behind compute.
// This trainer all-reduces fp32 gradients over the context and tensor
// groups, then over the data-parallel group (under ZeRO-1 an all-reduce of
// the gradients and an all-gather of the weights, each shard broadcast from
// its rank), routed experts over the expert-data group. Under
// overlap_grad_reduce on a split of data parallelism alone the last micro
// batch's backward (two thirds of `micro_batch`) hides the all-reduce but for
// the embedding's, which starts when that backward ends
// (training/overlapped_gradient_sum.h); ZeRO-1's gather follows the update.
double ExchangeSeconds(const PlanJob& job, const SplitPlan& plan,
                       const ClusterSpec& cluster, const KernelRates& rates,
                       const RankCoordinates& c, double micro_batch) {
  const std::vector<RankTensor> trainable =
      TrainableOf(job, *RankTensorsAt(job, plan, c));
  const OptimizerLists lists = OptimizerListsOf(job, plan, trainable);
  const double dense = static_cast<double>(ElementsOf(lists.dense));
  const double experts = static_cast<double>(ElementsOf(lists.experts));
  auto links = [&](GroupKind kind) {
    return GroupLinks(cluster, rates, plan.grid, c.rank, kind);
  };
  if (job.precision == Precision::kBf16Mixed) {
    const double seconds =
        2 * links(GroupKind::kDp)
                .RingSeconds(dense * 2, plan.dp() * plan.split.cp) +
        2 * links(GroupKind::kExpertDp).AllGatherSeconds(experts * 2);
    return seconds * (1 - rates.megatron_dp_overlap);
  }
  double seconds = links(GroupKind::kCp).AllReduceSeconds(dense * 4);
  double unsplit = 0;
  for (const RankTensor& t : lists.dense) {
    if (!t.tensor_split) unsplit += static_cast<double>(t.elements);
  }
  seconds += links(GroupKind::kTp).AllReduceSeconds(unsplit * 4);
  const GroupLinks dp = links(GroupKind::kDp);
  const GroupLinks expert_dp = links(GroupKind::kExpertDp);
  double sums =
      dp.AllReduceSeconds(dense * 4) + expert_dp.AllReduceSeconds(experts * 4);
  const double gathers = job.distributed_optimizer
                             ? dp.AllGatherSeconds(dense * 4) +
                                   expert_dp.AllGatherSeconds(experts * 4)
                             : 0.0;
  const Split& s = plan.split;
  if (job.overlap_grad_reduce && s.tp * s.cp * s.pp * s.ep == 1) {
    const double embedding = static_cast<double>(job.model.vocab_size) *
                             static_cast<double>(job.model.hidden_size);
    sums = std::max(dp.AllReduceSeconds(embedding * 4),
                    sums - 2.0 / 3.0 * micro_batch);
  }
  return seconds + sums + gathers;
}

// The optimizer's pass: per updated element a gradient read, the master
// (or fp32) weight and two moments read and written, and in mixed
// precision the bf16 weight written; then the gradients zeroed, and the bf16
// copies of product weights written where the store keeps them. The moments'
// bytes over 8 count the updated elements (a few more where this trainer pads
// each tensor's moments to 256 bytes).
double OptimizerSeconds(const PlanJob& job, const ClusterSpec& cluster,
                        const KernelRates& rates, const StateBytes& state) {
  const double updated = static_cast<double>(state.moments / 8);
  const double per_element =
      job.precision == Precision::kBf16Mixed ? 30.0 : 28.0;
  return (updated * per_element + static_cast<double>(state.gradients) +
          static_cast<double>(state.copies)) /
         (cluster.device.memory_bandwidth * rates.memory);
}

}  // namespace

absl::StatusOr<StepTime> PredictStepTime(
    const PlanJob& job, const SplitPlan& plan, const ClusterSpec& cluster,
    const KernelRates& rates, const std::vector<RankMemory>& memory) {
  StepTime step;
  double slowest = -1;
  for (const RankMemory& rank : memory) {
    const MicroBatchTime time = RankMicroBatch(
        job, plan, cluster, rates, rank, FirstRankOf(plan, rank.pp_rank).rank);
    if (time.Total() > slowest) {
      slowest = time.Total();
      step.slowest = time;
      step.slowest_pp_rank = rank.pp_rank;
    }
  }
  step.micro_batches = static_cast<double>(plan.micro_batches_per_rank(job));
  const double chunks = static_cast<double>(plan.stages.size()) / plan.split.pp;
  step.bubble = (plan.split.pp - 1) / chunks * slowest;
  for (const RankMemory& rank : memory) {
    step.data_parallel =
        std::max(step.data_parallel,
                 ExchangeSeconds(job, plan, cluster, rates,
                                 FirstRankOf(plan, rank.pp_rank), slowest));
    step.optimizer = std::max(
        step.optimizer, OptimizerSeconds(job, cluster, rates, rank.state));
  }
  step.model_flops =
      TrainingFlops(job.model, job.seq_length, job.global_batch_size);
  return step;
}

}  // namespace glm
