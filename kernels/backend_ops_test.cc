// Every backend op, forward and backward, on fresh random inputs (the idea of
// ggml's test-backend-ops): a table of op cases, each run on every backend in
// Backends().
//   forward:  compared with a naive double-precision reference, NMSE <= 1e-10;
//   backward: the backend's gradients against central finite differences of the
//             backend's own forward (loss = sum(dout . out), step 1e-2, or 1e-3
//             where selections could flip), NMSE <= 1e-4.
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"

namespace glm {
namespace {

using Tensors = std::vector<Tensor>;
using Reference = std::vector<std::vector<double>>;

std::vector<std::unique_ptr<Backend>> Backends() {
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(std::make_unique<CpuBackend>());
  return backends;
}

struct OpCase {
  std::string name;
  Tensors inputs;  // the float inputs; gradients are checked for each of them
  std::function<Tensors(Backend&, const Tensors&)> forward;
  std::function<Reference(const Tensors&)> reference;
  // Gradients of sum(douts . outputs) for every input (an empty Tensor: not
  // checked).
  std::function<Tensors(Backend&, const Tensors&, const Tensors&)> backward;
  double fd_step = 1e-2;
};

Tensor Random(std::vector<int64_t> shape, std::mt19937& rng,
              float scale = 1.f) {
  Tensor t(std::move(shape));
  std::normal_distribution<float> normal(0.f, scale);
  for (float& v : t.values()) v = normal(rng);
  return t;
}

Tensor ZerosLike(const Tensor& t) { return Tensor(t.shape()); }

// A loss op's value: `op` adds it to a sum in the backend's memory that
// starts at 0.
template <typename Op>
float LossOf(Backend& b, Op op) {
  TensorStorage<double> sum(1, 0.0, b.allocator());
  op(sum.data());
  TensorStorage<double> host(1, 0.0, nullptr);
  host.CopyFrom(sum);
  return static_cast<float>(host.data()[0]);
}

double Nmse(const std::vector<double>& expected,
            const std::vector<double>& actual) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    err += (expected[i] - actual[i]) * (expected[i] - actual[i]);
    norm += expected[i] * expected[i];
  }
  return err / std::max(norm, 1e-30);
}

std::vector<double> AsDouble(const Tensor& t) {
  return std::vector<double>(t.values().begin(), t.values().end());
}

double WeightedSum(const Tensors& outputs, const Tensors& douts) {
  double total = 0;
  for (size_t o = 0; o < outputs.size(); ++o) {
    for (int64_t i = 0; i < outputs[o].numel(); ++i) {
      total += double{outputs[o].data()[i]} * douts[o].data()[i];
    }
  }
  return total;
}

void RunCase(Backend& backend, OpCase op) {
  SCOPED_TRACE(op.name + " on " + backend.Name());
  std::mt19937 rng(7);
  const Tensors outputs = op.forward(backend, op.inputs);
  const Reference expected = op.reference(op.inputs);
  ASSERT_EQ(outputs.size(), expected.size());
  for (size_t o = 0; o < outputs.size(); ++o) {
    EXPECT_LE(Nmse(expected[o], AsDouble(outputs[o])), 1e-10) << "output " << o;
  }
  Tensors douts;
  for (const Tensor& out : outputs) douts.push_back(Random(out.shape(), rng));
  const Tensors grads = op.backward(backend, op.inputs, douts);
  ASSERT_EQ(grads.size(), op.inputs.size());
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    if (grads[i].empty()) continue;
    std::vector<double> numeric(op.inputs[i].numel());
    for (int64_t e = 0; e < op.inputs[i].numel(); ++e) {
      Tensors moved = op.inputs;
      moved[i].data()[e] += static_cast<float>(op.fd_step);
      const double plus = WeightedSum(op.forward(backend, moved), douts);
      moved[i].data()[e] -= static_cast<float>(2 * op.fd_step);
      const double minus = WeightedSum(op.forward(backend, moved), douts);
      numeric[e] = (plus - minus) / (2 * op.fd_step);
    }
    EXPECT_LE(Nmse(numeric, AsDouble(grads[i])), 1e-4)
        << "gradient of input " << i;
  }
}

// ---- cases ----

OpCase LinearCase(std::mt19937& rng) {
  OpCase op;
  op.name = "linear";
  op.inputs = {Random({5, 7}, rng), Random({3, 7}, rng)};
  op.forward = [](Backend& b, const Tensors& in) {
    Tensor y({5, 3});
    b.Linear(in[0].Matrix(), in[1].Matrix(), y.Matrix(), false);
    return Tensors{y};
  };
  op.reference = [](const Tensors& in) {
    std::vector<double> y(15, 0.0);
    for (int r = 0; r < 5; ++r)
      for (int o = 0; o < 3; ++o)
        for (int c = 0; c < 7; ++c)
          y[r * 3 + o] +=
              double{in[0].data()[r * 7 + c]} * in[1].data()[o * 7 + c];
    return Reference{y};
  };
  op.backward = [](Backend& b, const Tensors& in, const Tensors& d) {
    Tensor dx = ZerosLike(in[0]), dw = ZerosLike(in[1]);
    b.LinearBackward(in[0].Matrix(), in[1].Matrix(), d[0].Matrix(), dx.Matrix(),
                     dw.Matrix());
    return Tensors{dx, dw};
  };
  return op;
}

// Three experts of 4 outputs over 7 rows: expert 1 has none.
const std::vector<int32_t> kExpertOffsets = {0, 2, 2, 7};

OpCase GroupedLinearCase(std::mt19937& rng) {
  OpCase op;
  op.name = "grouped_linear";
  op.inputs = {Random({7, 5}, rng), Random({12, 5}, rng)};
  op.forward = [](Backend& b, const Tensors& in) {
    Tensor y({7, 4});
    b.GroupedLinear(in[0].Matrix(), in[1].Matrix(), kExpertOffsets.data(), 3,
                    y.Matrix());
    return Tensors{y};
  };
  op.reference = [](const Tensors& in) {
    std::vector<double> y(28, 0.0);
    for (int e = 0; e < 3; ++e)
      for (int r = kExpertOffsets[e]; r < kExpertOffsets[e + 1]; ++r)
        for (int o = 0; o < 4; ++o)
          for (int c = 0; c < 5; ++c)
            y[r * 4 + o] += double{in[0].data()[r * 5 + c]} *
                            in[1].data()[(e * 4 + o) * 5 + c];
    return Reference{y};
  };
  op.backward = [](Backend& b, const Tensors& in, const Tensors& d) {
    Tensor dx = ZerosLike(in[0]), dw = ZerosLike(in[1]);
    b.GroupedLinearBackward(in[0].Matrix(), in[1].Matrix(),
                            kExpertOffsets.data(), 3, d[0].Matrix(),
                            dx.Matrix(), /*accumulate_dx=*/true, dw.Matrix());
    return Tensors{dx, dw};
  };
  return op;
}

// A strided column view in and out: Linear on columns [2, 9) of a [4, 12]
// input.
OpCase StridedLinearCase(std::mt19937& rng) {
  OpCase op;
  op.name = "linear_strided";
  op.inputs = {Random({4, 12}, rng), Random({3, 7}, rng)};
  op.forward = [](Backend& b, const Tensors& in) {
    Tensor y({4, 5});
    b.Linear(in[0].Matrix().Columns(2, 7), in[1].Matrix(),
             y.Matrix().Columns(1, 3), false);
    return Tensors{y};
  };
  op.reference = [](const Tensors& in) {
    std::vector<double> y(20, 0.0);
    for (int r = 0; r < 4; ++r)
      for (int o = 0; o < 3; ++o)
        for (int c = 0; c < 7; ++c)
          y[r * 5 + 1 + o] +=
              double{in[0].data()[r * 12 + 2 + c]} * in[1].data()[o * 7 + c];
    return Reference{y};
  };
  op.backward = [](Backend& b, const Tensors& in, const Tensors& d) {
    Tensor dx = ZerosLike(in[0]), dw = ZerosLike(in[1]);
    b.LinearBackward(in[0].Matrix().Columns(2, 7), in[1].Matrix(),
                     d[0].Matrix().Columns(1, 3), dx.Matrix().Columns(2, 7),
                     dw.Matrix());
    return Tensors{dx, dw};
  };
  return op;
}

const std::vector<int32_t> kIds = {3, 0, 3, 5, 1, 3};

OpCase EmbeddingCase(std::mt19937& rng) {
  OpCase op;
  op.name = "embedding";
  op.inputs = {Random({6, 4}, rng)};
  op.forward = [](Backend& b, const Tensors& in) {
    Tensor y({6, 4});
    b.EmbeddingForward(in[0].Matrix(), kIds.data(), y.Matrix());
    return Tensors{y};
  };
  op.reference = [](const Tensors& in) {
    std::vector<double> y;
    for (int32_t id : kIds)
      for (int c = 0; c < 4; ++c) y.push_back(in[0].data()[id * 4 + c]);
    return Reference{y};
  };
  op.backward = [](Backend& b, const Tensors& in, const Tensors& d) {
    Tensor dt = ZerosLike(in[0]);
    b.EmbeddingBackward(d[0].Matrix(), kIds.data(), dt.Matrix());
    return Tensors{dt};
  };
  return op;
}

OpCase ScatterAddCase(std::mt19937& rng) {
  OpCase op;
  op.name = "scatter_add_rows";
  op.inputs = {Random({6, 4}, rng), Random({6}, rng)};
  op.forward = [](Backend& b, const Tensors& in) {
    Tensor y({7, 4});
    b.ScatterAddRows(in[0].Matrix(), kIds.data(), in[1].data(), y.Matrix());
    return Tensors{y};
  };
  op.reference = [](const Tensors& in) {
    std::vector<double> y(28, 0.0);
    for (int i = 0; i < 6; ++i)
      for (int c = 0; c < 4; ++c)
        y[kIds[i] * 4 + c] += double{in[1].data()[i]} * in[0].data()[i * 4 + c];
    return Reference{y};
  };
  op.backward = [](Backend& b, const Tensors& in, const Tensors& d) {
    Tensor ds = ZerosLike(in[0]), dscale = ZerosLike(in[1]);
    b.ScatterAddRowsBackward(in[0].Matrix(), kIds.data(), in[1].data(),
                             d[0].Matrix(), ds.Matrix(),
                             {dscale.data(), dscale.numel(), 1, 1}, nullptr);
    return Tensors{ds, dscale};
  };
  return op;
}

OpCase RmsNormCase(std::mt19937& rng) {
  OpCase op;
  op.name = "rms_norm";
  op.inputs = {Random({5, 8}, rng), Random({8}, rng)};
  op.forward = [](Backend& b, const Tensors& in) {
    Tensor y({5, 8}), rstd({5});
    b.RmsNormForward(in[0].Matrix(), in[1].data(), 1e-5f, y.Matrix(),
                     rstd.data());
    return Tensors{y};
  };
  op.reference = [](const Tensors& in) {
    std::vector<double> y;
    for (int r = 0; r < 5; ++r) {
      double ss = 0;
      for (int c = 0; c < 8; ++c) ss += std::pow(in[0].data()[r * 8 + c], 2);
      const double inv = 1 / std::sqrt(ss / 8 + 1e-5);
      for (int c = 0; c < 8; ++c)
        y.push_back(in[0].data()[r * 8 + c] * inv * in[1].data()[c]);
    }
    return Reference{y};
  };
  op.backward = [](Backend& b, const Tensors& in, const Tensors& d) {
    Tensor y({5, 8}), rstd({5}), dx = ZerosLike(in[0]), dw = ZerosLike(in[1]);
    b.RmsNormForward(in[0].Matrix(), in[1].data(), 1e-5f, y.Matrix(),
                     rstd.data());
    b.RmsNormBackward(in[0].Matrix(), in[1].data(), rstd.data(), d[0].Matrix(),
                      {}, dx.Matrix(), dw.data());
    return Tensors{dx, dw};
  };
  return op;
}

OpCase LayerNormCase(std::mt19937& rng) {
  OpCase op;
  op.name = "layer_norm";
  op.inputs = {Random({5, 8}, rng), Random({8}, rng), Random({8}, rng)};
  op.forward = [](Backend& b, const Tensors& in) {
    Tensor y({5, 8}), mean({5}), rstd({5});
    b.LayerNormForward(in[0].Matrix(), in[1].data(), in[2].data(), 1e-6f,
                       y.Matrix(), mean.data(), rstd.data());
    return Tensors{y};
  };
  op.reference = [](const Tensors& in) {
    std::vector<double> y;
    for (int r = 0; r < 5; ++r) {
      double mu = 0, var = 0;
      for (int c = 0; c < 8; ++c) mu += in[0].data()[r * 8 + c] / 8.0;
      for (int c = 0; c < 8; ++c)
        var += std::pow(in[0].data()[r * 8 + c] - mu, 2) / 8.0;
      for (int c = 0; c < 8; ++c)
        y.push_back((in[0].data()[r * 8 + c] - mu) / std::sqrt(var + 1e-6) *
                        in[1].data()[c] +
                    in[2].data()[c]);
    }
    return Reference{y};
  };
  op.backward = [](Backend& b, const Tensors& in, const Tensors& d) {
    Tensor y({5, 8}), mean({5}), rstd({5});
    Tensor dx = ZerosLike(in[0]), dw = ZerosLike(in[1]), db = ZerosLike(in[2]);
    b.LayerNormForward(in[0].Matrix(), in[1].data(), in[2].data(), 1e-6f,
                       y.Matrix(), mean.data(), rstd.data());
    b.LayerNormBackward(in[0].Matrix(), in[1].data(), mean.data(), rstd.data(),
                        d[0].Matrix(), dx.Matrix(), dw.data(), db.data());
    return Tensors{dx, dw, db};
  };
  return op;
}

OpCase SwiGluCase(std::mt19937& rng) {
  OpCase op;
  op.name = "swiglu";
  op.inputs = {Random({4, 6}, rng), Random({4, 6}, rng)};
  op.forward = [](Backend& b, const Tensors& in) {
    Tensor y({4, 6});
    b.SwiGluForward(in[0].Matrix(), in[1].Matrix(), y.Matrix());
    return Tensors{y};
  };
  op.reference = [](const Tensors& in) {
    std::vector<double> y;
    for (int i = 0; i < 24; ++i) {
      const double g = in[0].data()[i];
      y.push_back(g / (1 + std::exp(-g)) * in[1].data()[i]);
    }
    return Reference{y};
  };
  op.backward = [](Backend& b, const Tensors& in, const Tensors& d) {
    Tensor dg = ZerosLike(in[0]), du = ZerosLike(in[1]);
    b.SwiGluBackward(in[0].Matrix(), in[1].Matrix(), d[0].Matrix(), dg.Matrix(),
                     du.Matrix());
    return Tensors{dg, du};
  };
  return op;
}

// Two heads per token; positions [0, 5, 17].
const std::vector<int32_t> kPositions = {0, 5, 17};

OpCase RopeCase(std::mt19937& rng) {
  OpCase op;
  op.name = "rope_interleaved";
  op.inputs = {Random({6, 8}, rng)};
  op.forward = [](Backend& b, const Tensors& in) {
    Tensor y({6, 8});
    b.RopeForward(in[0].Matrix(), kPositions.data(), 2, 100.f, y.Matrix());
    return Tensors{y};
  };
  op.reference = [](const Tensors& in) {
    std::vector<double> y(48);
    for (int r = 0; r < 6; ++r) {
      for (int i = 0; i < 4; ++i) {
        const double angle = kPositions[r / 2] / std::pow(100.0, 2.0 * i / 8);
        const double x0 = in[0].data()[r * 8 + 2 * i],
                     x1 = in[0].data()[r * 8 + 2 * i + 1];
        y[r * 8 + i] = x0 * std::cos(angle) - x1 * std::sin(angle);
        y[r * 8 + 4 + i] = x1 * std::cos(angle) + x0 * std::sin(angle);
      }
    }
    return Reference{y};
  };
  op.backward = [](Backend& b, const Tensors& in, const Tensors& d) {
    Tensor dx = ZerosLike(in[0]);
    b.RopeBackward(d[0].Matrix(), kPositions.data(), 2, 100.f, dx.Matrix());
    return Tensors{dx};
  };
  return op;
}

const std::vector<float> kRouterBias = {0.1f,  -0.2f, 0.f,  0.3f,
                                        0.05f, -0.1f, 0.2f, 0.f};

// The router by its definition: choice = sigmoid + bias; keep the topk_group
// groups whose two best choices sum highest; take the top_k choices there;
// weights = unbiased scores, normalized if asked, times the scaling factor.
std::vector<double> NaiveRouter(const float* logits, const RouterSpec& spec) {
  const int experts = 8, per_group = experts / spec.n_group;
  std::vector<double> s(experts), choice(experts), dense(experts, 0.0);
  for (int e = 0; e < experts; ++e) {
    s[e] = 1 / (1 + std::exp(-double{logits[e]}));
    choice[e] = s[e] + kRouterBias[e];
  }
  std::vector<std::pair<double, int>> groups;
  for (int g = 0; g < spec.n_group; ++g) {
    std::vector<double> m(choice.begin() + g * per_group,
                          choice.begin() + (g + 1) * per_group);
    std::sort(m.rbegin(), m.rend());
    groups.push_back({-(m[0] + (per_group > 1 ? m[1] : 0.0)), g});
  }
  std::sort(groups.begin(), groups.end());
  std::vector<std::pair<double, int>> allowed;
  for (int i = 0; i < spec.topk_group; ++i) {
    const int g = groups[i].second;
    for (int e = g * per_group; e < (g + 1) * per_group; ++e)
      allowed.push_back({-choice[e], e});
  }
  std::sort(allowed.begin(), allowed.end());
  double sum = 0;
  for (int k = 0; k < spec.top_k; ++k) sum += s[allowed[k].second];
  for (int k = 0; k < spec.top_k; ++k) {
    const int e = allowed[k].second;
    dense[e] =
        s[e] / (spec.norm_topk_prob ? sum : 1.0) * spec.routed_scaling_factor;
  }
  return dense;
}

OpCase RouterCase(std::mt19937& rng, const std::string& name,
                  const RouterSpec& spec) {
  OpCase op;
  op.name = name;
  op.fd_step = 1e-3;
  op.inputs = {Random({5, 8}, rng)};
  const int k = spec.top_k;
  // Runs the router; returns its dense [token, expert] weights (so a changed
  // choice would show), and its scores and choices for the backward.
  auto route = [=](Backend& b, const Tensor& logits, Tensor* scores,
                   std::vector<int32_t>* idx) {
    Tensor weights({5, k}), dense({5, 8});
    idx->assign(5 * k, 0);
    b.RouterForward(logits.Matrix(), kRouterBias.data(), spec, scores->Matrix(),
                    weights.Matrix(), idx->data());
    for (int r = 0; r < 5; ++r)
      for (int j = 0; j < k; ++j)
        dense.data()[r * 8 + (*idx)[r * k + j]] = weights.data()[r * k + j];
    return dense;
  };
  op.forward = [=](Backend& b, const Tensors& in) {
    Tensor scores({5, 8});
    std::vector<int32_t> idx;
    return Tensors{route(b, in[0], &scores, &idx)};
  };
  op.reference = [=](const Tensors& in) {
    std::vector<double> y;
    for (int r = 0; r < 5; ++r) {
      const std::vector<double> row = NaiveRouter(in[0].data() + r * 8, spec);
      y.insert(y.end(), row.begin(), row.end());
    }
    return Reference{y};
  };
  op.backward = [=](Backend& b, const Tensors& in, const Tensors& d) {
    Tensor scores({5, 8}), dweights({5, k}), dlogits = ZerosLike(in[0]);
    std::vector<int32_t> idx;
    route(b, in[0], &scores, &idx);
    for (int r = 0; r < 5; ++r)
      for (int j = 0; j < k; ++j)
        dweights.data()[r * k + j] = d[0].data()[r * 8 + idx[r * k + j]];
    b.RouterBackward(scores.Matrix(), idx.data(), dweights.Matrix(), spec,
                     dlogits.Matrix());
    return Tensors{dlogits};
  };
  return op;
}

const std::vector<int32_t> kTargets = {2, -1, 0, 6, 6};

OpCase CrossEntropyCase(std::mt19937& rng) {
  OpCase op;
  op.name = "cross_entropy";
  op.inputs = {Random({5, 7}, rng, 2.f)};
  op.forward = [](Backend& b, const Tensors& in) {
    Tensor loss({1});
    loss.data()[0] = LossOf(b, [&](double* sum) {
      b.CrossEntropyForward(in[0].Matrix(), kTargets.data(), 1.0, sum);
    });
    return Tensors{loss};
  };
  op.reference = [](const Tensors& in) {
    double total = 0;
    for (int r = 0; r < 5; ++r) {
      if (kTargets[r] < 0) continue;
      double sum = 0;
      for (int c = 0; c < 7; ++c)
        sum += std::exp(double{in[0].data()[r * 7 + c]});
      total += std::log(sum) - in[0].data()[r * 7 + kTargets[r]];
    }
    return Reference{{total}};
  };
  op.backward = [](Backend& b, const Tensors& in, const Tensors& d) {
    Tensor dl = ZerosLike(in[0]);
    b.CrossEntropyBackward(in[0].Matrix(), kTargets.data(), d[0].data()[0],
                           dl.Matrix());
    return Tensors{dl};
  };
  return op;
}

// Five tokens in two sequences ([0, 3) and [3, 5)), two heads, top-2 causal
// keys.
constexpr int64_t kTokens = 5, kHeads = 2, kTopK = 2;
const std::vector<int32_t> kKeys = {0, -1, 1, 0, 1, 2, 3, -1, 3, 4};
const std::vector<int32_t> kSeqStart = {0, 0, 0, 3, 3};

Reference NaiveAttention(const Tensors& in, int64_t dqk, int64_t dv,
                         float scale) {
  std::vector<double> out(kTokens * kHeads * dv, 0.0);
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t h = 0; h < kHeads; ++h) {
      const int64_t row = t * kHeads + h;
      std::vector<double> s;
      std::vector<int32_t> used;
      for (int64_t j = 0; j < kTopK; ++j) {
        const int32_t key = kKeys[t * kTopK + j];
        if (key < 0) continue;
        double dot = 0;
        for (int64_t c = 0; c < dqk; ++c)
          dot += double{in[0].data()[row * dqk + c]} *
                 in[1].data()[(key * kHeads + h) * dqk + c];
        s.push_back(dot * scale);
        used.push_back(key);
      }
      const double max = *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (double& v : s) sum += (v = std::exp(v - max));
      for (size_t j = 0; j < s.size(); ++j)
        for (int64_t c = 0; c < dv; ++c)
          out[row * dv + c] +=
              s[j] / sum * in[2].data()[(used[j] * kHeads + h) * dv + c];
    }
  }
  return Reference{out};
}

OpCase SparseAttentionCase(std::mt19937& rng) {
  OpCase op;
  op.name = "sparse_attention";
  const int64_t dqk = 6, dv = 4;
  const float scale = 0.4f;
  op.inputs = {Random({kTokens * kHeads, dqk}, rng),
               Random({kTokens * kHeads, dqk}, rng),
               Random({kTokens * kHeads, dv}, rng)};
  op.forward = [=](Backend& b, const Tensors& in) {
    Tensor out({kTokens * kHeads, dv}), lse({kTokens * kHeads});
    b.SparseAttentionForward(in[0].Matrix(), in[1].Matrix(), in[2].Matrix(),
                             kKeys.data(), kTopK, 0, kHeads, scale,
                             out.Matrix(), lse.data());
    return Tensors{out};
  };
  op.reference = [=](const Tensors& in) {
    return NaiveAttention(in, dqk, dv, scale);
  };
  op.backward = [=](Backend& b, const Tensors& in, const Tensors& d) {
    Tensor out({kTokens * kHeads, dv}), lse({kTokens * kHeads});
    b.SparseAttentionForward(in[0].Matrix(), in[1].Matrix(), in[2].Matrix(),
                             kKeys.data(), kTopK, 0, kHeads, scale,
                             out.Matrix(), lse.data());
    Tensor dq = ZerosLike(in[0]), dk = ZerosLike(in[1]), dv_ = ZerosLike(in[2]);
    b.SparseAttentionBackward(in[0].Matrix(), in[1].Matrix(), in[2].Matrix(),
                              kKeys.data(), kTopK, 0, kHeads, scale,
                              out.Matrix(), lse.data(), d[0].Matrix(),
                              dq.Matrix(), dk.Matrix(), dv_.Matrix(),
                              /*key_weights=*/{});
    return Tensors{dq, dk, dv_};
  };
  return op;
}

// Each head's keys and values the rows of one latent per key token: kv
// [tokens, dqk], the value its first dv columns.
OpCase LatentAttentionCase(std::mt19937& rng) {
  OpCase op;
  op.name = "latent_attention";
  const int64_t d = 6, dv = 4;
  const float scale = 0.4f;
  op.inputs = {Random({kTokens * kHeads, d}, rng), Random({kTokens, d}, rng)};
  auto forward = [=](Backend& b, const Tensors& in, Tensor* lse) {
    Tensor out({kTokens * kHeads, dv});
    *lse = Tensor({kTokens * kHeads});
    b.LatentAttentionForward(in[0].Matrix(), in[1].Matrix(), kKeys.data(),
                             kTopK, kHeads, scale, out.Matrix(), lse->data());
    return out;
  };
  op.forward = [=](Backend& b, const Tensors& in) {
    Tensor lse;
    return Tensors{forward(b, in, &lse)};
  };
  op.reference = [=](const Tensors& in) {
    // The per-head form with every head's rows copied from the latent.
    Tensor k({kTokens * kHeads, d}), v({kTokens * kHeads, dv});
    for (int64_t r = 0; r < kTokens * kHeads; ++r) {
      const float* latent = in[1].Matrix().Row(r / kHeads);
      std::copy(latent, latent + d, k.Matrix().Row(r));
      std::copy(latent, latent + dv, v.Matrix().Row(r));
    }
    return NaiveAttention({in[0], k, v}, d, dv, scale);
  };
  op.backward = [=](Backend& b, const Tensors& in, const Tensors& dout) {
    Tensor lse;
    const Tensor out = forward(b, in, &lse);
    Tensor dq = ZerosLike(in[0]), dkv = ZerosLike(in[1]);
    b.LatentAttentionBackward(in[0].Matrix(), in[1].Matrix(), kKeys.data(),
                              kTopK, kHeads, scale, out.Matrix(), lse.data(),
                              dout[0].Matrix(), dq.Matrix(), dkv.Matrix(),
                              /*key_weights=*/{});
    return Tensors{dq, dkv};
  };
  return op;
}

double NaiveIndexScore(const Tensors& in, int64_t t, int64_t s, int64_t heads,
                       int64_t dim, double scale) {
  double total = 0;
  for (int64_t h = 0; h < heads; ++h) {
    double dot = 0;
    for (int64_t c = 0; c < dim; ++c)
      dot += double{in[0].data()[(t * heads + h) * dim + c]} *
             in[1].data()[s * dim + c];
    total += in[2].data()[t * heads + h] * std::max(scale * dot, 0.0);
  }
  return total;
}

// Indexer loss: a fixed positive target over the selected keys (not
// normalized, as SparseAttentionKeyWeights gives it), random indexer inputs.
OpCase IndexerKlCase(std::mt19937& rng) {
  OpCase op;
  op.name = "indexer_kl_loss";
  const int64_t dim = 4;
  const float scale = 0.5f, coeff = 0.7f;
  op.inputs = {Random({kTokens * kHeads, dim}, rng),
               Random({kTokens, dim}, rng), Random({kTokens, kHeads}, rng)};
  Tensor target({kTokens, kTopK});
  std::uniform_real_distribution<float> uniform(0.1f, 3.f);
  for (int64_t i = 0; i < target.numel(); ++i)
    target.data()[i] = kKeys[i] < 0 ? 0.f : uniform(rng);
  op.forward = [=](Backend& b, const Tensors& in) {
    Tensor loss({1});
    Tensor diq = ZerosLike(in[0]), dik = ZerosLike(in[1]),
           dw = ZerosLike(in[2]);
    loss.data()[0] = LossOf(b, [&](double* sum) {
      b.IndexerKlLoss(in[0].Matrix(), in[1].Matrix(), in[2].Matrix(),
                      kKeys.data(), kTopK, scale, target.Matrix(), coeff,
                      /*kept=*/nullptr, diq.Matrix(), dik.Matrix(), dw.Matrix(),
                      sum);
    });
    return Tensors{loss};
  };
  op.reference = [=](const Tensors& in) {
    double total = 0;
    for (int64_t t = 0; t < kTokens; ++t) {
      std::vector<double> z, q;
      double mass = 0;
      for (int64_t j = 0; j < kTopK; ++j) {
        const int32_t key = kKeys[t * kTopK + j];
        if (key < 0) continue;
        z.push_back(NaiveIndexScore(in, t, key, kHeads, dim, scale));
        q.push_back(target.data()[t * kTopK + j]);
        mass += q.back();
      }
      double lse = 0;
      for (double v : z) lse += std::exp(v);
      lse = std::log(lse);
      for (size_t j = 0; j < z.size(); ++j) {
        const double p = q[j] / mass;
        total += p * (std::log(p) - (z[j] - lse));
      }
    }
    return Reference{{coeff * total / kTokens}};
  };
  op.backward = [=](Backend& b, const Tensors& in, const Tensors& d) {
    Tensor diq = ZerosLike(in[0]), dik = ZerosLike(in[1]),
           dw = ZerosLike(in[2]);
    LossOf(b, [&](double* sum) {
      b.IndexerKlLoss(in[0].Matrix(), in[1].Matrix(), in[2].Matrix(),
                      kKeys.data(), kTopK, scale, target.Matrix(), coeff,
                      /*kept=*/nullptr, diq.Matrix(), dik.Matrix(), dw.Matrix(),
                      sum);
    });
    for (Tensor* g : {&diq, &dik, &dw})
      for (float& v : g->values()) v *= d[0].data()[0];
    return Tensors{diq, dik, dw};
  };
  return op;
}

std::vector<OpCase> AllCases() {
  std::mt19937 rng(2026);
  return {LinearCase(rng),
          StridedLinearCase(rng),
          GroupedLinearCase(rng),
          EmbeddingCase(rng),
          ScatterAddCase(rng),
          RmsNormCase(rng),
          LayerNormCase(rng),
          SwiGluCase(rng),
          RopeCase(rng),
          RouterCase(rng, "router_grouped_normalized",
                     {/*top_k=*/3, /*n_group=*/2, /*topk_group=*/1,
                      /*norm_topk_prob=*/true,
                      /*routed_scaling_factor=*/2.5f}),
          RouterCase(rng, "router_plain",
                     {/*top_k=*/2, /*n_group=*/1, /*topk_group=*/1,
                      /*norm_topk_prob=*/false,
                      /*routed_scaling_factor=*/1.5f}),
          CrossEntropyCase(rng),
          SparseAttentionCase(rng),
          LatentAttentionCase(rng),
          IndexerKlCase(rng)};
}

TEST(BackendOps, ForwardMatchesReferenceAndBackwardMatchesFiniteDifferences) {
  for (auto& backend : Backends()) {
    for (OpCase& op : AllCases()) RunCase(*backend, op);
  }
}

// Top-k has no gradient: compare the selected lists with a naive ranking,
// including the per-sequence causal limit (sequences [0, 3) and [3, 5)) and -1
// padding.
TEST(BackendOps, IndexerTopKMatchesNaiveRanking) {
  std::mt19937 rng(11);
  const int64_t heads = 2, dim = 4, topk = 2;
  Tensors in = {Random({kTokens * heads, dim}, rng),
                Random({kTokens, dim}, rng), Random({kTokens, heads}, rng)};
  for (auto& backend : Backends()) {
    std::vector<int32_t> keys(kTokens * topk, 7);
    backend->IndexerTopK(in[0].Matrix(), in[1].Matrix(), in[2].Matrix(),
                         kSeqStart.data(), 0, topk, 0.5f,
                         /*keep=*/nullptr, keys.data());
    for (int64_t t = 0; t < kTokens; ++t) {
      std::vector<std::pair<double, int32_t>> ranked;
      for (int32_t s = kSeqStart[t]; s <= t; ++s)
        ranked.push_back({-NaiveIndexScore(in, t, s, heads, dim, 0.5), s});
      std::sort(ranked.begin(), ranked.end());
      for (int64_t j = 0; j < topk; ++j) {
        const int32_t expected =
            j < static_cast<int64_t>(ranked.size()) ? ranked[j].second : -1;
        EXPECT_EQ(keys[t * topk + j], expected)
            << "query " << t << " slot " << j;
      }
    }
  }
}

// Choices of three tokens (two each) among four experts: grouped by expert,
// each expert's choices in order; expert 2 has none.
TEST(BackendOps, GroupByExpertIsAStableCountingSort) {
  const std::vector<int32_t> expert = {3, 0, 1, 3, 0, 1};
  for (auto& backend : Backends()) {
    SCOPED_TRACE(backend->Name());
    std::vector<int32_t> slots(6, -7), tokens(6, -7), offsets(5, -7);
    backend->GroupByExpert(expert.data(), 6, 2, 4, slots.data(), tokens.data(),
                           offsets.data());
    EXPECT_EQ(slots, (std::vector<int32_t>{1, 4, 2, 5, 0, 3}));
    EXPECT_EQ(tokens, (std::vector<int32_t>{0, 2, 1, 2, 0, 1}));
    EXPECT_EQ(offsets, (std::vector<int32_t>{0, 2, 4, 4, 6}));
  }
}

// The grouping above, token by token: token 0's choices landed at positions
// 4 and 0, token 1's at 2 and 5, token 2's at 1 and 3 (each in ascending
// order); AddRowGroups over them adds what ScatterAddRows over the tokens
// adds, bitwise.
TEST(BackendOps, TokenRowsLetTheCombineAddWithoutAScatter) {
  const std::vector<int32_t> slots = {1, 4, 2, 5, 0, 3},
                             tokens = {0, 2, 1, 2, 0, 1};
  std::mt19937 rng(5);
  const Tensor src = Random({6, 8}, rng), scale = Random({6}, rng),
               base = Random({3, 8}, rng);
  for (auto& backend : Backends()) {
    SCOPED_TRACE(backend->Name());
    std::vector<int32_t> token_rows(6, -7);
    backend->TokenRows(slots.data(), 6, 2, token_rows.data());
    EXPECT_EQ(token_rows, (std::vector<int32_t>{0, 4, 2, 5, 1, 3}));
    for (const float* s : {scale.data(), static_cast<const float*>(nullptr)}) {
      Tensor grouped = base.CopyTo(nullptr), scattered = base.CopyTo(nullptr);
      backend->AddRowGroups(src.Matrix(), token_rows.data(), 2, s,
                            grouped.Matrix());
      backend->ScatterAddRows(src.Matrix(), tokens.data(), s,
                              scattered.Matrix());
      EXPECT_EQ(grouped.values(), scattered.values());
    }
  }
}

// The combine's gradient token by token (AddRowGroupsBackward over the token
// rows above) writes what ScatterAddRowsBackward over the tokens writes,
// bitwise: each source row's dsrc, and its dscale at its slot.
TEST(BackendOps, CombineGradientByTokenRowsEqualsTheScatters) {
  const std::vector<int32_t> slots = {1, 4, 2, 5, 0, 3},
                             tokens = {0, 2, 1, 2, 0, 1},
                             token_rows = {0, 4, 2, 5, 1, 3};
  std::mt19937 rng(6);
  const Tensor src = Random({6, 8}, rng), scale = Random({6}, rng),
               dout = Random({3, 8}, rng);
  for (auto& backend : Backends()) {
    SCOPED_TRACE(backend->Name());
    Tensor dsrc_grouped({6, 8}, nullptr), dsrc_scattered({6, 8}, nullptr),
        dscale_grouped({6, 1}, nullptr), dscale_scattered({6, 1}, nullptr);
    backend->AddRowGroupsBackward(
        src.Matrix(), token_rows.data(), 2, scale.data(), dout.Matrix(),
        dsrc_grouped.Matrix(), dscale_grouped.Matrix(), slots.data());
    backend->ScatterAddRowsBackward(src.Matrix(), tokens.data(), scale.data(),
                                    dout.Matrix(), dsrc_scattered.Matrix(),
                                    dscale_scattered.Matrix(), slots.data());
    EXPECT_EQ(dsrc_grouped.values(), dsrc_scattered.values());
    EXPECT_EQ(dscale_grouped.values(), dscale_scattered.values());
    EXPECT_EQ(dsrc_grouped.values()[4 * 8 + 1],
              scale.data()[4] * dout.data()[0 * 8 + 1]);
  }
}

// Rows read by index (IndexedRows) give what the gathered copy gives,
// bitwise: x's rows, and dy's rows times their scales.
TEST(BackendOps, GroupedLinearReadsRowsByIndex) {
  std::mt19937 rng(11);
  const Tensor x = Random({4, 5}, rng), w = Random({12, 5}, rng),
               dy_tokens = Random({3, 4}, rng), dy_scale = Random({7}, rng);
  const std::vector<int32_t> rows = {3, 0, 0, 2, 1, 3, 2};
  const std::vector<int32_t> dy_rows = {2, 0, 1, 1, 0, 2, 2};
  Tensor gathered({7, 5}, nullptr), dy({7, 4}, nullptr);
  for (int p = 0; p < 7; ++p) {
    std::copy_n(x.data() + rows[p] * 5, 5, gathered.data() + p * 5);
    for (int c = 0; c < 4; ++c) {
      dy.data()[p * 4 + c] =
          dy_scale.data()[p] * dy_tokens.data()[dy_rows[p] * 4 + c];
    }
  }
  for (auto& backend : Backends()) {
    SCOPED_TRACE(backend->Name());
    Tensor y_rows({7, 4}, nullptr), y_copy({7, 4}, nullptr);
    backend->GroupedLinear(IndexedRows(x.Matrix(), rows.data(), 7), w.Matrix(),
                           kExpertOffsets.data(), 3, y_rows.Matrix());
    backend->GroupedLinear(gathered.Matrix(), w.Matrix(), kExpertOffsets.data(),
                           3, y_copy.Matrix());
    EXPECT_EQ(y_rows.values(), y_copy.values());
    Tensor dx_rows({7, 5}, nullptr), dx_copy({7, 5}, nullptr),
        dw_rows({12, 5}, nullptr), dw_copy({12, 5}, nullptr);
    backend->GroupedLinearBackward(
        IndexedRows(x.Matrix(), rows.data(), 7), w.Matrix(),
        kExpertOffsets.data(), 3,
        IndexedRows(dy_tokens.Matrix(), dy_rows.data(), 7, dy_scale.data()),
        dx_rows.Matrix(), false, dw_rows.Matrix());
    backend->GroupedLinearBackward(gathered.Matrix(), w.Matrix(),
                                   kExpertOffsets.data(), 3, dy.Matrix(),
                                   dx_copy.Matrix(), false, dw_copy.Matrix());
    EXPECT_EQ(dx_rows.values(), dx_copy.values());
    EXPECT_EQ(dw_rows.values(), dw_copy.values());
  }
}

// Tokens per expert from GroupByExpert's offsets, added to what is there.
TEST(BackendOps, AddExpertLoadsAddsEachExpertsRows) {
  const std::vector<int32_t> offsets = {0, 2, 4, 4, 6};
  for (auto& backend : Backends()) {
    SCOPED_TRACE(backend->Name());
    std::vector<int32_t> loads = {1, 0, 5, 2};
    backend->AddExpertLoads(offsets.data(), 4, loads.data());
    EXPECT_EQ(loads, (std::vector<int32_t>{3, 2, 5, 4}));
  }
}

// Two rows repeated three times into a strided view, then summed back onto
// y in group order: 10 + 1 + 1 + 1, and the view's other columns untouched.
TEST(BackendOps, RepeatRowsAndSumRowGroupsAreAdjoint) {
  const std::vector<float> x = {1.f, 2.f, 3.f, 4.f};
  for (auto& backend : Backends()) {
    SCOPED_TRACE(backend->Name());
    std::vector<float> wide(6 * 3, -7.f);
    const MatrixView repeated{wide.data() + 1, 6, 2, 3};
    backend->RepeatRows(ConstMatrixView{x.data(), 2, 2, 2}, 3, repeated);
    EXPECT_EQ(wide, (std::vector<float>{-7, 1, 2, -7, 1, 2, -7, 1, 2,  //
                                        -7, 3, 4, -7, 3, 4, -7, 3, 4}));
    std::vector<float> y = {10.f, 20.f, 30.f, 40.f};
    backend->SumRowGroups(repeated, 3, MatrixView{y.data(), 2, 2, 2});
    EXPECT_EQ(y, (std::vector<float>{13.f, 26.f, 39.f, 52.f}));
  }
}

// Queries, keys and values of the attention tests below: kTokens tokens of
// kHeads heads, head dims kAttentionDqk and kAttentionDv.
constexpr int64_t kAttentionDqk = 6, kAttentionDv = 4;
constexpr float kAttentionScale = 0.4f;
struct AttentionOperands {
  Tensor q, k, v;
};
AttentionOperands RandomAttentionOperands(std::mt19937& rng) {
  Tensor q = Random({kTokens * kHeads, kAttentionDqk}, rng);
  Tensor k = Random({kTokens * kHeads, kAttentionDqk}, rng);
  Tensor v = Random({kTokens * kHeads, kAttentionDv}, rng);
  return {std::move(q), std::move(k), std::move(v)};
}

// The forward's log-sum-exp and the head-summed key weights recomputed from
// it against softmax in double, and the backward's key weights equal to
// SparseAttentionKeyWeights' (the same probabilities).
TEST(BackendOps, AttentionLseAndKeyWeightsMatchNaiveSoftmax) {
  std::mt19937 rng(11);
  const int64_t dqk = kAttentionDqk, dv = kAttentionDv;
  const float scale = kAttentionScale;
  const auto [q, k, v] = RandomAttentionOperands(rng);
  std::vector<double> lse(kTokens * kHeads), weights(kTokens * kTopK, 0.0);
  for (int64_t row = 0; row < kTokens * kHeads; ++row) {
    const int64_t t = row / kHeads, h = row % kHeads;
    std::vector<double> s(kTopK, -INFINITY);
    double sum = 0;
    for (int64_t j = 0; j < kTopK; ++j) {
      const int32_t key = kKeys[t * kTopK + j];
      if (key < 0) continue;
      double dot = 0;
      for (int64_t c = 0; c < dqk; ++c)
        dot += double{q.data()[row * dqk + c]} *
               k.data()[(key * kHeads + h) * dqk + c];
      sum += std::exp(s[j] = dot * scale);
    }
    lse[row] = std::log(sum);
    for (int64_t j = 0; j < kTopK; ++j)
      weights[t * kTopK + j] += std::exp(s[j] - lse[row]);
  }
  for (auto& backend : Backends()) {
    SCOPED_TRACE(backend->Name());
    Tensor out({kTokens * kHeads, dv}), got_lse({kTokens * kHeads}),
        got_weights({kTokens, kTopK});
    backend->SparseAttentionForward(q.Matrix(), k.Matrix(), v.Matrix(),
                                    kKeys.data(), kTopK, 0, kHeads, scale,
                                    out.Matrix(), got_lse.data());
    backend->SparseAttentionKeyWeights(q.Matrix(), k.Matrix(), kKeys.data(),
                                       kTopK, kHeads, scale, got_lse.data(),
                                       got_weights.Matrix());
    EXPECT_LE(Nmse(lse, AsDouble(got_lse)), 1e-12);
    EXPECT_LE(Nmse(weights, AsDouble(got_weights)), 1e-12);
    Tensor dout = Random({kTokens * kHeads, dv}, rng), dq = ZerosLike(q),
           dk = ZerosLike(k), dvv = ZerosLike(v),
           backward_weights = Tensor::ForOutput({kTokens, kTopK});
    backend->SparseAttentionBackward(
        q.Matrix(), k.Matrix(), v.Matrix(), kKeys.data(), kTopK, 0, kHeads,
        scale, out.Matrix(), got_lse.data(), dout.Matrix(), dq.Matrix(),
        dk.Matrix(), dvv.Matrix(), backward_weights.Matrix());
    EXPECT_EQ(backward_weights.values(), got_weights.values());
  }
}

// The latent form is the per-head form with every head's key row a copy of
// the token's latent row and its value row that row's first dv columns: the
// same out, lse and key weights, and dkv the sum over heads of dk plus dv.
TEST(BackendOps, LatentAttentionEqualsThePerHeadFormOnCopiedRows) {
  std::mt19937 rng(13);
  const int64_t d = 6, dv = 4, rows = kTokens * kHeads;
  const float scale = 0.4f;
  const Tensor q = Random({rows, d}, rng), kv = Random({kTokens, d}, rng),
               dout = Random({rows, dv}, rng);
  Tensor k({rows, d}), v({rows, dv});
  for (int64_t r = 0; r < rows; ++r) {
    const float* latent = kv.Matrix().Row(r / kHeads);
    std::copy(latent, latent + d, k.Matrix().Row(r));
    std::copy(latent, latent + dv, v.Matrix().Row(r));
  }
  for (auto& backend : Backends()) {
    SCOPED_TRACE(backend->Name());
    Tensor out({rows, dv}), lse({rows}), latent_out({rows, dv}),
        latent_lse({rows});
    backend->SparseAttentionForward(q.Matrix(), k.Matrix(), v.Matrix(),
                                    kKeys.data(), kTopK, 0, kHeads, scale,
                                    out.Matrix(), lse.data());
    backend->LatentAttentionForward(q.Matrix(), kv.Matrix(), kKeys.data(),
                                    kTopK, kHeads, scale, latent_out.Matrix(),
                                    latent_lse.data());
    EXPECT_EQ(latent_out.values(), out.values());
    EXPECT_EQ(latent_lse.values(), lse.values());
    Tensor dq({rows, d}), dk({rows, d}), dvv({rows, dv}),
        weights({kTokens, kTopK}), latent_dq({rows, d}), dkv({kTokens, d}),
        latent_weights({kTokens, kTopK});
    backend->SparseAttentionBackward(
        q.Matrix(), k.Matrix(), v.Matrix(), kKeys.data(), kTopK, 0, kHeads,
        scale, out.Matrix(), lse.data(), dout.Matrix(), dq.Matrix(),
        dk.Matrix(), dvv.Matrix(), weights.Matrix());
    backend->LatentAttentionBackward(
        q.Matrix(), kv.Matrix(), kKeys.data(), kTopK, kHeads, scale,
        out.Matrix(), lse.data(), dout.Matrix(), latent_dq.Matrix(),
        dkv.Matrix(), latent_weights.Matrix());
    EXPECT_EQ(latent_dq.values(), dq.values());
    EXPECT_EQ(latent_weights.values(), weights.values());
    std::vector<double> summed(kTokens * d, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < d; ++c) {
        summed[r / kHeads * d + c] +=
            dk.Matrix().Row(r)[c] + (c < dv ? dvv.Matrix().Row(r)[c] : 0.f);
      }
    }
    EXPECT_LE(Nmse(summed, AsDouble(dkv)), 1e-12);
  }
}

// full_queries is a promise about the keys: queries 0 and 1 of kKeys select
// every key up to their own, query 2 does not (it lacks key 0). A kept promise
// changes nothing; a broken one aborts, naming the op and the query.
TEST(BackendOpsDeathTest, FullQueriesArePromisesTheCpuBackendChecks) {
  std::mt19937 rng(12);
  const int64_t dv = kAttentionDv;
  const float scale = kAttentionScale;
  const auto [q, k, v] = RandomAttentionOperands(rng);
  CpuBackend cpu;
  auto forward = [&](int64_t full, Tensor& out) {
    Tensor lse({kTokens * kHeads});
    cpu.SparseAttentionForward(q.Matrix(), k.Matrix(), v.Matrix(), kKeys.data(),
                               kTopK, full, kHeads, scale, out.Matrix(),
                               lse.data());
  };
  Tensor without({kTokens * kHeads, dv}), with({kTokens * kHeads, dv});
  forward(0, without);
  forward(2, with);
  EXPECT_EQ(without.values(), with.values());
  EXPECT_DEATH(forward(3, with),
               "SparseAttentionForward: full_queries 3 .* not every key up to "
               "the query selected at query 2");
}

// Context parallelism runs each rank's queries against every rank's keys:
// calls on query halves (with their offsets) must give the rows of the whole
// call, and their key gradients must add up to the whole call's.
TEST(BackendOps, QueryHalvesAgainstAllKeysEqualTheWholeCall) {
  std::mt19937 rng(5);
  const int64_t dqk = 6, dv = 4, idx_heads = 2, idx_dim = 4, split = 2;
  const float scale = 0.4f;
  const Tensors attn = {Random({kTokens * kHeads, dqk}, rng),
                        Random({kTokens * kHeads, dqk}, rng),
                        Random({kTokens * kHeads, dv}, rng),
                        Random({kTokens * kHeads, dv}, rng)};
  const Tensors idx = {Random({kTokens * idx_heads, idx_dim}, rng),
                       Random({kTokens, idx_dim}, rng),
                       Random({kTokens, idx_heads}, rng)};
  Tensor target({kTokens, kTopK});
  for (int64_t i = 0; i < target.numel(); ++i)
    target.data()[i] = kKeys[i] < 0 ? 0.f : 0.1f + 0.1f * (i % 7);
  // Queries [begin, begin + count) against all keys; returns every output.
  auto run = [&](Backend& b, int64_t begin, int64_t count) {
    const int32_t* keys = kKeys.data() + begin * kTopK;
    Tensor out({count * kHeads, dv}), lse({count * kHeads}),
        weights({count, kTopK}), backward_weights({count, kTopK});
    ConstMatrixView q = attn[0].Matrix().Rows(begin * kHeads, count * kHeads);
    b.SparseAttentionForward(q, attn[1].Matrix(), attn[2].Matrix(), keys, kTopK,
                             0, kHeads, scale, out.Matrix(), lse.data());
    b.SparseAttentionKeyWeights(q, attn[1].Matrix(), keys, kTopK, kHeads, scale,
                                lse.data(), weights.Matrix());
    Tensor dq({count * kHeads, dqk}), dk = ZerosLike(attn[1]),
                                      dvv = ZerosLike(attn[2]);
    b.SparseAttentionBackward(
        q, attn[1].Matrix(), attn[2].Matrix(), keys, kTopK, 0, kHeads, scale,
        out.Matrix(), lse.data(),
        attn[3].Matrix().Rows(begin * kHeads, count * kHeads), dq.Matrix(),
        dk.Matrix(), dvv.Matrix(), backward_weights.Matrix());
    Tensor selected({count, kTopK});
    std::vector<int32_t> chosen(count * kTopK);
    b.IndexerTopK(idx[0].Matrix().Rows(begin * idx_heads, count * idx_heads),
                  idx[1].Matrix(), idx[2].Matrix().Rows(begin, count),
                  kSeqStart.data() + begin, begin, kTopK, 0.5f,
                  /*keep=*/nullptr, chosen.data());
    for (int64_t i = 0; i < count * kTopK; ++i)
      selected.data()[i] = static_cast<float>(chosen[i]);
    Tensor loss({1}), diq({count * idx_heads, idx_dim}),
        dik = ZerosLike(idx[1]), dw({count, idx_heads});
    // Each part is weighted by its share of the queries, as a rank does.
    loss.data()[0] = LossOf(b, [&](double* sum) {
      b.IndexerKlLoss(
          idx[0].Matrix().Rows(begin * idx_heads, count * idx_heads),
          idx[1].Matrix(), idx[2].Matrix().Rows(begin, count), keys, kTopK,
          0.5f, target.Matrix().Rows(begin, count),
          static_cast<float>(count) / kTokens, /*kept=*/nullptr, diq.Matrix(),
          dik.Matrix(), dw.Matrix(), sum);
    });
    return Tensors{out, lse,      weights, backward_weights,
                   dq,  selected, diq,     dw,
                   dk,  dvv,      dik,     loss};
  };
  constexpr int kPerQuery = 8;  // outputs with one row block per query
  for (auto& backend : Backends()) {
    const Tensors whole = run(*backend, 0, kTokens);
    Tensors parts = run(*backend, 0, split);
    const Tensors rest = run(*backend, split, kTokens - split);
    for (size_t i = 0; i < whole.size(); ++i) {
      if (i < kPerQuery) {  // rows: first part, then the rest
        std::vector<float> joined = parts[i].values();
        joined.insert(joined.end(), rest[i].values().begin(),
                      rest[i].values().end());
        ASSERT_EQ(joined.size(), whole[i].values().size()) << i;
        for (size_t j = 0; j < joined.size(); ++j)
          EXPECT_NEAR(joined[j], whole[i].values()[j], 1e-5f) << i << " " << j;
      } else {  // key gradients and the loss: sums
        for (int64_t j = 0; j < whole[i].numel(); ++j)
          EXPECT_NEAR(parts[i].data()[j] + rest[i].data()[j],
                      whole[i].data()[j], 1e-5f)
              << i << " " << j;
      }
    }
  }
}

}  // namespace
}  // namespace glm
