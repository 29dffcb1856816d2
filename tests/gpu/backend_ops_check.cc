// Every Backend op (kernels/backend.h), forward and backward, on the CUDA
// backend against the CPU backend: the GPU machine's counterpart of
// kernels/backend_ops_test.cc (ggml's test-backend-ops). Each case is one op
// call on fresh seeded random inputs, run once on the CPU backend (the
// reference, host memory) and, per precision mode, twice on the CUDA backend
// (device memory).
//
//   bazel run --config=cuda //kernels/cuda:backend_ops_check --
//       [--precision=fp32|bf16|both] [--device=N] [--filter=SUBSTRING[|...]]
//       [--verbose] [--latent-scores-by-columns]
//
// --filter keeps the cases whose "op label" contains SUBSTRING (any of
// several, separated by |); --verbose prints every check of a case, not only
// the worst; --latent-scores-by-columns runs the latent forward's scores
// experiment (CudaBackendOptions::latent_scores_by_columns).
//
// How outputs are compared:
// - Outputs an op writes start as NaN on the GPU, so an element it skips
//   shows. Outputs it accumulates into (gradients) start with the same random
//   contents on both sides, scaled to the size of the op's contribution, so a
//   lost, doubled or overwriting contribution shows. The CPU reference runs on
//   zeros and the starting contents are added to its result in double, so the
//   reference carries no rounding of them.
// - Float outputs: normalized MSE, sum (gpu - ref)^2 / sum ref^2, over the view
//   the op was given, at most the op's limit in kLimits. Elements of the buffer
//   outside the view must come back bitwise unchanged.
// - Losses (CrossEntropyForward, IndexerKlLoss): relative error.
// - Other integer outputs (groupings, token rows): equal to the CPU's.
// - Integer choices, as sets: IndexerTopK's keys per query, RouterForward's
//   experts per token. A difference is allowed only between candidates the
//   CPU's scores (recomputed in double) call tied: within the op's `tie`
//   tolerance of the CPU's last chosen candidate (relative to the scores'
//   scale, see IndexScore and RouterToken). Such ties are counted and
//   printed. Router weights are compared per (token, expert), on tokens with
//   equal choices.
// - Each CUDA run is repeated on the same inputs: all outputs must be bitwise
//   equal, and the inputs must come back unchanged.
// Prints one line per case and mode, then a summary per op and mode; exits 1
// when any check fails.
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "base/bf16.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/rows.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/tensor.h"
#include "model/config.h"

namespace glm {
namespace {

using cuda::Precision;

constexpr Precision kModes[] = {Precision::kFp32, Precision::kBf16};

int ModeIndex(Precision p) { return p == Precision::kFp32 ? 0 : 1; }
const char* ModeName(Precision p) {
  return p == Precision::kFp32 ? "fp32" : "bf16";
}

// ---- limits ----

// Per op, [fp32, bf16]: nmse bounds float outputs, loss the relative error of
// a returned loss, tie how close two candidates' scores must be, relative to
// the scores' scale, to count as tied (see IndexScore and RouterToken).
// fp32 mode must match the CPU to fp32 rounding: NMSE 1e-10, 1e-5 relative for
// a loss (the same bound for one number), ties within 1e-6. bf16 mode rounds
// the inputs of matrix products only (Linear, attention, the indexer); its
// bounds are 3-4 times what that rounding gives on these inputs, found by
// simulating it in double: NMSE 5.6e-6 for Linear, 1.1e-5 for sparse
// attention, 1e-5 for the indexer loss's gradients, 1.5e-4 relative for that
// loss; index scores move by 3e-5 of their scale (1.5e-4 at most), so ties
// are taken within 1e-3.
struct OpLimits {
  const char* op;
  double nmse[2];
  double loss[2];
  double tie[2];
};

constexpr double kExact = 1e-10;
constexpr double kExactLoss = 1e-5;
constexpr double kExactTie = 1e-6;

constexpr OpLimits kLimits[] = {
    // op                    nmse fp32, bf16   loss fp32, bf16   tie fp32, bf16
    {"Linear", {kExact, 2e-5}, {0, 0}, {0, 0}},
    {"LinearBackward", {kExact, 2e-5}, {0, 0}, {0, 0}},
    {"LinearAdd", {kExact, 2e-5}, {0, 0}, {0, 0}},
    {"GroupByExpert", {0, 0}, {0, 0}, {0, 0}},
    {"AddExpertLoads", {0, 0}, {0, 0}, {0, 0}},
    {"GroupedLinear", {kExact, 2e-5}, {0, 0}, {0, 0}},
    {"GroupedLinearBackward", {kExact, 2e-5}, {0, 0}, {0, 0}},
    {"Copy", {kExact, kExact}, {0, 0}, {0, 0}},
    {"Axpy", {kExact, kExact}, {0, 0}, {0, 0}},
    {"RepeatRows", {kExact, kExact}, {0, 0}, {0, 0}},
    {"SumRowGroups", {kExact, kExact}, {0, 0}, {0, 0}},
    {"EmbeddingForward", {kExact, kExact}, {0, 0}, {0, 0}},
    {"EmbeddingBackward", {kExact, kExact}, {0, 0}, {0, 0}},
    {"ScatterAddRows", {kExact, kExact}, {0, 0}, {0, 0}},
    {"ScatterAddRowsBackward", {kExact, kExact}, {0, 0}, {0, 0}},
    {"TokenRows", {0, 0}, {0, 0}, {0, 0}},
    {"AddRowGroups", {kExact, kExact}, {0, 0}, {0, 0}},
    {"AddRowGroupsBackward", {kExact, kExact}, {0, 0}, {0, 0}},
    {"RmsNormForward", {kExact, kExact}, {0, 0}, {0, 0}},
    {"RmsNormBackward", {kExact, kExact}, {0, 0}, {0, 0}},
    {"LayerNormForward", {kExact, kExact}, {0, 0}, {0, 0}},
    {"LayerNormBackward", {kExact, kExact}, {0, 0}, {0, 0}},
    {"SwiGluForward", {kExact, kExact}, {0, 0}, {0, 0}},
    // bf16: outputs in the activation type, rounded to bf16: the rounding
    // alone gives NMSE 2^-16/6 = 2.5e-6 on average (2.75e-6 measured at
    // [4096, 2048]; 4.1e-6 on the 40 values of the tiny case).
    {"RmsNormForward to activation type", {kExact, 1e-5}, {0, 0}, {0, 0}},
    {"SwiGluForward to activation type", {kExact, 1e-5}, {0, 0}, {0, 0}},
    {"RopeForward to activation type", {kExact, 1e-5}, {0, 0}, {0, 0}},
    {"RepeatRows to activation type", {kExact, 1e-5}, {0, 0}, {0, 0}},
    // Exact where both sides are bf16 (a bf16 input is the rounding already).
    {"Copy in activation type", {kExact, 1e-5}, {0, 0}, {0, 0}},
    {"EmbeddingForward in activation type", {kExact, 1e-5}, {0, 0}, {0, 0}},
    {"SumRowGroups from activation type", {kExact, 1e-5}, {0, 0}, {0, 0}},
    {"SwiGluBackward to activation type", {kExact, 1e-5}, {0, 0}, {0, 0}},
    // Every operand in the activation type, as the MLPs run it: gate, up (and
    // dout) rounded as the products write them, the outputs rounded too;
    // three or four roundings of 2.5e-6 each, the gate's scaled by silu's
    // log-slope (about 1.3 on average at the cases' gate spread): about 1e-5.
    {"SwiGluForward in activation type", {kExact, 3e-5}, {0, 0}, {0, 0}},
    {"SwiGluBackward in activation type", {kExact, 3e-5}, {0, 0}, {0, 0}},
    // The combine reading the experts' outputs in the activation type: one
    // rounding of each source; its backward's dsrc, written in the activation
    // type, one rounding.
    {"ScatterAddRows from activation type", {kExact, 1e-5}, {0, 0}, {0, 0}},
    {"AddRowGroups from activation type", {kExact, 1e-5}, {0, 0}, {0, 0}},
    // The backwards' dscale: dots of rounded sources with dout. Their mean
    // NMSE is the rounding's 2.5e-6, but at the tiny shapes (six dots of four
    // terms) it is a ratio of small sums that cancellation spreads: simulated
    // with the rounding alone over 4000 draws, 3% passed 1e-5 and 0.1%
    // 3.5e-5 (run73 measured 1.19e-5 there).
    {"ScatterAddRowsBackward in activation type",
     {kExact, 4e-5},
     {0, 0},
     {0, 0}},
    {"AddRowGroupsBackward in activation type", {kExact, 4e-5}, {0, 0}, {0, 0}},
    // Both sides rounded: dy's rounding and dx's.
    {"RopeBackward in activation type", {kExact, 2e-5}, {0, 0}, {0, 0}},
    {"SwiGluBackward", {kExact, kExact}, {0, 0}, {0, 0}},
    {"RopeForward", {kExact, kExact}, {0, 0}, {0, 0}},
    {"RopeBackward", {kExact, kExact}, {0, 0}, {0, 0}},
    {"RouterForward", {kExact, kExact}, {0, 0}, {kExactTie, kExactTie}},
    {"RouterBackward", {kExact, kExact}, {0, 0}, {0, 0}},
    {"CrossEntropyForward", {0, 0}, {kExactLoss, kExactLoss}, {0, 0}},
    {"CrossEntropyBackward", {kExact, kExact}, {0, 0}, {0, 0}},
    // bf16: logits from bf16 products (rounded to bf16 where the case passes
    // them in the activation type) and their gradient rounded to bf16.
    {"LinearCrossEntropy", {kExact, 1e-4}, {kExactLoss, 1e-3}, {0, 0}},
    // bf16: cuDNN's fused attention where it has a plan (glm5.2-mini's dims:
    // bf16 operands and probabilities; measured 9.8e-6 forward, 1.1e-5
    // backward), else the fp32 kernels; key weights by bf16 GEMMs (6.9e-6).
    {"SparseAttentionForward", {kExact, 4e-5}, {0, 0}, {0, 0}},
    {"SparseAttentionBackward", {kExact, 4e-5}, {0, 0}, {0, 0}},
    {"SparseAttentionKeyWeights", {kExact, 4e-5}, {0, 0}, {0, 0}},
    // bf16: the latent kernels (bf16 operands, probabilities and score
    // gradients into the products, as cuDNN's above), else the fp32 kernels
    // on per-head copies.
    {"LatentAttentionForward", {kExact, 4e-5}, {0, 0}, {0, 0}},
    {"LatentAttentionBackward", {kExact, 4e-5}, {0, 0}, {0, 0}},
    {"IndexerTopK", {0, 0}, {0, 0}, {kExactTie, 1e-3}},
    {"IndexerKlLoss", {kExact, 4e-5}, {kExactLoss, 5e-4}, {0, 0}},
    // The loss over the scores its top-k call kept (the bf16 mode), and that
    // call's keys.
    {"IndexerKlLoss after a top-k keeping its scores",
     {kExact, 4e-5},
     {kExactLoss, 5e-4},
     {kExactTie, 1e-3}},
    // Compared bitwise (CheckAdamW).
    {"AdamWStep", {0, 0}, {0, 0}, {0, 0}},
};

const OpLimits& LimitsOf(const std::string& op) {
  for (const OpLimits& limits : kLimits) {
    if (op == limits.op) return limits;
  }
  std::fprintf(stderr, "no limits for op %s\n", op.c_str());
  std::abort();
}

// ---- random data ----

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t HashString(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// n normal values (at least one element of storage): Box-Muller on a
// counter-based stream (SplitMix64 of seed + pair index), so any thread makes
// any pair and the values do not depend on the thread count.
std::vector<float> Normal(int64_t n, uint64_t seed, float stddev) {
  std::vector<float> values(std::max<int64_t>(n, 1), stddev);
  const int64_t pairs = (n + 1) / 2;
  cpu::ParallelFor(pairs, pairs * 16, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const uint64_t bits =
          SplitMix64(seed + static_cast<uint64_t>(p) * 0x9e3779b97f4a7c15ull);
      // Two 24-bit uniforms in (0, 1).
      const float u1 = (static_cast<float>(bits >> 40) + 0.5f) * 0x1p-24f;
      const float u2 =
          (static_cast<float>((bits >> 8) & 0xffffff) + 0.5f) * 0x1p-24f;
      const float r = stddev * std::sqrt(-2.f * std::log(u1));
      const float angle = 6.28318531f * u2;
      values[2 * p] = r * std::cos(angle);
      if (2 * p + 1 < n) values[2 * p + 1] = r * std::sin(angle);
    }
  });
  return values;
}

// `count` distinct values of [lo, hi] in random order.
std::vector<int32_t> Sample(int64_t lo, int64_t hi, int64_t count,
                            std::mt19937_64& rng) {
  std::vector<int32_t> pool(hi - lo + 1);
  std::iota(pool.begin(), pool.end(), static_cast<int32_t>(lo));
  for (int64_t i = 0; i < count; ++i) {
    std::uniform_int_distribution<int64_t> pick(i, pool.size() - 1);
    std::swap(pool[i], pool[pick(rng)]);
  }
  pool.resize(count);
  return pool;
}

// ---- cases ----

// A view inside a buffer of `size` elements: element (r, c) is at offset + r *
// stride + c.
struct Layout {
  int64_t offset = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;
  int64_t size = 0;

  bool whole() const {
    return offset == 0 && stride == cols && size == rows * cols;
  }
  bool Contains(int64_t i) const {
    if (i < offset || rows == 0) return false;
    const int64_t r = (i - offset) / stride, c = (i - offset) % stride;
    return r < rows && c < cols;
  }
};

Layout Dense(int64_t rows, int64_t cols) {
  return {0, rows, cols, cols, rows * cols};
}
Layout Vec(int64_t n) { return Dense(1, n); }
// Columns [start, start + width) of a [rows, total] matrix.
Layout Cols(int64_t rows, int64_t total, int64_t start, int64_t width) {
  return {start, rows, width, total, rows * total};
}
// Slab i of a [count, rows, cols] tensor (one expert's weight).
Layout Slab(int64_t count, int64_t rows, int64_t cols, int64_t i) {
  return {i * rows * cols, rows, cols, cols, count * rows * cols};
}

// "[rows,cols]", with "/stride" for a column view and "@offset" for a view
// that does not start at the buffer's first element.
std::string Dims(const Layout& l) {
  std::string s = absl::StrCat("[", l.rows, ",", l.cols);
  if (l.stride != l.cols) absl::StrAppend(&s, "/", l.stride);
  if (l.offset != 0) absl::StrAppend(&s, "@", l.offset);
  return s + "]";
}

enum class Role { kInput, kWritten, kAccumulated };

// One array an op call reads or writes, float or int32.
struct Operand {
  std::string name;
  Role role = Role::kInput;
  bool integer = false;
  Layout layout;
  // Float inputs, and the starting contents of accumulated outputs.
  std::vector<float> floats;
  std::vector<int32_t> ints;  // integer inputs
  // A written output the op sums with atomics, in an order that varies
  // between runs: the repeat check compares it by NMSE, not bitwise.
  bool summed_in_any_order = false;
};

// Where a case's operands live for one run (host or device memory): the same
// call runs on either backend.
class Bound {
 public:
  Bound(const std::vector<Operand>& operands, std::vector<void*> bases)
      : operands_(operands), bases_(std::move(bases)) {}

  MatrixView View(int i) const {
    const Layout& l = operands_[i].layout;
    return {Floats(i), l.rows, l.cols, l.stride};
  }
  float* Floats(int i) const {
    return static_cast<float*>(bases_[i]) + operands_[i].layout.offset;
  }
  int32_t* Ints(int i) const {
    return static_cast<int32_t*>(bases_[i]) + operands_[i].layout.offset;
  }
  // Operand i's whole buffer (a view's tensor).
  ConstFloatSpan Buffer(int i) const {
    return {static_cast<float*>(bases_[i]), operands_[i].layout.size};
  }

 private:
  const std::vector<Operand>& operands_;
  std::vector<void*> bases_;
};

// The contents of a case's outputs after one run (inputs are left empty), and
// the loss the op returned.
struct RunOutput {
  std::vector<std::vector<float>> floats;
  std::vector<std::vector<int32_t>> ints;
  double loss = 0;
};

// One check of one case in one mode.
struct Outcome {
  Outcome(std::string what, std::string metric)
      : what(std::move(what)), metric(std::move(metric)) {}

  std::string what;    // the output checked, or "repeatable", "inputs"
  std::string metric;  // "nmse", "rel", "mismatch", "differ"
  double value = 0;
  double limit = 0;
  bool pass = false;
  int64_t ties = 0;  // differences allowed as ties
  std::string note;
};

struct Case;
// Checks of outputs that an NMSE does not fit (integer choices).
using SpecialCheck = std::function<std::vector<Outcome>(
    const Case&, const RunOutput& cpu, const RunOutput& gpu, int mode)>;
// Runs the op on `backend` with the operands at `bound`; returns its loss (0
// for ops without one).
using Call = std::function<double(Backend& backend, const Bound& bound)>;

struct Case {
  std::string op;
  std::string label;
  uint64_t seed = 0;
  std::vector<Operand> operands;
  Call call;
  bool returns_loss = false;
  SpecialCheck special;
  std::vector<int> special_outputs;  // compared by `special` only
};

CpuBackend& CpuReference() {
  static CpuBackend* backend = new CpuBackend;
  return *backend;
}

// Builds a case's operands; the add functions return operand ids for the call.
class CaseBuilder {
 public:
  CaseBuilder(const std::string& op, const std::string& label) {
    case_.op = op;
    case_.label = label;
    case_.seed = HashString(op + " " + label);
    rng_.seed(case_.seed);
  }

  std::mt19937_64& rng() { return rng_; }

  // Normal values over the whole buffer.
  int Input(const std::string& name, Layout layout, float stddev = 1.f) {
    return Values(name, layout, Normal(layout.size, rng_(), stddev));
  }
  int Values(const std::string& name, Layout layout,
             std::vector<float> values) {
    values.resize(std::max<int64_t>(layout.size, 1));
    return Add({name, Role::kInput, false, layout, std::move(values), {}});
  }
  int Ints(const std::string& name, std::vector<int32_t> values) {
    const Layout layout = Vec(static_cast<int64_t>(values.size()));
    values.resize(std::max<int64_t>(layout.size, 1));
    return Add({name, Role::kInput, true, layout, {}, std::move(values)});
  }
  int Written(const std::string& name, Layout layout) {
    return Add({name, Role::kWritten, false, layout, {}, {}});
  }
  int WrittenInts(const std::string& name, int64_t n) {
    return Add({name, Role::kWritten, true, Vec(n), {}, {}});
  }
  int Accumulated(const std::string& name, Layout layout) {
    return Add({name, Role::kAccumulated, false, layout, {}, {}});
  }
  // Marks output `id` as summed in an order that varies between runs (with
  // atomics): two runs then agree within kReorderedSumNmse, not bitwise.
  int SummedInAnyOrder(int id) {
    case_.operands[id].summed_in_any_order = true;
    return id;
  }

  // The host contents of input `id`, e.g. to derive saved values from a CPU
  // forward.
  MatrixView HostView(int id) {
    Operand& op = case_.operands[id];
    return {op.floats.data() + op.layout.offset, op.layout.rows, op.layout.cols,
            op.layout.stride};
  }
  const std::vector<int32_t>& HostInts(int id) const {
    return case_.operands[id].ints;
  }

  CaseBuilder& Special(SpecialCheck check, std::vector<int> outputs) {
    case_.special = std::move(check);
    case_.special_outputs = std::move(outputs);
    return *this;
  }
  Case Build(Call call, bool returns_loss = false) {
    case_.call = std::move(call);
    case_.returns_loss = returns_loss;
    return std::move(case_);
  }

 private:
  int Add(Operand operand) {
    case_.operands.push_back(std::move(operand));
    return static_cast<int>(case_.operands.size()) - 1;
  }

  Case case_;
  std::mt19937_64 rng_;
};

// The host view of a case's float input.
ConstMatrixView HostView(const Case& c, int id) {
  const Operand& op = c.operands[id];
  return {op.floats.data() + op.layout.offset, op.layout.rows, op.layout.cols,
          op.layout.stride};
}

// ---- comparisons ----

// The reference value of output element i: the CPU's, plus the starting
// contents of an accumulated output.
double Reference(const Operand& op, const std::vector<float>& cpu, int64_t i) {
  return op.role == Role::kAccumulated ? double{op.floats[i]} + cpu[i]
                                       : double{cpu[i]};
}

// Calls body(i, sums) for the buffer index i of every element of the view,
// rows split in fixed blocks over the CPU's threads, each block into its own
// Sums; returns their total.
template <typename Sums, typename Body>
Sums SumOverView(const Layout& l, const Body& body) {
  constexpr int64_t kRowsPerBlock = 16;
  const int64_t blocks = (l.rows + kRowsPerBlock - 1) / kRowsPerBlock;
  std::vector<Sums> parts(blocks);
  cpu::ParallelFor(blocks, l.rows * l.cols, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t last = std::min(l.rows, (b + 1) * kRowsPerBlock);
      for (int64_t r = b * kRowsPerBlock; r < last; ++r) {
        for (int64_t c = 0; c < l.cols; ++c)
          body(l.offset + r * l.stride + c, parts[b]);
      }
    }
  });
  Sums total;
  for (const Sums& part : parts) total += part;
  return total;
}

struct ErrorSums {
  double err = 0;
  double ref = 0;
  int64_t nonfinite = 0;

  ErrorSums& operator+=(const ErrorSums& o) {
    err += o.err;
    ref += o.ref;
    nonfinite += o.nonfinite;
    return *this;
  }
  void Add(double got, double want) {
    if (!std::isfinite(got)) ++nonfinite;
    err += (got - want) * (got - want);
    ref += want * want;
  }
  // NMSE; infinite when the GPU gave a non-finite value.
  double Nmse() const {
    if (nonfinite > 0) return std::numeric_limits<double>::infinity();
    if (ref == 0) return err == 0 ? 0 : std::numeric_limits<double>::infinity();
    return err / ref;
  }
};

ErrorSums CompareView(const Operand& op, const std::vector<float>& cpu,
                      const std::vector<float>& gpu) {
  return SumOverView<ErrorSums>(op.layout, [&](int64_t i, ErrorSums& s) {
    s.Add(gpu[i], Reference(op, cpu, i));
  });
}

// Two CUDA runs' values of one output over its view: the second against the
// first, as they are (CompareView's reference adds an accumulated output's
// starting contents to the CPU's increments, which these already hold).
ErrorSums CompareRuns(const Operand& op, const std::vector<float>& first,
                      const std::vector<float>& second) {
  return SumOverView<ErrorSums>(
      op.layout, [&](int64_t i, ErrorSums& s) { s.Add(second[i], first[i]); });
}

constexpr uint32_t kFloatPoison = 0xffffffffu;  // a NaN: cudaMemset 0xff
constexpr int kIntPoisonByte = 0x7f;            // 0x7f7f7f7f: no valid index

uint32_t Bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

// Elements of the buffer outside the view whose bits changed from their
// starting contents (NaN for written outputs).
int64_t ChangedOutside(const Operand& op, const std::vector<float>& gpu) {
  const Layout& l = op.layout;
  if (l.whole()) return 0;
  constexpr int64_t kBlock = 1 << 16;
  const int64_t blocks = (l.size + kBlock - 1) / kBlock;
  std::vector<int64_t> parts(blocks, 0);
  cpu::ParallelFor(blocks, l.size, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t last = std::min(l.size, (b + 1) * kBlock);
      for (int64_t i = b * kBlock; i < last; ++i) {
        if (l.Contains(i)) continue;
        const uint32_t start =
            op.role == Role::kAccumulated ? Bits(op.floats[i]) : kFloatPoison;
        if (Bits(gpu[i]) != start) ++parts[b];
      }
    }
  });
  return std::accumulate(parts.begin(), parts.end(), int64_t{0});
}

Outcome CheckFloatOutput(const Operand& op, const std::vector<float>& cpu,
                         const std::vector<float>& gpu, double limit) {
  const ErrorSums sums = CompareView(op, cpu, gpu);
  Outcome o{op.name, "nmse"};
  o.limit = limit;
  o.value = sums.Nmse();
  if (sums.nonfinite > 0) o.note = absl::StrCat(sums.nonfinite, " non-finite");
  o.pass = o.value <= limit;
  if (const int64_t changed = ChangedOutside(op, gpu); changed > 0) {
    o.pass = false;
    absl::StrAppend(&o.note, o.note.empty() ? "" : ", ", changed,
                    " changed outside the view");
  }
  return o;
}

Outcome CheckLoss(double cpu, double gpu, double limit) {
  Outcome o{"loss", "rel"};
  o.limit = limit;
  o.value = std::isfinite(gpu)
                ? std::abs(gpu - cpu) / std::max(std::abs(cpu), 1e-30)
                : std::numeric_limits<double>::infinity();
  o.pass = o.value <= limit;
  o.note = absl::StrFormat("cpu %.9g gpu %.9g", cpu, gpu);
  return o;
}

// An integer output must equal the CPU's exactly.
Outcome CheckIntOutput(const Operand& op, const std::vector<int32_t>& want,
                       const std::vector<int32_t>& got) {
  Outcome o(op.name, "mismatch");
  for (size_t i = 0; i < want.size(); ++i) o.value += want[i] != got[i];
  o.pass = o.value == 0;
  return o;
}

// The default checks of every output, then the case's special ones.
std::vector<Outcome> CheckOutputs(const Case& c, const RunOutput& cpu,
                                  const RunOutput& gpu, int mode) {
  const OpLimits& limits = LimitsOf(c.op);
  std::vector<Outcome> outcomes;
  for (size_t i = 0; i < c.operands.size(); ++i) {
    const Operand& op = c.operands[i];
    const bool special =
        std::count(c.special_outputs.begin(), c.special_outputs.end(),
                   static_cast<int>(i)) > 0;
    if (op.role == Role::kInput || special) continue;
    outcomes.push_back(op.integer
                           ? CheckIntOutput(op, cpu.ints[i], gpu.ints[i])
                           : CheckFloatOutput(op, cpu.floats[i], gpu.floats[i],
                                              limits.nmse[mode]));
  }
  if (c.returns_loss) {
    outcomes.push_back(CheckLoss(cpu.loss, gpu.loss, limits.loss[mode]));
  }
  if (c.special) {
    for (Outcome& o : c.special(c, cpu, gpu, mode)) outcomes.push_back(o);
  }
  return outcomes;
}

// The two runs' NMSE of an output summed in any order. fp32 sums of the
// same terms in another order differ by a few fp32 ulps (NMSE about 1e-14);
// written in bf16, that moves an element by one bf16 ulp (2^-8 relative) when
// it lies that near a rounding boundary: in run1's glm5.2-mini cases the
// two runs' bf16 dkv differed by NMSE 8.5e-11 and 2.6e-10. A lost or doubled
// contribution gives 1e-3 and more.
constexpr double kReorderedSumNmse = 1e-8;

// Two CUDA runs on the same inputs: every output bitwise equal (outputs
// summed in any order within kReorderedSumNmse).
Outcome CheckRepeatable(const Case& c, const RunOutput& first,
                        const RunOutput& second) {
  Outcome o{"repeatable", "differ"};
  std::string differing;
  for (size_t i = 0; i < c.operands.size(); ++i) {
    if (c.operands[i].role == Role::kInput) continue;
    if (c.operands[i].summed_in_any_order) {
      const ErrorSums sums =
          CompareRuns(c.operands[i], first.floats[i], second.floats[i]);
      if (sums.Nmse() > kReorderedSumNmse) {
        absl::StrAppend(&differing, differing.empty() ? "" : ", ",
                        c.operands[i].name, " (nmse ", sums.Nmse(), ")");
        o.value += 1;
      }
      continue;
    }
    const bool integer = c.operands[i].integer;
    const char* a = integer
                        ? reinterpret_cast<const char*>(first.ints[i].data())
                        : reinterpret_cast<const char*>(first.floats[i].data());
    const char* b =
        integer ? reinterpret_cast<const char*>(second.ints[i].data())
                : reinterpret_cast<const char*>(second.floats[i].data());
    const size_t words =
        integer ? first.ints[i].size() : first.floats[i].size();
    if (std::memcmp(a, b, words * 4) == 0) continue;
    int64_t count = 0;
    for (size_t e = 0; e < words; ++e)
      count += std::memcmp(a + 4 * e, b + 4 * e, 4) != 0;
    if (count > 0) {
      absl::StrAppend(&differing, differing.empty() ? "" : ", ",
                      c.operands[i].name, " (", count, ")");
    }
    o.value += count;
  }
  if (c.returns_loss &&
      std::memcmp(&first.loss, &second.loss, sizeof first.loss) != 0) {
    absl::StrAppend(&differing, differing.empty() ? "" : ", ", "loss");
    o.value += 1;
  }
  o.pass = o.value == 0;
  if (!o.pass) o.note = "differs: " + differing;
  return o;
}

// ---- tie-aware checks of integer choices ----

bool Near(double a, double b, double tolerance, double scale) {
  return std::abs(a - b) <= tolerance * scale;
}

struct SetDiff {
  std::vector<int32_t> cpu_only, gpu_only;
};

SetDiff Difference(std::vector<int32_t> cpu, std::vector<int32_t> gpu) {
  std::sort(cpu.begin(), cpu.end());
  std::sort(gpu.begin(), gpu.end());
  SetDiff d;
  std::set_difference(cpu.begin(), cpu.end(), gpu.begin(), gpu.end(),
                      std::back_inserter(d.cpu_only));
  std::set_difference(gpu.begin(), gpu.end(), cpu.begin(), cpu.end(),
                      std::back_inserter(d.gpu_only));
  return d;
}

// Whether `values` are distinct and each in [lo, hi].
bool DistinctInRange(std::vector<int32_t> values, int64_t lo, int64_t hi) {
  std::sort(values.begin(), values.end());
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] < lo || values[i] > hi) return false;
    if (i > 0 && values[i] == values[i - 1]) return false;
  }
  return true;
}

enum class Verdict { kEqual, kTie, kWrong };

// IndexerTopK's operands and arguments.
struct TopKArgs {
  int iq, ik, w, seq_start, keys;
  int64_t query_offset, topk;
  float scale;
};

// The index score of (query t, key s) in double, and the scale its rounding
// error grows with: sum over heads of |w| * scale * |iq| * |ik| (scores are
// sums of signed terms, so the score itself can be far smaller).
std::pair<double, double> IndexScore(const Case& c, const TopKArgs& a,
                                     int64_t t, int64_t s) {
  const ConstMatrixView iq = HostView(c, a.iq), ik = HostView(c, a.ik),
                        w = HostView(c, a.w);
  double score = 0, scale = 0;
  for (int64_t h = 0; h < w.cols; ++h) {
    const float* q = iq.Row(t * w.cols + h);
    const float* k = ik.Row(s);
    double dot = 0, qq = 0, kk = 0;
    for (int64_t d = 0; d < ik.cols; ++d) {
      dot += double{q[d]} * k[d];
      qq += double{q[d]} * q[d];
      kk += double{k[d]} * k[d];
    }
    score += w.Row(t)[h] * std::max(a.scale * dot, 0.0);
    scale += std::abs(w.Row(t)[h]) * a.scale * std::sqrt(qq * kk);
  }
  return {score, scale};
}

// One query's keys: the GPU's must be the CPU's count of distinct keys in the
// query's range, then -1; as a set equal to the CPU's, or differing only in
// keys whose score ties the CPU's last chosen key's.
Verdict TopKQuery(const Case& c, const TopKArgs& a, const int32_t* cpu,
                  const int32_t* gpu, int64_t t, double tie) {
  const int64_t first = c.operands[a.seq_start].ints[t];
  const int64_t last = a.query_offset + t;
  const int64_t count = std::min(a.topk, last - first + 1);
  const std::vector<int32_t> want(cpu, cpu + count), got(gpu, gpu + count);
  for (int64_t j = count; j < a.topk; ++j) {
    if (gpu[j] != -1) return Verdict::kWrong;
  }
  if (!DistinctInRange(got, first, last)) return Verdict::kWrong;
  const SetDiff d = Difference(want, got);
  if (d.cpu_only.empty()) return Verdict::kEqual;
  const auto [boundary, boundary_scale] = IndexScore(c, a, t, cpu[count - 1]);
  for (const std::vector<int32_t>* keys : {&d.cpu_only, &d.gpu_only}) {
    for (int32_t s : *keys) {
      const auto [score, scale] = IndexScore(c, a, t, s);
      if (!Near(score, boundary, tie, std::max(scale, boundary_scale)))
        return Verdict::kWrong;
    }
  }
  return Verdict::kTie;
}

SpecialCheck TopKCheck(TopKArgs a) {
  return [a](const Case& c, const RunOutput& cpu, const RunOutput& gpu,
             int mode) {
    const double tie = LimitsOf(c.op).tie[mode];
    const int64_t nq = c.operands[a.w].layout.rows;
    Outcome o{"keys", "mismatch"};
    for (int64_t t = 0; t < nq; ++t) {
      const Verdict v = TopKQuery(c, a, cpu.ints[a.keys].data() + t * a.topk,
                                  gpu.ints[a.keys].data() + t * a.topk, t, tie);
      o.value += v == Verdict::kWrong;
      o.ties += v == Verdict::kTie;
    }
    o.pass = o.value == 0;
    o.note = absl::StrCat("queries of ", nq);
    return std::vector<Outcome>{o};
  };
}

// RouterForward's operands and spec.
struct RouterArgs {
  int logits, bias, weights, indices;
  RouterSpec spec;
};

// The CPU's selection scores in double: per expert sigmoid(logit) + bias, per
// group the sum of its two best.
struct RouterScores {
  std::vector<double> choice, group;
};

RouterScores RouterScoresOf(const Case& c, const RouterArgs& a, int64_t t) {
  const ConstMatrixView logits = HostView(c, a.logits);
  const float* bias = c.operands[a.bias].floats.data();
  const int64_t experts = logits.cols, per_group = experts / a.spec.n_group;
  RouterScores s;
  for (int64_t e = 0; e < experts; ++e) {
    s.choice.push_back(1 / (1 + std::exp(-double{logits.Row(t)[e]})) + bias[e]);
  }
  for (int g = 0; g < a.spec.n_group; ++g) {
    std::vector<double> members(s.choice.begin() + g * per_group,
                                s.choice.begin() + (g + 1) * per_group);
    std::sort(members.rbegin(), members.rend());
    s.group.push_back(members[0] + (per_group > 1 ? members[1] : 0.0));
  }
  return s;
}

// One token's experts as sets; a difference is a tie when every differing
// expert's choice score ties the CPU's last chosen expert's, or its group's
// score ties the last kept group's.
Verdict RouterToken(const Case& c, const RouterArgs& a, int64_t t,
                    const int32_t* cpu, const int32_t* gpu, double tie) {
  const int64_t k = a.spec.top_k;
  const int64_t experts = c.operands[a.logits].layout.cols;
  const std::vector<int32_t> want(cpu, cpu + k), got(gpu, gpu + k);
  if (!DistinctInRange(got, 0, experts - 1)) return Verdict::kWrong;
  const SetDiff d = Difference(want, got);
  if (d.cpu_only.empty()) return Verdict::kEqual;
  const RouterScores s = RouterScoresOf(c, a, t);
  const double last_choice = s.choice[cpu[k - 1]];
  std::vector<double> groups = s.group;
  std::sort(groups.rbegin(), groups.rend());
  const double last_group = groups[a.spec.topk_group - 1];
  const int64_t per_group = experts / a.spec.n_group;
  for (const std::vector<int32_t>* chosen : {&d.cpu_only, &d.gpu_only}) {
    for (int32_t e : *chosen) {
      const double group = s.group[e / per_group];
      const bool tied =
          Near(s.choice[e], last_choice, tie,
               std::max(std::abs(s.choice[e]), std::abs(last_choice))) ||
          (a.spec.n_group > 1 &&
           Near(group, last_group, tie,
                std::max(std::abs(group), std::abs(last_group))));
      if (!tied) return Verdict::kWrong;
    }
  }
  return Verdict::kTie;
}

// Experts as sets per token; weights per (token, expert) over the tokens whose
// sets are equal.
SpecialCheck RouterCheck(RouterArgs a) {
  return
      [a](const Case& c, const RunOutput& cpu, const RunOutput& gpu, int mode) {
        const OpLimits& limits = LimitsOf(c.op);
        const int64_t n = c.operands[a.logits].layout.rows, k = a.spec.top_k;
        const Layout& wl = c.operands[a.weights].layout;
        Outcome choices{"indices", "mismatch"};
        ErrorSums sums;
        for (int64_t t = 0; t < n; ++t) {
          const int32_t* want = cpu.ints[a.indices].data() + t * k;
          const int32_t* got = gpu.ints[a.indices].data() + t * k;
          const Verdict v = RouterToken(c, a, t, want, got, limits.tie[mode]);
          choices.value += v == Verdict::kWrong;
          choices.ties += v == Verdict::kTie;
          if (v != Verdict::kEqual) continue;
          for (int64_t j = 0; j < k; ++j) {
            const int64_t slot = std::find(got, got + k, want[j]) - got;
            const int64_t row = wl.offset + t * wl.stride;
            sums.Add(gpu.floats[a.weights][row + slot],
                     cpu.floats[a.weights][row + j]);
          }
        }
        choices.pass = choices.value == 0;
        choices.note = absl::StrCat("tokens of ", n);
        Outcome weights{"weights", "nmse"};
        weights.limit = limits.nmse[mode];
        weights.value = sums.Nmse();
        weights.pass = weights.value <= weights.limit;
        if (choices.ties > 0)
          weights.note = "tokens with tied choices left out";
        return std::vector<Outcome>{choices, weights};
      };
}

// ---- running ----

// A device allocation of `words` 4-byte elements (at least one, so that empty
// operands still have an address).
class DeviceArray {
 public:
  explicit DeviceArray(int64_t words)
      : bytes_(std::max<int64_t>(words, 1) * 4) {
    GLM_CUDA_CHECK(cudaMalloc(&data_, bytes_));
  }
  ~DeviceArray() {
    if (data_ != nullptr) GLM_CUDA_CHECK(cudaFree(data_));
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  void* data() const { return data_; }
  void Upload(const void* host) {
    GLM_CUDA_CHECK(cudaMemcpy(data_, host, bytes_, cudaMemcpyHostToDevice));
  }
  void Download(void* host) const {
    GLM_CUDA_CHECK(cudaMemcpy(host, data_, bytes_, cudaMemcpyDeviceToHost));
  }
  void Fill(int byte) { GLM_CUDA_CHECK(cudaMemset(data_, byte, bytes_)); }
  // Whether the device contents equal `host` bitwise, read back in pieces so
  // that a large input needs no second host copy.
  bool Equals(const void* host) const {
    constexpr size_t kPiece = size_t{64} << 20;
    std::vector<char> piece(std::min(bytes_, kPiece));
    for (size_t at = 0; at < bytes_; at += kPiece) {
      const size_t n = std::min(kPiece, bytes_ - at);
      GLM_CUDA_CHECK(cudaMemcpy(piece.data(), static_cast<char*>(data_) + at, n,
                                cudaMemcpyDeviceToHost));
      if (std::memcmp(piece.data(), static_cast<const char*>(host) + at, n) !=
          0) {
        return false;
      }
    }
    return true;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_;
};

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

// Waits for every stream (the backend's is its own, non-blocking one) and
// surfaces any error a kernel left.
void SyncDevice() {
  GLM_CUDA_CHECK(cudaDeviceSynchronize());
  GLM_CUDA_CHECK(cudaGetLastError());
}

// Host storage of an operand's buffer (at least one element).
template <typename T>
std::vector<T> HostBuffer(const Operand& op) {
  return std::vector<T>(std::max<int64_t>(op.layout.size, 1), T{0});
}

// The reference: the CPU backend on the case's inputs with every output zeroed.
RunOutput RunOnCpu(const Case& c) {
  RunOutput out;
  out.floats.resize(c.operands.size());
  out.ints.resize(c.operands.size());
  std::vector<void*> bases;
  for (size_t i = 0; i < c.operands.size(); ++i) {
    const Operand& op = c.operands[i];
    if (op.role == Role::kInput) {
      // Inputs are only read.
      bases.push_back(
          op.integer ? static_cast<void*>(const_cast<int32_t*>(op.ints.data()))
                     : const_cast<float*>(op.floats.data()));
    } else if (op.integer) {
      out.ints[i] = HostBuffer<int32_t>(op);
      bases.push_back(out.ints[i].data());
    } else {
      out.floats[i] = HostBuffer<float>(op);
      bases.push_back(out.floats[i].data());
    }
  }
  out.loss = c.call(CpuReference(), Bound(c.operands, bases));
  return out;
}

struct Squares {
  double sum = 0;
  int64_t nonzero = 0;

  Squares& operator+=(const Squares& o) {
    sum += o.sum;
    nonzero += o.nonzero;
    return *this;
  }
};

// Starting contents of each accumulated output: normal values scaled to the
// root mean square of the CPU's nonzero contributions in the view (1 when it
// contributed nothing), so that they neither drown the contribution nor vanish
// beside it.
void SetAccumulatorStarts(Case* c, const RunOutput& cpu) {
  for (size_t i = 0; i < c->operands.size(); ++i) {
    Operand& op = c->operands[i];
    if (op.role != Role::kAccumulated) continue;
    const std::vector<float>& delta = cpu.floats[i];
    const Squares squares =
        SumOverView<Squares>(op.layout, [&](int64_t e, Squares& s) {
          s.sum += double{delta[e]} * delta[e];
          s.nonzero += delta[e] != 0.f;
        });
    const double rms =
        squares.nonzero > 0 ? std::sqrt(squares.sum / squares.nonzero) : 1.0;
    op.floats = Normal(op.layout.size, SplitMix64(c->seed + i),
                       static_cast<float>(rms));
  }
}

// A case's operands in device memory: inputs uploaded once, outputs reset
// before every run.
class DeviceCase {
 public:
  explicit DeviceCase(const Case& c) : case_(c) {
    for (const Operand& op : c.operands) {
      arrays_.push_back(std::make_unique<DeviceArray>(op.layout.size));
      if (op.role != Role::kInput) continue;
      arrays_.back()->Upload(op.integer
                                 ? static_cast<const void*>(op.ints.data())
                                 : op.floats.data());
    }
  }

  // Runs the op once into `out`, whose buffers are kept from run to run;
  // returns the seconds of the op alone (its launches until the device is
  // idle), without the copies and fills around it.
  double Run(Backend& backend, RunOutput* out) {
    std::vector<void*> bases;
    for (size_t i = 0; i < case_.operands.size(); ++i) {
      const Operand& op = case_.operands[i];
      bases.push_back(arrays_[i]->data());
      if (op.role == Role::kAccumulated) arrays_[i]->Upload(op.floats.data());
      if (op.role == Role::kWritten)
        arrays_[i]->Fill(op.integer ? kIntPoisonByte : 0xff);
    }
    SyncDevice();
    const auto start = std::chrono::steady_clock::now();
    out->loss = case_.call(backend, Bound(case_.operands, bases));
    SyncDevice();
    const double op_seconds = SecondsSince(start);
    out->floats.resize(case_.operands.size());
    out->ints.resize(case_.operands.size());
    for (size_t i = 0; i < case_.operands.size(); ++i) {
      const Operand& op = case_.operands[i];
      if (op.role == Role::kInput) continue;
      if (op.integer) {
        if (out->ints[i].empty()) out->ints[i] = HostBuffer<int32_t>(op);
        arrays_[i]->Download(out->ints[i].data());
      } else {
        if (out->floats[i].empty()) out->floats[i] = HostBuffer<float>(op);
        arrays_[i]->Download(out->floats[i].data());
      }
    }
    return op_seconds;
  }

  // Inputs whose device copy no longer matches the host bitwise.
  Outcome CheckInputs() const {
    Outcome o{"inputs", "differ"};
    for (size_t i = 0; i < case_.operands.size(); ++i) {
      const Operand& op = case_.operands[i];
      if (op.role != Role::kInput) continue;
      const void* host = op.integer ? static_cast<const void*>(op.ints.data())
                                    : op.floats.data();
      if (!arrays_[i]->Equals(host)) {
        o.value += 1;
        absl::StrAppend(&o.note, o.note.empty() ? "changed: " : ", ", op.name);
      }
    }
    o.pass = o.value == 0;
    return o;
  }

 private:
  const Case& case_;
  std::vector<std::unique_ptr<DeviceArray>> arrays_;
};

// ---- the case list ----

struct Factory {
  std::string op;
  std::string label;
  std::function<Case()> make;
};

using Factories = std::vector<Factory>;

const ModelConfig& Mini() {
  static const ModelConfig* config =
      new ModelConfig(PresetConfig("glm5.2-mini").value());
  return *config;
}

// ---- operands in the backend's activation type ----
//
// Ops take some operands in Backend::ActivationType() (BF16 in the bf16
// mode): those kernels/backend.h names (products' x, producers' outputs, the
// readers of the experts' products, the gradients only products read).
// Their cases run on the CPU with the F32 operand as it is; on the CUDA
// backend the input is rounded to bf16 here (the rounding the product would
// apply to an F32 x), and the output is widened to F32 for the comparison.

// x's rows*cols floats, row by row, from where the backend keeps them.
std::vector<float> ReadRows(Backend& be, ConstMatrixView x) {
  std::vector<float> host(x.rows * x.cols);
  for (int64_t r = 0; r < x.rows; ++r) {
    be.allocator()->CopyToHost(host.data() + r * x.cols, x.Row(r),
                               x.cols * sizeof(float));
  }
  return host;
}

// Whether a case passes an operand as F32 or in the activation type.
enum class XType { kF32, kActivation };

const char* LabelOf(XType type) {
  return type == XType::kActivation ? " x in activation type" : "";
}

// `op`, or "op how activation type" for a case with operands in the
// activation type (the limits of kLimits differ).
std::string ActivationOp(const char* op, const char* how, XType type) {
  return type == XType::kActivation
             ? absl::StrCat(op, " ", how, " activation type")
             : std::string(op);
}

// A bf16 tensor on the backend holding `bits`.
Tensor UploadBf16(Backend& be, const std::vector<uint16_t>& bits) {
  Tensor t({static_cast<int64_t>(bits.size())}, be.allocator(),
           ElementType::kBF16);
  be.allocator()->CopyFromHost(t.Matrix().data, bits.data(),
                               bits.size() * sizeof(uint16_t));
  return t;
}

// `x` as the case passes it: itself for kF32 or where the backend's
// activation type is F32, else a bf16 copy with x's row stride (a strided
// view stays strided) held by `holder`; the gaps between rows hold NaN.
ConstMatrixView AsActivation(Backend& be, XType type, ConstMatrixView x,
                             Tensor* holder) {
  if (type == XType::kF32 || be.ActivationType() == ElementType::kF32) {
    return x;
  }
  const std::vector<float> values = ReadRows(be, x);
  const int64_t stride = std::max(x.stride, x.cols);
  std::vector<uint16_t> bits(std::max<int64_t>(1, x.rows * stride), 0xffff);
  for (int64_t r = 0; r < x.rows; ++r) {
    for (int64_t c = 0; c < x.cols; ++c) {
      bits[r * stride + c] = Float32ToBfloat16(values[r * x.cols + c]);
    }
  }
  *holder = UploadBf16(be, bits);
  return {holder->Matrix().data, x.rows, x.cols, stride, ElementType::kBF16};
}
IndexedRows RowsAsActivation(Backend& be, XType type, const IndexedRows& x,
                             Tensor* holder) {
  IndexedRows converted = x;
  converted.x = AsActivation(be, type, x.x, holder);
  return converted;
}

// Runs write(ys') for ys' the outputs `ys` as the case passes them: ys
// themselves for kF32 or where the backend's activation type is F32, else
// bf16 buffers with each y's row stride poisoned with NaN, whose views'
// values are then widened into the ys. Empty views stay empty.
template <typename Write>
void IntoActivations(Backend& be, XType type, const std::vector<MatrixView>& ys,
                     const Write& write) {
  if (type == XType::kF32 || be.ActivationType() == ElementType::kF32) {
    write(ys);
    return;
  }
  std::vector<Tensor> buffers(ys.size());
  std::vector<MatrixView> views(ys.size());
  for (size_t i = 0; i < ys.size(); ++i) {
    const MatrixView y = ys[i];
    if (y.empty()) continue;
    const int64_t stride = std::max(y.stride, y.cols);
    buffers[i] = UploadBf16(
        be,
        std::vector<uint16_t>(std::max<int64_t>(1, y.rows * stride), 0xffff));
    views[i] = {buffers[i].Matrix().data, y.rows, y.cols, stride,
                ElementType::kBF16};
  }
  write(views);
  for (size_t i = 0; i < ys.size(); ++i) {
    const MatrixView y = ys[i];
    if (y.empty()) continue;
    std::vector<uint16_t> bits(buffers[i].numel());
    be.allocator()->CopyToHost(bits.data(), buffers[i].Matrix().data,
                               bits.size() * sizeof(uint16_t));
    std::vector<float> row(y.cols);
    for (int64_t r = 0; r < y.rows; ++r) {
      for (int64_t c = 0; c < y.cols; ++c) {
        row[c] = Bfloat16ToFloat32(bits[r * views[i].stride + c]);
      }
      be.allocator()->CopyFromHost(y.Row(r), row.data(),
                                   y.cols * sizeof(float));
    }
  }
}
template <typename Write>
void IntoActivation(Backend& be, XType type, MatrixView y, const Write& write) {
  IntoActivations(be, type, {y}, [&](const std::vector<MatrixView>& views) {
    write(views[0]);
  });
}

// ---- dense algebra ----

// Whether a product's weight operand is converted by the op on every call, or
// read from the copy the backend keeps of its whole buffer (as of a model's
// weight tensor, Backend::RefreshComputeCopies).
enum class WeightCopy { kPerCall, kKept };

const char* LabelOf(WeightCopy copy) {
  return copy == WeightCopy::kKept ? " kept weight copy" : "";
}

// Runs `op` with operand `w` as the weights the backend keeps copies of
// (when `copy` says so), then drops the copies: the case frees its buffers.
template <typename Op>
void WithWeights(Backend& be, const Bound& p, int w, WeightCopy copy, Op op) {
  if (copy == WeightCopy::kKept) be.RefreshComputeCopies({p.Buffer(w)});
  op();
  if (copy == WeightCopy::kKept) be.RefreshComputeCopies({});
}

// y_type kActivation: y in the activation type (not with accumulate).
void AddLinear(Factories& f, const std::string& tag, Layout x, Layout w,
               Layout y, bool accumulate,
               WeightCopy copy = WeightCopy::kPerCall,
               XType x_type = XType::kF32, XType y_type = XType::kF32) {
  const std::string label =
      absl::StrCat(tag, " x", Dims(x), " w", Dims(w), " y", Dims(y),
                   accumulate ? " +=" : "", LabelOf(copy), LabelOf(x_type),
                   y_type == XType::kActivation ? " y in activation type" : "");
  f.push_back({"Linear", label, [=] {
                 CaseBuilder b("Linear", label);
                 const int ix = b.Input("x", x), iw = b.Input("w", w);
                 const int iy =
                     accumulate ? b.Accumulated("y", y) : b.Written("y", y);
                 return b.Build([=](Backend& be, const Bound& p) {
                   Tensor holder;
                   const ConstMatrixView xv =
                       AsActivation(be, x_type, p.View(ix), &holder);
                   WithWeights(be, p, iw, copy, [&] {
                     auto product = [&](MatrixView y_view) {
                       be.Linear(xv, p.View(iw), y_view, accumulate);
                     };
                     IntoActivation(be, y_type, p.View(iy), product);
                   });
                   return 0.0;
                 });
               }});
}

// y = x w^T + addend, y written (a residual stream's sum).
void AddLinearAdd(Factories& f, const std::string& tag, Layout x, Layout w,
                  Layout y, WeightCopy copy = WeightCopy::kPerCall,
                  XType x_type = XType::kF32) {
  const std::string label =
      absl::StrCat(tag, " x", Dims(x), " w", Dims(w), " y", Dims(y),
                   LabelOf(copy), LabelOf(x_type));
  f.push_back({"LinearAdd", label, [=] {
                 CaseBuilder b("LinearAdd", label);
                 const int ix = b.Input("x", x), iw = b.Input("w", w),
                           ia = b.Input("addend", y), iy = b.Written("y", y);
                 return b.Build([=](Backend& be, const Bound& p) {
                   Tensor holder;
                   const ConstMatrixView xv =
                       AsActivation(be, x_type, p.View(ix), &holder);
                   WithWeights(be, p, iw, copy, [&] {
                     be.LinearAdd(xv, p.View(iw), p.View(ia), p.View(iy));
                   });
                   return 0.0;
                 });
               }});
}

// Zeroes a view of the backend's memory (host memory where it has no
// allocator).
void ZeroView(Backend& be, MatrixView v) {
  const std::vector<float> zeros(v.cols, 0.f);
  for (int64_t r = 0; r < v.rows; ++r) {
    if (be.allocator() == nullptr) {
      std::fill(v.Row(r), v.Row(r) + v.cols, 0.f);
    } else {
      be.allocator()->CopyFromHost(v.Row(r), zeros.data(),
                                   v.cols * sizeof(float));
    }
  }
}

// dx or dw absent: that gradient is not asked for. dx_type kActivation: dx
// in the activation type, which the op writes rather than adds into (an F32
// activation type gets a zeroed dx to add into, as the model's).
void AddLinearBackward(Factories& f, const std::string& tag, Layout x, Layout w,
                       Layout dy, bool want_dx, bool want_dw, Layout dx,
                       Layout dw, WeightCopy copy = WeightCopy::kPerCall,
                       XType x_type = XType::kF32, XType dy_type = XType::kF32,
                       XType dx_type = XType::kF32) {
  const std::string label = absl::StrCat(
      tag, " x", Dims(x), " w", Dims(w), " dy", Dims(dy),
      want_dx ? "" : " no dx", want_dw ? "" : " no dw", LabelOf(copy),
      LabelOf(x_type),
      dy_type == XType::kActivation ? " dy in activation type" : "",
      dx_type == XType::kActivation ? " dx in activation type, written" : "");
  const bool written = dx_type == XType::kActivation;
  f.push_back({"LinearBackward", label, [=] {
                 CaseBuilder b("LinearBackward", label);
                 const int ix = b.Input("x", x), iw = b.Input("w", w),
                           idy = b.Input("dy", dy);
                 const int idx = !want_dx  ? -1
                                 : written ? b.Written("dx", dx)
                                           : b.Accumulated("dx", dx);
                 const int idw = want_dw ? b.Accumulated("dw", dw) : -1;
                 return b.Build([=](Backend& be, const Bound& p) {
                   Tensor holder, dy_holder;
                   const ConstMatrixView xv =
                       AsActivation(be, x_type, p.View(ix), &holder);
                   const ConstMatrixView dyv =
                       AsActivation(be, dy_type, p.View(idy), &dy_holder);
                   auto backward = [&](MatrixView dxv) {
                     if (written && dxv.dtype == ElementType::kF32) {
                       ZeroView(be, dxv);
                     }
                     WithWeights(be, p, iw, copy, [&] {
                       be.LinearBackward(xv, p.View(iw), dyv, dxv,
                                         idw >= 0 ? p.View(idw) : MatrixView{});
                     });
                   };
                   if (idx >= 0) {
                     IntoActivation(be, dx_type, p.View(idx), backward);
                   } else {
                     backward(MatrixView{});
                   }
                   return 0.0;
                 });
               }});
}

// ---- routed experts, grouped ----

// Expert loads for `rows` rows over `experts`: ragged (about a fifth of the
// experts get most rows, expert 1 none), or every row on expert `all_on`.
std::vector<int64_t> ExpertLoads(int64_t rows, int64_t experts, int all_on,
                                 std::mt19937_64& rng) {
  std::vector<int64_t> loads(experts, 0);
  if (all_on >= 0) {
    loads[all_on] = rows;
    return loads;
  }
  std::vector<double> weight(experts);
  std::uniform_real_distribution<double> u(0.05, 1.0);
  for (int64_t e = 0; e < experts; ++e)
    weight[e] = (e % 5 == 0 ? 8 : 1) * u(rng);
  weight[1] = 0;
  double total = 0;
  for (double w : weight) total += w;
  int64_t given = 0;
  for (int64_t e = 0; e < experts; ++e) {
    loads[e] = static_cast<int64_t>(rows * weight[e] / total);
    given += loads[e];
  }
  loads[0] += rows - given;
  return loads;
}

std::vector<int32_t> OffsetsOf(const std::vector<int64_t>& loads) {
  std::vector<int32_t> offsets{0};
  for (int64_t load : loads) offsets.push_back(offsets.back() + load);
  return offsets;
}

// A grouping's operands: `count` choices skewed toward low expert ids (the
// last expert gets none) and the arrays GroupByExpert writes.
struct GroupingOperands {
  int expert, slots, tokens, offsets;
};
GroupingOperands AddGrouping(CaseBuilder& b, int64_t count, int64_t experts) {
  std::vector<int32_t> expert(count);
  for (int32_t& e : expert) {
    const int64_t x = b.rng()() % (experts - 1);
    e = static_cast<int32_t>(x * x / (experts - 1));
  }
  return {b.Ints("expert", expert), b.WrittenInts("slots", count),
          b.WrittenInts("tokens", count),
          b.WrittenInts("offsets", experts + 1)};
}

void GroupByExpertOf(Backend& be, const Bound& p, const GroupingOperands& g,
                     int64_t count, int64_t top_k, int64_t experts,
                     int offsets) {
  be.GroupByExpert(p.Ints(g.expert), count, top_k, experts, p.Ints(g.slots),
                   p.Ints(g.tokens), p.Ints(offsets));
}

void AddGroupByExpert(Factories& f, const std::string& tag, int64_t tokens,
                      int64_t top_k, int64_t experts) {
  const std::string label =
      absl::StrCat(tag, " tokens", tokens, " top", top_k, " experts", experts);
  f.push_back({"GroupByExpert", label, [=] {
                 CaseBuilder b("GroupByExpert", label);
                 const int64_t count = tokens * top_k;
                 const GroupingOperands g = AddGrouping(b, count, experts);
                 return b.Build([=](Backend& be, const Bound& p) {
                   GroupByExpertOf(be, p, g, count, top_k, experts, g.offsets);
                   return 0.0;
                 });
               }});
}

// Two micro batches' loads added to a start that is not zero (the grouping's
// own offsets, written by GroupByExpert on both backends alike).
void AddExpertLoadsCase(Factories& f, const std::string& tag, int64_t tokens,
                        int64_t top_k, int64_t experts) {
  const std::string label =
      absl::StrCat(tag, " tokens", tokens, " top", top_k, " experts", experts);
  f.push_back({"AddExpertLoads", label, [=] {
                 CaseBuilder b("AddExpertLoads", label);
                 const int64_t count = tokens * top_k;
                 const GroupingOperands g = AddGrouping(b, count, experts);
                 const int il = b.WrittenInts("loads", experts + 1);
                 return b.Build([=](Backend& be, const Bound& p) {
                   GroupByExpertOf(be, p, g, count, top_k, experts, g.offsets);
                   GroupByExpertOf(be, p, g, count, top_k, experts, il);
                   for (int batch = 0; batch < 2; ++batch) {
                     be.AddExpertLoads(p.Ints(g.offsets), experts, p.Ints(il));
                   }
                   return 0.0;
                 });
               }});
}

// Expert products over `rows` rows grouped by expert (ragged loads, or all on
// expert `all_on`): in -> out per expert, the weights stacked [experts * out,
// in]. With `tokens`, the rows are read by index from x [tokens, in] (the
// routed experts' first product), random token per row. With `dy_tokens`,
// the backward's dy rows are read by index from [dy_tokens, out] and scaled
// (the combine's gradient: a token's dout times its routing weight).
// With y_type kActivation, the forward's y and the backward's written dx are
// in the activation type (the routed experts' products; no accumulated dx).
void AddGroupedLinear(Factories& f, const std::string& tag, int64_t rows,
                      int64_t experts, int64_t in, int64_t out, int all_on,
                      WeightCopy copy = WeightCopy::kPerCall,
                      int64_t tokens = 0, int64_t dy_tokens = 0,
                      XType x_type = XType::kF32, XType y_type = XType::kF32) {
  const std::string label = absl::StrCat(
      tag, " rows", rows, " experts", experts, " ", in, "->", out,
      LabelOf(copy), LabelOf(x_type),
      tokens > 0 ? absl::StrCat(" read from ", tokens, " tokens") : "",
      y_type == XType::kActivation ? " y/dx in activation type" : "");
  const std::string dy_label =
      dy_tokens > 0 ? absl::StrCat(" dy scaled from ", dy_tokens, " tokens")
      : x_type == XType::kActivation ? " dy in activation type"
                                     : "";
  auto offsets_of = [=](CaseBuilder& b) {
    return OffsetsOf(ExpertLoads(rows, experts, all_on, b.rng()));
  };
  const int64_t x_rows = tokens > 0 ? tokens : rows;
  // An index operand of a random token per row (-1: none when from is 0).
  auto rows_of = [=](CaseBuilder& b, const std::string& name, int64_t from) {
    if (from == 0) return -1;
    std::vector<int32_t> index(rows);
    for (int32_t& t : index) t = static_cast<int32_t>(b.rng()() % from);
    return b.Ints(name, index);
  };
  // The operand's rows, by index when there is one (id >= 0).
  auto indexed = [=](const Bound& p, int view, int id, int scale = -1) {
    return id < 0 ? IndexedRows(p.View(view))
                  : IndexedRows(p.View(view), p.Ints(id), rows,
                                scale < 0 ? nullptr : p.Floats(scale));
  };
  // x's rows, in the activation type when the case says so.
  auto x_rows_of = [=](Backend& be, const Bound& p, int view, int id,
                       Tensor* holder) {
    return RowsAsActivation(be, x_type, indexed(p, view, id), holder);
  };
  // The forward reads no dy: its case is the dense-dy one's.
  if (dy_tokens == 0) {
    f.push_back(
        {"GroupedLinear", label, [=] {
           CaseBuilder b("GroupedLinear", label);
           const int io = b.Ints("offsets", offsets_of(b)),
                     ir = rows_of(b, "x_rows", tokens),
                     ix = b.Input("x", Dense(x_rows, in)),
                     iw = b.Input("w", Dense(experts * out, in)),
                     iy = b.Written("y", Dense(rows, out));
           return b.Build([=](Backend& be, const Bound& p) {
             Tensor holder;
             const IndexedRows xr = x_rows_of(be, p, ix, ir, &holder);
             WithWeights(be, p, iw, copy, [&] {
               IntoActivation(be, y_type, p.View(iy), [&](MatrixView y) {
                 be.GroupedLinear(xr, p.View(iw), p.Ints(io), experts, y);
               });
             });
             return 0.0;
           });
         }});
  }
  // dx added to (the model's shared experts' way) or written (its routed
  // experts': the buffer starts poisoned).
  for (const bool accumulate_dx : {true, false}) {
    if (accumulate_dx && y_type == XType::kActivation) continue;
    const std::string backward_label =
        label + dy_label + (accumulate_dx ? "" : " dx written");
    f.push_back(
        {"GroupedLinearBackward", backward_label, [=] {
           CaseBuilder b("GroupedLinearBackward", backward_label);
           const int io = b.Ints("offsets", offsets_of(b)),
                     ir = rows_of(b, "x_rows", tokens),
                     ix = b.Input("x", Dense(x_rows, in)),
                     iw = b.Input("w", Dense(experts * out, in)),
                     idyr = rows_of(b, "dy_rows", dy_tokens),
                     idys = dy_tokens > 0 ? b.Input("dy_scale", Vec(rows)) : -1,
                     idy = b.Input(
                         "dy", Dense(dy_tokens > 0 ? dy_tokens : rows, out)),
                     idx = accumulate_dx ? b.Accumulated("dx", Dense(rows, in))
                                         : b.Written("dx", Dense(rows, in)),
                     idw = b.Accumulated("dw", Dense(experts * out, in));
           return b.Build([=](Backend& be, const Bound& p) {
             Tensor holder, dy_holder;
             const IndexedRows xr = x_rows_of(be, p, ix, ir, &holder);
             // A dense dy goes in the activation type with x (as SwiGLU's
             // backward writes the gate/up products' dy).
             const IndexedRows dy_rows = indexed(p, idy, idyr, idys);
             const IndexedRows dyr =
                 dy_rows.indexed()
                     ? dy_rows
                     : RowsAsActivation(be, x_type, dy_rows, &dy_holder);
             WithWeights(be, p, iw, copy, [&] {
               IntoActivation(be, y_type, p.View(idx), [&](MatrixView dx) {
                 be.GroupedLinearBackward(xr, p.View(iw), p.Ints(io), experts,
                                          dyr, dx, accumulate_dx, p.View(idw));
               });
             });
             return 0.0;
           });
         }});
  }
}

void AddGroupedCases(Factories& f) {
  const ModelConfig& m = Mini();
  const int64_t hidden = m.hidden_size, moe = m.moe_intermediate_size,
                experts = m.n_routed_experts, top_k = m.num_experts_per_tok;
  AddGroupByExpert(f, "tiny", 5, 2, 4);
  AddGroupByExpert(f, "glm5.2-mini", 4096, top_k, experts);
  AddExpertLoadsCase(f, "glm5.2-mini", 4096, top_k, experts);
  AddGroupedLinear(f, "tiny", 17, 4, 24, 16, -1);
  AddGroupedLinear(f, "one expert", 64, 4, 24, 16, 2);
  AddGroupedLinear(f, "glm5.2-mini gate_up", 4096 * top_k, experts, hidden,
                   2 * moe, -1);
  AddGroupedLinear(f, "glm5.2-mini down", 4096 * top_k, experts, moe, hidden,
                   -1);
  AddGroupedLinear(f, "tiny", 17, 4, 24, 16, -1, WeightCopy::kKept);
  AddGroupedLinear(f, "glm5.2-mini gate_up", 4096 * top_k, experts, hidden,
                   2 * moe, -1, WeightCopy::kKept);
  AddGroupedLinear(f, "tiny", 17, 4, 24, 16, -1, WeightCopy::kPerCall, 5);
  AddGroupedLinear(f, "glm5.2-mini gate_up", 4096 * top_k, experts, hidden,
                   2 * moe, -1, WeightCopy::kKept, 4096);
  AddGroupedLinear(f, "tiny", 17, 4, 24, 16, -1, WeightCopy::kPerCall, 0, 5);
  AddGroupedLinear(f, "glm5.2-mini down", 4096 * top_k, experts, moe, hidden,
                   -1, WeightCopy::kKept, 0, 4096);
  AddGroupedLinear(f, "tiny", 17, 4, 24, 16, -1, WeightCopy::kPerCall, 5, 0,
                   XType::kActivation);
  AddGroupedLinear(f, "odd widths", 17, 4, 20, 12, -1, WeightCopy::kPerCall, 5,
                   0, XType::kActivation);
  AddGroupedLinear(f, "glm5.2-mini gate_up", 4096 * top_k, experts, hidden,
                   2 * moe, -1, WeightCopy::kKept, 4096, 0, XType::kActivation);
  AddGroupedLinear(f, "glm5.2-mini down", 4096 * top_k, experts, moe, hidden,
                   -1, WeightCopy::kKept, 0, 4096, XType::kActivation);
  // As the routed experts run in the bf16 mode: every row-side operand in
  // the activation type but the combine's gradient (read by index).
  const XType act = XType::kActivation;
  AddGroupedLinear(f, "tiny", 17, 4, 24, 16, -1, WeightCopy::kPerCall, 5, 0,
                   act, act);
  AddGroupedLinear(f, "odd widths", 17, 4, 20, 12, -1, WeightCopy::kPerCall, 5,
                   0, act, act);
  AddGroupedLinear(f, "tiny", 17, 4, 24, 16, -1, WeightCopy::kPerCall, 0, 5,
                   act, act);
  AddGroupedLinear(f, "odd widths", 17, 4, 20, 12, -1, WeightCopy::kPerCall, 0,
                   5, act, act);
  AddGroupedLinear(f, "glm5.2-mini gate_up", 4096 * top_k, experts, hidden,
                   2 * moe, -1, WeightCopy::kKept, 4096, 0, act, act);
  AddGroupedLinear(f, "glm5.2-mini down", 4096 * top_k, experts, moe, hidden,
                   -1, WeightCopy::kKept, 0, 4096, act, act);
  AddGroupedLinear(f, "glm5.2-mini down", 4096 * top_k, experts, moe, hidden,
                   -1, WeightCopy::kKept, 0, 0, act, act);
}

void AddLinearCases(Factories& f) {
  const ModelConfig& m = Mini();
  const int64_t hidden = m.hidden_size, heads = m.num_attention_heads,
                qk = m.QkHeadDim(), kv_a = m.kv_lora_rank + m.qk_rope_head_dim,
                kv_b = heads * (m.qk_nope_head_dim + m.v_head_dim),
                attn = heads * m.v_head_dim, moe = m.moe_intermediate_size,
                inter = m.intermediate_size;
  AddLinear(f, "tiny", Dense(5, 7), Dense(3, 7), Dense(5, 3), false);
  AddLinear(f, "strided", Cols(4, 12, 2, 7), Dense(3, 7), Cols(4, 5, 1, 3),
            false);
  AddLinear(f, "odd", Dense(37, 45), Dense(29, 45), Dense(37, 29), true);
  // Views starting off 16-byte boundaries.
  AddLinear(f, "misaligned", Cols(33, 70, 3, 61), Cols(17, 64, 1, 61),
            Cols(33, 20, 2, 17), true);
  AddLinear(f, "no tokens", Dense(0, hidden), Dense(m.q_lora_rank, hidden),
            Dense(0, m.q_lora_rank), false);
  AddLinear(f, "q_a_proj", Dense(4096, hidden), Dense(m.q_lora_rank, hidden),
            Dense(4096, m.q_lora_rank), false);
  AddLinear(f, "q_b_proj", Dense(4096, m.q_lora_rank),
            Dense(heads * qk, m.q_lora_rank), Dense(4096, heads * qk), false);
  AddLinear(f, "kv_a_proj", Dense(4096, hidden), Dense(kv_a, hidden),
            Dense(4096, kv_a), false);
  AddLinear(f, "kv_b_proj", Dense(4096, m.kv_lora_rank),
            Dense(kv_b, m.kv_lora_rank), Dense(4096, kv_b), false);
  AddLinear(f, "o_proj", Dense(2048, attn), Dense(hidden, attn),
            Dense(2048, hidden), false);
  AddLinear(f, "router gate", Dense(4096, hidden),
            Dense(m.n_routed_experts, hidden), Dense(4096, m.n_routed_experts),
            false);
  // Few output tiles over a long k: the CUDA backend splits k (four slices
  // here, added into y).
  AddLinear(f, "router gate", Dense(4096, hidden),
            Dense(m.n_routed_experts, hidden), Dense(4096, m.n_routed_experts),
            true);
  AddLinear(f, "mlp up into gate_up", Dense(1024, hidden), Dense(inter, hidden),
            Cols(1024, 2 * inter, inter, inter), false);
  AddLinear(f, "expert gate_up slab", Dense(1000, hidden),
            Slab(3, 2 * moe, hidden, 2), Dense(1000, 2 * moe), false);
  AddLinear(f, "expert down", Dense(1000, moe), Slab(3, hidden, moe, 1),
            Dense(1000, hidden), true);
  AddLinear(f, "lm_head", Dense(128, hidden), Dense(m.vocab_size, hidden),
            Dense(128, m.vocab_size), false);
  AddLinear(f, "misaligned", Cols(33, 70, 3, 61), Cols(17, 64, 1, 61),
            Cols(33, 20, 2, 17), true, WeightCopy::kKept);
  AddLinear(f, "q_b_proj", Dense(4096, m.q_lora_rank),
            Dense(heads * qk, m.q_lora_rank), Dense(4096, heads * qk), false,
            WeightCopy::kKept);
  AddLinear(f, "expert down", Dense(1000, moe), Slab(3, hidden, moe, 1),
            Dense(1000, hidden), true, WeightCopy::kKept);
  AddLinear(f, "odd", Dense(37, 45), Dense(29, 45), Dense(37, 29), true,
            WeightCopy::kPerCall, XType::kActivation);
  AddLinear(f, "q_a_proj", Dense(4096, hidden), Dense(m.q_lora_rank, hidden),
            Dense(4096, m.q_lora_rank), false, WeightCopy::kKept,
            XType::kActivation);
  AddLinear(f, "kv_b_proj", Dense(4096, m.kv_lora_rank),
            Dense(kv_b, m.kv_lora_rank), Dense(4096, kv_b), false,
            WeightCopy::kKept, XType::kActivation);
  AddLinear(f, "kv_b_proj", Dense(4096, m.kv_lora_rank),
            Dense(kv_b, m.kv_lora_rank), Dense(4096, kv_b), false,
            WeightCopy::kKept, XType::kActivation, XType::kActivation);
  AddLinear(f, "odd", Dense(37, 45), Dense(29, 45), Dense(37, 29), false,
            WeightCopy::kPerCall, XType::kF32, XType::kActivation);
  // The residual sums the output products form: o_proj's and the MLP's down
  // projection's in the activation type, an odd shape (4-byte alignment) and
  // a k-split product (the addend copied, the slices added).
  AddLinearAdd(f, "odd", Dense(37, 45), Dense(29, 45), Dense(37, 29));
  AddLinearAdd(f, "misaligned", Cols(33, 70, 3, 61), Cols(17, 64, 1, 61),
               Cols(33, 20, 2, 17));
  AddLinearAdd(f, "o_proj", Dense(2048, attn), Dense(hidden, attn),
               Dense(2048, hidden), WeightCopy::kKept, XType::kActivation);
  AddLinearAdd(f, "shared expert down", Dense(4096, moe), Dense(hidden, moe),
               Dense(4096, hidden), WeightCopy::kKept, XType::kActivation);
  AddLinearAdd(f, "router gate", Dense(4096, hidden),
               Dense(m.n_routed_experts, hidden),
               Dense(4096, m.n_routed_experts));

  AddLinearBackward(f, "tiny", Dense(5, 7), Dense(3, 7), Dense(5, 3), true,
                    true, Dense(5, 7), Dense(3, 7));
  AddLinearBackward(f, "strided", Cols(4, 12, 2, 7), Dense(3, 7),
                    Cols(4, 5, 1, 3), true, true, Cols(4, 12, 2, 7),
                    Dense(3, 7));
  AddLinearBackward(f, "misaligned", Cols(33, 70, 3, 61), Cols(17, 64, 1, 61),
                    Cols(33, 20, 2, 17), true, true, Cols(33, 66, 5, 61),
                    Cols(17, 63, 1, 61));
  AddLinearBackward(f, "tiny", Dense(6, 9), Dense(4, 9), Dense(6, 4), true,
                    false, Dense(6, 9), {});
  AddLinearBackward(f, "indexer wk", Dense(4096, hidden),
                    Dense(m.index_head_dim, hidden),
                    Dense(4096, m.index_head_dim), false, true, {},
                    Dense(m.index_head_dim, hidden));
  AddLinearBackward(f, "q_b_proj", Dense(2048, m.q_lora_rank),
                    Dense(heads * qk, m.q_lora_rank), Dense(2048, heads * qk),
                    true, true, Dense(2048, m.q_lora_rank),
                    Dense(heads * qk, m.q_lora_rank));
  // dw [32, 2048] over 4,096 tokens: eight slices of k on the CUDA backend.
  AddLinearBackward(f, "indexer weights_proj", Dense(4096, hidden),
                    Dense(m.index_n_heads, hidden),
                    Dense(4096, m.index_n_heads), true, true,
                    Dense(4096, hidden), Dense(m.index_n_heads, hidden));
  AddLinearBackward(f, "mlp gate", Dense(512, hidden), Dense(inter, hidden),
                    Cols(512, 2 * inter, 0, inter), true, true,
                    Dense(512, hidden), Dense(inter, hidden));
  AddLinearBackward(f, "expert down slab", Dense(1000, moe),
                    Slab(3, hidden, moe, 1), Dense(1000, hidden), true, true,
                    Dense(1000, moe), Slab(3, hidden, moe, 1));
  AddLinearBackward(f, "lm_head", Dense(64, hidden),
                    Dense(m.vocab_size, hidden), Dense(64, m.vocab_size), true,
                    true, Dense(64, hidden), Dense(m.vocab_size, hidden));
  AddLinearBackward(f, "misaligned", Cols(33, 70, 3, 61), Cols(17, 64, 1, 61),
                    Cols(33, 20, 2, 17), true, true, Cols(33, 66, 5, 61),
                    Cols(17, 63, 1, 61), WeightCopy::kKept);
  AddLinearBackward(f, "expert down slab", Dense(1000, moe),
                    Slab(3, hidden, moe, 1), Dense(1000, hidden), true, true,
                    Dense(1000, moe), Slab(3, hidden, moe, 1),
                    WeightCopy::kKept);
  AddLinearBackward(f, "odd", Dense(37, 45), Dense(29, 45), Dense(37, 29), true,
                    true, Dense(37, 45), Dense(29, 45), WeightCopy::kPerCall,
                    XType::kActivation);
  AddLinearBackward(f, "q_b_proj", Dense(2048, m.q_lora_rank),
                    Dense(heads * qk, m.q_lora_rank), Dense(2048, heads * qk),
                    true, true, Dense(2048, m.q_lora_rank),
                    Dense(heads * qk, m.q_lora_rank), WeightCopy::kKept,
                    XType::kActivation);
  AddLinearBackward(f, "q_b_proj", Dense(2048, m.q_lora_rank),
                    Dense(heads * qk, m.q_lora_rank), Dense(2048, heads * qk),
                    true, true, Dense(2048, m.q_lora_rank),
                    Dense(heads * qk, m.q_lora_rank), WeightCopy::kKept,
                    XType::kActivation, XType::kActivation);
  AddLinearBackward(f, "mlp gate", Dense(512, hidden), Dense(inter, hidden),
                    Cols(512, 2 * inter, 0, inter), true, true,
                    Dense(512, hidden), Dense(inter, hidden),
                    WeightCopy::kPerCall, XType::kF32, XType::kActivation);
  // o_proj as the attention's backward runs it: dy F32 (the residual
  // stream's gradient), x and the written dx in the activation type.
  AddLinearBackward(f, "o_proj", Dense(2048, heads * m.v_head_dim),
                    Dense(hidden, heads * m.v_head_dim), Dense(2048, hidden),
                    true, true, Dense(2048, heads * m.v_head_dim),
                    Dense(hidden, heads * m.v_head_dim), WeightCopy::kKept,
                    XType::kActivation, XType::kF32, XType::kActivation);
  AddLinearBackward(f, "odd", Dense(37, 45), Dense(29, 45), Dense(37, 29), true,
                    false, Cols(37, 50, 3, 45), {}, WeightCopy::kPerCall,
                    XType::kF32, XType::kF32, XType::kActivation);
}

// x_type, y_type kActivation: that side in the activation type (a
// conversion where the two differ).
void AddCopy(Factories& f, const std::string& tag, Layout x, Layout y,
             XType x_type = XType::kF32, XType y_type = XType::kF32) {
  const bool converts =
      x_type == XType::kActivation || y_type == XType::kActivation;
  const std::string label =
      absl::StrCat(tag, " x", Dims(x), LabelOf(x_type), " y", Dims(y),
                   y_type == XType::kActivation ? " in activation type" : "");
  const std::string op = converts ? "Copy in activation type" : "Copy";
  f.push_back({op, label, [=] {
                 CaseBuilder b(op, label);
                 const int ix = b.Input("x", x), iy = b.Written("y", y);
                 return b.Build([=](Backend& be, const Bound& p) {
                   Tensor holder;
                   const ConstMatrixView xv =
                       AsActivation(be, x_type, p.View(ix), &holder);
                   auto copy = [&](MatrixView out) { be.Copy(xv, out); };
                   IntoActivation(be, y_type, p.View(iy), copy);
                   return 0.0;
                 });
               }});
}

void AddAxpy(Factories& f, const std::string& tag, float alpha, Layout x,
             Layout y) {
  const std::string label =
      absl::StrCat(tag, " alpha ", alpha, " x", Dims(x), " y", Dims(y));
  f.push_back({"Axpy", label, [=] {
                 CaseBuilder b("Axpy", label);
                 const int ix = b.Input("x", x), iy = b.Accumulated("y", y);
                 return b.Build([=](Backend& be, const Bound& p) {
                   be.Axpy(alpha, p.View(ix), p.View(iy));
                   return 0.0;
                 });
               }});
}

void AddRepeatRows(Factories& f, const std::string& tag, int64_t repeats,
                   Layout x, Layout y, XType y_type = XType::kF32) {
  const std::string label =
      absl::StrCat(tag, " x", Dims(x), " repeats ", repeats, " y", Dims(y));
  const std::string op = ActivationOp("RepeatRows", "to", y_type);
  f.push_back({op, label, [=] {
                 CaseBuilder b(op, label);
                 const int ix = b.Input("x", x), iy = b.Written("y", y);
                 return b.Build([=](Backend& be, const Bound& p) {
                   auto repeat = [&](MatrixView out) {
                     be.RepeatRows(p.View(ix), repeats, out);
                   };
                   IntoActivation(be, y_type, p.View(iy), repeat);
                   return 0.0;
                 });
               }});
}

// x_type kActivation: x in the activation type (the keys' gradients).
void AddSumRowGroups(Factories& f, const std::string& tag, int64_t repeats,
                     Layout x, Layout y, XType x_type = XType::kF32) {
  const std::string label =
      absl::StrCat(tag, " x", Dims(x), " repeats ", repeats, " y", Dims(y));
  const std::string op = ActivationOp("SumRowGroups", "from", x_type);
  f.push_back({op, label, [=] {
                 CaseBuilder b(op, label);
                 const int ix = b.Input("x", x), iy = b.Accumulated("y", y);
                 return b.Build([=](Backend& be, const Bound& p) {
                   Tensor holder;
                   be.SumRowGroups(
                       AsActivation(be, x_type, p.View(ix), &holder), repeats,
                       p.View(iy));
                   return 0.0;
                 });
               }});
}

void AddElementwiseCases(Factories& f) {
  const ModelConfig& m = Mini();
  const int64_t heads = m.num_attention_heads, qk = m.QkHeadDim(),
                nope = m.qk_nope_head_dim, rope = m.qk_rope_head_dim,
                kv_row = m.qk_nope_head_dim + m.v_head_dim,
                index_dim = m.index_head_dim, tokens = 4096;
  AddCopy(f, "tiny", Dense(5, 7), Dense(5, 7));
  AddCopy(f, "misaligned", Cols(17, 40, 3, 29), Cols(17, 37, 5, 29));
  AddCopy(f, "q nope", Cols(tokens * heads, qk, 0, nope),
          Cols(tokens * heads, qk, 0, nope));
  AddCopy(f, "k_rope to head 5", Dense(tokens, rope),
          {5 * qk + nope, tokens, rope, heads * qk, tokens * heads * qk});
  AddCopy(f, "indexer q pass",
          Cols(tokens * m.index_n_heads, index_dim, rope, index_dim - rope),
          Cols(tokens * m.index_n_heads, index_dim, rope, index_dim - rope));
  const XType act = XType::kActivation, f32 = XType::kF32;
  AddCopy(f, "tiny", Dense(5, 7), Dense(5, 7), f32, act);
  AddCopy(f, "tiny", Dense(5, 7), Dense(5, 7), act, f32);
  AddCopy(f, "misaligned", Cols(17, 40, 3, 29), Cols(17, 37, 5, 29), act, act);
  AddCopy(f, "q nope into the query", Cols(tokens * heads, qk, 0, nope),
          Cols(tokens * heads, qk, 0, nope), f32, act);
  AddCopy(f, "kv nope into the keys", Cols(tokens * heads, kv_row, 0, nope),
          Cols(tokens * heads, qk, 0, nope), act, act);

  AddRepeatRows(f, "tiny", 3, Dense(5, 7), Dense(15, 7));
  AddRepeatRows(f, "k_rope to every head", heads, Dense(tokens, rope),
                Cols(tokens * heads, qk, nope, rope));
  AddRepeatRows(f, "tiny", 3, Dense(5, 7), Dense(15, 7), XType::kActivation);
  AddRepeatRows(f, "k_rope into the keys", heads, Dense(tokens, rope),
                Cols(tokens * heads, qk, nope, rope), XType::kActivation);
  AddSumRowGroups(f, "tiny", 3, Dense(15, 7), Dense(5, 7));
  AddSumRowGroups(f, "every head's dk_rope", heads,
                  Cols(tokens * heads, qk, nope, rope), Dense(tokens, rope));
  AddSumRowGroups(f, "every head's dk_rope", heads,
                  Cols(tokens * heads, qk, nope, rope), Dense(tokens, rope),
                  XType::kActivation);
  AddCopy(f, "dkey nope into the kv gradient",
          Cols(tokens * heads, qk, 0, nope),
          Cols(tokens * heads, kv_row, 0, nope), act, act);

  AddAxpy(f, "tiny", 0.7f, Dense(5, 7), Dense(5, 7));
  AddAxpy(f, "misaligned", -1.25f, Cols(17, 40, 3, 29), Cols(17, 37, 5, 29));
  AddAxpy(f, "one row", 1.f, Dense(1, m.index_topk), Dense(1, m.index_topk));
  AddAxpy(f, "dkey nope", 1.f, Cols(tokens * heads, qk, 0, nope),
          Cols(tokens * heads, kv_row, 0, nope));
  AddAxpy(f, "indexer weights", 1.f / std::sqrt(float(m.index_n_heads)),
          Dense(tokens, m.index_n_heads), Dense(tokens, m.index_n_heads));
}

// ---- rows ----

// Ids for `n` rows of a `vocab`-row table: a tenth of them one hot id, a
// fifth from 16 warm ones, the rest uniform (so some rows are hit many times
// and most by none).
std::vector<int32_t> SkewedIds(int64_t n, int64_t vocab, std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> any(0, vocab - 1), warm(0, 15);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) {
    const double p = u(rng);
    id = static_cast<int32_t>(p < 0.1   ? 17 % vocab
                              : p < 0.3 ? (101 + 7 * warm(rng)) % vocab
                                        : any(rng));
  }
  return ids;
}

// An expert's token list: `count` distinct tokens of [0, tokens), ascending
// (as the dispatch builds it).
std::vector<int32_t> ExpertTokens(int64_t tokens, int64_t count,
                                  std::mt19937_64& rng) {
  std::vector<int32_t> chosen = Sample(0, tokens - 1, count, rng);
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

using IdMaker = std::function<std::vector<int32_t>(std::mt19937_64&)>;

// type kActivation: table and out in the activation type (the MoE's gather
// of its experts' input rows).
void AddEmbedding(Factories& f, const std::string& tag, Layout table,
                  Layout out, IdMaker ids, XType type = XType::kF32) {
  const std::string label =
      absl::StrCat(tag, " table", Dims(table), " out", Dims(out));
  const std::string op = ActivationOp("EmbeddingForward", "in", type);
  f.push_back({op, label, [=] {
                 CaseBuilder b(op, label);
                 const int it = b.Input("table", table),
                           ii = b.Ints("ids", ids(b.rng())),
                           io = b.Written("out", out);
                 return b.Build([=](Backend& be, const Bound& p) {
                   Tensor holder;
                   const ConstMatrixView t =
                       AsActivation(be, type, p.View(it), &holder);
                   IntoActivation(be, type, p.View(io), [&](MatrixView o) {
                     be.EmbeddingForward(t, p.Ints(ii), o);
                   });
                   return 0.0;
                 });
               }});
}

void AddEmbeddingBackward(Factories& f, const std::string& tag, Layout dout,
                          Layout dtable, IdMaker ids) {
  const std::string label =
      absl::StrCat(tag, " dout", Dims(dout), " dtable", Dims(dtable));
  f.push_back({"EmbeddingBackward", label, [=] {
                 CaseBuilder b("EmbeddingBackward", label);
                 const int id = b.Input("dout", dout),
                           ii = b.Ints("ids", ids(b.rng())),
                           it = b.Accumulated("dtable", dtable);
                 return b.Build([=](Backend& be, const Bound& p) {
                   be.EmbeddingBackward(p.View(id), p.Ints(ii), p.View(it));
                   return 0.0;
                 });
               }});
}

// src_type kActivation: src in the activation type (the experts' outputs).
void AddScatter(Factories& f, const std::string& tag, Layout src, Layout out,
                bool scaled, IdMaker rows, XType src_type = XType::kF32) {
  const std::string label = absl::StrCat(tag, " src", Dims(src), " out",
                                         Dims(out), scaled ? "" : " no scale");
  const std::string op = ActivationOp("ScatterAddRows", "from", src_type);
  f.push_back(
      {op, label, [=] {
         CaseBuilder b(op, label);
         const int is = b.Input("src", src), ir = b.Ints("rows", rows(b.rng())),
                   ic = scaled ? b.Input("scale", Vec(src.rows)) : -1,
                   io = b.Accumulated("out", out);
         return b.Build([=](Backend& be, const Bound& p) {
           Tensor holder;
           be.ScatterAddRows(AsActivation(be, src_type, p.View(is), &holder),
                             p.Ints(ir), ic >= 0 ? p.Floats(ic) : nullptr,
                             p.View(io));
           return 0.0;
         });
       }});
}

// dscale: a column (rows 0: [src rows, 1]) written at dscale_rows' rows
// (null: in order).
// A random grouping's slots: a permutation of the tokens' per_token slots.
std::vector<int32_t> ShuffledSlots(int64_t tokens, int64_t per_token,
                                   std::mt19937_64& rng) {
  std::vector<int32_t> slots(tokens * per_token);
  for (size_t p = 0; p < slots.size(); ++p) slots[p] = static_cast<int32_t>(p);
  std::shuffle(slots.begin(), slots.end(), rng);
  return slots;
}

void AddTokenRows(Factories& f, const std::string& tag, int64_t tokens,
                  int64_t per_token) {
  const std::string label =
      absl::StrCat(tag, " tokens ", tokens, " per token ", per_token);
  f.push_back({"TokenRows", label, [=] {
                 CaseBuilder b("TokenRows", label);
                 const int is =
                     b.Ints("slots", ShuffledSlots(tokens, per_token, b.rng()));
                 const int io = b.WrittenInts("token rows", tokens * per_token);
                 return b.Build([=](Backend& be, const Bound& p) {
                   be.TokenRows(p.Ints(is), tokens * per_token, per_token,
                                p.Ints(io));
                   return 0.0;
                 });
               }});
}

// A random grouping's slots, and each token's positions in it (TokenRows
// on the CPU): the combine's sources.
struct TokenGrouping {
  std::vector<int32_t> slots, sources;
};
TokenGrouping RandomTokenGrouping(int64_t tokens, int64_t per_token,
                                  std::mt19937_64& rng) {
  TokenGrouping g{ShuffledSlots(tokens, per_token, rng), {}};
  g.sources.resize(g.slots.size());
  cpu::TokenRows(g.slots.data(), static_cast<int64_t>(g.slots.size()),
                 per_token, g.sources.data());
  return g;
}

// The combine by each token's rows.
void AddRowGroupsCase(Factories& f, const std::string& tag, int64_t tokens,
                      int64_t per_token, int64_t cols, bool scaled,
                      XType src_type) {
  const std::string label =
      absl::StrCat(tag, " src[", tokens * per_token, ",", cols, "] out[",
                   tokens, ",", cols, "]", scaled ? "" : " no scale");
  const std::string op = ActivationOp("AddRowGroups", "from", src_type);
  f.push_back(
      {op, label, [=] {
         CaseBuilder b(op, label);
         const TokenGrouping g =
             RandomTokenGrouping(tokens, per_token, b.rng());
         const int is = b.Input("src", Dense(tokens * per_token, cols)),
                   ir = b.Ints("sources", g.sources),
                   ic = scaled ? b.Input("scale", Vec(tokens * per_token)) : -1,
                   io = b.Accumulated("out", Dense(tokens, cols));
         return b.Build([=](Backend& be, const Bound& p) {
           Tensor holder;
           be.AddRowGroups(AsActivation(be, src_type, p.View(is), &holder),
                           p.Ints(ir), per_token,
                           ic >= 0 ? p.Floats(ic) : nullptr, p.View(io));
           return 0.0;
         });
       }});
}

// The combine's gradient token by token, as the MoE's backward runs it: the
// sources from TokenRows on the CPU, dscale written at the grouping's slots.
void AddRowGroupsBackwardCase(Factories& f, const std::string& tag,
                              int64_t tokens, int64_t per_token, int64_t cols,
                              XType src_type) {
  const int64_t count = tokens * per_token;
  const std::string label =
      absl::StrCat(tag, " src[", count, ",", cols, "] dout[", tokens, ",", cols,
                   "] dscale at slots");
  const std::string op = ActivationOp("AddRowGroupsBackward", "in", src_type);
  f.push_back({op, label, [=] {
                 CaseBuilder b(op, label);
                 const TokenGrouping g =
                     RandomTokenGrouping(tokens, per_token, b.rng());
                 const int is = b.Input("src", Dense(count, cols)),
                           ir = b.Ints("sources", g.sources),
                           ic = b.Input("scale", Vec(count)),
                           id = b.Input("dout", Dense(tokens, cols)),
                           ids = b.Written("dsrc", Dense(count, cols)),
                           idc = b.Written("dscale", Dense(count, 1)),
                           idr = b.Ints("slots", g.slots);
                 return b.Build([=](Backend& be, const Bound& p) {
                   Tensor holder;
                   const ConstMatrixView x =
                       AsActivation(be, src_type, p.View(is), &holder);
                   IntoActivation(
                       be, src_type, p.View(ids), [&](MatrixView dsrc) {
                         be.AddRowGroupsBackward(x, p.Ints(ir), per_token,
                                                 p.Floats(ic), p.View(id), dsrc,
                                                 p.View(idc), p.Ints(idr));
                       });
                   return 0.0;
                 });
               }});
}

void AddScatterBackward(Factories& f, const std::string& tag, Layout src,
                        Layout dout, bool scaled, bool want_dsrc,
                        bool want_dscale, Layout dsrc, IdMaker rows,
                        XType src_type = XType::kF32, Layout dscale = {},
                        IdMaker dscale_rows = nullptr) {
  if (dscale.rows == 0) dscale = Dense(src.rows, 1);
  const std::string label = absl::StrCat(
      tag, " src", Dims(src), " dout", Dims(dout), scaled ? "" : " no scale",
      want_dsrc ? "" : " no dsrc", want_dscale ? "" : " no dscale",
      dscale_rows ? absl::StrCat(" dscale", Dims(dscale), " by index") : "");
  const std::string op = ActivationOp("ScatterAddRowsBackward", "in", src_type);
  f.push_back(
      {op, label, [=] {
         CaseBuilder b(op, label);
         const int is = b.Input("src", src), ir = b.Ints("rows", rows(b.rng())),
                   ic = scaled ? b.Input("scale", Vec(src.rows)) : -1,
                   id = b.Input("dout", dout),
                   ids = want_dsrc ? b.Written("dsrc", dsrc) : -1,
                   idc = want_dscale ? b.Written("dscale", dscale) : -1,
                   idr = dscale_rows
                             ? b.Ints("dscale rows", dscale_rows(b.rng()))
                             : -1;
         return b.Build([=](Backend& be, const Bound& p) {
           Tensor holder;
           const ConstMatrixView x =
               AsActivation(be, src_type, p.View(is), &holder);
           IntoActivation(be, src_type, ids >= 0 ? p.View(ids) : MatrixView{},
                          [&](MatrixView dsrc) {
                            be.ScatterAddRowsBackward(
                                x, p.Ints(ir), ic >= 0 ? p.Floats(ic) : nullptr,
                                p.View(id), dsrc,
                                idc >= 0 ? p.View(idc) : MatrixView{},
                                idr >= 0 ? p.Ints(idr) : nullptr);
                          });
           return 0.0;
         });
       }});
}

void AddRowsCases(Factories& f) {
  const ModelConfig& m = Mini();
  const int64_t hidden = m.hidden_size, vocab = m.vocab_size, tokens = 4096,
                slots = tokens * m.num_experts_per_tok;
  // Repeated rows, and rows 2, 4 and 6 hit by none.
  const IdMaker tiny = [](std::mt19937_64&) {
    return std::vector<int32_t>{3, 0, 3, 5, 1, 3};
  };
  const IdMaker skewed = [=](std::mt19937_64& rng) {
    return SkewedIds(tokens, vocab, rng);
  };
  const IdMaker expert_slots = [=](std::mt19937_64& rng) {
    return ExpertTokens(slots, 1000, rng);
  };
  AddEmbedding(f, "tiny", Dense(6, 4), Dense(6, 4), tiny);
  AddEmbedding(f, "strided", Cols(9, 8, 1, 5), Cols(6, 9, 2, 5), tiny);
  AddEmbedding(f, "vocab", Dense(vocab, hidden), Dense(tokens, hidden), skewed);
  AddEmbedding(f, "expert weights by slot", Dense(slots, 1), Dense(1000, 1),
               expert_slots);
  // An expert's input rows: each of 1000 rows one of the 4096 tokens.
  const IdMaker expert_tokens = [=](std::mt19937_64& rng) {
    return ExpertTokens(tokens, 1000, rng);
  };
  AddEmbedding(f, "expert inputs", Dense(tokens, hidden), Dense(1000, hidden),
               expert_tokens, XType::kActivation);

  AddEmbeddingBackward(f, "tiny", Dense(6, 4), Dense(7, 4), tiny);
  AddEmbeddingBackward(f, "strided", Cols(6, 9, 2, 5), Cols(9, 8, 1, 5), tiny);
  AddEmbeddingBackward(f, "vocab", Dense(tokens, hidden), Dense(vocab, hidden),
                       skewed);

  const IdMaker all_tokens = [=](std::mt19937_64& rng) {
    return ExpertTokens(tokens, tokens, rng);
  };
  const IdMaker some_tokens = [=](std::mt19937_64& rng) {
    return ExpertTokens(tokens, 1000, rng);
  };
  const IdMaker no_tokens = [](std::mt19937_64&) {
    return std::vector<int32_t>{};
  };
  // 4096 sources onto 8 rows: each destination row sums ~512 of them.
  const IdMaker hot = [=](std::mt19937_64& rng) {
    std::uniform_int_distribution<int32_t> row(0, 7);
    std::vector<int32_t> rows(tokens);
    for (int32_t& r : rows) r = row(rng);
    return rows;
  };
  AddScatter(f, "tiny", Dense(6, 4), Dense(7, 4), true, tiny);
  AddScatter(f, "tiny", Dense(6, 4), Dense(7, 4), false, tiny);
  AddScatter(f, "strided", Cols(6, 9, 2, 5), Cols(7, 8, 1, 5), true, tiny);
  AddScatter(f, "expert of every token", Dense(tokens, hidden),
             Dense(tokens, hidden), true, all_tokens);
  AddScatter(f, "expert of no token", Dense(0, hidden), Dense(tokens, hidden),
             true, no_tokens);
  AddScatter(f, "expert of 1000 tokens", Dense(1000, hidden),
             Dense(tokens, hidden), true, some_tokens);
  AddScatter(f, "hot rows", Dense(tokens, hidden), Dense(8, hidden), true, hot);
  AddScatter(f, "expert dweight by slot", Dense(1000, 1), Dense(slots, 1),
             false, expert_slots);
  // The MoE's combine: every token's top-k rows, grouped by expert (here in
  // random order), onto the tokens; and the routing weights' gradients onto
  // every slot (a permutation of one-column rows).
  const int64_t top_k = m.num_experts_per_tok;
  const IdMaker routed_tokens = [=](std::mt19937_64& rng) {
    std::vector<int32_t> rows(slots);
    for (int64_t i = 0; i < slots; ++i)
      rows[i] = static_cast<int32_t>(i / top_k);
    std::shuffle(rows.begin(), rows.end(), rng);
    return rows;
  };
  const IdMaker every_slot = [=](std::mt19937_64& rng) {
    std::vector<int32_t> rows(slots);
    std::iota(rows.begin(), rows.end(), 0);
    std::shuffle(rows.begin(), rows.end(), rng);
    return rows;
  };
  AddScatter(f, "top-k combine", Dense(slots, hidden), Dense(tokens, hidden),
             true, routed_tokens, XType::kActivation);
  AddScatter(f, "top-k combine", Dense(slots, hidden), Dense(tokens, hidden),
             false, routed_tokens);
  AddScatter(f, "dweight onto every slot", Dense(slots, 1), Dense(slots, 1),
             false, every_slot);

  AddScatterBackward(f, "tiny", Dense(6, 4), Dense(7, 4), true, true, true,
                     Dense(6, 4), tiny);
  AddScatterBackward(f, "tiny", Dense(6, 4), Dense(7, 4), false, true, false,
                     Dense(6, 4), tiny);
  AddScatterBackward(f, "strided", Cols(6, 9, 2, 5), Cols(7, 8, 1, 5), true,
                     true, true, Cols(6, 11, 3, 5), tiny);
  AddScatterBackward(f, "expert of 1000 tokens", Dense(1000, hidden),
                     Dense(tokens, hidden), true, true, true,
                     Dense(1000, hidden), some_tokens);
  AddScatterBackward(f, "expert of no token", Dense(0, hidden),
                     Dense(tokens, hidden), true, true, true, Dense(0, hidden),
                     no_tokens);
  AddScatterBackward(f, "expert of 1000 tokens", Dense(1000, hidden),
                     Dense(tokens, hidden), true, false, true, {}, some_tokens);
  AddScatterBackward(f, "hot rows", Dense(tokens, hidden), Dense(8, hidden),
                     true, true, true, Dense(tokens, hidden), hot);

  // The routed experts' outputs in the activation type, combined onto their
  // tokens as the MoE layers do: every token's top-k rows, grouped by expert
  // (a shuffle of the tokens, each top-k times).
  const IdMaker combine = [=](std::mt19937_64& rng) {
    std::vector<int32_t> rows(slots);
    for (int64_t i = 0; i < slots; ++i)
      rows[i] = static_cast<int32_t>(i % tokens);
    std::shuffle(rows.begin(), rows.end(), rng);
    return rows;
  };
  const XType act = XType::kActivation;
  AddScatter(f, "tiny", Dense(6, 4), Dense(7, 4), true, tiny, act);
  AddScatter(f, "strided", Cols(6, 9, 2, 5), Cols(7, 8, 1, 5), true, tiny, act);
  AddScatter(f, "combine", Dense(slots, hidden), Dense(tokens, hidden), true,
             combine, act);
  AddScatterBackward(f, "tiny", Dense(6, 4), Dense(7, 4), true, true, true,
                     Dense(6, 4), tiny, act);
  AddScatterBackward(f, "strided", Cols(6, 9, 2, 5), Cols(7, 8, 1, 5), true,
                     true, true, Cols(6, 11, 3, 5), tiny, act);
  AddScatterBackward(f, "combine", Dense(slots, hidden), Dense(tokens, hidden),
                     true, true, true, Dense(slots, hidden), combine, act);
  AddTokenRows(f, "tiny", 3, 2);
  AddTokenRows(f, "glm5.2-mini", tokens, m.num_experts_per_tok);
  for (const XType type : {XType::kF32, act}) {
    AddRowGroupsCase(f, "tiny", 3, 2, 4, true, type);
    AddRowGroupsCase(f, "odd width", 5, 3, 7, false, type);
    AddRowGroupsCase(f, "glm5.2-mini", tokens, m.num_experts_per_tok, hidden,
                     true, type);
    AddRowGroupsBackwardCase(f, "tiny", 3, 2, 4, type);
    AddRowGroupsBackwardCase(f, "odd width", 5, 3, 7, type);
    AddRowGroupsBackwardCase(f, "glm5.2-mini", tokens, m.num_experts_per_tok,
                             hidden, type);
  }
  // The routing weights' gradients written at their slots (a permutation),
  // as the MoE's backward asks: into a strided column, and at the mini
  // shape.
  const IdMaker tiny_slots = [](std::mt19937_64&) {
    return std::vector<int32_t>{4, 0, 5, 2, 1, 3};
  };
  AddScatterBackward(f, "tiny", Dense(6, 4), Dense(7, 4), true, true, true,
                     Dense(6, 4), tiny, act, Cols(6, 3, 1, 1), tiny_slots);
  AddScatterBackward(f, "combine", Dense(slots, hidden), Dense(tokens, hidden),
                     true, true, true, Dense(slots, hidden), combine, act,
                     Dense(slots, 1), [=](std::mt19937_64& rng) {
                       std::vector<int32_t> order(slots);
                       for (int64_t i = 0; i < slots; ++i)
                         order[i] = static_cast<int32_t>(i);
                       std::shuffle(order.begin(), order.end(), rng);
                       return order;
                     });
  // 260 quads a row: the last step reaches four lanes only.
  AddScatterBackward(
      f, "a last step of four lanes", Dense(300, 1040), Dense(tokens, 1040),
      true, true, true, Dense(300, 1040),
      [=](std::mt19937_64& rng) { return ExpertTokens(tokens, 300, rng); },
      act);
}

// ---- normalization ----

// y_type kActivation: y in the backend's activation type (a dense y).
void AddRmsNorm(Factories& f, const std::string& tag, Layout x, Layout y,
                float eps, XType y_type = XType::kF32) {
  const std::string label =
      absl::StrCat(tag, " x", Dims(x), " y", Dims(y), " eps ", eps);
  const std::string op = ActivationOp("RmsNormForward", "to", y_type);
  f.push_back({op, label, [=] {
                 CaseBuilder b(op, label);
                 const int ix = b.Input("x", x), iw = b.Input("w", Vec(x.cols)),
                           iy = b.Written("y", y),
                           ir = b.Written("rstd", Vec(x.rows));
                 return b.Build([=](Backend& be, const Bound& p) {
                   auto norm = [&](MatrixView out) {
                     be.RmsNormForward(p.View(ix), p.Floats(iw), eps, out,
                                       p.Floats(ir));
                   };
                   IntoActivation(be, y_type, p.View(iy), norm);
                   return 0.0;
                 });
               }});
}

// With a residual (dx = residual + the input gradient), dx is written.
void AddRmsNormBackward(Factories& f, const std::string& tag, Layout x,
                        Layout dy, bool want_dx, bool want_dw, Layout dx,
                        float eps, bool with_residual = false) {
  const std::string label =
      absl::StrCat(tag, " x", Dims(x), " dy", Dims(dy), " eps ", eps,
                   want_dx ? "" : " no dx", want_dw ? "" : " no dw",
                   with_residual ? " residual" : "");
  f.push_back({"RmsNormBackward", label, [=] {
                 CaseBuilder b("RmsNormBackward", label);
                 const int ix = b.Input("x", x), iw = b.Input("w", Vec(x.cols));
                 std::vector<float> y(x.rows * x.cols + 1), rstd(x.rows + 1);
                 CpuReference().RmsNormForward(
                     b.HostView(ix), b.HostView(iw).data, eps,
                     {y.data(), x.rows, x.cols, x.cols}, rstd.data());
                 const int ir = b.Values("rstd", Vec(x.rows), rstd),
                           idy = b.Input("dy", dy),
                           ires = with_residual ? b.Input("residual", dx) : -1,
                           idx = !want_dx        ? -1
                                 : with_residual ? b.Written("dx", dx)
                                                 : b.Accumulated("dx", dx),
                           idw =
                               want_dw ? b.Accumulated("dw", Vec(x.cols)) : -1;
                 return b.Build([=](Backend& be, const Bound& p) {
                   be.RmsNormBackward(
                       p.View(ix), p.Floats(iw), p.Floats(ir), p.View(idy),
                       ires >= 0 ? p.View(ires) : ConstMatrixView{},
                       idx >= 0 ? p.View(idx) : MatrixView{},
                       idw >= 0 ? p.Floats(idw) : nullptr);
                   return 0.0;
                 });
               }});
}

void AddLayerNorm(Factories& f, const std::string& tag, Layout x, Layout y,
                  float eps) {
  const std::string label =
      absl::StrCat(tag, " x", Dims(x), " y", Dims(y), " eps ", eps);
  f.push_back({"LayerNormForward", label, [=] {
                 CaseBuilder b("LayerNormForward", label);
                 const int ix = b.Input("x", x), iw = b.Input("w", Vec(x.cols)),
                           ib = b.Input("b", Vec(x.cols)),
                           iy = b.Written("y", y),
                           im = b.Written("mean", Vec(x.rows)),
                           ir = b.Written("rstd", Vec(x.rows));
                 return b.Build([=](Backend& be, const Bound& p) {
                   be.LayerNormForward(p.View(ix), p.Floats(iw), p.Floats(ib),
                                       eps, p.View(iy), p.Floats(im),
                                       p.Floats(ir));
                   return 0.0;
                 });
               }});
}

void AddLayerNormBackward(Factories& f, const std::string& tag, Layout x,
                          Layout dy, bool want_dx, bool want_dwb, Layout dx,
                          float eps) {
  const std::string label =
      absl::StrCat(tag, " x", Dims(x), " dy", Dims(dy), " eps ", eps,
                   want_dx ? "" : " no dx", want_dwb ? "" : " no dw db");
  f.push_back(
      {"LayerNormBackward", label, [=] {
         CaseBuilder b("LayerNormBackward", label);
         const int ix = b.Input("x", x), iw = b.Input("w", Vec(x.cols)),
                   ib = b.Input("b", Vec(x.cols));
         std::vector<float> y(x.rows * x.cols + 1), mean(x.rows + 1),
             rstd(x.rows + 1);
         CpuReference().LayerNormForward(
             b.HostView(ix), b.HostView(iw).data, b.HostView(ib).data, eps,
             {y.data(), x.rows, x.cols, x.cols}, mean.data(), rstd.data());
         const int im = b.Values("mean", Vec(x.rows), mean),
                   ir = b.Values("rstd", Vec(x.rows), rstd),
                   idy = b.Input("dy", dy),
                   idx = want_dx ? b.Accumulated("dx", dx) : -1,
                   idw = want_dwb ? b.Accumulated("dw", Vec(x.cols)) : -1,
                   idb = want_dwb ? b.Accumulated("db", Vec(x.cols)) : -1;
         return b.Build([=](Backend& be, const Bound& p) {
           be.LayerNormBackward(p.View(ix), p.Floats(iw), p.Floats(im),
                                p.Floats(ir), p.View(idy),
                                idx >= 0 ? p.View(idx) : MatrixView{},
                                idw >= 0 ? p.Floats(idw) : nullptr,
                                idb >= 0 ? p.Floats(idb) : nullptr);
           return 0.0;
         });
       }});
}

void AddNormCases(Factories& f) {
  const ModelConfig& m = Mini();
  const int64_t hidden = m.hidden_size, lora = m.kv_lora_rank,
                kv_a = m.kv_lora_rank + m.qk_rope_head_dim,
                index_dim = m.index_head_dim, tokens = 4096;
  const float eps = static_cast<float>(m.rms_norm_eps), lora_eps = 1e-6f;
  AddRmsNorm(f, "tiny", Dense(5, 8), Dense(5, 8), eps);
  AddRmsNorm(f, "one row", Dense(1, 7), Dense(1, 7), eps);
  AddRmsNorm(f, "odd", Dense(3, 1000), Dense(3, 1000), eps);
  AddRmsNorm(f, "misaligned", Cols(33, 70, 3, 61), Cols(33, 64, 1, 61), eps);
  AddRmsNorm(f, "kv latent", Cols(tokens, kv_a, 0, lora), Dense(tokens, lora),
             lora_eps);
  AddRmsNorm(f, "q_a", Dense(tokens, m.q_lora_rank),
             Dense(tokens, m.q_lora_rank), lora_eps);
  AddRmsNorm(f, "hidden", Dense(tokens, hidden), Dense(tokens, hidden), eps);
  AddRmsNorm(f, "tiny", Dense(5, 8), Dense(5, 8), eps, XType::kActivation);
  AddRmsNorm(f, "odd", Dense(3, 1000), Dense(3, 1000), eps, XType::kActivation);
  AddRmsNorm(f, "kv latent", Cols(tokens, kv_a, 0, lora), Dense(tokens, lora),
             lora_eps, XType::kActivation);
  AddRmsNorm(f, "hidden", Dense(tokens, hidden), Dense(tokens, hidden), eps,
             XType::kActivation);

  AddRmsNormBackward(f, "tiny", Dense(5, 8), Dense(5, 8), true, true,
                     Dense(5, 8), eps);
  AddRmsNormBackward(f, "misaligned", Cols(33, 70, 3, 61), Cols(33, 64, 1, 61),
                     true, true, Cols(33, 66, 5, 61), eps);
  AddRmsNormBackward(f, "kv latent", Cols(tokens, kv_a, 0, lora),
                     Dense(tokens, lora), true, true,
                     Cols(tokens, kv_a, 0, lora), lora_eps);
  AddRmsNormBackward(f, "hidden", Dense(tokens, hidden), Dense(tokens, hidden),
                     true, true, Dense(tokens, hidden), eps);
  AddRmsNormBackward(f, "hidden", Dense(tokens, hidden), Dense(tokens, hidden),
                     false, true, {}, eps);
  AddRmsNormBackward(f, "hidden", Dense(tokens, hidden), Dense(tokens, hidden),
                     true, false, Dense(tokens, hidden), eps);
  // A residual branch's gradient joined in: rows held in registers with the
  // weight gradient's partials (the last block of rows partial: 4,091 rows),
  // and the one-element path.
  AddRmsNormBackward(f, "hidden", Dense(tokens - 5, hidden),
                     Dense(tokens - 5, hidden), true, true,
                     Dense(tokens - 5, hidden), eps, /*with_residual=*/true);
  AddRmsNormBackward(f, "tiny", Dense(5, 8), Dense(5, 8), true, true,
                     Dense(5, 8), eps, /*with_residual=*/true);
  AddRmsNormBackward(f, "misaligned", Cols(33, 70, 3, 61), Cols(33, 64, 1, 61),
                     true, true, Cols(33, 66, 5, 61), eps,
                     /*with_residual=*/true);

  AddLayerNorm(f, "tiny", Dense(5, 8), Dense(5, 8), 1e-6f);
  AddLayerNorm(f, "misaligned", Cols(33, 70, 3, 61), Cols(33, 64, 1, 61),
               1e-6f);
  AddLayerNorm(f, "wide", Dense(64, 4000), Dense(64, 4000), 1e-5f);
  AddLayerNorm(f, "indexer k_norm", Dense(tokens, index_dim),
               Dense(tokens, index_dim), 1e-6f);

  AddLayerNormBackward(f, "tiny", Dense(5, 8), Dense(5, 8), true, true,
                       Dense(5, 8), 1e-6f);
  AddLayerNormBackward(f, "misaligned", Cols(33, 70, 3, 61),
                       Cols(33, 64, 1, 61), true, true, Cols(33, 66, 5, 61),
                       1e-6f);
  AddLayerNormBackward(f, "indexer k_norm", Dense(tokens, index_dim),
                       Dense(tokens, index_dim), true, true,
                       Dense(tokens, index_dim), 1e-6f);
  AddLayerNormBackward(f, "indexer k_norm", Dense(tokens, index_dim),
                       Dense(tokens, index_dim), true, false,
                       Dense(tokens, index_dim), 1e-6f);
  AddLayerNormBackward(f, "indexer k_norm", Dense(tokens, index_dim),
                       Dense(tokens, index_dim), false, true, {}, 1e-6f);
}

// ---- activations ----

// gate and up are columns [0, cols) and [cols, 2 cols) of one [rows, 2 cols]
// buffer, as the MLPs keep them; gate values spread wider to reach the
// sigmoid's tails.
// The op a SwiGLU case runs as: its inputs (gate, up; dout in the backward)
// in the activation type as well as its outputs, or only its outputs.
std::string SwiGluOp(const char* op, XType out_type, XType in_type) {
  return in_type == XType::kActivation ? absl::StrCat(op, " in activation type")
                                       : ActivationOp(op, "to", out_type);
}

// in_type kActivation: gate and up too (out_type kActivation).
void AddSwiGlu(Factories& f, const std::string& tag, int64_t rows, int64_t cols,
               XType out_type = XType::kF32, XType in_type = XType::kF32) {
  const std::string label = absl::StrCat(tag, " gate_up[", rows, ",", 2 * cols,
                                         "] out[", rows, ",", cols, "]");
  const std::string op = SwiGluOp("SwiGluForward", out_type, in_type);
  f.push_back(
      {op, label, [=] {
         CaseBuilder b(op, label);
         const int ig = b.Input("gate", Cols(rows, 2 * cols, 0, cols), 3.f),
                   iu = b.Input("up", Cols(rows, 2 * cols, cols, cols)),
                   io = b.Written("out", Dense(rows, cols));
         return b.Build([=](Backend& be, const Bound& p) {
           Tensor gate_holder, up_holder;
           const ConstMatrixView gate = AsActivation(be, in_type, p.View(ig),
                                                     &gate_holder),
                                 up = AsActivation(be, in_type, p.View(iu),
                                                   &up_holder);
           auto swiglu = [&](MatrixView out) {
             be.SwiGluForward(gate, up, out);
           };
           IntoActivation(be, out_type, p.View(io), swiglu);
           return 0.0;
         });
       }});
}

// dgate and dup are the two column halves of one [rows, 2 cols] buffer.
// type kActivation: dgate and dup in the activation type; in_type
// kActivation: gate, up and dout too (type kActivation).
void AddSwiGluBackward(Factories& f, const std::string& tag, int64_t rows,
                       int64_t cols, bool want_dgate, bool want_dup,
                       XType type = XType::kF32, XType in_type = XType::kF32) {
  const std::string label =
      absl::StrCat(tag, " gate_up[", rows, ",", 2 * cols, "]",
                   want_dgate ? "" : " no dgate", want_dup ? "" : " no dup");
  const std::string op = SwiGluOp("SwiGluBackward", type, in_type);
  f.push_back(
      {op, label, [=] {
         CaseBuilder b(op, label);
         const Layout gate = Cols(rows, 2 * cols, 0, cols),
                      up = Cols(rows, 2 * cols, cols, cols);
         const int ig = b.Input("gate", gate, 3.f), iu = b.Input("up", up),
                   id = b.Input("dout", Dense(rows, cols)),
                   idg = want_dgate ? b.Written("dgate", gate) : -1,
                   idu = want_dup ? b.Written("dup", up) : -1;
         return b.Build([=](Backend& be, const Bound& p) {
           const std::vector<MatrixView> grads = {
               idg >= 0 ? p.View(idg) : MatrixView{},
               idu >= 0 ? p.View(idu) : MatrixView{}};
           Tensor holders[3];
           const ConstMatrixView gate = AsActivation(be, in_type, p.View(ig),
                                                     &holders[0]),
                                 up = AsActivation(be, in_type, p.View(iu),
                                                   &holders[1]),
                                 dout = AsActivation(be, in_type, p.View(id),
                                                     &holders[2]);
           auto backward = [&](const std::vector<MatrixView>& g) {
             be.SwiGluBackward(gate, up, dout, g[0], g[1]);
           };
           IntoActivations(be, type, grads, backward);
           return 0.0;
         });
       }});
}

void AddActivationCases(Factories& f) {
  const ModelConfig& m = Mini();
  const int64_t moe = m.moe_intermediate_size, inter = m.intermediate_size;
  AddSwiGlu(f, "tiny", 4, 6);
  AddSwiGlu(f, "odd", 37, 45);
  AddSwiGlu(f, "expert", 1000, moe);
  AddSwiGlu(f, "dense mlp", 2048, inter);
  AddSwiGlu(f, "tiny", 4, 6, XType::kActivation);
  AddSwiGlu(f, "odd", 37, 45, XType::kActivation);
  AddSwiGlu(f, "expert", 1000, moe, XType::kActivation);
  AddSwiGluBackward(f, "tiny", 4, 6, true, true);
  AddSwiGluBackward(f, "odd", 37, 45, true, true);
  AddSwiGluBackward(f, "expert", 1000, moe, true, true);
  AddSwiGluBackward(f, "expert", 1000, moe, false, true);
  AddSwiGluBackward(f, "expert", 1000, moe, true, false);
  AddSwiGluBackward(f, "dense mlp", 2048, inter, true, true);
  AddSwiGluBackward(f, "tiny", 4, 6, true, true, XType::kActivation);
  AddSwiGluBackward(f, "expert", 1000, moe, true, true, XType::kActivation);
  AddSwiGluBackward(f, "expert", 1000, moe, false, true, XType::kActivation);
  // As the MLPs run in the bf16 mode: gate_up from the products in the
  // activation type (the routed experts' dout too).
  const XType act = XType::kActivation;
  AddSwiGlu(f, "tiny", 4, 6, act, act);
  AddSwiGlu(f, "odd", 37, 45, act, act);
  AddSwiGlu(f, "expert", 1000, moe, act, act);
  AddSwiGlu(f, "dense mlp", 2048, inter, act, act);
  AddSwiGluBackward(f, "tiny", 4, 6, true, true, act, act);
  AddSwiGluBackward(f, "odd", 37, 45, true, true, act, act);
  AddSwiGluBackward(f, "expert", 1000, moe, true, true, act, act);
  AddSwiGluBackward(f, "dense mlp", 2048, inter, true, true, act, act);
}

// ---- rotary embedding ----

// Positions of `tokens` tokens packed from documents of `doc` tokens (the
// last one shorter), each counting from 0.
std::vector<int32_t> PackedPositions(int64_t tokens, int64_t doc) {
  std::vector<int32_t> pos(tokens);
  for (int64_t t = 0; t < tokens; ++t) pos[t] = static_cast<int32_t>(t % doc);
  return pos;
}

// Positions spread over the model's whole range.
std::vector<int32_t> FarPositions(int64_t tokens, int64_t max,
                                  std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> pos(0, static_cast<int32_t>(max - 1));
  std::vector<int32_t> out(tokens);
  for (int32_t& p : out) p = pos(rng);
  return out;
}

using PositionMaker = std::function<std::vector<int32_t>(std::mt19937_64&)>;

void AddRope(Factories& f, const std::string& tag, Layout x, Layout y,
             int64_t rows_per_position, float theta, PositionMaker positions,
             XType y_type = XType::kF32) {
  const std::string label =
      absl::StrCat(tag, " x", Dims(x), " y", Dims(y), " rows/pos ",
                   rows_per_position, " theta ", theta);
  const std::string op = ActivationOp("RopeForward", "to", y_type);
  f.push_back({op, label, [=] {
                 CaseBuilder b(op, label);
                 const int ix = b.Input("x", x),
                           ip = b.Ints("positions", positions(b.rng())),
                           iy = b.Written("y", y);
                 return b.Build([=](Backend& be, const Bound& p) {
                   auto rope = [&](MatrixView out) {
                     be.RopeForward(p.View(ix), p.Ints(ip), rows_per_position,
                                    theta, out);
                   };
                   IntoActivation(be, y_type, p.View(iy), rope);
                   return 0.0;
                 });
               }});
}

// type kActivation: dy and dx in the activation type.
void AddRopeBackward(Factories& f, const std::string& tag, Layout dy, Layout dx,
                     int64_t rows_per_position, float theta,
                     PositionMaker positions, XType type = XType::kF32) {
  const std::string label =
      absl::StrCat(tag, " dy", Dims(dy), " dx", Dims(dx), " rows/pos ",
                   rows_per_position, " theta ", theta);
  const std::string op = ActivationOp("RopeBackward", "in", type);
  f.push_back({op, label, [=] {
                 CaseBuilder b(op, label);
                 const int id = b.Input("dy", dy),
                           ip = b.Ints("positions", positions(b.rng())),
                           ix = b.Written("dx", dx);
                 return b.Build([=](Backend& be, const Bound& p) {
                   Tensor holder;
                   const ConstMatrixView dyv =
                       AsActivation(be, type, p.View(id), &holder);
                   auto backward = [&](MatrixView out) {
                     be.RopeBackward(dyv, p.Ints(ip), rows_per_position, theta,
                                     out);
                   };
                   IntoActivation(be, type, p.View(ix), backward);
                   return 0.0;
                 });
               }});
}

void AddRopeCases(Factories& f) {
  const ModelConfig& m = Mini();
  const int64_t heads = m.num_attention_heads, qk = m.QkHeadDim(),
                nope = m.qk_nope_head_dim, rope = m.qk_rope_head_dim,
                kv_a = m.kv_lora_rank + m.qk_rope_head_dim,
                index_heads = m.index_n_heads, index_dim = m.index_head_dim,
                tokens = 4096;
  const float theta = static_cast<float>(m.rope_theta);
  const PositionMaker tiny = [](std::mt19937_64&) {
    return std::vector<int32_t>{0, 5, 17};
  };
  // Two documents: 3000 tokens, then 1096.
  const PositionMaker packed = [=](std::mt19937_64&) {
    return PackedPositions(tokens, 3000);
  };
  const PositionMaker far = [=](std::mt19937_64& rng) {
    return FarPositions(64, m.max_position_embeddings, rng);
  };
  const PositionMaker odd = [](std::mt19937_64& rng) {
    return FarPositions(11, 70000, rng);
  };
  const Layout q_rope = Cols(tokens * heads, qk, nope, rope),
               k_rope = Cols(tokens, kv_a, m.kv_lora_rank, rope),
               index_q = Cols(tokens * index_heads, index_dim, 0, rope);
  AddRope(f, "tiny", Dense(6, 8), Dense(6, 8), 2, 100.f, tiny);
  AddRope(f, "misaligned", Cols(33, 9, 1, 6), Cols(33, 7, 1, 6), 3, 1e4f, odd);
  // The last position's rows cut short (7 rows, 3 a position).
  AddRope(f, "short last group", Dense(7, 8), Dense(7, 8), 3, 100.f, tiny);
  AddRope(f, "far positions", Dense(64, rope), Dense(64, rope), 1, theta, far);
  AddRope(f, "q", q_rope, q_rope, heads, theta, packed);
  AddRope(f, "k", k_rope, Dense(tokens, rope), 1, theta, packed);
  AddRope(f, "indexer q", index_q, index_q, index_heads, theta, packed);
  AddRope(f, "tiny", Dense(6, 8), Dense(6, 8), 2, 100.f, tiny,
          XType::kActivation);
  AddRope(f, "misaligned", Cols(33, 9, 1, 6), Cols(33, 7, 1, 6), 3, 1e4f, odd,
          XType::kActivation);
  AddRope(f, "q into the query", q_rope, q_rope, heads, theta, packed,
          XType::kActivation);

  AddRopeBackward(f, "tiny", Dense(6, 8), Dense(6, 8), 2, 100.f, tiny);
  AddRopeBackward(f, "misaligned", Cols(33, 7, 1, 6), Cols(33, 9, 1, 6), 3,
                  1e4f, odd);
  AddRopeBackward(f, "short last group", Dense(7, 8), Dense(7, 8), 3, 100.f,
                  tiny);
  AddRopeBackward(f, "far positions", Dense(64, rope), Dense(64, rope), 1,
                  theta, far);
  AddRopeBackward(f, "q", q_rope, q_rope, heads, theta, packed);
  AddRopeBackward(f, "k", Dense(tokens, rope), k_rope, 1, theta, packed);
  AddRopeBackward(f, "tiny", Dense(6, 8), Dense(6, 8), 2, 100.f, tiny,
                  XType::kActivation);
  AddRopeBackward(f, "misaligned", Cols(33, 7, 1, 6), Cols(33, 9, 1, 6), 3,
                  1e4f, odd, XType::kActivation);
  AddRopeBackward(f, "dquery into dq", q_rope, q_rope, heads, theta, packed,
                  XType::kActivation);
}

// ---- router ----

void AddRouter(Factories& f, const std::string& tag, Layout logits,
               const RouterSpec& spec) {
  const std::string label = absl::StrCat(
      tag, " logits", Dims(logits), " top ", spec.top_k, " groups ",
      spec.n_group, "/", spec.topk_group, spec.norm_topk_prob ? " norm" : "",
      " scale ", spec.routed_scaling_factor);
  f.push_back(
      {"RouterForward", label, [=] {
         CaseBuilder b("RouterForward", label);
         const int n = static_cast<int>(logits.rows);
         RouterArgs a{b.Input("logits", logits),
                      b.Input("bias", Vec(logits.cols), 0.1f), 0, 0, spec};
         const int is = b.Written("scores", Dense(n, logits.cols));
         a.weights = b.Written("weights", Dense(n, spec.top_k));
         a.indices = b.WrittenInts("indices", n * spec.top_k);
         b.Special(RouterCheck(a), {a.weights, a.indices});
         return b.Build([=](Backend& be, const Bound& p) {
           be.RouterForward(p.View(a.logits), p.Floats(a.bias), spec,
                            p.View(is), p.View(a.weights), p.Ints(a.indices));
           return 0.0;
         });
       }});
}

// Scores and choices from the CPU's forward on random logits.
void AddRouterBackward(Factories& f, const std::string& tag, int64_t n,
                       int64_t experts, const RouterSpec& spec) {
  const std::string label = absl::StrCat(
      tag, " logits[", n, ",", experts, "] top ", spec.top_k, " groups ",
      spec.n_group, "/", spec.topk_group, spec.norm_topk_prob ? " norm" : "",
      " scale ", spec.routed_scaling_factor);
  f.push_back(
      {"RouterBackward", label, [=] {
         CaseBuilder b("RouterBackward", label);
         const std::vector<float> logits = Normal(n * experts, b.rng()(), 1.f);
         const std::vector<float> bias = Normal(experts, b.rng()(), 0.1f);
         std::vector<float> scores(n * experts), weights(n * spec.top_k);
         std::vector<int32_t> indices(n * spec.top_k);
         CpuReference().RouterForward(
             {logits.data(), n, experts, experts}, bias.data(), spec,
             {scores.data(), n, experts, experts},
             {weights.data(), n, spec.top_k, spec.top_k}, indices.data());
         const int is = b.Values("scores", Dense(n, experts), scores),
                   ii = b.Ints("indices", indices),
                   idw = b.Input("dweights", Dense(n, spec.top_k)),
                   idl = b.Accumulated("dlogits", Dense(n, experts));
         return b.Build([=](Backend& be, const Bound& p) {
           be.RouterBackward(p.View(is), p.Ints(ii), p.View(idw), spec,
                             p.View(idl));
           return 0.0;
         });
       }});
}

void AddRouterCases(Factories& f) {
  const ModelConfig& m = Mini();
  const int64_t experts = m.n_routed_experts;
  const RouterSpec mini{m.num_experts_per_tok, m.n_group, m.topk_group,
                        m.norm_topk_prob,
                        static_cast<float>(m.routed_scaling_factor)};
  const RouterSpec grouped{m.num_experts_per_tok, 8, 4, true, 2.5f};
  const RouterSpec plain{m.num_experts_per_tok, 1, 1, false, 1.5f};
  const RouterSpec tiny_grouped{3, 2, 1, true, 2.5f},
      tiny_plain{2, 1, 1, false, 1.5f};
  AddRouter(f, "tiny", Dense(5, 8), tiny_grouped);
  AddRouter(f, "tiny", Dense(5, 8), tiny_plain);
  AddRouter(f, "strided", Cols(37, 40, 3, experts), mini);
  AddRouter(f, "glm5.2-mini", Dense(4096, experts), mini);
  AddRouter(f, "grouped", Dense(1000, experts), grouped);
  AddRouter(f, "unnormalized", Dense(1000, experts), plain);
  AddRouterBackward(f, "tiny", 5, 8, tiny_grouped);
  AddRouterBackward(f, "glm5.2-mini", 4096, experts, mini);
  AddRouterBackward(f, "grouped", 1000, experts, grouped);
  AddRouterBackward(f, "unnormalized", 1000, experts, plain);
}

// ---- loss ----

// Random targets in [0, vocab), about one in eight -1 (not counted).
std::vector<int32_t> Targets(int64_t n, int64_t vocab, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> target(
      0, static_cast<int32_t>(vocab - 1));
  std::uniform_int_distribution<int> skip(0, 7);
  std::vector<int32_t> out(n);
  for (int32_t& t : out) t = skip(rng) == 0 ? -1 : target(rng);
  return out;
}

// A loss op's value: `op` adds it to a sum in the backend's memory that starts
// at kStart on both backends (so a write instead of an add shows), read back
// less that start.
template <typename Op>
double LossOf(Backend& be, Op op) {
  constexpr double kStart = 0.375;
  TensorStorage<double> start(1, 0.0, nullptr);
  start.data()[0] = kStart;
  TensorStorage<double> sum(1, 0.0, be.allocator());
  sum.CopyFrom(start);
  op(sum.data());
  TensorStorage<double> host(1, 0.0, nullptr);
  host.CopyFrom(sum);
  return host.data()[0] - kStart;
}

void AddCrossEntropy(Factories& f, const std::string& tag, Layout logits) {
  const std::string label = absl::StrCat(tag, " logits", Dims(logits));
  f.push_back(
      {"CrossEntropyForward", label, [=] {
         CaseBuilder b("CrossEntropyForward", label);
         const int il = b.Input("logits", logits, 2.f),
                   it = b.Ints("targets",
                               Targets(logits.rows, logits.cols, b.rng()));
         return b.Build(
             [=](Backend& be, const Bound& p) {
               return LossOf(be, [&](double* sum) {
                 be.CrossEntropyForward(p.View(il), p.Ints(it), 1.0, sum);
               });
             },
             /*returns_loss=*/true);
       }});
}

void AddCrossEntropyBackward(Factories& f, const std::string& tag,
                             Layout logits, Layout dlogits, float scale) {
  const std::string label =
      absl::StrCat(tag, " logits", Dims(logits), " dlogits", Dims(dlogits),
                   " scale ", scale);
  f.push_back(
      {"CrossEntropyBackward", label, [=] {
         CaseBuilder b("CrossEntropyBackward", label);
         const int il = b.Input("logits", logits, 2.f),
                   it = b.Ints("targets",
                               Targets(logits.rows, logits.cols, b.rng())),
                   id = b.Accumulated("dlogits", dlogits);
         return b.Build([=](Backend& be, const Bound& p) {
           be.CrossEntropyBackward(p.View(il), p.Ints(it), scale, p.View(id));
           return 0.0;
         });
       }});
}

// A work buffer an op may leave in any state: its own outcome is not checked
// (the op's results are, in its other outputs).
SpecialCheck WorkBuffer() {
  return [](const Case&, const RunOutput&, const RunOutput&, int) {
    return std::vector<Outcome>{};
  };
}

void AddLinearCrossEntropy(Factories& f, const std::string& tag, int64_t rows,
                           int64_t hidden, int64_t vocab, float scale,
                           XType x_type = XType::kF32) {
  const std::string label = absl::StrCat(
      tag, " x[", rows, ",", hidden, "] w[", vocab, ",", hidden, "]",
      x_type == XType::kActivation ? " x and logits in activation type" : "");
  f.push_back(
      {"LinearCrossEntropy", label, [=] {
         CaseBuilder b("LinearCrossEntropy", label);
         const int ix = b.Input("x", Dense(rows, hidden)),
                   iw = b.Input("w", Dense(vocab, hidden), 0.05f),
                   it = b.Ints("targets", Targets(rows, vocab, b.rng())),
                   il = b.Written("logits", Dense(rows, vocab)),
                   idx = b.Accumulated("dx", Dense(rows, hidden)),
                   idw = b.Accumulated("dw", Dense(vocab, hidden));
         b.Special(WorkBuffer(), {il});
         return b.Build(
             [=](Backend& be, const Bound& p) {
               double loss = 0;
               Tensor holder;
               const ConstMatrixView xv =
                   AsActivation(be, x_type, p.View(ix), &holder);
               // The logits work buffer in x's type, as the model
               // passes it.
               auto run = [&](MatrixView logits) {
                 loss = LossOf(be, [&](double* sum) {
                   be.LinearCrossEntropy(xv, p.View(iw), p.Ints(it),
                                         static_cast<double>(rows), scale,
                                         logits, sum, p.View(idx), p.View(idw));
                 });
               };
               WithWeights(be, p, iw, WeightCopy::kKept, [&] {
                 IntoActivation(be, x_type, p.View(il), run);
               });
               return loss;
             },
             /*returns_loss=*/true);
       }});
}

void AddLossCases(Factories& f) {
  const int64_t vocab = Mini().vocab_size, tokens = 512;
  AddLinearCrossEntropy(f, "tiny", 5, 3, 7, 0.37f);
  AddLinearCrossEntropy(f, "glm5.2-mini", 64, Mini().hidden_size, vocab,
                        1.f / 64);
  AddLinearCrossEntropy(f, "glm5.2-mini", 64, Mini().hidden_size, vocab,
                        1.f / 64, XType::kActivation);
  AddCrossEntropy(f, "tiny", Dense(5, 7));
  AddCrossEntropy(f, "strided", Cols(9, 40, 5, 31));
  AddCrossEntropy(f, "vocab", Dense(tokens, vocab));
  AddCrossEntropyBackward(f, "tiny", Dense(5, 7), Dense(5, 7), 0.37f);
  AddCrossEntropyBackward(f, "strided", Cols(9, 40, 5, 31), Cols(9, 33, 1, 31),
                          0.37f);
  AddCrossEntropyBackward(f, "vocab", Dense(tokens, vocab),
                          Dense(tokens, vocab), 1.f / 448);
}

// ---- optimizer ----

// One tensor of an AdamW case: its inputs (weights, gradient, moments) and
// the outputs the step writes (the weights and moments, updated copies of
// the inputs).
struct AdamWOperands {
  int w, grad, exp_avg, exp_avg_sq;
  int new_w, new_exp_avg, new_exp_avg_sq;
  bool decay;
};

AdamWOperands AddAdamWTensor(CaseBuilder& b, const std::string& name,
                             Layout layout, bool decay) {
  AdamWOperands t;
  t.w = b.Input(name, layout, 0.02f);
  t.grad = b.Input(name + " grad", layout);
  t.exp_avg = b.Input(name + " exp_avg", layout, 0.1f);
  std::vector<float> squares = Normal(layout.size, b.rng()(), 0.1f);
  for (float& x : squares) x *= x;
  t.exp_avg_sq = b.Values(name + " exp_avg_sq", layout, std::move(squares));
  t.new_w = b.Written("new " + name, layout);
  t.new_exp_avg = b.Written("new " + name + " exp_avg", layout);
  t.new_exp_avg_sq = b.Written("new " + name + " exp_avg_sq", layout);
  t.decay = decay;
  return t;
}

// Writes the backend's bf16 copy of the weights `w` (widened to fp32, exact)
// to the device floats `out`, when it keeps one (not the CPU backend or the
// fp32 mode).
void ReadWeightCopy(Backend& be, ConstMatrixView w, float* out) {
  const auto* ctx = dynamic_cast<const cuda::CudaContext*>(&be);
  const __nv_bfloat16* copy = ctx == nullptr ? nullptr : ctx->Bf16WeightCopy(w);
  if (copy == nullptr) return;
  be.Synchronize();
  const int64_t n = w.rows * w.cols;
  std::vector<uint16_t> bits(n);
  GLM_CUDA_CHECK(cudaMemcpy(bits.data(), copy, n * sizeof(uint16_t),
                            cudaMemcpyDeviceToHost));
  std::vector<float> widened(n);
  for (int64_t i = 0; i < n; ++i) widened[i] = Bfloat16ToFloat32(bits[i]);
  GLM_CUDA_CHECK(cudaMemcpy(out, widened.data(), n * sizeof(float),
                            cudaMemcpyHostToDevice));
}

// Whether `got` equals `want` bitwise over `layout`: the elements that differ.
Outcome BitwiseEqual(const std::string& what, const Layout& layout,
                     const std::vector<float>& want,
                     const std::vector<float>& got) {
  Outcome o{what, "mismatch"};
  for (int64_t i = 0; i < layout.size; ++i)
    o.value += Bits(want[i]) != Bits(got[i]);
  o.pass = o.value == 0;
  return o;
}

// The updated weights and moments equal the CPU's bitwise (the CUDA kernel
// repeats the CPU's double operations); in the bf16 mode the copy AdamW
// wrote equals, bitwise, the one a separate refresh writes afterwards.
std::vector<Outcome> CheckAdamW(const Case& c, const RunOutput& cpu,
                                const RunOutput& gpu, int mode,
                                const std::vector<AdamWOperands>& tensors,
                                int fused, int refreshed) {
  std::vector<Outcome> outcomes;
  for (const AdamWOperands& t : tensors) {
    for (int id : {t.new_w, t.new_exp_avg, t.new_exp_avg_sq}) {
      outcomes.push_back(BitwiseEqual(c.operands[id].name,
                                      c.operands[id].layout, cpu.floats[id],
                                      gpu.floats[id]));
    }
  }
  if (mode != ModeIndex(Precision::kBf16)) return outcomes;
  const Layout& layout = c.operands[fused].layout;
  Outcome o = BitwiseEqual("fused copy", layout, gpu.floats[refreshed],
                           gpu.floats[fused]);
  // A copy never read back stays poison on both sides.
  const int64_t unread = std::count_if(
      gpu.floats[fused].begin(), gpu.floats[fused].begin() + layout.size,
      [](float x) { return Bits(x) == kFloatPoison; });
  if (unread > 0) {
    o.pass = false;
    o.note = absl::StrCat(unread, " not written");
  }
  outcomes.push_back(o);
  return outcomes;
}

// One AdamW step of a weight matrix with a kept bf16 copy (more elements
// than a chunk of the multi-tensor kernel) and of a norm weight (no decay,
// no copy). The copy is made before the step from the old weights, so a
// step that does not write it leaves it stale.
void AddAdamW(Factories& f, const std::string& tag, Layout matrix,
              int64_t norm) {
  const std::string label =
      absl::StrCat(tag, " w", Dims(matrix), " norm[", norm, "]");
  f.push_back(
      {"AdamWStep", label, [=] {
         CaseBuilder b("AdamWStep", label);
         const AdamWOperands w = AddAdamWTensor(b, "w", matrix, true);
         const AdamWOperands n = AddAdamWTensor(b, "norm", Vec(norm), false);
         const int fused = b.Written("fused copy", matrix);
         const int refreshed = b.Written("refreshed copy", matrix);
         AdamWHyperparameters hyper;
         hyper.lr = 1e-3;
         hyper.weight_decay = 0.1;
         hyper.grad_scale = 0.5;
         hyper.step = 3;
         b.Special(
             [=](const Case& c, const RunOutput& cpu, const RunOutput& gpu,
                 int mode) {
               return CheckAdamW(c, cpu, gpu, mode, {w, n}, fused, refreshed);
             },
             {w.new_w, w.new_exp_avg, w.new_exp_avg_sq, n.new_w, n.new_exp_avg,
              n.new_exp_avg_sq, fused, refreshed});
         return b.Build([=](Backend& be, const Bound& p) {
           std::vector<AdamWTensor> tensors;
           for (const AdamWOperands& t : {w, n}) {
             be.Copy(p.View(t.w), p.View(t.new_w));
             be.Copy(p.View(t.exp_avg), p.View(t.new_exp_avg));
             be.Copy(p.View(t.exp_avg_sq), p.View(t.new_exp_avg_sq));
             tensors.push_back(
                 {p.Floats(t.new_w), p.Floats(t.grad), p.Floats(t.new_exp_avg),
                  p.Floats(t.new_exp_avg_sq), p.Buffer(t.new_w).size, t.decay});
           }
           const ConstFloatSpan copied = p.Buffer(w.new_w);
           be.RefreshComputeCopies({copied});
           be.AdamWStep(hyper, tensors);
           ReadWeightCopy(be, p.View(w.new_w), p.Floats(fused));
           be.RefreshComputeCopies({copied});
           ReadWeightCopy(be, p.View(w.new_w), p.Floats(refreshed));
           be.RefreshComputeCopies({});
           return 0.0;
         });
       }});
}

void AddOptimizerCases(Factories& f) {
  AddAdamW(f, "two chunks", Dense(300, 260), 70);
  AddAdamW(f, "odd", Dense(33, 7), 5);
}

// ---- sparse attention and the indexer ----

// Queries (their key-token positions) and the sequence start of each.
struct Queries {
  std::vector<int64_t> position, start;
  int64_t size() const { return static_cast<int64_t>(position.size()); }
};

// The first `short_count` positions of a sequence starting at 0 (fewer keys
// than top-k), then the last `long_count` of [0, tokens).
Queries ShortAndLong(int64_t short_count, int64_t long_count, int64_t tokens) {
  Queries q;
  for (int64_t t = 0; t < short_count; ++t) q.position.push_back(t);
  for (int64_t t = tokens - long_count; t < tokens; ++t)
    q.position.push_back(t);
  q.start.assign(q.size(), 0);
  return q;
}

// Key lists as the indexer gives them: min(topk, position - start + 1)
// distinct keys of [start, position] in random order, then -1; with `gaps`,
// each list shuffled so that -1 entries fall anywhere.
std::vector<int32_t> RandomKeys(const Queries& q, int64_t topk, bool gaps,
                                std::mt19937_64& rng) {
  std::vector<int32_t> keys(q.size() * topk, -1);
  for (int64_t t = 0; t < q.size(); ++t) {
    const int64_t count = std::min(topk, q.position[t] - q.start[t] + 1);
    const std::vector<int32_t> chosen =
        Sample(q.start[t], q.position[t], count, rng);
    int32_t* row = keys.data() + t * topk;
    std::copy(chosen.begin(), chosen.end(), row);
    if (gaps) std::shuffle(row, row + topk, rng);
  }
  return keys;
}

// Attention shapes: heads, q/k width, v width (v is a column view of
// v_stride-wide rows starting at v_offset), key tokens.
struct AttentionShape {
  int64_t heads, dqk, dv, v_stride, v_offset, key_tokens, topk;
  float scale;
  // Whether calls pass the full queries (Backend's full_queries) or 0.
  bool pass_full_queries = true;
};

// The leading queries that select every key up to their own (self-attention
// from token 0 with at most top-k keys): the calls' full_queries.
int64_t FullQueries(const AttentionShape& s, const Queries& q) {
  if (!s.pass_full_queries || q.size() != s.key_tokens) return 0;
  int64_t full = 0;
  while (full < q.size() && q.position[full] == full && q.start[full] == 0 &&
         full < s.topk) {
    ++full;
  }
  return full;
}

std::string AttentionLabel(const std::string& tag, const AttentionShape& s,
                           const Queries& q, bool gaps) {
  const int64_t full = FullQueries(s, q);
  return absl::StrCat(tag, " q", q.size(), " k", s.key_tokens, " h", s.heads,
                      " dqk", s.dqk, " dv", s.dv, " top", s.topk,
                      gaps ? " gaps" : "",
                      full > 0 ? absl::StrCat(" full ", full) : "");
}

struct AttentionIds {
  int q, k, v, keys;
};

AttentionIds AttentionInputs(CaseBuilder& b, const AttentionShape& s,
                             const Queries& q, bool gaps) {
  AttentionIds ids;
  ids.q = b.Input("q", Dense(q.size() * s.heads, s.dqk));
  ids.k = b.Input("k", Dense(s.key_tokens * s.heads, s.dqk));
  ids.v =
      b.Input("v", Cols(s.key_tokens * s.heads, s.v_stride, s.v_offset, s.dv));
  ids.keys = b.Ints("keys", RandomKeys(q, s.topk, gaps, b.rng()));
  return ids;
}

// The attention's q, k and v as a case passes them: F32, or in the
// activation type (v keeping its stride), held by `holders`.
struct AttentionOperands {
  Tensor holders[3];
  ConstMatrixView q, k, v;
};
void MakeAttentionOperands(Backend& be, const Bound& p, const AttentionIds& in,
                           XType type, AttentionOperands* ops) {
  ops->q = AsActivation(be, type, p.View(in.q), &ops->holders[0]);
  ops->k = AsActivation(be, type, p.View(in.k), &ops->holders[1]);
  ops->v = AsActivation(be, type, p.View(in.v), &ops->holders[2]);
}

// type kActivation: q, k, v and out in the activation type.
void AddAttention(Factories& f, const std::string& tag, AttentionShape s,
                  Queries q, bool gaps, XType type = XType::kF32) {
  const std::string label =
      AttentionLabel(tag, s, q, gaps) +
      (type == XType::kActivation ? " q k v out in activation type" : "");
  const int64_t full = FullQueries(s, q);
  f.push_back({"SparseAttentionForward", label, [=] {
                 CaseBuilder b("SparseAttentionForward", label);
                 const AttentionIds in = AttentionInputs(b, s, q, gaps);
                 const int io = b.Written("out",
                                          Dense(q.size() * s.heads, s.dv)),
                           il = b.Written("lse", Dense(q.size() * s.heads, 1));
                 return b.Build([=](Backend& be, const Bound& p) {
                   AttentionOperands ops;
                   MakeAttentionOperands(be, p, in, type, &ops);
                   auto attend = [&](MatrixView out) {
                     be.SparseAttentionForward(
                         ops.q, ops.k, ops.v, p.Ints(in.keys), s.topk, full,
                         s.heads, s.scale, out, p.View(il).data);
                   };
                   IntoActivation(be, type, p.View(io), attend);
                   return 0.0;
                 });
               }});
}

// The CPU forward's out and lse for a case's inputs.
struct ForwardResult {
  std::vector<float> out, lse;
};

ForwardResult CpuForward(CaseBuilder& b, const AttentionShape& s,
                         const AttentionIds& in, int64_t rows) {
  ForwardResult r{std::vector<float>(rows * s.dv + 1),
                  std::vector<float>(rows + 1)};
  CpuReference().SparseAttentionForward(
      b.HostView(in.q), b.HostView(in.k), b.HostView(in.v),
      b.HostInts(in.keys).data(), s.topk, 0, s.heads, s.scale,
      {r.out.data(), rows, s.dv, s.dv}, r.lse.data());
  return r;
}

// lse from the CPU's forward.
void AddKeyWeights(Factories& f, const std::string& tag, AttentionShape s,
                   Queries q, bool gaps, XType type = XType::kF32) {
  const std::string label =
      AttentionLabel(tag, s, q, gaps) +
      (type == XType::kActivation ? " q k in activation type" : "");
  f.push_back({"SparseAttentionKeyWeights", label, [=] {
                 CaseBuilder b("SparseAttentionKeyWeights", label);
                 const AttentionIds in = AttentionInputs(b, s, q, gaps);
                 const int64_t rows = q.size() * s.heads;
                 const ForwardResult fwd = CpuForward(b, s, in, rows);
                 const int il = b.Values("lse", Dense(rows, 1), fwd.lse),
                           iw = b.Written("weights", Dense(q.size(), s.topk));
                 return b.Build([=](Backend& be, const Bound& p) {
                   AttentionOperands ops;
                   MakeAttentionOperands(be, p, in, type, &ops);
                   be.SparseAttentionKeyWeights(ops.q, ops.k, p.Ints(in.keys),
                                                s.topk, s.heads, s.scale,
                                                p.View(il).data, p.View(iw));
                   return 0.0;
                 });
               }});
}

// out and lse from the CPU's forward; with want_key_weights, the key
// weights the backward sums from its probabilities too.
void AddAttentionBackward(Factories& f, const std::string& tag,
                          AttentionShape s, Queries q, bool gaps, bool want_dq,
                          bool want_dkv, XType type = XType::kF32,
                          bool want_key_weights = false) {
  const std::string label =
      AttentionLabel(tag, s, q, gaps) + (want_dq ? "" : " no dq") +
      (want_dkv ? "" : " no dk dv") +
      (type == XType::kActivation
           ? " q k v out dout and grads in activation type"
           : "") +
      (want_key_weights ? " with key weights" : "");
  const int64_t full = FullQueries(s, q);
  f.push_back(
      {"SparseAttentionBackward", label, [=] {
         CaseBuilder b("SparseAttentionBackward", label);
         const AttentionIds in = AttentionInputs(b, s, q, gaps);
         const int64_t rows = q.size() * s.heads;
         const ForwardResult fwd = CpuForward(b, s, in, rows);
         const int io = b.Values("out", Dense(rows, s.dv), fwd.out),
                   il = b.Values("lse", Dense(rows, 1), fwd.lse),
                   id = b.Input("dout", Dense(rows, s.dv)),
                   idq = want_dq ? b.Written("dq", Dense(rows, s.dqk)) : -1,
                   idk = want_dkv
                             ? b.Written("dk",
                                         Dense(s.key_tokens * s.heads, s.dqk))
                             : -1,
                   idv =
                       want_dkv
                           ? b.Written("dv", Cols(s.key_tokens * s.heads,
                                                  s.v_stride, s.v_offset, s.dv))
                           : -1,
                   iw = want_key_weights
                            ? b.Written("key weights", Dense(q.size(), s.topk))
                            : -1;
         return b.Build([=](Backend& be, const Bound& p) {
           AttentionOperands ops;
           MakeAttentionOperands(be, p, in, type, &ops);
           Tensor out_holder, dout_holder;
           const ConstMatrixView out =
               AsActivation(be, type, p.View(io), &out_holder);
           const ConstMatrixView dout =
               AsActivation(be, type, p.View(id), &dout_holder);
           const std::vector<MatrixView> grads = {
               idq >= 0 ? p.View(idq) : MatrixView{},
               idk >= 0 ? p.View(idk) : MatrixView{},
               idv >= 0 ? p.View(idv) : MatrixView{}};
           auto backward = [&](const std::vector<MatrixView>& g) {
             be.SparseAttentionBackward(ops.q, ops.k, ops.v, p.Ints(in.keys),
                                        s.topk, full, s.heads, s.scale, out,
                                        p.View(il).data, dout, g[0], g[1], g[2],
                                        iw >= 0 ? p.View(iw) : MatrixView{});
           };
           IntoActivations(be, type, grads, backward);
           return 0.0;
         });
       }});
}

// The indexer's queries, keys and head weights for `nq` queries.
struct IndexerShape {
  int64_t heads, dim, key_tokens, topk;
  float scale;
};

void AddTopK(Factories& f, const std::string& tag, IndexerShape s,
             int64_t query_offset, std::vector<int32_t> seq_start) {
  const int64_t nq = static_cast<int64_t>(seq_start.size());
  const std::string label =
      absl::StrCat(tag, " q[", query_offset, ",", query_offset + nq, ") k",
                   s.key_tokens, " h", s.heads, "x", s.dim, " top", s.topk);
  f.push_back({"IndexerTopK", label, [=] {
                 CaseBuilder b("IndexerTopK", label);
                 TopKArgs a{};
                 a.iq = b.Input("iq", Dense(nq * s.heads, s.dim));
                 a.ik = b.Input("ik", Dense(s.key_tokens, s.dim));
                 a.w = b.Input("w", Dense(nq, s.heads),
                               1.f / std::sqrt(float(s.heads)));
                 a.seq_start = b.Ints("seq_start", seq_start);
                 a.keys = b.WrittenInts("keys", nq * s.topk);
                 a.query_offset = query_offset;
                 a.topk = s.topk;
                 a.scale = s.scale;
                 b.Special(TopKCheck(a), {a.keys});
                 return b.Build([=](Backend& be, const Bound& p) {
                   be.IndexerTopK(p.View(a.iq), p.View(a.ik), p.View(a.w),
                                  p.Ints(a.seq_start), a.query_offset, a.topk,
                                  a.scale, /*keep=*/nullptr, p.Ints(a.keys));
                   return 0.0;
                 });
               }});
}

// Index queries with a random sign per (query, head) row and |normal|
// magnitudes, keys with |normal| entries: every dot product is tens of units
// from ReLU's kink, where fp32 rounding order alone could switch a whole term
// of the gradient on or off.
std::vector<float> SignedRows(const Layout& l, std::mt19937_64& rng) {
  std::vector<float> v = Normal(l.size, rng(), 1.f);
  for (int64_t r = 0; r < l.rows; ++r) {
    const float sign = rng() % 2 == 0 ? 1.f : -1.f;
    for (int64_t c = 0; c < l.cols; ++c) {
      float& x = v[l.offset + r * l.stride + c];
      x = sign * std::abs(x);
    }
  }
  return v;
}

// The index queries and keys as SignedRows describes them, far from ReLU's
// kink; returns their operand ids.
std::pair<int, int> KinkFreeIndexOperands(CaseBuilder& b, Layout iq,
                                          Layout ik) {
  const int iiq = b.Values("iq", iq, SignedRows(iq, b.rng()));
  std::vector<float> keys = Normal(ik.size, b.rng()(), 1.f);
  for (float& x : keys) x = std::abs(x);
  return {iiq, b.Values("ik", ik, std::move(keys))};
}

// A positive target per selected slot (0 on -1 slots), unnormalized as
// SparseAttentionKeyWeights gives it: `heads` probabilities summed.
std::vector<float> KeyTargets(const std::vector<int32_t>& keys, int64_t nq,
                              int64_t topk, float heads, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(0.1f, 1.f);
  std::vector<float> target(nq * topk + 1, 0.f);
  for (int64_t i = 0; i < nq * topk; ++i) {
    if (keys[i] >= 0) target[i] = heads * u(rng) / static_cast<float>(topk);
  }
  return target;
}

void AddIndexerKl(Factories& f, const std::string& tag, IndexerShape s,
                  Queries q, int64_t attn_heads, float coeff,
                  bool normal_inputs, bool want_dik) {
  const int64_t nq = q.size();
  const std::string label = absl::StrCat(
      tag, " q", nq, " k", s.key_tokens, " h", s.heads, "x", s.dim, " top",
      s.topk, " attn heads ", attn_heads, want_dik ? "" : " no dik");
  // Fewer than one in 8 keys selected: the bf16 mode's sparse path sums dik
  // with atomics.
  const bool sparse = 8 * s.topk < s.key_tokens;
  f.push_back(
      {"IndexerKlLoss", label, [=] {
         CaseBuilder b("IndexerKlLoss", label);
         const Layout iq = Dense(nq * s.heads, s.dim),
                      ik = Dense(s.key_tokens, s.dim);
         int iiq, iik;
         if (normal_inputs) {
           iiq = b.Input("iq", iq);
           iik = b.Input("ik", ik);
         } else {
           std::tie(iiq, iik) = KinkFreeIndexOperands(b, iq, ik);
         }
         const int iw =
             b.Input("w", Dense(nq, s.heads), 1.f / std::sqrt(float(s.heads)));
         const std::vector<int32_t> keys =
             RandomKeys(q, s.topk, false, b.rng());
         const int ikeys = b.Ints("keys", keys),
                   ip = b.Values(
                       "target", Dense(nq, s.topk),
                       KeyTargets(keys, nq, s.topk,
                                  static_cast<float>(attn_heads), b.rng())),
                   idq = b.Accumulated("diq", iq),
                   idk = !want_dik ? -1
                         : sparse ? b.SummedInAnyOrder(b.Accumulated("dik", ik))
                                  : b.Accumulated("dik", ik),
                   idw = b.Accumulated("dw", Dense(nq, s.heads));
         return b.Build(
             [=](Backend& be, const Bound& p) {
               return LossOf(be, [&](double* sum) {
                 be.IndexerKlLoss(p.View(iiq), p.View(iik), p.View(iw),
                                  p.Ints(ikeys), s.topk, s.scale, p.View(ip),
                                  coeff, /*kept=*/nullptr, p.View(idq),
                                  idk >= 0 ? p.View(idk) : MatrixView{},
                                  p.View(idw), sum);
               });
             },
             /*returns_loss=*/true);
       }});
}

// IndexerTopK keeping its scores, then IndexerKlLoss over the same operands
// and another selection of the same keys (random, as in AddIndexerKl): in
// self-attention over the sequences `seq_start` gives each token, the bf16
// mode's loss reads the scores the top-k call kept for its queries past
// top-k. Both the keys and the loss's outputs are checked.
void AddIndexerKlAfterTopK(Factories& f, const std::string& tag, IndexerShape s,
                           std::vector<int32_t> seq_start) {
  const int64_t n = static_cast<int64_t>(seq_start.size());
  const std::string op = "IndexerKlLoss after a top-k keeping its scores";
  const std::string label =
      absl::StrCat(tag, " q", n, " h", s.heads, "x", s.dim, " top", s.topk);
  f.push_back(
      {op, label, [=] {
         CaseBuilder b(op, label);
         const Layout iq = Dense(n * s.heads, s.dim), ik = Dense(n, s.dim);
         TopKArgs a{};
         std::tie(a.iq, a.ik) = KinkFreeIndexOperands(b, iq, ik);
         a.w = b.Input("w", Dense(n, s.heads), 1.f / std::sqrt(float(s.heads)));
         a.seq_start = b.Ints("seq_start", seq_start);
         a.keys = b.WrittenInts("top-k keys", n * s.topk);
         a.topk = s.topk;
         a.scale = s.scale;
         b.Special(TopKCheck(a), {a.keys});
         Queries q;
         for (int64_t t = 0; t < n; ++t) {
           q.position.push_back(t);
           q.start.push_back(seq_start[t]);
         }
         const std::vector<int32_t> keys =
             RandomKeys(q, s.topk, false, b.rng());
         const int ikeys = b.Ints("keys", keys),
                   ip = b.Values("target", Dense(n, s.topk),
                                 KeyTargets(keys, n, s.topk, 16.f, b.rng())),
                   idq = b.Accumulated("diq", iq),
                   idk = b.Accumulated("dik", ik),
                   idw = b.Accumulated("dw", Dense(n, s.heads));
         return b.Build(
             [=](Backend& be, const Bound& p) {
               KeptIndexerScores kept;
               be.IndexerTopK(p.View(a.iq), p.View(a.ik), p.View(a.w),
                              p.Ints(a.seq_start), 0, s.topk, s.scale, &kept,
                              p.Ints(a.keys));
               return LossOf(be, [&](double* sum) {
                 be.IndexerKlLoss(p.View(a.iq), p.View(a.ik), p.View(a.w),
                                  p.Ints(ikeys), s.topk, s.scale, p.View(ip),
                                  0.3f, &kept, p.View(idq), p.View(idk),
                                  p.View(idw), sum);
               });
             },
             /*returns_loss=*/true);
       }});
}

// The tests' five tokens in two sequences, [0, 3) and [3, 5).
Queries TinyQueries() { return {{0, 1, 2, 3, 4}, {0, 0, 0, 3, 3}}; }

// Latent attention: heads reading one shared row per key token (kv [key
// tokens, d], the value its first dv columns).
struct LatentShape {
  int64_t heads, d, dv, key_tokens, topk;
  float scale;
};

std::string LatentLabel(const std::string& tag, const LatentShape& s,
                        const Queries& q, bool gaps, XType type) {
  return absl::StrCat(tag, " q", q.size(), " k", s.key_tokens, " h", s.heads,
                      " d", s.d, " dv", s.dv, " top", s.topk,
                      gaps ? " gaps" : "",
                      type == XType::kActivation ? " in activation type" : "");
}

struct LatentIds {
  int q, kv, keys;
};

LatentIds LatentInputs(CaseBuilder& b, const LatentShape& s, const Queries& q,
                       bool gaps) {
  return {b.Input("q", Dense(q.size() * s.heads, s.d)),
          b.Input("kv", Dense(s.key_tokens, s.d)),
          b.Ints("keys", RandomKeys(q, s.topk, gaps, b.rng()))};
}

void AddLatentAttention(Factories& f, const std::string& tag, LatentShape s,
                        Queries q, bool gaps, XType type) {
  const std::string label = LatentLabel(tag, s, q, gaps, type);
  f.push_back(
      {"LatentAttentionForward", label, [=] {
         CaseBuilder b("LatentAttentionForward", label);
         const LatentIds in = LatentInputs(b, s, q, gaps);
         const int64_t rows = q.size() * s.heads;
         const int io = b.Written("out", Dense(rows, s.dv)),
                   il = b.Written("lse", Dense(rows, 1));
         return b.Build([=](Backend& be, const Bound& p) {
           Tensor qh, kvh;
           const ConstMatrixView qv = AsActivation(be, type, p.View(in.q), &qh);
           const ConstMatrixView kv =
               AsActivation(be, type, p.View(in.kv), &kvh);
           IntoActivation(be, type, p.View(io), [&](MatrixView out) {
             be.LatentAttentionForward(qv, kv, p.Ints(in.keys), s.topk, s.heads,
                                       s.scale, out, p.View(il).data);
           });
           return 0.0;
         });
       }});
}

// out and lse from the CPU's forward.
void AddLatentAttentionBackward(Factories& f, const std::string& tag,
                                LatentShape s, Queries q, bool gaps,
                                bool want_dq, bool want_dkv, XType type,
                                bool want_key_weights) {
  const std::string label = LatentLabel(tag, s, q, gaps, type) +
                            (want_dq ? "" : " no dq") +
                            (want_dkv ? "" : " no dkv") +
                            (want_key_weights ? " with key weights" : "");
  f.push_back(
      {"LatentAttentionBackward", label, [=] {
         CaseBuilder b("LatentAttentionBackward", label);
         const LatentIds in = LatentInputs(b, s, q, gaps);
         const int64_t rows = q.size() * s.heads;
         std::vector<float> out(rows * s.dv + 1), lse(rows + 1);
         CpuReference().LatentAttentionForward(
             b.HostView(in.q), b.HostView(in.kv), b.HostInts(in.keys).data(),
             s.topk, s.heads, s.scale, {out.data(), rows, s.dv, s.dv},
             lse.data());
         const int io = b.Values("out", Dense(rows, s.dv), out),
                   il = b.Values("lse", Dense(rows, 1), lse),
                   id = b.Input("dout", Dense(rows, s.dv)),
                   idq = want_dq ? b.Written("dq", Dense(rows, s.d)) : -1,
                   idkv = want_dkv ? b.SummedInAnyOrder(b.Written(
                                         "dkv", Dense(s.key_tokens, s.d)))
                                   : -1,
                   iw = want_key_weights
                            ? b.Written("key weights", Dense(q.size(), s.topk))
                            : -1;
         return b.Build([=](Backend& be, const Bound& p) {
           Tensor holders[4];
           const ConstMatrixView qv =
               AsActivation(be, type, p.View(in.q), &holders[0]);
           const ConstMatrixView kv =
               AsActivation(be, type, p.View(in.kv), &holders[1]);
           const ConstMatrixView outv =
               AsActivation(be, type, p.View(io), &holders[2]);
           const ConstMatrixView dout =
               AsActivation(be, type, p.View(id), &holders[3]);
           const std::vector<MatrixView> grads = {
               idq >= 0 ? p.View(idq) : MatrixView{},
               idkv >= 0 ? p.View(idkv) : MatrixView{}};
           IntoActivations(be, type, grads,
                           [&](const std::vector<MatrixView>& g) {
                             be.LatentAttentionBackward(
                                 qv, kv, p.Ints(in.keys), s.topk, s.heads,
                                 s.scale, outv, p.View(il).data, dout, g[0],
                                 g[1], iw >= 0 ? p.View(iw) : MatrixView{});
                           });
           return 0.0;
         });
       }});
}

// The latent kernels take bf16 operands with up to 16 heads and widths that
// are multiples of 64; the other cases check the per-head fallback.
void AddLatentAttentionCases(Factories& f) {
  const ModelConfig& m = Mini();
  const XType act = XType::kActivation, f32 = XType::kF32;
  const LatentShape tiny{2, 6, 4, 5, 2, 0.4f};
  AddLatentAttention(f, "tiny", tiny, TinyQueries(), false, f32);
  AddLatentAttention(f, "tiny", tiny, TinyQueries(), false, act);
  AddLatentAttentionBackward(f, "tiny", tiny, TinyQueries(), false, true, true,
                             act, true);
  // Three heads (13 padded rows), top-100 (a part-filled last key tile) with
  // -1 slots anywhere.
  const LatentShape small{3, 128, 64, 300, 100, 0.125f};
  const Queries small_q = ShortAndLong(40, 40, 300);
  for (XType type : {f32, act}) {
    AddLatentAttention(f, "small", small, small_q, true, type);
    AddLatentAttentionBackward(f, "small", small, small_q, true, true, true,
                               type, true);
  }
  AddLatentAttentionBackward(f, "small", small, small_q, true, false, true, act,
                             false);
  AddLatentAttentionBackward(f, "small", small, small_q, true, true, false, act,
                             false);
  // glm5.2-mini's latent (kv_lora_rank + rope) and heads at long context: the
  // last queries of 16k and 64k tokens, each with top-2048. The scale is the
  // per-head form's, as the model keeps it.
  const LatentShape mini{
      m.num_attention_heads, m.kv_lora_rank + m.qk_rope_head_dim,
      m.kv_lora_rank,        16384,
      m.index_topk,          1.f / std::sqrt(float(m.QkHeadDim()))};
  const Queries mini_q = ShortAndLong(0, 256, mini.key_tokens);
  AddLatentAttention(f, "glm5.2-mini 16k", mini, mini_q, false, act);
  AddLatentAttentionBackward(f, "glm5.2-mini 16k", mini, mini_q, false, true,
                             true, act, true);
  LatentShape mini_64k = mini;
  mini_64k.key_tokens = 65536;
  const Queries mini_64k_q = ShortAndLong(0, 128, mini_64k.key_tokens);
  AddLatentAttention(f, "glm5.2-mini 64k", mini_64k, mini_64k_q, false, act);
  AddLatentAttentionBackward(f, "glm5.2-mini 64k", mini_64k, mini_64k_q, false,
                             true, true, act, true);
}

void AddAttentionCases(Factories& f) {
  const ModelConfig& m = Mini();
  const int64_t heads = m.num_attention_heads, qk = m.QkHeadDim(),
                vdim = m.v_head_dim, nope = m.qk_nope_head_dim,
                topk = m.index_topk, tokens = 4096;
  const AttentionShape tiny{2, 6, 4, 4, 0, 5, 2, 0.4f};
  const AttentionShape small{3, 20, 12, 15, 2, 50, 16, 0.25f};
  // v is columns [nope, nope + v) of kv_b_proj's per-head rows.
  const AttentionShape mini{heads, qk,     vdim, nope + vdim,
                            nope,  tokens, topk, 1.f / std::sqrt(float(qk))};
  Queries small_q;
  for (int64_t t = 0; t < 37; ++t) {
    small_q.position.push_back(13 + t);
    small_q.start.push_back(t < 20 ? 0 : 30);
  }
  // 128 queries with 1..128 keys, 128 with top-k of 3968..4095 candidates.
  const Queries mini_q = ShortAndLong(128, 128, tokens);
  // Top-16 of up to 2048 keys, head dims cuDNN does not take: too sparse for
  // the CUDA backend's tiles, so its per-query gather runs in both modes.
  const AttentionShape sparse{2, 40, 24, 24, 0, 2048, 16, 0.2f};
  const Queries sparse_q = ShortAndLong(8, 56, 2048);
  AddAttention(f, "sparse", sparse, sparse_q, true);
  AddAttentionBackward(f, "sparse", sparse, sparse_q, true, true, true);
  AddAttention(f, "tiny", tiny, TinyQueries(), false);
  AddAttention(f, "small", small, small_q, true);
  AddAttention(f, "glm5.2-mini", mini, mini_q, false);
  // Self-attention (nq == nk) at glm5.2-mini's head dims, top-512 of 1024
  // tokens: the bf16 mode's causal cuDNN graphs.
  AttentionShape self = mini;
  self.key_tokens = 1024;
  self.topk = 512;
  const Queries self_q = ShortAndLong(1024, 0, 1024);
  AddAttention(f, "mini self", self, self_q, false);
  AddAttentionBackward(f, "mini self", self, self_q, false, true, true);
  // The same without the full queries: every query through the mask.
  AttentionShape self_masked = self;
  self_masked.pass_full_queries = false;
  AddAttention(f, "mini self", self_masked, self_q, false);
  AddAttentionBackward(f, "mini self", self_masked, self_q, false, true, true);
  // Top-128 of up to 2048 tokens at glm5.2-mini's head dims, as at long
  // sequences: too sparse for the tiles (the fp32 mode gathers rows per
  // query), the bf16 mode's cuDNN masked kernels all the same, in two query
  // chunks (kAttentionPairsPerCall), the second over a longer key prefix.
  AttentionShape self_sparse = mini;
  self_sparse.key_tokens = 2048;
  self_sparse.topk = 128;
  const Queries self_sparse_q = ShortAndLong(2048, 0, 2048);
  AddAttention(f, "mini self sparse", self_sparse, self_sparse_q, false);
  AddAttentionBackward(f, "mini self sparse", self_sparse, self_sparse_q, false,
                       true, true);
  AddAttentionBackward(f, "tiny", tiny, TinyQueries(), false, true, true);
  AddAttentionBackward(f, "small", small, small_q, true, true, true);
  AddAttentionBackward(f, "small", small, small_q, true, false, true);
  AddAttentionBackward(f, "small", small, small_q, true, true, false);
  AddAttentionBackward(f, "glm5.2-mini", mini, mini_q, false, true, true);
  AddKeyWeights(f, "sparse", sparse, sparse_q, true);
  AddKeyWeights(f, "small", small, small_q, true);
  AddKeyWeights(f, "glm5.2-mini", mini, mini_q, false);
  // Self-attention: the bf16 mode's query blocks score keys up to their last
  // query only (two blocks of 512 here).
  AddKeyWeights(f, "mini self", self, self_q, false);
  // Operands in the activation type: read where they lie by cuDNN (v strided
  // as the kv projection's columns), widened for the fp32 kernels (tiny,
  // sparse: shapes cuDNN does not take). At top-128 of 2048 most of a
  // query's key tiles, at times its first, hold none of its keys: masked
  // scores must not turn into infinities there.
  const XType act = XType::kActivation;
  AddAttention(f, "mini self", self, self_q, false, act);
  AddAttention(f, "mini self", self_masked, self_q, false, act);
  AddAttention(f, "mini self sparse", self_sparse, self_sparse_q, false, act);
  AddAttention(f, "tiny", tiny, TinyQueries(), false, act);
  AddAttention(f, "sparse", sparse, sparse_q, true, act);
  AddAttentionBackward(f, "mini self", self, self_q, false, true, true, act);
  AddAttentionBackward(f, "tiny", tiny, TinyQueries(), false, true, true, act);
  // Two query chunks: dk and dv added over them in F32 stand-ins.
  AddAttentionBackward(f, "mini self sparse", self_sparse, self_sparse_q, false,
                       true, true, act);
  // cuDNN's calls of 2^26 query-key pairs x heads and more run the plan
  // their first call timed fastest: 32 heads over 2,048 tokens (top-1024)
  // put the chunks of 2^21 pairs over that (the forward's masked rest, the
  // backward's second chunk), at head dims small enough for a quick CPU
  // reference.
  const AttentionShape many_heads{32, 32,   32,   32,
                                  0,  2048, 1024, 1.f / std::sqrt(32.f)};
  const Queries many_heads_q = ShortAndLong(2048, 0, 2048);
  AddAttention(f, "many heads", many_heads, many_heads_q, false, act);
  AddAttentionBackward(f, "many heads", many_heads, many_heads_q, false, true,
                       true, act);
  // bf16 operands of dense selections: the heads' sums on the tensor cores
  // (AttentionKeySums), causal in self-attention, every key otherwise; 1000
  // tokens leave a part-filled last query block and key tile.
  AddKeyWeights(f, "mini self", self, self_q, false, act);
  AddKeyWeights(f, "glm5.2-mini", mini, mini_q, false, act);
  AttentionShape self_uneven = self;
  self_uneven.key_tokens = 1000;
  self_uneven.topk = 500;
  AddKeyWeights(f, "mini self uneven", self_uneven, ShortAndLong(1000, 0, 1000),
                false, act);
  // The backward's products over the causal tiles at a part-filled last
  // 128-token tile (1000 tokens), with 16 heads and with 6 (the triangle's
  // heads side by side halved to 2).
  AddAttentionBackward(f, "mini self uneven", self_uneven,
                       ShortAndLong(1000, 0, 1000), false, true, true, act);
  AttentionShape six_heads_uneven = self_uneven;
  six_heads_uneven.heads = 6;
  AddAttentionBackward(f, "six heads uneven", six_heads_uneven,
                       ShortAndLong(1000, 0, 1000), false, true, true, act);
  // The indexer's KL target from the backward: summed from the products' P
  // (bf16, rounded as the products wrote it) at self-attention's shapes
  // above, and formed as SparseAttentionKeyWeights forms it elsewhere (the
  // fp32 kernels, cuDNN's backward, queries of other tokens than the keys).
  AddAttentionBackward(f, "mini self", self, self_q, false, true, true, act,
                       /*want_key_weights=*/true);
  AddAttentionBackward(f, "mini self uneven", self_uneven,
                       ShortAndLong(1000, 0, 1000), false, true, true, act,
                       /*want_key_weights=*/true);
  AddAttentionBackward(f, "six heads uneven", six_heads_uneven,
                       ShortAndLong(1000, 0, 1000), false, true, true, act,
                       /*want_key_weights=*/true);
  AddAttentionBackward(f, "mini self sparse", self_sparse, self_sparse_q, false,
                       true, true, act, /*want_key_weights=*/true);
  AddAttentionBackward(f, "small", small, small_q, true, true, true,
                       XType::kF32, /*want_key_weights=*/true);
  AddAttentionBackward(f, "glm5.2-mini", mini, mini_q, false, true, true,
                       XType::kF32, /*want_key_weights=*/true);
  AddKeyWeights(f, "sparse", sparse, sparse_q, true, act);

  const IndexerShape index_tiny{2, 4, 5, 2, 0.5f};
  const IndexerShape index_mini{m.index_n_heads, m.index_head_dim, tokens, topk,
                                1.f / std::sqrt(float(m.index_head_dim))};
  AddTopK(f, "tiny", index_tiny, 0, {0, 0, 0, 3, 3});
  AddTopK(f, "tiny second half", index_tiny, 2, {0, 3, 3});
  // Queries 3584..4095 of a sequence starting at token 1000: 2585..3096
  // candidates each.
  AddTopK(f, "late chunk", index_mini, 3584, std::vector<int32_t>(512, 1000));
  // Queries 0..511 of sequences [0, 300) and [300, ...): fewer candidates
  // than top-k, all chosen.
  std::vector<int32_t> early(512);
  for (int64_t t = 0; t < 512; ++t) early[t] = t < 300 ? 0 : 300;
  AddTopK(f, "early chunk", index_mini, 0, early);
  IndexerShape top64 = index_mini;
  top64.key_tokens = 1024;
  top64.topk = 64;
  AddTopK(f, "causal", top64, 0, std::vector<int32_t>(1024, 0));
  // 12 heads of 64 dims (the bf16 mode's tensor-core tiles pad both), 333
  // queries (a partial last block) of two sequences from token 100.
  std::vector<int32_t> two(333);
  for (int64_t t = 0; t < 333; ++t) two[t] = t < 150 ? 0 : 250;
  AddTopK(f, "12 heads", IndexerShape{12, 64, 700, 50, 0.3f}, 100, two);

  AddIndexerKl(f, "tiny", index_tiny, TinyQueries(), 3, 0.7f, true, true);
  AddIndexerKl(f, "tiny", index_tiny, TinyQueries(), 1, 0.7f, true, false);
  AddIndexerKl(f, "glm5.2-mini", index_mini, mini_q, heads, 0.3f, false, true);
  AddIndexerKl(f, "glm5.2-mini", index_mini, mini_q, 1, 0.3f, false, false);
  // Self-attention of a whole 4k sequence (nq == nk): the bf16 mode's query
  // blocks each see the keys up to their last query.
  AddIndexerKl(f, "glm5.2-mini self", index_mini,
               ShortAndLong(tokens, 0, tokens), heads, 0.3f, false, true);
  // 12 heads (rows padded to 32 on the bf16 mode's tiles), 301 queries of two
  // packed sequences (an odd last block, two dik segments), 1,100 keys (a
  // partial last key tile).
  Queries packed;
  for (int64_t t = 0; t < 301; ++t) {
    packed.position.push_back(t);
    packed.start.push_back(t < 150 ? 0 : 150);
  }
  AddIndexerKl(f, "packed", IndexerShape{12, 128, 1100, 300, 0.2f}, packed, 8,
               0.5f, false, true);
  // Fewer than one in 8 keys selected (the bf16 mode's sparse path): the
  // packed queries at top-100 of 64 dims (partial key tiles and column
  // blocks, -1 slots); glm5.2-mini's heads at top-2048 of 20k keys.
  const IndexerShape sparse_small{12, 64, 1100, 100, 0.2f};
  AddIndexerKl(f, "sparse packed", sparse_small, packed, 8, 0.5f, false, true);
  AddIndexerKl(f, "sparse packed", sparse_small, packed, 8, 0.5f, false, false);
  IndexerShape sparse_mini = index_mini;
  sparse_mini.key_tokens = 20480;
  AddIndexerKl(f, "glm5.2-mini sparse", sparse_mini,
               ShortAndLong(16, 48, sparse_mini.key_tokens), heads, 0.3f, false,
               true);
  // glm5.2-mini's indexer heads over 1,024 tokens at top-256 (768 queries
  // kept); 12 heads of 64 dims over two packed sequences at top-100.
  IndexerShape top256 = index_mini;
  top256.key_tokens = 1024;
  top256.topk = 256;
  AddIndexerKlAfterTopK(f, "mini heads", top256, std::vector<int32_t>(1024, 0));
  std::vector<int32_t> two_sequences(700);
  for (int64_t t = 0; t < 700; ++t) two_sequences[t] = t < 380 ? 0 : 380;
  AddIndexerKlAfterTopK(f, "packed", IndexerShape{12, 64, 700, 100, 0.3f},
                        two_sequences);
}

Factories AllCases() {
  Factories f;
  AddLinearCases(f);
  AddGroupedCases(f);
  AddElementwiseCases(f);
  AddRowsCases(f);
  AddNormCases(f);
  AddActivationCases(f);
  AddRopeCases(f);
  AddRouterCases(f);
  AddLossCases(f);
  AddOptimizerCases(f);
  AddAttentionCases(f);
  AddLatentAttentionCases(f);
  return f;
}

// ---- reporting ----

double Ratio(const Outcome& o) {
  if (!o.pass) return std::numeric_limits<double>::infinity();
  return o.limit > 0 ? o.value / o.limit : 0;
}

std::string Describe(const Outcome& o) {
  std::string s = o.metric == "nmse" || o.metric == "rel"
                      ? absl::StrFormat("%-10s %-4s %9.2e <= %.0e", o.what,
                                        o.metric, o.value, o.limit)
                      : absl::StrFormat("%-10s %-4s %9.0f <= %.0f", o.what,
                                        o.metric, o.value, o.limit);
  if (o.ties > 0) absl::StrAppend(&s, " ties ", o.ties);
  if (!o.note.empty()) absl::StrAppend(&s, " (", o.note, ")");
  return s;
}

struct Tally {
  int cases = 0;
  int failed = 0;
  int not_repeatable = 0;
  int64_t ties = 0;
  double worst = 0;  // largest value/limit over the passing checks
};

// Prints the case's line (its worst check; every check with --verbose, and
// every failing one always). Returns whether all passed.
bool Report(const Case& c, Precision mode, const std::vector<Outcome>& all,
            bool verbose, Tally* tally) {
  const Outcome* worst = &all.front();
  bool pass = true;
  int64_t ties = 0;
  for (const Outcome& o : all) {
    if (Ratio(o) > Ratio(*worst)) worst = &o;
    pass &= o.pass;
    ties += o.ties;
    if (o.pass && o.limit > 0) tally->worst = std::max(tally->worst, Ratio(o));
    if (!o.pass && o.what == "repeatable") ++tally->not_repeatable;
  }
  std::printf("%s %s %-22s %-58s %s\n", pass ? "PASS" : "FAIL", ModeName(mode),
              c.op.c_str(), c.label.c_str(), Describe(*worst).c_str());
  for (const Outcome& o : all) {
    if (&o != worst && (verbose || !o.pass))
      std::printf("     %s\n", Describe(o).c_str());
  }
  std::fflush(stdout);
  ++tally->cases;
  tally->failed += !pass;
  tally->ties += ties;
  return pass;
}

void PrintSummary(const std::map<std::pair<std::string, int>, Tally>& tallies,
                  const std::vector<std::string>& failures) {
  std::printf("\n%-24s %-4s %6s %6s %12s %6s %10s\n", "op", "mode", "cases",
              "failed", "worst/limit", "ties", "nonrepeat");
  for (const OpLimits& limits : kLimits) {
    for (Precision mode : kModes) {
      auto it = tallies.find({limits.op, ModeIndex(mode)});
      if (it == tallies.end()) continue;
      const Tally& t = it->second;
      std::printf("%-24s %-4s %6d %6d %12.2e %6lld %10d\n", limits.op,
                  ModeName(mode), t.cases, t.failed, t.worst,
                  static_cast<long long>(t.ties), t.not_repeatable);
    }
  }
  if (!failures.empty()) {
    std::printf("\n%zu failed:\n", failures.size());
    for (const std::string& f : failures) std::printf("  %s\n", f.c_str());
  }
}

// The case running on the GPU now and the one being prepared on the CPU,
// printed if something aborts the process (a CUDA error check, an op's shape
// assertion).
char g_running[512] = "";
char g_preparing[512] = "";
char g_checking[512] = "";

void OnAbort(int signal) {
  const char prefix[] = "\nbackend_ops_check: aborted while running ";
  const char preparing[] = " (preparing ";
  const char checking[] = ", checking ";
  if (write(STDERR_FILENO, prefix, sizeof prefix - 1) < 0 ||
      write(STDERR_FILENO, g_running, std::strlen(g_running)) < 0 ||
      write(STDERR_FILENO, preparing, sizeof preparing - 1) < 0 ||
      write(STDERR_FILENO, g_preparing, std::strlen(g_preparing)) < 0 ||
      write(STDERR_FILENO, checking, sizeof checking - 1) < 0 ||
      write(STDERR_FILENO, g_checking, std::strlen(g_checking)) < 0 ||
      write(STDERR_FILENO, ")\n", 2) < 0) {
    // Nothing more can be done while aborting.
  }
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

struct Flags {
  std::vector<Precision> modes = {Precision::kFp32, Precision::kBf16};
  int device = 0;
  std::string filter;
  bool verbose = false;
  // The latent forward's scores experiment
  // (CudaBackendOptions::latent_scores_by_columns).
  bool latent_scores_by_columns = false;
};

constexpr char kUsage[] =
    "usage: backend_ops_check [--precision=fp32|bf16|both] [--device=N]\n"
    "                         [--filter=SUBSTRING[|...]] [--verbose]\n"
    "                         [--latent-scores-by-columns]\n";

bool ParseFlags(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (absl::StartsWith(arg, "--precision=")) {
      const std::string value = arg.substr(12);
      if (value == "fp32") {
        flags->modes = {Precision::kFp32};
      } else if (value == "bf16") {
        flags->modes = {Precision::kBf16};
      } else if (value != "both") {
        return false;
      }
    } else if (absl::StartsWith(arg, "--device=")) {
      if (!absl::SimpleAtoi(arg.substr(9), &flags->device)) return false;
    } else if (absl::StartsWith(arg, "--filter=")) {
      flags->filter = arg.substr(9);
    } else if (arg == "--verbose") {
      flags->verbose = true;
    } else if (arg == "--latent-scores-by-columns") {
      flags->latent_scores_by_columns = true;
    } else {
      return false;
    }
  }
  return true;
}

// Whether `name` contains any of the |-separated substrings of `filter`.
bool MatchesFilter(const std::string& name, const std::string& filter) {
  for (absl::string_view part : absl::StrSplit(filter, '|')) {
    if (absl::StrContains(name, part)) return true;
  }
  return false;
}

// Seconds since the last lap.
class Stopwatch {
 public:
  double Lap() {
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    return seconds;
  }

 private:
  std::chrono::steady_clock::time_point last_ =
      std::chrono::steady_clock::now();
};

// Where a case's time goes: making its inputs (and the saved values of a
// backward), the CPU reference, the CUDA runs with their copies, the checks.
struct PhaseSeconds {
  double build = 0, cpu = 0, cuda = 0, ops = 0, check = 0;

  PhaseSeconds& operator+=(const PhaseSeconds& o) {
    build += o.build;
    cpu += o.cpu;
    cuda += o.cuda;
    ops += o.ops;
    check += o.check;
    return *this;
  }
  std::string ToString() const {
    return absl::StrFormat(
        "inputs %.1f s, CPU reference %.1f s, CUDA runs with copies %.1f s "
        "(the ops alone %.1f s), checks %.1f s",
        build, cpu, cuda, ops, check);
  }
};

// A case with its CPU reference, made on a thread of its own while the GPU
// runs the case before it: over the whole harness the inputs and the
// reference took about as long as the CUDA runs and checks (132 s against
// 157 s on an H100's host), so overlapping them saves up to the shorter. The
// CPU side touches host memory and the CPU backend alone.
struct PreparedCase {
  Case c;
  RunOutput cpu;
  PhaseSeconds seconds;
};

// A case's two CUDA runs in one precision mode, and its inputs' check.
struct ModeRuns {
  Precision mode;
  RunOutput first, second;
  Outcome inputs{"inputs", "differ"};  // DeviceCase::CheckInputs's
};

PreparedCase Prepare(const Factory& factory) {
  std::snprintf(g_preparing, sizeof g_preparing, "%s %s", factory.op.c_str(),
                factory.label.c_str());
  PreparedCase p;
  Stopwatch watch;
  p.c = factory.make();
  p.seconds.build += watch.Lap();
  p.cpu = RunOnCpu(p.c);
  p.seconds.cpu += watch.Lap();
  SetAccumulatorStarts(&p.c, p.cpu);
  return p;
}

// cuDNN attention calls of more query-key pairs than this run in chunks of
// queries: low enough that the 2048-token self-attention cases take two.
constexpr int64_t kAttentionPairsPerCall = int64_t{1} << 21;

int Main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::signal(SIGABRT, OnAbort);
  GLM_CUDA_CHECK(cudaSetDevice(flags.device));
  std::unique_ptr<Backend> backends[2];
  for (Precision mode : flags.modes) {
    // Products that time cuBLASLt's algorithms (the largest writing ones)
    // run the one their first call chose: checked like any other.
    CudaBackendOptions options{flags.device, mode, kAttentionPairsPerCall};
    options.time_product_algorithms = true;
    options.sparse_indexer_loss = true;
    options.latent_scores_by_columns = flags.latent_scores_by_columns;
    absl::StatusOr<std::unique_ptr<Backend>> backend = MakeCudaBackend(options);
    if (!backend.ok()) {
      std::fprintf(stderr, "%s\n", backend.status().ToString().c_str());
      return 2;
    }
    backends[ModeIndex(mode)] = *std::move(backend);
  }
  const auto start = std::chrono::steady_clock::now();
  PhaseSeconds total;
  std::map<std::pair<std::string, int>, Tally> tallies;
  std::vector<std::string> failures;
  int run = 0;
  Factories chosen;
  for (Factory& factory : AllCases()) {
    if (MatchesFilter(factory.op + " " + factory.label, flags.filter)) {
      chosen.push_back(std::move(factory));
    }
  }
  // Each case's checks and report run on a thread of their own while the GPU
  // runs the next case (run77: 47.5 s of checks on the main thread), one case
  // at a time so that the reports keep their order.
  std::future<PhaseSeconds> checking;
  auto finish_checks = [&] {
    if (checking.valid()) total += checking.get();
  };
  std::future<PreparedCase> next;
  if (!chosen.empty())
    next = std::async(std::launch::async, Prepare, std::cref(chosen[0]));
  for (size_t k = 0; k < chosen.size(); ++k) {
    const std::string name = chosen[k].op + " " + chosen[k].label;
    auto prepared = std::make_shared<PreparedCase>(next.get());
    if (k + 1 < chosen.size()) {
      next = std::async(std::launch::async, Prepare, std::cref(chosen[k + 1]));
    }
    std::snprintf(g_running, sizeof g_running, "%s", name.c_str());
    PhaseSeconds& seconds = prepared->seconds;
    Stopwatch watch;
    DeviceCase device(prepared->c);
    seconds.build += watch.Lap();
    auto runs = std::make_shared<std::vector<ModeRuns>>();
    for (Precision mode : flags.modes) {
      std::snprintf(g_running, sizeof g_running, "%s (%s)", name.c_str(),
                    ModeName(mode));
      Backend& backend = *backends[ModeIndex(mode)];
      ModeRuns& r = runs->emplace_back();
      r.mode = mode;
      seconds.ops += device.Run(backend, &r.first);
      seconds.ops += device.Run(backend, &r.second);
      seconds.cuda += watch.Lap();
      r.inputs = device.CheckInputs();
      seconds.check += watch.Lap();
      ++run;
    }
    finish_checks();
    checking = std::async(std::launch::async, [&, prepared, runs, name] {
      std::snprintf(g_checking, sizeof g_checking, "%s", name.c_str());
      Stopwatch check_watch;
      const Case& c = prepared->c;
      for (const ModeRuns& r : *runs) {
        std::vector<Outcome> outcomes =
            CheckOutputs(c, prepared->cpu, r.first, ModeIndex(r.mode));
        outcomes.push_back(CheckRepeatable(c, r.first, r.second));
        outcomes.push_back(r.inputs);
        if (!Report(c, r.mode, outcomes, flags.verbose,
                    &tallies[{c.op, ModeIndex(r.mode)}])) {
          failures.push_back(absl::StrCat(ModeName(r.mode), " ", name));
        }
      }
      PhaseSeconds seconds = prepared->seconds;
      seconds.check += check_watch.Lap();
      if (flags.verbose)
        std::printf("     time: %s\n", seconds.ToString().c_str());
      return seconds;
    });
  }
  finish_checks();
  if (run == 0) {
    std::fprintf(stderr, "no case matches --filter=%s\n", flags.filter.c_str());
    return 2;
  }
  PrintSummary(tallies, failures);
  std::printf(
      "\n%d case runs, %zu failed; %.1f s: %s (inputs and the CPU reference "
      "a case ahead, the checks a case behind, beside the CUDA runs)\n",
      run, failures.size(), SecondsSince(start), total.ToString().c_str());
  return failures.empty() ? 0 : 1;
}

}  // namespace
}  // namespace glm

int main(int argc, char** argv) { return glm::Main(argc, argv); }
