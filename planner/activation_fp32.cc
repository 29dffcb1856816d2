// This trainer's activations: every tensor the Activations structs of
// model/*.h and parallel/stage_model.h keep, fp32 values and int32 indices,
// in the shapes the forward passes allocate them (model/mla_attention.cc,
// model/indexer.cc, model/moe.cc, model/expert_dispatch.cc,
// model/mtp_layer.cc). Host vectors (token lists, layouts) are marked: they
// live in host memory on every backend.
#include <algorithm>
#include <string>
#include <utility>

#include "model/head_loss.h"
#include "planner/activation_memory.h"

namespace glm {
namespace {

constexpr int64_t kElementBytes = 4;  // fp32 values and int32 indices

class Terms {
 public:
  void Add(std::string name, int64_t elements) {
    terms_.push_back({std::move(name), kElementBytes * elements, false});
  }
  void AddHost(std::string name, int64_t elements) {
    terms_.push_back({std::move(name), kElementBytes * elements, true});
  }
  void Append(const std::vector<MemoryTerm>& more) {
    terms_.insert(terms_.end(), more.begin(), more.end());
  }
  std::vector<MemoryTerm> Take() { return std::move(terms_); }

 private:
  std::vector<MemoryTerm> terms_;
};

// The model's sizes as one rank holds them.
struct Dims {
  int64_t hidden, q_lora, kv_lora, rope, nope, v, qk, heads;
  int64_t index_heads, index_dim, experts, top_k, expert_inter, shared_inter;
  int64_t dense_inter, vocab;
  bool tp_split;

  Dims(const ModelConfig& m, const Split& split)
      : hidden(m.hidden_size),
        q_lora(m.q_lora_rank),
        kv_lora(m.kv_lora_rank),
        rope(m.qk_rope_head_dim),
        nope(m.qk_nope_head_dim),
        v(m.v_head_dim),
        qk(m.QkHeadDim()),
        heads(m.num_attention_heads / split.tp),
        index_heads(m.index_n_heads),
        index_dim(m.index_head_dim),
        experts(m.n_routed_experts),
        top_k(m.num_experts_per_tok),
        expert_inter(m.moe_intermediate_size),
        shared_inter(m.moe_intermediate_size * m.n_shared_experts),
        dense_inter(m.intermediate_size / split.tp),
        vocab(m.vocab_size),
        tp_split(split.tp > 1) {}
};

bool HasIndexer(const ModelConfig& m, int layer) {
  if (layer > m.num_hidden_layers) return m.index_sharing.topk_freq <= 1;
  return m.index_sharing.IsComputingLayer(layer);
}

// IndexerLossGradients (model/indexer.h): the indexer queries', keys' and
// head weights'.
void AddIndexerLossGradients(const Dims& d, const TokenShare& t, Terms* terms) {
  terms->Add("indexer loss gradients (queries, keys, head weights)",
             t.chunk * d.index_heads * (d.index_dim + 1) + t.all * d.index_dim);
}

// AttentionActivations (model/mla_attention.h, model/indexer.h); `latent`
// of the chunk's queries in the latent form, whose tokens get no per-head
// keys and values. An indexer keeps its loss's gradients when the forward
// formed it.
void AddAttention(const Dims& d, const TokenShare& t, bool indexer,
                  bool loss_in_forward, int64_t latent, Terms* terms) {
  const int64_t c = t.chunk, all = t.all, per_head = all - latent;
  if (d.tp_split) terms->Add("attention input gathered over tp", c * d.hidden);
  terms->Add("q_a, its norm and q_resid", c * (2 * d.q_lora + 1));
  terms->Add("per-head queries (q_b_proj's output, RoPE'd in place)",
             c * d.heads * d.qk);
  terms->Add("kv_a and its norm", all * (d.kv_lora + d.rope + 1));
  terms->Add("kv latent", all * d.kv_lora);
  terms->Add("kv (per-head keys and values)",
             per_head * d.heads * (d.nope + d.v));
  terms->Add("RoPE'd keys", per_head * d.heads * d.qk);
  if (latent > 0) {
    terms->Add("latent key rows (kv latent | RoPE'd k_rope)",
               all * (d.kv_lora + d.rope));
    terms->Add("latent queries (q_nope W_UK | RoPE'd q_rope)",
               latent * d.heads * (d.kv_lora + d.rope));
    terms->Add("latent attention output", latent * d.heads * d.kv_lora);
  }
  terms->Add("attention output", c * d.heads * d.v);
  terms->Add("attention log-sum-exp", c * d.heads);
  if (!indexer) return;
  const int64_t iq = c * d.index_heads * d.index_dim;
  terms->Add("indexer queries (raw, RoPE'd)", 2 * iq);
  terms->Add("indexer keys (raw, normed, statistics)",
             c * (2 * d.index_dim + 2));
  terms->Add("indexer keys (RoPE'd)", all * d.index_dim);
  terms->Add("indexer head weights", c * d.index_heads);
  if (loss_in_forward) AddIndexerLossGradients(d, t, terms);
  terms->Add("top-k key indices", c * t.topk);
}

// DecoderLayerActivations' MLP part (model/dense_mlp.h, model/moe.h,
// model/expert_dispatch.h).
void AddMlp(const Dims& d, const TokenShare& t, bool moe, int64_t ep,
            Terms* terms) {
  const bool expert_parallel = ep > 1;
  const int64_t n = t.local;
  if (!moe) {
    // Under tensor parallelism the MLP runs on the gathered chunk.
    if (d.tp_split)
      terms->Add("MLP input gathered over tp", t.chunk * d.hidden);
    terms->Add("MLP gate|up and SwiGLU", t.chunk * 3 * d.dense_inter);
    return;
  }
  terms->Add("router scores, weights and choices",
             n * (d.experts + 2 * d.top_k));
  terms->Add("expert offsets of the layer's choices", d.experts + 1);
  terms->Add("shared expert gate|up and SwiGLU", n * 3 * d.shared_inter);
  const int64_t rows = t.routed;
  // The first grouped product's rows, gathered from the layer's input once
  // and read again by its backward, and the experts' outputs, which the
  // combine's backward reads. Under expert parallelism: the rows received
  // (the products read them as they came), and the outputs returned for the
  // rows sent (parallel/expert_parallel_dispatch.cc).
  terms->Add(expert_parallel
                 ? "routed rows: received inputs and returned outputs"
                 : "routed rows: gathered inputs and outputs",
             2 * rows * d.hidden);
  terms->Add("routed rows: gate|up and SwiGLU", rows * 3 * d.expert_inter);
  // Each row's router weight, slot and token, and each token's rows (the
  // grouping's token_rows; under expert parallelism the sent grouping's).
  terms->Add("routed rows: router weights and row indices", rows * 4);
  if (expert_parallel) {
    // One grouped block per member the rows came from, over the held experts.
    terms->Add("routed rows: expert offsets per block",
               ep * (d.experts / ep + 1));
    terms->AddHost("sent slots", n * d.top_k);
  } else {
    terms->Add("routed rows: expert offsets", d.experts + 1);
  }
}

// One decoder layer without its output (the stage keeps that).
void AddDecoderLayer(const PlanJob& job, const Split& split, int layer,
                     Terms* terms) {
  const ModelConfig& m = job.model;
  const Dims d(m, split);
  const TokenShare t = TokenShareOf(job, split);
  terms->Add("attention norm", t.local * (d.hidden + 1));
  AddAttention(d, t, HasIndexer(m, layer), IndexerLossInForward(job, layer),
               LatentQueries(job, split, layer), terms);
  terms->Add("attention residual and MLP norm", t.local * (2 * d.hidden + 1));
  AddMlp(d, t, layer > m.num_hidden_layers || m.IsMoeLayer(layer), split.ep,
         terms);
}

// What a recomputed decoder layer keeps from its forward
// (GlmModel::KeepRecords): the keys a computing layer chose (later layers
// share them) and a MoE layer's routing and expert offsets.
void AddLayerRecords(const PlanJob& job, const Split& split, int layer,
                     Terms* terms) {
  const ModelConfig& m = job.model;
  const Dims d(m, split);
  const TokenShare t = TokenShareOf(job, split);
  if (HasIndexer(m, layer)) terms->Add("top-k key indices", t.chunk * t.topk);
  if (m.IsMoeLayer(layer)) {
    terms->Add("router choices", t.local * d.top_k);
    terms->Add("expert offsets of the layer's choices", d.experts + 1);
  }
}

// MtpActivations without its decoder layer.
void AddMtpInputsAndHead(const Dims& d, const TokenShare& t, Terms* terms) {
  const int64_t n = t.local;
  terms->Add("MTP next ids, embedding, concat and norms",
             n * (1 + d.hidden + 2 * d.hidden + 2));
  terms->Add("MTP layer input and output", 2 * n * d.hidden);
  terms->Add("MTP head norm", n * (d.hidden + 1));
  terms->Add("MTP head input gradient (the fused loss's)", n * d.hidden);
  terms->Add("MTP targets", n);
}

// What a GlmModel keeps of a micro batch after its backward (which frees
// the rest): the index arrays GlmModel::Load sent in one copy, ids,
// positions and sequence starts, the head's targets, and the MTP layer's
// next ids and targets.
int64_t LoadedBatchBytes(const PlanJob& job, const Split& split,
                         const StageSlice& stage) {
  const TokenShare t = TokenShareOf(job, split);
  return kElementBytes *
         (2 * t.all + t.local + t.local + 2 * stage.mtp_layers * t.local);
}

std::vector<MemoryTerm> SavedTerms(const PlanJob& job, const Split& split,
                                   const StageSlice& stage) {
  const Dims d(job.model, split);
  const TokenShare t = TokenShareOf(job, split);
  Terms terms;
  terms.AddHost("token ids and layout", 4 * t.all + t.local);
  terms.Add("token ids and positions on the backend", 2 * t.all + t.local);
  terms.Add("hidden states (stage input, layer outputs)",
            (stage.num_layers() + 1) * t.local * d.hidden);
  for (int layer = stage.first_layer; layer > 0 && layer <= stage.last_layer;
       ++layer) {
    if (job.recompute == Recompute::kFull) {
      AddLayerRecords(job, split, layer, &terms);
    } else {
      AddDecoderLayer(job, split, layer, &terms);
    }
  }
  if (!stage.has_loss) return terms.Take();
  terms.Add("final norm", t.local * (d.hidden + 1));
  terms.Add("head input gradient (the fused loss's)", t.local * d.hidden);
  terms.Add("targets", t.local);
  for (int k = 1; k <= stage.mtp_layers; ++k) {
    AddMtpInputsAndHead(d, t, &terms);
    AddDecoderLayer(job, split, job.model.num_hidden_layers + k, &terms);
  }
  return terms.Take();
}

// DecoderLayerBackward's temporaries at its largest moment: the MLP's
// backward, or the attention's (model/mla_attention.cc, model/indexer.cc).
std::vector<MemoryTerm> LayerBackwardPeak(const PlanJob& job,
                                          const Split& split, int layer) {
  const ModelConfig& m = job.model;
  const Dims d(m, split);
  const TokenShare t = TokenShareOf(job, split);
  const int64_t n = t.local, c = t.chunk, all = t.all;
  Terms mlp;
  mlp.Add("layer gradients (dmlp_in, dh_mid)", 2 * n * d.hidden);
  if (layer > m.num_hidden_layers || m.IsMoeLayer(layer)) {
    mlp.Add("router gradients", n * (d.top_k + d.experts));
    mlp.Add("shared expert backward", n * 3 * d.shared_inter);
    // model/expert_dispatch.cc's ExpertsBackward: the routed rows' output,
    // hidden, gate|up and input gradients (their router weights' land in the
    // router gradients).
    mlp.Add("routed rows' gradients",
            t.routed * (2 * d.hidden + 3 * d.expert_inter));
    if (split.ep > 1) {
      // parallel/expert_parallel_dispatch.cc: beside the output and input
      // gradients above (formed on the sender and on the experts' member),
      // the output gradients received and the input gradients returned.
      mlp.Add("expert-parallel exchange buffers", t.routed * 2 * d.hidden);
    }
  } else {
    mlp.Add("MLP backward", c * 3 * d.dense_inter);
    if (d.tp_split) mlp.Add("MLP chunk gradients", 2 * c * d.hidden);
  }
  const int64_t latent = LatentQueries(job, split, layer),
                per_head = all - latent;
  Terms attention;
  attention.Add("layer gradients (dmlp_in, dh_mid, dattn_in)",
                3 * n * d.hidden);
  attention.Add("attention output, query and key gradients",
                c * d.heads * (d.v + d.qk) + per_head * d.heads * d.qk);
  attention.Add("kv gradient", per_head * d.heads * (d.nope + d.v));
  if (latent > 0) {
    attention.Add("latent key rows' gradient", all * (d.kv_lora + d.rope));
  }
  if (HasIndexer(m, layer) && !IndexerLossInForward(job, layer)) {
    // The loss formed here: its target, summed from the attention's
    // probabilities, and its gradients.
    attention.Add("indexer loss target", c * t.topk);
    AddIndexerLossGradients(d, t, &attention);
  }
  if (d.tp_split) attention.Add("attention chunk gradients", 2 * c * d.hidden);
  // After the sparse attention's score gradients are freed: the latent and
  // query chains (and the indexer's weight gradients).
  Terms chains;
  chains.Add("latent gradients", all * 2 * (d.rope + d.kv_lora));
  // The query gradient is the attention's (its rope part rotated back in
  // place from a copy) and two latent gradients.
  chains.Add("query gradients", c * (d.heads * d.rope + 2 * d.q_lora));
  if (HasIndexer(m, layer)) {
    chains.Add("indexer gradients",
               c * (d.index_heads * (1 + d.index_dim) + 2 * d.index_dim));
  }
  const std::vector<MemoryTerm> chain = chains.Take();
  // While the attention's score gradients exist: the latent queries' output
  // and query gradients beside them (LatentBackward).
  Terms attending;
  attending.AddHost("attention probabilities and score gradients",
                    2 * c * d.heads * t.topk);
  if (latent > 0) {
    attending.Add("latent output and query gradients",
                  latent * d.heads * (2 * d.kv_lora + d.rope));
  }
  const std::vector<MemoryTerm> scores = attending.Take();
  attention.Append(TotalBytes(chain) > TotalBytes(scores) ? chain : scores);
  std::vector<MemoryTerm> a = attention.Take(), b = mlp.Take();
  return TotalBytes(a) >= TotalBytes(b) ? a : b;
}

// The head's backward (model/output_head.cc): the fused losses left their
// input gradients in the forward, so only the hidden state's gradient and the
// MTP layer's own backward remain.
std::vector<MemoryTerm> HeadBackwardPeak(const PlanJob& job, const Split& split,
                                         const StageSlice& stage) {
  const Dims d(job.model, split);
  const TokenShare t = TokenShareOf(job, split);
  const int64_t n = t.local;
  Terms terms;
  terms.Add("hidden gradient", n * d.hidden);
  if (stage.mtp_layers == 0) return terms.Take();
  terms.Add("MTP layer gradients", 2 * n * d.hidden);
  terms.Append(LayerBackwardPeak(job, split, job.model.num_hidden_layers + 1));
  return terms.Take();
}

// Forward temporaries: the indexer loss's target (the attention each
// selected key receives) and score gradients (a host vector in the CPU
// kernel, kernels/cpu/indexer.cc), or the fused head loss's chunk of logits
// and their gradient (model/head_loss.h), whichever is larger.
std::vector<MemoryTerm> ForwardPeak(const PlanJob& job, const Split& split,
                                    const StageSlice& stage) {
  const TokenShare t = TokenShareOf(job, split);
  bool indexer = false;
  for (int layer = stage.first_layer; layer > 0 && layer <= stage.last_layer;
       ++layer) {
    indexer |= IndexerLossInForward(job, layer);
  }
  Terms terms;
  if (indexer) {
    terms.Add("indexer loss target", t.chunk * t.topk);
    terms.AddHost("indexer loss score gradients",
                  t.chunk * job.model.index_n_heads * t.topk);
  }
  std::vector<MemoryTerm> indexer_terms = terms.Take();
  if (!stage.has_loss) return indexer_terms;
  const int64_t vocab = job.model.vocab_size;
  Terms head;
  head.Add("fused head loss chunk (logits and their gradient)",
           2 *
               FusedChunkRows(t.local, vocab, kDefaultHeadChunkBytes,
                              kFp32LogitBytes) *
               vocab);
  std::vector<MemoryTerm> head_terms = head.Take();
  return TotalBytes(head_terms) > TotalBytes(indexer_terms) ? head_terms
                                                            : indexer_terms;
}

}  // namespace

// Whether `layer` forms its indexer loss in its forward, as Forward and the
// pipeline stages do; under recomputation a step forms it in the layer's
// backward (GlmModel::ForwardLoaded), the MTP layer's included.
bool IndexerLossInForward(const PlanJob& job, int layer) {
  return HasIndexer(job.model, layer) && job.recompute != Recompute::kFull;
}

// The queries of `layer` that attend in MLA's latent form (LatentFrom in
// model/mla_attention.cc): in this trainer's stores, the micro batch's from
// latent_attention_from on, on one rank without tensor or context
// parallelism, in layers that do not form the indexer loss in their forward.
int64_t LatentQueries(const PlanJob& job, const Split& split, int layer) {
  if (!IsTrainerStore(job.precision) || job.latent_attention_from <= 0 ||
      split.tp > 1 || split.cp > 1 || IndexerLossInForward(job, layer)) {
    return 0;
  }
  return std::max<int64_t>(
      0, TokenShareOf(job, split).chunk - job.latent_attention_from);
}

StageActivationBytes Fp32StageActivations(const PlanJob& job,
                                          const Split& split,
                                          const StageSlice& stage) {
  StageActivationBytes acts;
  acts.saved = SavedTerms(job, split, stage);
  const Dims d(job.model, split);
  const TokenShare t = TokenShareOf(job, split);
  if (RunsAsOneModel(split)) {
    acts.kept_after_backward = LoadedBatchBytes(job, split, stage);
  }
  // Backward walks the layers with the gradient of the hidden state and of
  // the layer's input alive.
  std::vector<MemoryTerm> peak = ForwardPeak(job, split, stage);
  if (!stage.has_loss) {
    // The output gradient a stage receives is copied where its ops read it
    // while the first copy still lives.
    Terms received;
    received.Add("output gradient and its copy", 2 * t.local * d.hidden);
    std::vector<MemoryTerm> candidate = received.Take();
    if (TotalBytes(candidate) > TotalBytes(peak)) peak = std::move(candidate);
  }
  for (int layer = stage.first_layer; layer > 0 && layer <= stage.last_layer;
       ++layer) {
    Terms terms;
    terms.Add("hidden gradients (dh, dh_in)", 2 * t.local * d.hidden);
    if (job.recompute == Recompute::kFull) {
      // The layer's forward again (GlmModel::RecomputeLayer), its records
      // included, alive through its backward.
      Terms recomputed;
      AddDecoderLayer(job, split, layer, &recomputed);
      for (MemoryTerm term : recomputed.Take()) {
        term.name = "recomputed " + term.name;
        terms.Append({term});
      }
    }
    terms.Append(LayerBackwardPeak(job, split, layer));
    std::vector<MemoryTerm> candidate = terms.Take();
    if (TotalBytes(candidate) > TotalBytes(peak)) peak = std::move(candidate);
  }
  if (stage.has_loss) {
    std::vector<MemoryTerm> head = HeadBackwardPeak(job, split, stage);
    if (TotalBytes(head) > TotalBytes(peak)) peak = std::move(head);
  }
  acts.transient = std::move(peak);
  return acts;
}

}  // namespace glm
