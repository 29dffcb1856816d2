#include "training/lora.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "training/lora_targets.h"

namespace glm {
namespace {

constexpr char kWeightSuffix[] = ".weight";

// Columns [first, first + count) of a 2-D tensor.
Tensor ColumnsOf(const Tensor& t, int64_t first, int64_t count) {
  Tensor columns({t.dim(0), count});
  for (int64_t r = 0; r < t.dim(0); ++r) {
    std::copy_n(t.data() + r * t.dim(1) + first, count,
                columns.data() + r * count);
  }
  return columns;
}

}  // namespace

absl::StatusOr<LoraAdapters> LoraAdapters::Create(ModelParameters* params,
                                                  const LoraOptions& options,
                                                  uint64_t seed) {
  if (options.rank <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.lora.rank: must be > 0, got ", options.rank));
  }
  if (options.target_modules.empty()) {
    return absl::InvalidArgumentError(
        "training.lora.target_modules: name at least one linear layer");
  }
  LoraAdapters adapters(options.alpha / options.rank);
  std::set<std::string> matched;
  for (const NamedTensor& named : params->Named()) {
    const std::vector<int64_t>& shape = params->WholeShape(named.name);
    const std::string module =
        LoraModuleOf(named.name, shape, named.grad != nullptr);
    if (module.empty()) continue;
    // "model.layers.3.self_attn.q_a_proj.weight": stem without ".weight".
    const std::string stem =
        named.name.substr(0, named.name.size() - (sizeof(kWeightSuffix) - 1));
    bool wanted = false;
    for (const std::string& target : options.target_modules) {
      wanted |= module == target;
    }
    if (!wanted) continue;
    matched.insert(module);
    const int64_t out = shape[0], in = shape[1];
    std::mt19937_64 rng(seed + adapters.targets_.size());
    std::uniform_real_distribution<float> uniform(-1.f / std::sqrt(in),
                                                  1.f / std::sqrt(in));
    Tensor a({options.rank, in});
    for (float& x : a.values()) x = uniform(rng);
    // A rank holding rows of W (column-parallel) trains those rows of B; one
    // holding columns (row-parallel), those columns of A.
    const TensorPart part = params->held().PartOf(named.name, shape);
    if (part.dim == 1) a = ColumnsOf(a, part.first, part.count);
    const int64_t b_rows = part.dim == 0 ? part.count : out;
    Target target{stem,
                  named.value,
                  named.grad,
                  *named.value,
                  a,
                  Tensor(a.shape()),
                  Tensor({b_rows, options.rank}),
                  Tensor({b_rows, options.rank})};
    adapters.targets_.push_back(std::move(target));
  }
  std::vector<std::string> unmatched;
  for (const std::string& target : options.target_modules) {
    if (!matched.count(target)) unmatched.push_back(target);
  }
  if (!unmatched.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training.lora.target_modules: no 2-D weight named ",
        absl::StrJoin(unmatched, ", "),
        " (modules look like q_a_proj, kv_b_proj, o_proj, gate_proj)"));
  }
  return adapters;
}

LoraAdapters LoraAdapters::MirrorOn(ModelParameters* params,
                                    Allocator* memory) const {
  std::map<std::string, NamedTensor> named;
  for (const NamedTensor& t : params->Named()) named.emplace(t.name, t);
  LoraAdapters mirror(scale_);
  for (const Target& t : targets_) {
    const NamedTensor& weight = named.at(t.module + kWeightSuffix);
    mirror.targets_.push_back({t.module, weight.value, weight.grad,
                               t.base.CopyTo(memory), t.a.CopyTo(memory),
                               Tensor(t.a.shape(), memory), t.b.CopyTo(memory),
                               Tensor(t.b.shape(), memory)});
  }
  return mirror;
}

void LoraAdapters::CopyValuesFrom(const LoraAdapters& other) {
  assert(other.targets_.size() == targets_.size());
  for (size_t i = 0; i < targets_.size(); ++i) {
    targets_[i].a.CopyFrom(other.targets_[i].a);
    targets_[i].b.CopyFrom(other.targets_[i].b);
  }
}

// s * B, the scaled up-projection both products below use.
Tensor ScaledB(Backend& backend, const Tensor& b, double scale) {
  Tensor scaled(b.shape(), b.allocator());
  backend.Axpy(static_cast<float>(scale), b.Matrix(), scaled.Matrix());
  return scaled;
}

void LoraAdapters::Merge(Backend& backend) {
  for (Target& t : targets_) {
    if (!Held(t)) continue;
    backend.Copy(t.base.Matrix(), t.weight->Matrix());
    // W[out, in] += (s B)[out, r] A[r, in]: the input-gradient product of a
    // linear layer with weight A (its input, W0, only gives the shape).
    backend.LinearBackward(t.base.Matrix(), t.a.Matrix(),
                           ScaledB(backend, t.b, scale_).Matrix(),
                           t.weight->Matrix(), MatrixView());
  }
}

void LoraAdapters::AdapterGradients(Backend& backend) {
  for (Target& t : targets_) {
    if (!Held(t)) continue;
    const Tensor scaled_b = ScaledB(backend, t.b, scale_);
    // dA[r, in] = (s B)^T[r, out] G[out, in]: a weight-gradient product.
    t.a_grad.SetZero();
    backend.LinearBackward(t.weight_grad->Matrix(), t.a.Matrix(),
                           scaled_b.Matrix(), MatrixView(), t.a_grad.Matrix());
    // dB[out, r] = s G[out, in] A^T[in, r]: a forward product, then scaled.
    Tensor g_at(t.b.shape(), t.b.allocator());
    backend.Linear(t.weight_grad->Matrix(), t.a.Matrix(), g_at.Matrix(),
                   /*accumulate=*/false);
    t.b_grad.SetZero();
    backend.Axpy(static_cast<float>(scale_), g_at.Matrix(), t.b_grad.Matrix());
    t.weight_grad->SetZero();
  }
}

std::vector<TrainableTensor> LoraAdapters::Trainable() {
  return Adapters(/*held_only=*/true);
}

std::vector<TrainableTensor> LoraAdapters::All() {
  return Adapters(/*held_only=*/false);
}

std::vector<TrainableTensor> LoraAdapters::Adapters(bool held_only) {
  std::vector<TrainableTensor> adapters;
  for (Target& t : targets_) {
    if (held_only && !Held(t)) continue;
    adapters.push_back({t.module + ".lora_A.weight", &t.a, &t.a_grad});
    adapters.push_back({t.module + ".lora_B.weight", &t.b, &t.b_grad});
  }
  return adapters;
}

}  // namespace glm
