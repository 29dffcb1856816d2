// This trainer's activations: every tensor the Activations structs of
// model/*.h and parallel/stage_model.h keep, in the shapes and element types
// the forward passes allocate them (model/mla_attention.cc, model/indexer.cc,
// model/moe.cc, model/expert_dispatch.cc, model/mtp_layer.cc): fp32 values
// and int32 indices, and the tensors the model allocates in
// Backend::ActivationType(), bf16 in the CUDA bf16 mode. Host vectors (token
// lists, layouts) are marked: they live in host memory on every backend. The
// kernels' own temporaries depend on the backend: the CPU backend's host
// vectors, or the CUDA backend's grow-only scratch (CudaScratch below).
#include <algorithm>
#include <string>
#include <utility>

#include "kernels/attention_pairs.h"
#include "model/head_loss.h"
#include "planner/activation_memory.h"

namespace glm {
namespace {

constexpr int64_t kWordBytes = 4;  // fp32 values and int32 indices
constexpr int64_t kBf16Bytes = 2;

// A tensor's bytes: kernels/tensor.h keeps every element type in 4-byte
// words.
int64_t StoredBytes(int64_t elements, int64_t element_bytes) {
  return (elements * element_bytes + kWordBytes - 1) / kWordBytes * kWordBytes;
}

// Backend::ActivationType(): bf16 in the CUDA bf16 mode (CudaBackend, and
// Bf16ActivationsCpuBackend standing in for it), fp32 otherwise.
int64_t ActivationElementBytes(Precision precision) {
  return precision == Precision::kFp32Bf16Copies ? kBf16Bytes : kWordBytes;
}

class Terms {
 public:
  explicit Terms(const PlanJob& job)
      : activation_bytes_(ActivationElementBytes(job.precision)),
        device_(job.device) {}

  // F32 values and int32 indices, any number of tensors.
  void Add(std::string name, int64_t elements) {
    AddBytes(std::move(name), kWordBytes * elements);
  }
  // One tensor the model allocates in Backend::ActivationType().
  void AddActivation(std::string name, int64_t elements) {
    AddBytes(std::move(name), StoredBytes(elements, activation_bytes_));
  }
  // One tensor a block of `chunks` in the activation type, `row_elements`
  // a row.
  void AddActivationPerChunk(std::string name, const ExpertChunks& chunks,
                             int64_t row_elements) {
    AddBytes(
        std::move(name),
        (chunks.count - 1) *
                StoredBytes(chunks.rows * row_elements, activation_bytes_) +
            StoredBytes(chunks.last_rows * row_elements, activation_bytes_));
  }
  // One tensor in the activation type, or in F32 where `f32` (what a
  // tensor-parallel group gathers or reads gathered moves float32).
  void AddActivationUnless(bool f32, std::string name, int64_t elements) {
    if (f32) {
      Add(std::move(name), elements);
    } else {
      AddActivation(std::move(name), elements);
    }
  }
  void AddBytes(std::string name, int64_t bytes) {
    terms_.push_back({std::move(name), bytes, false});
  }
  // The model's host bookkeeping, on every backend.
  void AddHost(std::string name, int64_t elements) {
    terms_.push_back({std::move(name), kWordBytes * elements, true});
  }
  // A CPU kernel's host vectors (kernels/cpu/): a GPU rank's kernels keep
  // none, their temporaries are the CUDA backend's scratch.
  void AddCpuKernelVectors(std::string name, int64_t elements) {
    if (device_ == RankDevice::kCpu) AddHost(std::move(name), elements);
  }
  void Append(const std::vector<MemoryTerm>& more) {
    terms_.insert(terms_.end(), more.begin(), more.end());
  }
  std::vector<MemoryTerm> Take() { return std::move(terms_); }

 private:
  int64_t activation_bytes_;
  RankDevice device_;
  std::vector<MemoryTerm> terms_;
};

// The larger of two moments on the rank's device (a tie keeps `a`).
const std::vector<MemoryTerm>& Larger(const PlanJob& job,
                                      const std::vector<MemoryTerm>& a,
                                      const std::vector<MemoryTerm>& b) {
  return RankBytes(b, job.device) > RankBytes(a, job.device) ? b : a;
}

// A layer's activations formed again in its backward.
std::vector<MemoryTerm> Recomputed(std::vector<MemoryTerm> terms) {
  for (MemoryTerm& term : terms) term.name = "recomputed " + term.name;
  return terms;
}

// Kept activations a moment no longer holds: `terms` taken off the kept
// bytes, each name prefixed with `why`.
std::vector<MemoryTerm> Freed(const std::string& why,
                              std::vector<MemoryTerm> terms) {
  for (MemoryTerm& term : terms) {
    term.name = why + term.name;
    term.bytes = -term.bytes;
  }
  return terms;
}

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
  terms->Add("q_a and its norm", c * (d.q_lora + 1));
  terms->AddActivation("q_resid (q_a normed)", c * d.q_lora);
  terms->AddActivation("per-head queries (q_b_proj's output, RoPE'd in place)",
                       c * d.heads * d.qk);
  terms->Add("kv_a and its norm", all * (d.kv_lora + d.rope + 1));
  terms->AddActivation("kv latent", all * d.kv_lora);
  terms->AddActivation("kv (per-head keys and values)",
                       per_head * d.heads * (d.nope + d.v));
  terms->AddActivation("RoPE'd keys", per_head * d.heads * d.qk);
  if (latent > 0) {
    terms->AddActivation("latent key rows (kv latent | RoPE'd k_rope)",
                         all * (d.kv_lora + d.rope));
    terms->AddActivation("latent queries (q_nope W_UK | RoPE'd q_rope)",
                         latent * d.heads * (d.kv_lora + d.rope));
    terms->AddActivation("latent attention output",
                         latent * d.heads * d.kv_lora);
  }
  terms->AddActivation("attention output", c * d.heads * d.v);
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

// A SwiGLU MLP's kept gate|up and hidden rows (model/dense_mlp.cc), two
// tensors of the activation type.
void AddSwiGlu(const std::string& what, int64_t rows, int64_t inter,
               Terms* terms) {
  terms->AddActivation(what + " gate|up", rows * 2 * inter);
  terms->AddActivation(what + " SwiGLU output", rows * inter);
}

// " (N chunks)" where the routed rows run in several.
std::string ChunksNote(const ExpertChunks& chunks) {
  return chunks.count > 1 ? " (" + std::to_string(chunks.count) + " chunks)"
                          : "";
}

// A MoE layer's loads (MoeActivations::expert_offsets): the offsets of each
// block of tokens grouped on its own.
void AddLayerExpertOffsets(const Dims& d, const ExpertChunks& chunks,
                           Terms* terms) {
  terms->Add("expert offsets of the layer's choices" + ChunksNote(chunks),
             chunks.count * (d.experts + 1));
}

// The largest block of `chunks` alone: the rows a backward holds at once.
ExpertChunks LargestChunk(const ExpertChunks& chunks) {
  return {1, chunks.rows, chunks.rows, chunks.formed_in_backward};
}

// ExpertRows' rows through the experts (model/expert_dispatch.h), a tensor
// each a block: the first grouped product's rows, gathered from the layer's
// input once and read again by its backward (under expert parallelism the
// rows received, which the products read as they came); gate|up and the
// SwiGLU output; and the experts' outputs, which the combine's backward
// reads (under expert parallelism those returned for the rows sent).
void AddExpertRows(const std::string& what, bool expert_parallel, const Dims& d,
                   const ExpertChunks& chunks, Terms* terms) {
  const std::string note = ChunksNote(chunks);
  terms->AddActivationPerChunk(
      what + (expert_parallel ? "received inputs" : "gathered inputs") + note,
      chunks, d.hidden);
  terms->AddActivationPerChunk(
      what + (expert_parallel ? "returned outputs" : "outputs") + note, chunks,
      d.hidden);
  terms->AddActivationPerChunk(what + "gate|up" + note, chunks,
                               2 * d.expert_inter);
  terms->AddActivationPerChunk(what + "SwiGLU output" + note, chunks,
                               d.expert_inter);
}

// DecoderLayerActivations' MLP part (model/dense_mlp.h, model/moe.h,
// model/expert_dispatch.h); the routed rows in `chunks`.
void AddMlp(const Dims& d, const TokenShare& t, bool moe, int64_t ep,
            const ExpertChunks& chunks, Terms* terms) {
  const bool expert_parallel = ep > 1;
  const int64_t n = t.local;
  if (!moe) {
    // Under tensor parallelism the MLP runs on the gathered chunk.
    if (d.tp_split)
      terms->Add("MLP input gathered over tp", t.chunk * d.hidden);
    AddSwiGlu("MLP", t.chunk, d.dense_inter, terms);
    return;
  }
  terms->Add("router scores, weights and choices",
             n * (d.experts + 2 * d.top_k));
  AddLayerExpertOffsets(d, chunks, terms);
  AddSwiGlu("shared expert", n, d.shared_inter, terms);
  // Chunks formed again in the backward keep their groupings and router
  // weights only (DropExpertRows).
  if (!chunks.formed_in_backward) {
    AddExpertRows("routed rows: ", expert_parallel, d, chunks, terms);
  }
  // Each row's router weight, slot and token, and each token's rows (the
  // grouping's token_rows, a chunk's of its own; under expert parallelism
  // the sent grouping's).
  terms->Add("routed rows: router weights and row indices", t.routed * 4);
  if (expert_parallel) {
    // One grouped block per member the rows came from, over the held experts.
    terms->Add("routed rows: expert offsets per block",
               ep * (d.experts / ep + 1));
    terms->AddHost("sent slots", n * d.top_k);
  } else {
    terms->Add("routed rows: expert offsets" + ChunksNote(chunks),
               chunks.count * (d.experts + 1));
  }
}

// A decoder layer's attention half: its input norm and the attention
// (model/decoder_layer.cc's AttentionInputType).
void AddLayerAttentionHalf(const PlanJob& job, const Split& split, int layer,
                           Terms* terms) {
  const ModelConfig& m = job.model;
  const Dims d(m, split);
  const TokenShare t = TokenShareOf(job, split);
  terms->AddActivationUnless(d.tp_split, "attention norm output",
                             t.local * d.hidden);
  terms->Add("attention norm rstd", t.local);
  AddAttention(d, t, HasIndexer(m, layer), IndexerLossInForward(job, layer),
               LatentQueries(job, split, layer), terms);
}

// Its MLP half, what only the MLP half's backward reads: the attention's
// residual sum (h_mid), the post-attention norm's output and statistics,
// and the MLP's or MoE's activations (MlpInputType).
void AddLayerMlpHalf(const PlanJob& job, const Split& split, int layer,
                     Terms* terms) {
  const ModelConfig& m = job.model;
  const Dims d(m, split);
  const TokenShare t = TokenShareOf(job, split);
  const bool moe = layer > m.num_hidden_layers || m.IsMoeLayer(layer);
  terms->Add("attention residual and MLP norm rstd", t.local * (d.hidden + 1));
  terms->AddActivationUnless(!moe && d.tp_split, "MLP norm output",
                             t.local * d.hidden);
  AddMlp(d, t, moe, split.ep, ExpertChunksOf(job, split), terms);
}

// One decoder layer without its output (the stage keeps that).
void AddDecoderLayer(const PlanJob& job, const Split& split, int layer,
                     Terms* terms) {
  AddLayerAttentionHalf(job, split, layer, terms);
  AddLayerMlpHalf(job, split, layer, terms);
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
    AddLayerExpertOffsets(d, ExpertChunksOf(job, split), terms);
  }
}

// MtpActivations without its decoder layer.
void AddMtpInputsAndHead(const Dims& d, const TokenShare& t, Terms* terms) {
  const int64_t n = t.local;
  terms->Add("MTP next ids, embedding and norms' rstd", n * (1 + d.hidden + 2));
  terms->AddActivation("MTP concat (normed embedding | normed hidden)",
                       n * 2 * d.hidden);
  terms->Add("MTP layer input and output", 2 * n * d.hidden);
  terms->AddActivation("MTP head norm output", n * d.hidden);
  terms->Add("MTP head norm rstd", n);
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
  return kWordBytes *
         (2 * t.all + t.local + t.local + 2 * stage.mtp_layers * t.local);
}

std::vector<MemoryTerm> SavedTerms(const PlanJob& job, const Split& split,
                                   const StageSlice& stage) {
  const Dims d(job.model, split);
  const TokenShare t = TokenShareOf(job, split);
  Terms terms(job);
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
  terms.AddActivation("final norm output", t.local * d.hidden);
  terms.Add("final norm rstd", t.local);
  terms.Add("head input gradient (the fused loss's)", t.local * d.hidden);
  terms.Add("targets", t.local);
  for (int k = 1; k <= stage.mtp_layers; ++k) {
    AddMtpInputsAndHead(d, t, &terms);
    AddDecoderLayer(job, split, job.model.num_hidden_layers + k, &terms);
  }
  return terms.Take();
}

// MoeBackward's temporaries at its largest moment (model/moe.cc): the
// routing weights' gradient throughout, beside the routed experts' backward
// or, after it, the router logits' gradient and the shared experts'
// backward.
std::vector<MemoryTerm> MoeBackwardPeak(const PlanJob& job,
                                        const Split& split) {
  const Dims d(job.model, split);
  const TokenShare t = TokenShareOf(job, split);
  const int64_t n = t.local;
  // model/expert_dispatch.cc's ExpertsBackward, a block of rows at a time:
  // the routed rows' output, hidden, gate|up and input gradients, beside the
  // block's rows formed again where the forward dropped them.
  Terms routed(job);
  const ExpertChunks chunks = ExpertChunksOf(job, split);
  const ExpertChunks block = LargestChunk(chunks);
  if (chunks.formed_in_backward) {
    AddExpertRows("a chunk's routed rows formed again: ", false, d, block,
                  &routed);
  }
  const std::string of = chunks.count > 1 ? " (a chunk's)" : "";
  routed.AddActivationPerChunk("routed rows' output gradients" + of, block,
                               d.hidden);
  routed.AddActivationPerChunk("routed rows' input gradients" + of, block,
                               d.hidden);
  routed.AddActivationPerChunk("routed rows' hidden gradients" + of, block,
                               d.expert_inter);
  routed.AddActivationPerChunk("routed rows' gate|up gradients" + of, block,
                               2 * d.expert_inter);
  if (split.ep > 1) {
    // parallel/expert_parallel_dispatch.cc: beside the output and input
    // gradients above (formed on the sender and on the experts' member),
    // the output gradients received and the input gradients returned.
    routed.AddActivation("expert-parallel exchange: output gradients received",
                         t.routed * d.hidden);
    routed.AddActivation("expert-parallel exchange: input gradients returned",
                         t.routed * d.hidden);
  }
  // MlpBackward's hidden and gate|up gradients.
  Terms shared(job);
  shared.Add("router logits' gradient", n * d.experts);
  shared.AddActivation("shared expert backward (hidden gradient)",
                       n * d.shared_inter);
  shared.AddActivation("shared expert backward (gate|up gradient)",
                       n * 2 * d.shared_inter);
  Terms terms(job);
  terms.Add("routing weights' gradient", n * d.top_k);
  const std::vector<MemoryTerm> a = routed.Take(), b = shared.Take();
  terms.Append(Larger(job, a, b));
  return terms.Take();
}

// DecoderLayerBackward's temporaries at the largest moment of each half
// (model/decoder_layer.cc), the MLP's backward first, then the attention's.
struct LayerBackwardMoments {
  std::vector<MemoryTerm> mlp;
  // model/mla_attention.cc, model/indexer.cc.
  std::vector<MemoryTerm> attention;
};

LayerBackwardMoments LayerBackward(const PlanJob& job, const Split& split,
                                   int layer) {
  const ModelConfig& m = job.model;
  const Dims d(m, split);
  const TokenShare t = TokenShareOf(job, split);
  const int64_t n = t.local, c = t.chunk, all = t.all;
  Terms mlp(job);
  mlp.Add("layer gradients (dmlp_in, dh_mid)", 2 * n * d.hidden);
  if (layer > m.num_hidden_layers || m.IsMoeLayer(layer)) {
    mlp.Append(MoeBackwardPeak(job, split));
  } else {
    mlp.AddActivation("MLP backward (hidden gradient)", c * d.dense_inter);
    mlp.AddActivation("MLP backward (gate|up gradient)", c * 2 * d.dense_inter);
    if (d.tp_split) mlp.Add("MLP chunk gradients", 2 * c * d.hidden);
  }
  const int64_t latent = LatentQueries(job, split, layer),
                per_head = all - latent;
  Terms attention(job);
  // The MLP half's dmlp_in is freed with that half (MlpHalfBackward).
  attention.Add("layer gradients (dh_mid, dattn_in)", 2 * n * d.hidden);
  attention.AddActivation("attention output gradient", c * d.heads * d.v);
  attention.AddActivation("query gradient", c * d.heads * d.qk);
  attention.AddActivation("key gradient", per_head * d.heads * d.qk);
  attention.AddActivation("kv gradient", per_head * d.heads * (d.nope + d.v));
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
  Terms chains(job);
  chains.Add("latent gradients", all * 2 * (d.rope + d.kv_lora));
  // The query gradient is the attention's (its rope part rotated back in
  // place from a copy) and two latent gradients.
  chains.AddActivation("query gradients (rope copy)", c * d.heads * d.rope);
  chains.Add("query gradients (q_resid, q_a)", c * 2 * d.q_lora);
  if (HasIndexer(m, layer)) {
    chains.Add("indexer gradients",
               c * (d.index_heads * (1 + d.index_dim) + 2 * d.index_dim));
  }
  const std::vector<MemoryTerm> chain = chains.Take();
  // While the attention's score gradients exist: the latent queries' output
  // and query gradients beside them (LatentBackward).
  Terms attending(job);
  attending.AddCpuKernelVectors("attention probabilities and score gradients",
                                2 * c * d.heads * t.topk);
  if (latent > 0) {
    attending.AddActivation("latent output gradient",
                            latent * d.heads * d.kv_lora);
    attending.AddActivation("latent query gradient",
                            latent * d.heads * (d.kv_lora + d.rope));
  }
  const std::vector<MemoryTerm> scores = attending.Take();
  attention.Append(Larger(job, scores, chain));
  return {mlp.Take(), attention.Take()};
}

// The head's backward (model/output_head.cc): the fused losses left their
// input gradients in the forward, so only the hidden state's gradient and the
// MTP layer's own backward remain.
std::vector<MemoryTerm> HeadBackwardPeak(const PlanJob& job, const Split& split,
                                         const StageSlice& stage) {
  const Dims d(job.model, split);
  const TokenShare t = TokenShareOf(job, split);
  const int64_t n = t.local;
  Terms terms(job);
  terms.Add("hidden gradient", n * d.hidden);
  if (stage.mtp_layers == 0) return terms.Take();
  terms.Add("MTP layer gradients", 2 * n * d.hidden);
  // The MTP layer's activations stay kept through its backward (the const
  // DecoderLayerBackward): the larger half's moment.
  const LayerBackwardMoments mtp =
      LayerBackward(job, split, job.model.num_hidden_layers + 1);
  terms.Append(Larger(job, mtp.attention, mtp.mlp));
  return terms.Take();
}

// Forward temporaries: the indexer loss's target (the attention each
// selected key receives) and score gradients (a host vector in the CPU
// kernel, kernels/cpu/indexer.cc), or the fused head loss's chunk of logits
// and their gradient (model/head_loss.h: fp32 logits and a gradient, or bf16
// logits whose gradient is written in place), whichever is larger.
std::vector<MemoryTerm> ForwardPeak(const PlanJob& job, const Split& split,
                                    const StageSlice& stage) {
  const TokenShare t = TokenShareOf(job, split);
  bool indexer = false;
  for (int layer = stage.first_layer; layer > 0 && layer <= stage.last_layer;
       ++layer) {
    indexer |= IndexerLossInForward(job, layer);
  }
  Terms terms(job);
  if (indexer) {
    terms.Add("indexer loss target", t.chunk * t.topk);
    terms.AddCpuKernelVectors("indexer loss score gradients",
                              t.chunk * job.model.index_n_heads * t.topk);
  }
  const std::vector<MemoryTerm> indexer_terms = terms.Take();
  if (!stage.has_loss) return indexer_terms;
  const int64_t vocab = job.model.vocab_size;
  const int64_t logit_bytes = job.precision == Precision::kFp32Bf16Copies
                                  ? kBf16LogitBytes
                                  : kFp32LogitBytes;
  Terms head(job);
  head.AddBytes(
      "fused head loss chunk (logits and their gradient)",
      FusedChunkRows(t.local, vocab, kDefaultHeadChunkBytes, logit_bytes) *
          vocab * logit_bytes);
  const std::vector<MemoryTerm> head_terms = head.Take();
  return Larger(job, indexer_terms, head_terms);
}

// The CUDA backend's scratch (kernels/cuda/cuda_backend.cc: Scratch and
// CompositeScratch, each one buffer grown to the largest call and held) for
// the attention backward of a layer's per-head queries: the one op whose
// scratch grows with the pairs attended. Not counted: the indexer's
// chunks (kernels/cuda/indexer.cu, 512 MiB a chunk at most), the products'
// operand conversions and cub's sort space.
class CudaScratch {
 public:
  explicit CudaScratch(const PlanJob& job) : job_(job) {}

  void AddLayer(const Split& split, int layer) {
    const Dims d(job_.model, split);
    const TokenShare t = TokenShareOf(job_, split);
    // The latent queries' backward sums into the model's F32 gradient of the
    // latent rows (kernels/cuda/latent_attention.cu): no scratch.
    const int64_t latent = LatentQueries(job_, split, layer);
    const int64_t queries = t.chunk - latent, keys = t.all - latent;
    if (queries == 0) return;
    if (job_.precision == Precision::kFp32Bf16Copies) {
      AddBf16Attention(d, queries, keys);
      return;
    }
    // kernels/cuda/sparse_attention.cu's SparseAttentionBackward: the
    // probabilities and score gradients again, F32 [queries, heads, top-k]
    // each (PlanScratch).
    Plain("attention backward: probabilities and score gradients",
          2 * Aligned(queries * d.heads * t.topk * kWordBytes));
  }

  std::vector<MemoryTerm> Take() {
    std::vector<MemoryTerm> terms;
    for (MemoryTerm* largest : {&plain_, &composite_}) {
      if (largest->bytes > 0) terms.push_back(*largest);
    }
    return terms;
  }

 private:
  // kernels/cuda/cuda_context.h's Carver: each piece at 256 bytes.
  static int64_t Aligned(int64_t bytes) { return (bytes + 255) / 256 * 256; }

  void Plain(const std::string& name, int64_t bytes) {
    if (bytes > plain_.bytes) plain_ = {"scratch: " + name, bytes, false};
  }
  void Composite(const std::string& name, int64_t bytes) {
    if (bytes > composite_.bytes) {
      composite_ = {"composite scratch: " + name, bytes, false};
    }
  }

  // The bf16 mode's attention backward over the per-head queries and keys
  // (CudaBackend::SparseAttentionBackward): attention products while their
  // P and dS fit kProductsScratchBytes, else cuDNN's, in chunks of at most
  // attention_pairs_per_call query-key pairs.
  void AddBf16Attention(const Dims& d, int64_t queries, int64_t keys) {
    const int64_t bf16 = kBf16Bytes, f32 = kWordBytes;
    // kernels/cuda/cuda_backend.cc and self_attention_backward.cc.
    constexpr int64_t kProductsScratchBytes = int64_t{2} << 30;
    constexpr int64_t kProductsWorkspaceBytes = int64_t{1} << 20;
    const int64_t pairs = queries * keys;
    if (queries == keys &&
        (pairs + 2 * d.heads * pairs) * bf16 <= kProductsScratchBytes) {
      Plain("attention products backward (mask, P and dS)",
            Aligned(pairs * bf16) + Aligned(queries * f32) +
                2 * Aligned(d.heads * queries * f32) +
                2 * Aligned(d.heads * pairs * bf16) +
                Aligned(kProductsWorkspaceBytes));
      return;
    }
    // The chunks of CudnnAttention::Chunks, each over the keys up to its
    // last query.
    const int64_t pairs_per_call = job_.attention_pairs_per_call;
    // cuDNN's deterministic backward's workspace, which cuDNN reports at run
    // time: about 38 bytes a query-key pair for glm5.2-mini's 16 heads
    // (kernels/cuda/cudnn_attention.h; 41 GB asked at 32k, bench/NOTES.md
    // 2026-12-02), counted per pair and head.
    constexpr double kWorkspaceBytesPerPairAndHead = 38.0 / 16;
    const bool self = queries == keys;
    const int64_t rows =
        std::min(queries, QueriesPerAttentionCall(pairs_per_call, keys));
    const int64_t chunk_keys = self ? queries : keys;
    const bool several = rows < queries;
    const int64_t chunk_pairs = rows * chunk_keys;
    // CudnnAttention's Carve for a backward chunk: the output gradient's bf16
    // copy, the statistics, the mask and its has-key flags, the workspace;
    // with several chunks dK and dV land in bf16 buffers and are added into
    // F32 sums (composite scratch) rather than written in place.
    int64_t bytes =
        Aligned(rows * d.heads * d.v * bf16) + Aligned(rows * d.heads * f32) +
        Aligned(chunk_pairs * bf16) + Aligned(rows * f32) +
        Aligned(static_cast<int64_t>(kWorkspaceBytesPerPairAndHead * d.heads *
                                     static_cast<double>(chunk_pairs)));
    if (several) {
      bytes += Aligned(chunk_keys * d.heads * d.qk * bf16) +
               Aligned(chunk_keys * d.heads * (d.nope + d.v) * bf16);
      Composite("cuDNN attention backward: F32 sums of dK and dV",
                Aligned(keys * d.heads * d.qk * f32) +
                    Aligned(keys * d.heads * d.v * f32));
    }
    Plain("cuDNN attention backward (mask, workspace)", bytes);
  }

  const PlanJob& job_;
  MemoryTerm plain_, composite_;
};

// What the stage's ops hold in the CUDA backend's scratch buffers.
std::vector<MemoryTerm> StageScratch(const PlanJob& job, const Split& split,
                                     const StageSlice& stage) {
  if (job.device != RankDevice::kGpu) return {};
  CudaScratch scratch(job);
  for (int layer = stage.first_layer; layer > 0 && layer <= stage.last_layer;
       ++layer) {
    scratch.AddLayer(split, layer);
  }
  if (stage.has_loss) {
    for (int k = 1; k <= stage.mtp_layers; ++k) {
      scratch.AddLayer(split, job.model.num_hidden_layers + k);
    }
  }
  return scratch.Take();
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

ExpertChunks ExpertChunksOf(const PlanJob& job, const Split& split) {
  const TokenShare t = TokenShareOf(job, split);
  const int64_t tokens = job.expert_chunk_tokens;
  // Expert parallelism's dispatcher runs its blocks by member, unchunked.
  if (!IsTrainerStore(job.precision) || split.ep > 1 || tokens <= 0 ||
      t.local <= tokens) {
    return {1, t.routed, t.routed, false};
  }
  const int64_t top_k = job.model.num_experts_per_tok;
  ExpertChunks chunks;
  chunks.count = (t.local + tokens - 1) / tokens;
  chunks.rows = tokens * top_k;
  chunks.last_rows = (t.local - (chunks.count - 1) * tokens) * top_k;
  chunks.formed_in_backward = job.recompute == Recompute::kFull;
  return chunks;
}

StageActivationBytes Fp32StageActivations(const PlanJob& job,
                                          const Split& split,
                                          const StageSlice& stage) {
  StageActivationBytes acts;
  acts.device = job.device;
  acts.saved = SavedTerms(job, split, stage);
  acts.scratch = StageScratch(job, split, stage);
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
    Terms received(job);
    received.Add("output gradient and its copy", 2 * t.local * d.hidden);
    peak = Larger(job, peak, received.Take());
  }
  // One model (GlmModel::Backward) frees what only a layer's MLP half reads
  // once that half's backward is done, before the attention's; a pipeline
  // stage keeps every layer's activations through its backward.
  const bool frees_mlp_half = RunsAsOneModel(split);
  for (int layer = stage.first_layer; layer > 0 && layer <= stage.last_layer;
       ++layer) {
    Terms mlp_moment(job), attention_moment(job);
    for (Terms* moment : {&mlp_moment, &attention_moment}) {
      moment->Add("hidden gradients (dh, dh_in)", 2 * t.local * d.hidden);
    }
    Terms mlp_half(job);
    AddLayerMlpHalf(job, split, layer, &mlp_half);
    if (job.recompute == Recompute::kFull) {
      // The layer's forward again (GlmModel::RecomputeLayer), its records
      // included: the attention half alive through the layer's backward, the
      // MLP half through the MLP's (recomputation runs as one model only).
      Terms attention_half(job);
      AddLayerAttentionHalf(job, split, layer, &attention_half);
      const std::vector<MemoryTerm> attention =
          Recomputed(attention_half.Take());
      mlp_moment.Append(attention);
      mlp_moment.Append(Recomputed(mlp_half.Take()));
      attention_moment.Append(attention);
    } else if (frees_mlp_half) {
      // The kept activations (saved) less the layer's MLP half.
      attention_moment.Append(
          Freed("freed before the attention backward: ", mlp_half.Take()));
    }
    const LayerBackwardMoments backward = LayerBackward(job, split, layer);
    mlp_moment.Append(backward.mlp);
    attention_moment.Append(backward.attention);
    peak = Larger(job, peak, mlp_moment.Take());
    peak = Larger(job, peak, attention_moment.Take());
  }
  if (stage.has_loss)
    peak = Larger(job, peak, HeadBackwardPeak(job, split, stage));
  acts.transient = std::move(peak);
  return acts;
}

}  // namespace glm
