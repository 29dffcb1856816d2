// Megatron-Core's activations in bf16 training with sequence parallelism,
// the tensors its MLA, DSA, MoE and output layers save for backward (in the
// style of Korthikanti et al., "Reducing Activation Recomputation in Large
// Transformer Models", 2022, extended to MLA, DSA and routed experts):
// - layer norms save their input; linear layers their input; MLA keeps the
//   per-head queries, keys and values the attention kernel reads, which
//   keeps its output and log-sum-exp (not probabilities);
// - DSA computing layers keep the indexer's queries, keys and head weights,
//   the selected key indices, and fp32 scores over the top-k for its loss;
// - MoE keeps router logits (fp32), the dispatched rows with their router
//   probabilities, and the experts' gate|up and SwiGLU outputs; the
//   probabilities weight each row inside the SwiGLU (weighted_bias_swiglu
//   in megatron/core/transformer/moe/experts.py), so the combine keeps no
//   expert outputs;
// - the output layer keeps fp32 softmax of the logits, or with chunked
//   logits only the head input's gradient, formed in the forward pass.
// Selective recomputation drops norm outputs, MLA up-projections and
// SwiGLU outputs; full recomputation keeps each layer's input only and
// rebuilds one layer at a time in backward.
#include <algorithm>
#include <string>
#include <utility>

#include "planner/activation_memory.h"

namespace glm {
namespace {

constexpr int64_t kBf16 = 2;
constexpr int64_t kFp32 = 4;
constexpr int64_t kIndex = 4;

class Terms {
 public:
  explicit Terms(Recompute recompute) : recompute_(recompute) {}
  void Add(std::string name, int64_t bytes) {
    terms_.push_back({std::move(name), bytes, false});
  }
  // Kept unless selective recomputation rebuilds it in backward.
  void AddRecomputable(std::string name, int64_t bytes) {
    if (recompute_ != Recompute::kSelective) Add(std::move(name), bytes);
  }
  void Append(const std::vector<MemoryTerm>& more) {
    terms_.insert(terms_.end(), more.begin(), more.end());
  }
  std::vector<MemoryTerm> Take() { return std::move(terms_); }

 private:
  Recompute recompute_;
  std::vector<MemoryTerm> terms_;
};

struct Dims {
  int64_t hidden, q_lora, kv_lora, rope, qk, v, heads, index_heads, index_dim;
  int64_t experts, top_k, expert_inter, shared_inter, dense_inter, vocab;

  Dims(const ModelConfig& m, const Split& split)
      : hidden(m.hidden_size),
        q_lora(m.q_lora_rank),
        kv_lora(m.kv_lora_rank),
        rope(m.qk_rope_head_dim),
        qk(m.QkHeadDim()),
        v(m.v_head_dim),
        heads(m.num_attention_heads / split.tp),
        index_heads(m.index_n_heads),
        index_dim(m.index_head_dim),
        experts(m.n_routed_experts),
        top_k(m.num_experts_per_tok),
        expert_inter(m.moe_intermediate_size / split.etp),
        shared_inter(m.moe_intermediate_size * m.n_shared_experts),
        dense_inter(m.intermediate_size / split.tp),
        vocab(m.vocab_size) {}
};

bool HasIndexer(const ModelConfig& m, int layer) {
  if (layer > m.num_hidden_layers) return m.index_sharing.topk_freq <= 1;
  return m.index_sharing.IsComputingLayer(layer);
}

bool IsMoe(const ModelConfig& m, int layer) {
  return layer > m.num_hidden_layers || m.IsMoeLayer(layer);
}

// Expert rows a rank computes: its routed rows, gathered over the expert
// tensor-parallel group.
int64_t ExpertRows(const TokenShare& t, const Split& split) {
  return t.routed * split.etp;
}

void AddAttention(const Dims& d, const TokenShare& t, bool indexer,
                  Terms* terms) {
  const int64_t c = t.chunk;
  terms->Add("q_a (q norm input)", c * d.q_lora * kBf16);
  terms->AddRecomputable("q norm output", c * d.q_lora * kBf16);
  terms->Add("kv_a (kv norm input, key RoPE part)",
             c * (d.kv_lora + d.rope) * kBf16);
  terms->AddRecomputable("kv norm output", c * d.kv_lora * kBf16);
  terms->AddRecomputable("per-head queries", c * d.heads * d.qk * kBf16);
  terms->AddRecomputable("per-head keys and values",
                         c * d.heads * (d.qk + d.v) * kBf16);
  terms->Add("attention output", c * d.heads * d.v * kBf16);
  terms->Add("attention log-sum-exp", c * d.heads * kFp32);
  if (!indexer) return;
  terms->Add("indexer queries, keys and head weights",
             c * (d.index_heads * d.index_dim + d.index_dim) * kBf16 +
                 c * d.index_heads * kFp32);
  terms->Add("top-k key indices", c * t.topk * kIndex);
  terms->Add("indexer scores over the top-k", c * t.topk * kFp32);
}

void AddMlp(const Dims& d, const TokenShare& t, const Split& split, bool moe,
            Terms* terms) {
  const int64_t n = t.local;
  if (!moe) {
    terms->Add("MLP gate|up", t.chunk * 2 * d.dense_inter * kBf16);
    terms->AddRecomputable("MLP SwiGLU", t.chunk * d.dense_inter * kBf16);
    return;
  }
  terms->Add("router logits and choices",
             n * d.experts * kFp32 + n * d.top_k * (kFp32 + kIndex));
  terms->Add("shared expert gate|up", n * 2 * d.shared_inter * kBf16);
  terms->AddRecomputable("shared expert SwiGLU", n * d.shared_inter * kBf16);
  const int64_t rows = ExpertRows(t, split);
  terms->Add("dispatched rows and their probabilities",
             rows * (d.hidden * kBf16 + kFp32));
  terms->Add("expert gate|up", rows * 2 * d.expert_inter * kBf16);
  terms->AddRecomputable("expert SwiGLU", rows * d.expert_inter * kBf16);
}

std::vector<MemoryTerm> LayerTerms(const PlanJob& job, const Split& split,
                                   int layer, Recompute recompute) {
  const ModelConfig& m = job.model;
  const Dims d(m, split);
  const TokenShare t = TokenShareOf(job, split);
  Terms terms(recompute);
  terms.Add("layer input", t.local * d.hidden * kBf16);
  if (recompute == Recompute::kFull) return terms.Take();
  terms.AddRecomputable("attention norm output", t.local * d.hidden * kBf16);
  AddAttention(d, t, HasIndexer(m, layer), &terms);
  terms.Add("attention residual", t.local * d.hidden * kBf16);
  terms.AddRecomputable("MLP norm output", t.local * d.hidden * kBf16);
  AddMlp(d, t, split, IsMoe(m, layer), &terms);
  return terms.Take();
}

// The logits' part: the fp32 softmax the cross-entropy keeps, or with
// chunks the head input's gradient formed in forward.
void AddLogits(const PlanJob& job, const Dims& d, const TokenShare& t,
               const std::string& which, Terms* terms) {
  if (job.logits_chunk_tokens > 0) {
    terms->Add(which + " head input gradient", t.local * d.hidden * kFp32);
  } else {
    terms->Add(which + " softmax (fp32)", t.local * d.vocab * kFp32);
  }
}

std::vector<MemoryTerm> SavedTerms(const PlanJob& job, const Split& split,
                                   const StageSlice& stage) {
  const ModelConfig& m = job.model;
  const Dims d(m, split);
  const TokenShare t = TokenShareOf(job, split);
  Terms terms(job.recompute);
  for (int layer = stage.first_layer; layer > 0 && layer <= stage.last_layer;
       ++layer) {
    terms.Append(LayerTerms(job, split, layer, job.recompute));
  }
  if (!stage.has_loss) return terms.Take();
  terms.Add("final norm input and output", 2 * t.local * d.hidden * kBf16);
  AddLogits(job, d, t, "logits", &terms);
  for (int k = 1; k <= stage.mtp_layers; ++k) {
    terms.Add("MTP embedding, norms, concat and projection",
              6 * t.local * d.hidden * kBf16);
    terms.Append(
        LayerTerms(job, split, m.num_hidden_layers + k, job.recompute));
    terms.Add("MTP head norm input and output", 2 * t.local * d.hidden * kBf16);
    AddLogits(job, d, t, "MTP logits", &terms);
  }
  return terms.Take();
}

// A layer's backward at its largest: the attention's gradients with its
// keys and values gathered over the context-parallel ranks and the flash
// kernel's fp32 query-gradient accumulator, or the experts' gradients with
// the dispatch's send and receive buffers. Under full recomputation the
// layer's own activations are rebuilt first.
std::vector<MemoryTerm> LayerBackwardPeak(const PlanJob& job,
                                          const Split& split, int layer) {
  const ModelConfig& m = job.model;
  const Dims d(m, split);
  const TokenShare t = TokenShareOf(job, split);
  Terms attention(Recompute::kNone);
  attention.Add("hidden-state gradients", 2 * t.local * d.hidden * kBf16);
  attention.Add("query, key and value gradients",
                t.chunk * d.heads * (3 * d.qk + d.v) * kBf16);
  if (split.cp > 1) {
    attention.Add("keys and values gathered over cp",
                  (t.all - t.chunk) * d.heads * (d.qk + d.v) * kBf16);
  }
  Terms experts(Recompute::kNone);
  experts.Add("hidden-state gradients", 2 * t.local * d.hidden * kBf16);
  if (IsMoe(m, layer)) {
    const int64_t rows = ExpertRows(t, split);
    experts.Add("expert gradients",
                rows * (3 * d.expert_inter + d.hidden) * kBf16);
    experts.Add("dispatch send and receive buffers",
                2 * t.routed * d.hidden * kBf16);
  }
  std::vector<MemoryTerm> a = attention.Take(), b = experts.Take();
  std::vector<MemoryTerm> peak = TotalBytes(a) >= TotalBytes(b) ? a : b;
  if (job.recompute == Recompute::kFull) {
    std::vector<MemoryTerm> rebuilt =
        LayerTerms(job, split, layer, Recompute::kNone);
    for (MemoryTerm& term : rebuilt) term.name = "recomputed " + term.name;
    peak.insert(peak.end(), rebuilt.begin(), rebuilt.end());
  }
  return peak;
}

// The output layer's logits while its loss is formed: bf16 logits and
// their fp32 softmax, whole or one chunk of tokens.
std::vector<MemoryTerm> HeadPeak(const PlanJob& job, const Split& split) {
  const Dims d(job.model, split);
  const TokenShare t = TokenShareOf(job, split);
  const int64_t rows = job.logits_chunk_tokens > 0
                           ? std::min(job.logits_chunk_tokens, t.local)
                           : t.local;
  Terms terms(Recompute::kNone);
  terms.Add("logits (bf16) and their fp32 gradient",
            rows * d.vocab * (kBf16 + kFp32));
  return terms.Take();
}

}  // namespace

StageActivationBytes Bf16StageActivations(const PlanJob& job,
                                          const Split& split,
                                          const StageSlice& stage) {
  StageActivationBytes acts;
  acts.saved = SavedTerms(job, split, stage);
  std::vector<MemoryTerm> peak;
  for (int layer = stage.first_layer; layer > 0 && layer <= stage.last_layer;
       ++layer) {
    std::vector<MemoryTerm> candidate = LayerBackwardPeak(job, split, layer);
    if (TotalBytes(candidate) > TotalBytes(peak)) peak = std::move(candidate);
  }
  for (int k = 1; k <= stage.mtp_layers; ++k) {
    std::vector<MemoryTerm> candidate =
        LayerBackwardPeak(job, split, job.model.num_hidden_layers + k);
    if (TotalBytes(candidate) > TotalBytes(peak)) peak = std::move(candidate);
  }
  if (stage.has_loss) {
    std::vector<MemoryTerm> head = HeadPeak(job, split);
    if (TotalBytes(head) > TotalBytes(peak)) peak = std::move(head);
  }
  acts.transient = std::move(peak);
  return acts;
}

}  // namespace glm
