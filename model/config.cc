#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file_util.h"
#include "base/quote.h"
#include "nlohmann/json.hpp"

namespace glm {
namespace {

using nlohmann::json;

// Bounds far above any GLM-5.x model. Under them every parameter count fits in
// 64 bits many times over, so the total can be computed and checked before
// anything is allocated.
constexpr int64_t kMaxVocabSize = int64_t{1} << 24;
constexpr int64_t kMaxWidth = int64_t{1} << 17;  // hidden and LoRA ranks
constexpr int64_t kMaxHeadDim = int64_t{1} << 12;
constexpr int kMaxHeads = 1 << 10;
constexpr int kMaxLayers = 1 << 10;
constexpr int kMaxExperts = 1 << 12;
constexpr int kMaxSharedExperts = 64;
constexpr int64_t kMaxPositions = int64_t{1} << 24;
// 4.4 trillion: six times GLM-5.
constexpr int64_t kMaxParameters = int64_t{1} << 42;
// A config.json is a few kilobytes; its objects nest two deep.
constexpr size_t kMaxConfigJsonBytes = 1 << 20;
constexpr int kMaxJsonDepth = 16;

#define GLM_RETURN_IF_ERROR(expr)      \
  do {                                 \
    absl::Status status_ = (expr);     \
    if (!status_.ok()) return status_; \
  } while (0)

absl::Status FieldError(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("config.json field '", field, "': ", what));
}

// A value as an error message may show it: short and printable.
std::string Shown(const json& value) {
  if (value.is_string()) return Quote(value.get<std::string>());
  return Excerpt(value.dump());
}

// Reads typed fields of one JSON object. A null value counts as absent, as HF
// writes null for unset optional fields.
class FieldReader {
 public:
  explicit FieldReader(const json& object) : object_(object) {}

  const json* Find(const std::string& name) const {
    auto it = object_.find(name);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  // Integer field; `fallback` is HF's default (nullopt: the field is required).
  template <typename Integer>
  absl::Status Int(const std::string& name, Integer* out,
                   std::optional<int64_t> fallback = std::nullopt) const {
    const json* value = Find(name);
    if (value == nullptr) {
      if (!fallback) return FieldError(name, "missing");
      *out = static_cast<Integer>(*fallback);
      return absl::OkStatus();
    }
    if (!value->is_number_integer()) {
      return FieldError(
          name, absl::StrCat("expected an integer, got ", Shown(*value)));
    }
    // Checked before narrowing, so 2^32 + 8 layers cannot become 8.
    const bool fits =
        value->is_number_unsigned()
            ? value->get<uint64_t>() <=
                  static_cast<uint64_t>(std::numeric_limits<Integer>::max())
            : value->get<int64_t>() >= std::numeric_limits<Integer>::min() &&
                  value->get<int64_t>() <= std::numeric_limits<Integer>::max();
    if (!fits) {
      return FieldError(name, absl::StrCat(Shown(*value), " is out of range"));
    }
    *out = static_cast<Integer>(value->get<int64_t>());
    return absl::OkStatus();
  }

  absl::Status Double(const std::string& name, double* out,
                      double fallback) const {
    const json* value = Find(name);
    if (value == nullptr) {
      *out = fallback;
      return absl::OkStatus();
    }
    if (!value->is_number() || !std::isfinite(value->get<double>())) {
      return FieldError(
          name, absl::StrCat("expected a finite number, got ", Shown(*value)));
    }
    *out = value->get<double>();
    return absl::OkStatus();
  }

  absl::Status Bool(const std::string& name, bool* out, bool fallback) const {
    const json* value = Find(name);
    if (value == nullptr) {
      *out = fallback;
      return absl::OkStatus();
    }
    if (!value->is_boolean()) {
      return FieldError(
          name, absl::StrCat("expected true or false, got ", Shown(*value)));
    }
    *out = value->get<bool>();
    return absl::OkStatus();
  }

  absl::Status String(const std::string& name, std::string* out,
                      const std::string& fallback) const {
    const json* value = Find(name);
    if (value == nullptr) {
      *out = fallback;
      return absl::OkStatus();
    }
    if (!value->is_string()) {
      return FieldError(name,
                        absl::StrCat("expected a string, got ", Shown(*value)));
    }
    *out = value->get<std::string>();
    return absl::OkStatus();
  }

  // A field the model has no switch for: absent, or exactly `expected`.
  absl::Status Fixed(const std::string& name, const json& expected,
                     const std::string& why) const {
    const json* value = Find(name);
    if (value == nullptr || *value == expected) return absl::OkStatus();
    return FieldError(
        name, absl::StrCat(Shown(*value), " is not supported (", why, ")"));
  }

 private:
  const json& object_;
};

// Per-layer indexer kinds ("full"/"shared") from `indexer_types` (a list, as
// HF saves it) or `index_topk_pattern` (a string of F/S or a list).
absl::StatusOr<std::vector<bool>> ReadIndexerPattern(const json& value,
                                                     const std::string& field,
                                                     int num_layers) {
  std::vector<bool> computing;
  if (value.is_string()) {
    for (char c : value.get<std::string>()) {
      if (c != 'F' && c != 'S') {
        return FieldError(field, "characters must be 'F' or 'S'");
      }
      computing.push_back(c == 'F');
    }
  } else if (value.is_array()) {
    for (const json& kind : value) {
      if (kind != "full" && kind != "shared") {
        return FieldError(field, absl::StrCat("entries must be \"full\" or ",
                                              "\"shared\", got ", Shown(kind)));
      }
      computing.push_back(kind == "full");
    }
  } else {
    return FieldError(field, "expected a list or a string");
  }
  if (static_cast<int>(computing.size()) != num_layers) {
    return FieldError(
        field, absl::StrCat("has ", computing.size(),
                            " entries for num_hidden_layers ", num_layers));
  }
  return computing;
}

// The (freq, offset) rule that gives exactly `computing`; the model supports
// only patterns of that form (all released GLM-5.x checkpoints use one).
absl::StatusOr<IndexSharing> SharingFromPattern(
    const std::vector<bool>& computing, const std::string& field) {
  const int layers = static_cast<int>(computing.size());
  // With freq > 1 the layers up to offset compute and layer offset + 1 skips,
  // so the first skip layer fixes the offset: the search stays quadratic.
  const int first_skip =
      static_cast<int>(std::find(computing.begin(), computing.end(), false) -
                       computing.begin() + 1);
  for (int freq = 1; freq <= std::max(layers, 1); ++freq) {
    for (int offset = freq == 1 ? 2 : 0; offset <= layers; ++offset) {
      if (freq > 1 && offset != first_skip - 1) continue;
      IndexSharing sharing{freq, offset};
      bool same = true;
      for (int n = 1; n <= layers && same; ++n) {
        same = sharing.IsComputingLayer(n) == computing[n - 1];
      }
      if (same) return sharing;
      if (freq == 1) break;
    }
  }
  return FieldError(field,
                    "is not of the form 'layer n computes iff max(n - offset, "
                    "0) % freq == 0'");
}

absl::Status ReadIndexSharing(const FieldReader& fields, int num_layers,
                              IndexSharing* sharing) {
  GLM_RETURN_IF_ERROR(fields.Int("index_topk_freq", &sharing->topk_freq, 1));
  GLM_RETURN_IF_ERROR(
      fields.Int("index_skip_topk_offset", &sharing->skip_topk_offset, 2));
  // Longer patterns are refused with num_hidden_layers.
  if (num_layers > kMaxLayers) return absl::OkStatus();
  // HF precedence: indexer_types, then index_topk_pattern, then freq/offset.
  for (const char* field : {"indexer_types", "index_topk_pattern"}) {
    const json* value = fields.Find(field);
    if (value == nullptr) continue;
    absl::StatusOr<std::vector<bool>> computing =
        ReadIndexerPattern(*value, field, num_layers);
    if (!computing.ok()) return computing.status();
    absl::StatusOr<IndexSharing> derived =
        SharingFromPattern(*computing, field);
    if (!derived.ok()) return derived.status();
    *sharing = *derived;
    return absl::OkStatus();
  }
  return absl::OkStatus();
}

// HF's mlp_layer_types: first_k_dense_replace "dense" then "sparse".
absl::Status ReadMlpLayerTypes(const FieldReader& fields, bool first_k_given,
                               ModelConfig* config) {
  const json* value = fields.Find("mlp_layer_types");
  if (value == nullptr) return absl::OkStatus();
  if (!value->is_array() ||
      static_cast<int>(value->size()) != config->num_hidden_layers) {
    return FieldError("mlp_layer_types",
                      "expected a list with one entry per layer");
  }
  int dense = 0;
  while (dense < config->num_hidden_layers && (*value)[dense] == "dense") {
    ++dense;
  }
  for (int i = dense; i < config->num_hidden_layers; ++i) {
    if ((*value)[i] != "sparse") {
      return FieldError("mlp_layer_types",
                        absl::StrCat("entry ", i, " is ", Shown((*value)[i]),
                                     "; expected dense layers first, then "
                                     "\"sparse\""));
    }
  }
  if (first_k_given && dense != config->first_k_dense_replace) {
    return FieldError(
        "mlp_layer_types",
        absl::StrCat("has ", dense,
                     " dense layers but first_k_dense_replace is ",
                     config->first_k_dense_replace));
  }
  config->first_k_dense_replace = dense;
  return absl::OkStatus();
}

// Only the default RoPE (no YaRN scaling) is supported: `value` must be an
// object whose rope_type (or the older "type") is absent or "default".
absl::Status CheckDefaultRope(const json& value, const std::string& field) {
  if (!value.is_object()) return FieldError(field, "expected an object");
  for (const char* key : {"rope_type", "type"}) {
    auto it = value.find(key);
    if (it != value.end() && *it != "default") {
      return FieldError(
          absl::StrCat(field, ".", key),
          absl::StrCat(Shown(*it), " is not supported (only \"default\")"));
    }
  }
  return absl::OkStatus();
}

// rope_parameters (transformers 5) or the older top-level rope_theta and
// rope_scaling.
absl::Status ReadRope(const FieldReader& fields, ModelConfig* config) {
  GLM_RETURN_IF_ERROR(
      fields.Double("rope_theta", &config->rope_theta, 10000.0));
  if (const json* scaling = fields.Find("rope_scaling")) {
    GLM_RETURN_IF_ERROR(CheckDefaultRope(*scaling, "rope_scaling"));
  }
  const json* parameters = fields.Find("rope_parameters");
  if (parameters == nullptr) return absl::OkStatus();
  GLM_RETURN_IF_ERROR(CheckDefaultRope(*parameters, "rope_parameters"));
  absl::Status theta =
      FieldReader(*parameters)
          .Double("rope_theta", &config->rope_theta, config->rope_theta);
  if (!theta.ok()) {
    return FieldError("rope_parameters.rope_theta", "expected a number");
  }
  return absl::OkStatus();
}

absl::Status ReadShapes(const FieldReader& fields, ModelConfig* config) {
  GLM_RETURN_IF_ERROR(fields.Int("vocab_size", &config->vocab_size));
  GLM_RETURN_IF_ERROR(fields.Int("hidden_size", &config->hidden_size));
  GLM_RETURN_IF_ERROR(
      fields.Int("num_hidden_layers", &config->num_hidden_layers));
  GLM_RETURN_IF_ERROR(
      fields.Int("num_attention_heads", &config->num_attention_heads));
  if (fields.Find("q_lora_rank") == nullptr) {
    return FieldError("q_lora_rank",
                      "missing or null (a full q_proj without LoRA is not "
                      "supported)");
  }
  GLM_RETURN_IF_ERROR(fields.Int("q_lora_rank", &config->q_lora_rank));
  GLM_RETURN_IF_ERROR(fields.Int("kv_lora_rank", &config->kv_lora_rank));
  GLM_RETURN_IF_ERROR(
      fields.Int("qk_nope_head_dim", &config->qk_nope_head_dim));
  GLM_RETURN_IF_ERROR(
      fields.Int("qk_rope_head_dim", &config->qk_rope_head_dim));
  GLM_RETURN_IF_ERROR(fields.Int("v_head_dim", &config->v_head_dim));
  GLM_RETURN_IF_ERROR(
      fields.Int("intermediate_size", &config->intermediate_size));
  GLM_RETURN_IF_ERROR(
      fields.Int("moe_intermediate_size", &config->moe_intermediate_size));
  // HF re-routes the older `num_experts` to n_routed_experts.
  GLM_RETURN_IF_ERROR(fields.Int(
      fields.Find("num_experts") ? "num_experts" : "n_routed_experts",
      &config->n_routed_experts));
  GLM_RETURN_IF_ERROR(
      fields.Int("num_experts_per_tok", &config->num_experts_per_tok));
  GLM_RETURN_IF_ERROR(fields.Int("index_n_heads", &config->index_n_heads, 32));
  GLM_RETURN_IF_ERROR(
      fields.Int("index_head_dim", &config->index_head_dim, 128));
  GLM_RETURN_IF_ERROR(fields.Int("index_topk", &config->index_topk, 2048));
  return absl::OkStatus();
}

// Fields with HF defaults, and fields whose only supported value is HF's.
absl::Status ReadOptions(const FieldReader& fields, ModelConfig* config) {
  GLM_RETURN_IF_ERROR(
      fields.Int("n_shared_experts", &config->n_shared_experts, 1));
  GLM_RETURN_IF_ERROR(fields.Double("routed_scaling_factor",
                                    &config->routed_scaling_factor, 2.5));
  GLM_RETURN_IF_ERROR(fields.Int("n_group", &config->n_group, 1));
  GLM_RETURN_IF_ERROR(fields.Int("topk_group", &config->topk_group, 1));
  GLM_RETURN_IF_ERROR(
      fields.Bool("norm_topk_prob", &config->norm_topk_prob, true));
  GLM_RETURN_IF_ERROR(
      fields.Double("rms_norm_eps", &config->rms_norm_eps, 1e-5));
  GLM_RETURN_IF_ERROR(
      fields.Int("num_nextn_predict_layers", &config->num_mtp_layers, 0));
  GLM_RETURN_IF_ERROR(fields.Int("max_position_embeddings",
                                 &config->max_position_embeddings, 202752));
  GLM_RETURN_IF_ERROR(
      fields.Bool("tie_word_embeddings", &config->tie_word_embeddings, false));
  std::string dtype;
  GLM_RETURN_IF_ERROR(fields.String("torch_dtype", &dtype, "bfloat16"));
  GLM_RETURN_IF_ERROR(fields.String("dtype", &config->torch_dtype, dtype));
  // transformers always uses interleaved RoPE (main and indexer) whatever
  // these GLM-5.2 flags say; they are read for their type only.
  for (const char* flag : {"rope_interleave", "indexer_rope_interleave"}) {
    bool interleave;
    GLM_RETURN_IF_ERROR(fields.Bool(flag, &interleave, true));
  }
  GLM_RETURN_IF_ERROR(
      fields.Fixed("hidden_act", "silu", "the experts are SwiGLU"));
  GLM_RETURN_IF_ERROR(
      fields.Fixed("attention_bias", false, "projections have no bias"));
  GLM_RETURN_IF_ERROR(fields.Fixed("mlp_bias", false, "MLPs have no bias"));
  GLM_RETURN_IF_ERROR(
      fields.Fixed("num_key_value_heads", config->num_attention_heads,
                   "MLA has one key/value head per query head"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ParseHfConfigJson(const std::string& text) {
  if (text.size() > kMaxConfigJsonBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json is ", text.size(), " bytes, more than the ",
                     kMaxConfigJsonBytes, " a model config may have"));
  }
  json root;
  bool too_deep = false;
  // Values deeper than the limit are dropped as they are read, so neither the
  // parse nor anything after it walks a deep tree.
  json::parser_callback_t depth_limit =
      [&too_deep](int depth, json::parse_event_t, json&) {
        too_deep |= depth > kMaxJsonDepth;
        return depth <= kMaxJsonDepth;
      };
  try {
    root = json::parse(text, depth_limit);
  } catch (const json::exception& error) {
    // The parser's message repeats the token it stopped at, which may be
    // long.
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json is not valid JSON: ", Quote(error.what(), 200)));
  }
  if (too_deep) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json nests more than ", kMaxJsonDepth, " levels deep"));
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError("config.json is not a JSON object");
  }
  const FieldReader fields(root);
  ModelConfig config;
  GLM_RETURN_IF_ERROR(ReadShapes(fields, &config));
  GLM_RETURN_IF_ERROR(ReadOptions(fields, &config));
  GLM_RETURN_IF_ERROR(
      fields.Int("first_k_dense_replace", &config.first_k_dense_replace, 3));
  GLM_RETURN_IF_ERROR(ReadMlpLayerTypes(
      fields, fields.Find("first_k_dense_replace") != nullptr, &config));
  GLM_RETURN_IF_ERROR(ReadIndexSharing(fields, config.num_hidden_layers,
                                       &config.index_sharing));
  GLM_RETURN_IF_ERROR(ReadRope(fields, &config));
  GLM_RETURN_IF_ERROR(ValidateModelConfig(config));
  return config;
}

absl::StatusOr<ModelConfig> ReadHfConfigFile(const std::string& path) {
  // A file that cannot be sized is left to ReadFile to explain.
  absl::StatusOr<int64_t> size = FileSize(path);
  if (size.ok() && static_cast<uint64_t>(*size) > kMaxConfigJsonBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", *size, " bytes, more than the ",
                     kMaxConfigJsonBytes, " a config.json may have"));
  }
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<ModelConfig> config = ParseHfConfigJson(*text);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

absl::Status ValidateModelConfig(const ModelConfig& c) {
  const int layers = c.num_hidden_layers;
  const bool has_moe = c.first_k_dense_replace < layers || c.num_mtp_layers > 0;
  const int64_t experts_per_group =
      c.n_group > 0 ? c.n_routed_experts / c.n_group : 0;
  struct Rule {
    bool ok;
    const char* field;
    std::string what;
  };
  const Rule rules[] = {
      {c.vocab_size > 0, "vocab_size", "must be positive"},
      {c.hidden_size > 0, "hidden_size", "must be positive"},
      {layers > 0, "num_hidden_layers", "must be positive"},
      {c.num_attention_heads > 0, "num_attention_heads", "must be positive"},
      {c.q_lora_rank > 0, "q_lora_rank", "must be positive"},
      {c.kv_lora_rank > 0, "kv_lora_rank", "must be positive"},
      {c.qk_nope_head_dim > 0, "qk_nope_head_dim", "must be positive"},
      {c.qk_rope_head_dim > 0 && c.qk_rope_head_dim % 2 == 0,
       "qk_rope_head_dim", "must be positive and even (RoPE rotates pairs)"},
      {c.v_head_dim > 0, "v_head_dim", "must be positive"},
      {c.vocab_size <= kMaxVocabSize, "vocab_size",
       absl::StrCat("must be at most ", kMaxVocabSize)},
      {c.hidden_size <= kMaxWidth && c.q_lora_rank <= kMaxWidth &&
           c.kv_lora_rank <= kMaxWidth && c.intermediate_size <= kMaxWidth &&
           c.moe_intermediate_size <= kMaxWidth,
       "hidden_size",
       absl::StrCat("it, q_lora_rank, kv_lora_rank and the ",
                    "intermediate sizes must be at most ", kMaxWidth)},
      {c.qk_nope_head_dim <= kMaxHeadDim && c.qk_rope_head_dim <= kMaxHeadDim &&
           c.v_head_dim <= kMaxHeadDim && c.index_head_dim <= kMaxHeadDim,
       "qk_nope_head_dim",
       absl::StrCat("it, qk_rope_head_dim, v_head_dim and ",
                    "index_head_dim must be at most ", kMaxHeadDim)},
      {c.num_attention_heads <= kMaxHeads && c.index_n_heads <= kMaxHeads,
       "num_attention_heads",
       absl::StrCat("it and index_n_heads must be at most ", kMaxHeads)},
      {layers <= kMaxLayers, "num_hidden_layers",
       absl::StrCat("must be at most ", kMaxLayers)},
      {c.n_routed_experts <= kMaxExperts, "n_routed_experts",
       absl::StrCat("must be at most ", kMaxExperts)},
      {c.n_shared_experts <= kMaxSharedExperts, "n_shared_experts",
       absl::StrCat("must be at most ", kMaxSharedExperts)},
      {c.max_position_embeddings <= kMaxPositions &&
           c.index_topk <= kMaxPositions,
       "max_position_embeddings",
       absl::StrCat("it and index_topk must be at most ", kMaxPositions)},
      {c.intermediate_size >= 0 && c.moe_intermediate_size >= 0 &&
           c.n_routed_experts >= 0 && c.num_experts_per_tok >= 0,
       "intermediate_size",
       "it, moe_intermediate_size, n_routed_experts and num_experts_per_tok "
       "must not be negative"},
      {std::isfinite(c.routed_scaling_factor) &&
           std::isfinite(c.rms_norm_eps) && std::isfinite(c.rope_theta),
       "routed_scaling_factor",
       "it, rms_norm_eps and rope_theta must be finite"},
      {c.first_k_dense_replace >= 0 && c.first_k_dense_replace <= layers,
       "first_k_dense_replace", "must be in [0, num_hidden_layers]"},
      {c.first_k_dense_replace == 0 || c.intermediate_size > 0,
       "intermediate_size", "must be positive when there are dense layers"},
      {!has_moe || c.n_routed_experts > 0, "n_routed_experts",
       "must be positive when there are MoE layers"},
      {!has_moe || c.moe_intermediate_size > 0, "moe_intermediate_size",
       "must be positive when there are MoE layers"},
      {c.n_shared_experts >= 0, "n_shared_experts", "must not be negative"},
      {c.n_group > 0 && (!has_moe || c.n_routed_experts % c.n_group == 0),
       "n_group", "must be positive and divide n_routed_experts"},
      {!has_moe || experts_per_group >= 2, "n_group",
       "each group needs at least 2 experts (group score = top-2 sum)"},
      {c.topk_group > 0 && c.topk_group <= c.n_group, "topk_group",
       "must be in [1, n_group]"},
      {!has_moe || (c.num_experts_per_tok > 0 &&
                    c.num_experts_per_tok <= c.topk_group * experts_per_group),
       "num_experts_per_tok",
       "must be in [1, experts in the topk_group selected groups]"},
      {c.routed_scaling_factor > 0, "routed_scaling_factor",
       "must be positive"},
      {c.rms_norm_eps > 0, "rms_norm_eps", "must be positive"},
      {c.index_n_heads > 0, "index_n_heads", "must be positive"},
      {c.index_head_dim >= c.qk_rope_head_dim, "index_head_dim",
       "must be at least qk_rope_head_dim (RoPE covers its first dims)"},
      {c.index_topk > 0, "index_topk", "must be positive"},
      {c.index_sharing.topk_freq >= 1, "index_topk_freq", "must be >= 1"},
      {c.index_sharing.skip_topk_offset >= 0, "index_skip_topk_offset",
       "must not be negative"},
      // The offset's sign is checked first: 1 - offset must not overflow.
      {c.index_sharing.skip_topk_offset >= 0 &&
           c.index_sharing.IsComputingLayer(1),
       "index_skip_topk_offset",
       "makes layer 1 a skip layer, which has no earlier top-k to reuse"},
      {c.num_mtp_layers == 0 || c.num_mtp_layers == 1,
       "num_nextn_predict_layers", "must be 0 or 1"},
      {c.rope_theta > 0, "rope_theta", "must be positive"},
      {c.max_position_embeddings > 0, "max_position_embeddings",
       "must be positive"},
  };
  for (const Rule& rule : rules) {
    if (!rule.ok) return FieldError(rule.field, rule.what);
  }
  const ParameterCount count = CountParameters(c);
  if (count.total + count.mtp > kMaxParameters) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json describes ", count.total + count.mtp,
        " parameters, more than the ", kMaxParameters, " a job may train"));
  }
  return absl::OkStatus();
}

namespace {

// Shapes shared by the tiny test presets; they differ only in index sharing.
ModelConfig TinyConfig(IndexSharing sharing) {
  ModelConfig c;
  c.vocab_size = 512;  // a byte tokenizer fits
  c.hidden_size = 64;
  c.num_hidden_layers = 8;
  c.num_attention_heads = 4;
  c.q_lora_rank = 32;
  c.kv_lora_rank = 32;
  c.qk_nope_head_dim = 16;
  c.qk_rope_head_dim = 8;
  c.v_head_dim = 16;
  c.intermediate_size = 128;
  c.first_k_dense_replace = 1;
  c.n_routed_experts = 8;
  c.n_shared_experts = 1;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 32;
  c.routed_scaling_factor = 2.5;
  c.index_n_heads = 4;
  c.index_head_dim = 16;
  c.index_topk = 16;  // shorter than test sequences, so sparsity bites
  c.index_sharing = sharing;
  c.num_mtp_layers = 1;
  c.rope_theta = 10000.0;
  c.max_position_embeddings = 4096;
  c.torch_dtype = "float32";
  return c;
}

// GLM-5 / GLM-5.2 released head and expert shapes.
ModelConfig Glm52Config() {
  ModelConfig c;
  c.vocab_size = 154880;
  c.hidden_size = 6144;
  c.num_hidden_layers = 78;
  c.num_attention_heads = 64;
  c.q_lora_rank = 2048;
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 192;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 256;
  c.intermediate_size = 12288;
  c.first_k_dense_replace = 3;
  c.n_routed_experts = 256;
  c.n_shared_experts = 1;
  c.num_experts_per_tok = 8;
  c.moe_intermediate_size = 2048;
  c.routed_scaling_factor = 2.5;
  c.index_n_heads = 32;
  c.index_head_dim = 128;
  c.index_topk = 2048;
  c.index_sharing = IndexSharing{4, 3};
  c.num_mtp_layers = 1;
  c.rope_theta = 8e6;
  c.max_position_embeddings = 1048576;
  c.torch_dtype = "bfloat16";
  return c;
}

// The GPU benchmark model, pinned so figures compare over time.
ModelConfig Glm52MiniConfig() {
  ModelConfig c = Glm52Config();
  c.hidden_size = 2048;
  c.num_hidden_layers = 12;
  c.num_attention_heads = 16;
  c.q_lora_rank = 1536;
  c.intermediate_size = 6144;
  c.first_k_dense_replace = 1;
  c.n_routed_experts = 32;
  c.moe_intermediate_size = 768;
  return c;
}

}  // namespace

std::vector<std::string> PresetNames() {
  return {"glm5.2-tiny", "glm5-tiny", "glm5.2-mini", "glm5.2"};
}

absl::StatusOr<ModelConfig> PresetConfig(const std::string& name) {
  if (name == "glm5.2-tiny") return TinyConfig(IndexSharing{4, 3});
  if (name == "glm5-tiny") return TinyConfig(IndexSharing{1, 2});
  if (name == "glm5.2-mini") return Glm52MiniConfig();
  if (name == "glm5.2") return Glm52Config();
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model preset ", Quote(name),
                   " (known: ", absl::StrJoin(PresetNames(), ", "), ")"));
}

namespace {

int64_t SwiGluParameters(int64_t hidden, int64_t intermediate) {
  return 3 * hidden * intermediate;
}

// MLA projections and their two RMSNorms, without the indexer.
int64_t AttentionParameters(const ModelConfig& c) {
  const int64_t heads = c.num_attention_heads;
  return c.hidden_size * c.q_lora_rank + c.q_lora_rank +
         c.q_lora_rank * heads * c.QkHeadDim() +
         c.hidden_size * (c.kv_lora_rank + c.qk_rope_head_dim) +
         c.kv_lora_rank +
         c.kv_lora_rank * heads * (c.qk_nope_head_dim + c.v_head_dim) +
         heads * c.v_head_dim * c.hidden_size;
}

// wq_b, wk, k_norm (weight and bias), weights_proj.
int64_t IndexerParameters(const ModelConfig& c) {
  return c.q_lora_rank * c.index_n_heads * c.index_head_dim +
         c.hidden_size * c.index_head_dim + 2 * c.index_head_dim +
         c.hidden_size * c.index_n_heads;
}

// Router weight (its e_score_correction_bias is a buffer, not a parameter,
// as in transformers' count), shared experts and the routed experts.
int64_t MoeParameters(const ModelConfig& c, int routed_experts) {
  return c.n_routed_experts * c.hidden_size +
         SwiGluParameters(c.hidden_size,
                          c.moe_intermediate_size * c.n_shared_experts) +
         routed_experts *
             SwiGluParameters(c.hidden_size, c.moe_intermediate_size);
}

struct LayerCount {
  int64_t total = 0;
  int64_t active = 0;
};

LayerCount DecoderLayerParameters(const ModelConfig& c, int layer,
                                  bool has_indexer) {
  int64_t common = 2 * c.hidden_size + AttentionParameters(c) +
                   (has_indexer ? IndexerParameters(c) : 0);
  if (!c.IsMoeLayer(layer)) {
    int64_t dense =
        common + SwiGluParameters(c.hidden_size, c.intermediate_size);
    return {dense, dense};
  }
  return {common + MoeParameters(c, c.n_routed_experts),
          common + MoeParameters(c, c.num_experts_per_tok)};
}

}  // namespace

ParameterCount CountParameters(const ModelConfig& c) {
  const int64_t embeddings =
      c.vocab_size * c.hidden_size * (c.tie_word_embeddings ? 1 : 2) +
      c.hidden_size;  // + model.norm
  ParameterCount count;
  count.total = count.active = embeddings;
  for (int layer = 1; layer <= c.num_hidden_layers; ++layer) {
    LayerCount layer_count = DecoderLayerParameters(
        c, layer, c.index_sharing.IsComputingLayer(layer));
    count.total += layer_count.total;
    count.active += layer_count.active;
  }
  for (int i = 0; i < c.num_mtp_layers; ++i) {
    // enorm, hnorm, eh_proj, shared_head.norm and a decoder layer; it has its
    // own indexer only without index sharing (freq 1).
    count.mtp += 3 * c.hidden_size + 2 * c.hidden_size * c.hidden_size +
                 DecoderLayerParameters(c, c.num_hidden_layers + 1 + i,
                                        c.index_sharing.topk_freq == 1)
                     .total;
  }
  return count;
}

std::string ToHfConfigJson(const ModelConfig& c) {
  json j = json::object();
  j["architectures"] = {"GlmMoeDsaForCausalLM"};
  j["model_type"] = "glm_moe_dsa";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_attention_heads;
  j["q_lora_rank"] = c.q_lora_rank;
  j["kv_lora_rank"] = c.kv_lora_rank;
  j["qk_nope_head_dim"] = c.qk_nope_head_dim;
  j["qk_rope_head_dim"] = c.qk_rope_head_dim;
  j["v_head_dim"] = c.v_head_dim;
  j["intermediate_size"] = c.intermediate_size;
  j["first_k_dense_replace"] = c.first_k_dense_replace;
  j["n_routed_experts"] = c.n_routed_experts;
  j["n_shared_experts"] = c.n_shared_experts;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["routed_scaling_factor"] = c.routed_scaling_factor;
  j["n_group"] = c.n_group;
  j["topk_group"] = c.topk_group;
  j["norm_topk_prob"] = c.norm_topk_prob;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["index_n_heads"] = c.index_n_heads;
  j["index_head_dim"] = c.index_head_dim;
  j["index_topk"] = c.index_topk;
  j["index_topk_freq"] = c.index_sharing.topk_freq;
  j["index_skip_topk_offset"] = c.index_sharing.skip_topk_offset;
  j["num_nextn_predict_layers"] = c.num_mtp_layers;
  j["rope_parameters"] = {{"rope_type", "default"},
                          {"rope_theta", c.rope_theta}};
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["dtype"] = c.torch_dtype;
  return j.dump(2) + "\n";
}

}  // namespace glm
