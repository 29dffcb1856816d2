#include "model/parameters.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/separate_memory_allocator.h"
#include "model/test_model_util.h"
#include "xxhash.h"

namespace glm {
namespace {

constexpr char kRows[] = "model.layers.0.self_attn.q_b_proj.weight";
constexpr char kColumns[] = "model.layers.0.mlp.down_proj.weight";
constexpr char kExperts[] = "model.layers.1.mlp.experts.gate_up_proj";
constexpr char kWhole[] = "model.layers.1.self_attn.q_a_proj.weight";
constexpr char kNorm[] = "model.layers.1.input_layernorm.weight";
constexpr char kLeftOut[] = "model.layers.2.self_attn.o_proj.weight";

// Some tensors, three of them in part (rows, columns, experts).
HeldTensors SomeTensors() {
  HeldTensors held;
  held.names = std::set<std::string>{kRows, kColumns, kExperts, kWhole, kNorm};
  held.parts[kRows] = {0, 2, 3};
  held.parts[kColumns] = {1, 4, 5};
  held.parts[kExperts] = {0, 1, 2};
  return held;
}

Tensor* ValueOf(ModelParameters& params, const std::string& name) {
  for (const NamedTensor& named : params.Named()) {
    if (named.name == name) return named.value;
  }
  ADD_FAILURE() << "no tensor " << name;
  return nullptr;
}

// Element (i, j, k) of a tensor viewed as [outer, extent, inner] around dim.
void ExpectPartOfWhole(const Tensor& part, const Tensor& whole,
                       const TensorPart& p) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < p.dim; ++d) outer *= whole.dim(d);
  for (size_t d = p.dim + 1; d < whole.shape().size(); ++d) {
    inner *= whole.dim(d);
  }
  ASSERT_EQ(part.numel(), outer * p.count * inner);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < p.count; ++i) {
      for (int64_t k = 0; k < inner; ++k) {
        const int64_t from = (o * whole.dim(p.dim) + p.first + i) * inner + k;
        ASSERT_EQ(part.data()[(o * p.count + i) * inner + k],
                  whole.data()[from]);
      }
    }
  }
}

void ExpectHeldPartsOfWhole(ModelParameters& held, ModelParameters& whole) {
  const HeldTensors& h = held.held();
  for (const NamedTensor& named : held.Named()) {
    const Tensor& expected = *ValueOf(whole, named.name);
    if (!h.Holds(named.name)) {
      EXPECT_TRUE(named.value->empty()) << named.name;
      EXPECT_TRUE(named.grad == nullptr || named.grad->empty()) << named.name;
      continue;
    }
    const auto part = h.parts.find(named.name);
    const TensorPart p = part != h.parts.end()
                             ? part->second
                             : TensorPart{0, 0, expected.dim(0)};
    ExpectPartOfWhole(*named.value, expected, p);
    if (named.grad != nullptr) {
      EXPECT_EQ(named.grad->shape(), named.value->shape()) << named.name;
    }
  }
}

TEST(ModelParametersTest, AllocatesOnlyTheHeldParts) {
  ModelParameters params(TinyTestConfig(), SomeTensors());
  const std::vector<int64_t> rows = params.WholeShape(kRows);
  EXPECT_EQ(ValueOf(params, kRows)->shape(),
            (std::vector<int64_t>{3, rows[1]}));
  const std::vector<int64_t> columns = params.WholeShape(kColumns);
  EXPECT_EQ(ValueOf(params, kColumns)->shape(),
            (std::vector<int64_t>{columns[0], 5}));
  const std::vector<int64_t> experts = params.WholeShape(kExperts);
  EXPECT_EQ(ValueOf(params, kExperts)->shape(),
            (std::vector<int64_t>{2, experts[1], experts[2]}));
  EXPECT_EQ(ValueOf(params, kWhole)->shape(), params.WholeShape(kWhole));
  EXPECT_TRUE(ValueOf(params, kLeftOut)->empty());
  EXPECT_FALSE(params.WholeShape(kLeftOut).empty());
}

TEST(ModelParametersTest, HeldPartsInitializeAsInTheWholeModel) {
  ModelParameters whole(TinyTestConfig());
  whole.InitRandom(7);
  ModelParameters some(TinyTestConfig(), SomeTensors());
  some.InitRandom(7);
  ExpectHeldPartsOfWhole(some, whole);
  EXPECT_EQ(ValueOf(some, kNorm)->HostValues(),
            ValueOf(whole, kNorm)->HostValues());
}

// Matrices ~ N(0, std) with draws independent across elements, tensors and
// seeds; norm weights 1, biases and buffers 0.
TEST(ModelParametersTest, InitRandomDrawsNormalValues) {
  constexpr float kStd = 0.5f;
  ModelParameters params(TinyTestConfig());
  params.InitRandom(7, kStd);
  double sum = 0, squares = 0, lag_products = 0;
  int64_t n = 0;
  for (const NamedTensor& named : params.Named()) {
    const std::vector<float> v = named.value->HostValues();
    if (named.grad == nullptr || named.value->shape().size() == 1) {
      const float constant =
          named.name.find("norm.weight") != std::string::npos ? 1.f : 0.f;
      for (float x : v) ASSERT_EQ(x, constant) << named.name;
      continue;
    }
    for (size_t i = 0; i < v.size(); ++i) {
      sum += v[i];
      squares += double{v[i]} * v[i];
      if (i > 0) lag_products += double{v[i]} * v[i - 1];
    }
    n += v.size();
  }
  ASSERT_GT(n, 10000);
  // Bounds of 5 standard errors (the mean's std is kStd / sqrt(n)).
  const double bound = 5 / std::sqrt(static_cast<double>(n));
  EXPECT_NEAR(sum / n / kStd, 0, bound);
  EXPECT_NEAR(squares / n / (kStd * kStd), 1, 5 * std::sqrt(2.0) * bound);
  EXPECT_NEAR(lag_products / n / (kStd * kStd), 0, bound);
  // Tensors of one shape, and one tensor under two seeds, differ.
  ModelParameters other_seed(TinyTestConfig());
  other_seed.InitRandom(8, kStd);
  const std::string same_shape = "model.layers.2.self_attn.q_a_proj.weight";
  EXPECT_NE(ValueOf(params, kWhole)->HostValues(),
            ValueOf(params, same_shape)->HostValues());
  EXPECT_NE(ValueOf(params, kWhole)->HostValues(),
            ValueOf(other_seed, kWhole)->HostValues());
}

// The draw InitRandom gives element `index` of the sequence `key`, written
// out again: the single-threaded reference the parallel draw must equal bit for
// bit (and a pin of the formula, which reproducible runs depend on).
float ReferenceNormalAt(uint64_t key, uint64_t index) {
  uint64_t z = key + (index + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const float u1 = (static_cast<float>(z >> 40) + 1.f) / 16777216.f;
  const float u2 = static_cast<float>((z >> 8) & 0xFFFFFF) / 16777216.f;
  return std::sqrt(-2.f * std::log(u1)) *
         std::cos(6.28318530717958647692f * u2);
}

uint32_t Bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

// Every matrix of a whole model holds, element by element, the reference draw
// at its index.
void ExpectReferenceDraws(ModelParameters& whole, uint64_t seed, float std) {
  for (const NamedTensor& named : whole.Named()) {
    if (named.grad == nullptr || named.value->shape().size() == 1) continue;
    const uint64_t key =
        XXH3_64bits_withSeed(named.name.data(), named.name.size(), seed);
    const std::vector<float> v = named.value->HostValues();
    for (size_t i = 0; i < v.size(); ++i) {
      ASSERT_EQ(Bits(v[i]), Bits(std * ReferenceNormalAt(key, i)))
          << named.name << " element " << i;
    }
  }
}

// The test's environment sets GLM_CPU_THREADS=3; a vocabulary of 5000 makes
// the models large enough to be allocated on all three threads, and the
// embedding, the output head and the held parts of both below large enough to
// be drawn on all three, with the ranges split inside rows.
TEST(ModelParametersTest, InitRandomOnEveryThreadEqualsTheReferenceDraws) {
  ASSERT_EQ(cpu::NumThreads(), 3);
  ModelConfig config = TinyTestConfig();
  config.vocab_size = 5000;
  // The smallest of them: 7 columns of the output head.
  ASSERT_GE(config.vocab_size * 7, cpu::kMinParallelWork);
  ModelParameters whole(config);
  whole.InitRandom(11, 0.3f);
  ExpectReferenceDraws(whole, 11, 0.3f);
  HeldTensors held = SomeTensors();
  held.names->insert({"model.embed_tokens.weight", "lm_head.weight"});
  held.parts["model.embed_tokens.weight"] = {0, 1234, 3000};
  held.parts["lm_head.weight"] = {1, 3, 7};
  ModelParameters some(config, held);
  some.InitRandom(11, 0.3f);
  ExpectHeldPartsOfWhole(some, whole);
}

TEST(ModelParametersTest, KeepHeldCutsTheWholeModel) {
  ModelParameters whole(TinyTestConfig());
  whole.InitRandom(3);
  ModelParameters kept(TinyTestConfig());
  kept.InitRandom(3);
  ASSERT_TRUE(kept.KeepHeld(SomeTensors()).ok());
  ExpectHeldPartsOfWhole(kept, whole);
  // Already cut: nothing changes.
  ModelParameters some(TinyTestConfig(), SomeTensors());
  some.InitRandom(3);
  ASSERT_TRUE(some.KeepHeld(SomeTensors()).ok());
  ExpectHeldPartsOfWhole(some, whole);
}

TEST(ModelParametersTest, KeepHeldRefusesAnotherShapeAndChangesNothing) {
  ModelParameters params(TinyTestConfig());
  *ValueOf(params, kRows) = Tensor({1, 1});
  const absl::Status status = params.KeepHeld(SomeTensors());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find(kRows), std::string::npos) << status;
  EXPECT_FALSE(ValueOf(params, kLeftOut)->empty());
}

}  // namespace
}  // namespace glm

namespace glm {
namespace {

// A device mirror holds its values in one allocation and its gradients in
// another; ZeroGrad clears every gradient with one fill.
TEST(ModelParametersTest, DeviceMirrorLivesInTwoArenas) {
  ModelParameters host(TinyTestConfig());
  host.InitRandom(3);
  SeparateMemoryAllocator device;
  {
    std::unique_ptr<ModelParameters> mirror = MirrorParameters(host, &device);
    EXPECT_EQ(device.allocations(), 2);
    std::vector<NamedTensor> want = host.Named(), got = mirror->Named();
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].value->HostValues(), want[i].value->HostValues())
          << want[i].name;
      if (got[i].grad == nullptr) continue;
      EXPECT_EQ(got[i].grad->shape(), want[i].grad->shape());
      // Every gradient nonzero, then one ZeroGrad.
      got[i].grad->CopyFrom(*want[i].value);
    }
    // A copy owns its tensors: its ZeroGrad leaves the mirror's gradients.
    ModelParameters copy = *mirror;
    copy.ZeroGrad();
    EXPECT_EQ(mirror->embed_tokens.grad.HostValues(),
              host.embed_tokens.value.HostValues());
    mirror->ZeroGrad();
    for (const NamedTensor& t : mirror->Named()) {
      if (t.grad == nullptr) continue;
      for (float g : t.grad->HostValues()) ASSERT_EQ(g, 0.f) << t.name;
    }
  }
  EXPECT_EQ(device.bytes_in_use(), 0);
}

// In host memory too, every value is a view of one arena and every gradient
// of another, and ZeroGrad clears every gradient with one fill.
TEST(ModelParametersTest, HostModelLivesInTwoArenas) {
  ModelParameters params(TinyTestConfig());
  params.InitRandom(3);
  std::set<const void*> value_arenas, grad_arenas;
  for (NamedTensor& t : params.Named()) {
    EXPECT_TRUE(t.value->on_host());
    value_arenas.insert(t.value->arena());
    if (t.grad == nullptr) continue;
    grad_arenas.insert(t.grad->arena());
    t.grad->CopyFrom(*t.value);
  }
  ASSERT_EQ(value_arenas.size(), 1u);
  ASSERT_EQ(grad_arenas.size(), 1u);
  EXPECT_NE(*value_arenas.begin(), nullptr);
  EXPECT_NE(*grad_arenas.begin(), *value_arenas.begin());
  // A copy owns its tensors: its ZeroGrad leaves the original's gradients.
  ModelParameters copy = params;
  EXPECT_EQ(copy.embed_tokens.grad.arena(), nullptr);
  copy.ZeroGrad();
  EXPECT_EQ(params.embed_tokens.grad.HostValues(),
            params.embed_tokens.value.HostValues());
  params.ZeroGrad();
  for (const NamedTensor& t : params.Named()) {
    if (t.grad == nullptr) continue;
    for (float g : t.grad->HostValues()) ASSERT_EQ(g, 0.f) << t.name;
  }
}

}  // namespace
}  // namespace glm

namespace glm {
namespace {

// Where every held tensor of `params` lives, all in one place: null for host
// memory.
Allocator* OnlyPlace(ModelParameters& params) {
  std::set<Allocator*> places;
  for (const NamedTensor& named : params.Named()) {
    if (!named.value->empty()) places.insert(named.value->allocator());
    if (named.grad != nullptr && !named.grad->empty()) {
      places.insert(named.grad->allocator());
    }
  }
  EXPECT_EQ(places.size(), 1u);
  return places.empty() ? nullptr : *places.begin();
}

// A whole model on a device cut to some tensors stays there, laid out as a
// device model of those tensors is: values in one arena and gradients in
// another (the whole model's arenas freed), the held parts of the values, the
// gradients of tensors kept whole, and zeros for the cut ones.
TEST(ModelParametersTest, KeepHeldOnADeviceKeepsTheModelInItsArenas) {
  ModelParameters host(TinyTestConfig());
  host.InitRandom(3);
  for (NamedTensor& named : host.Named()) {
    if (named.grad != nullptr) named.grad->CopyFrom(*named.value);
  }
  SeparateMemoryAllocator device;
  int64_t held_bytes = 0;
  {
    AllocatorScope on_device(&device);
    const ModelParameters held(TinyTestConfig(), SomeTensors());
    held_bytes = device.bytes_in_use();
  }
  std::unique_ptr<ModelParameters> mirror = MirrorParameters(host, &device);
  CopyGradients(host, *mirror);
  ASSERT_TRUE(mirror->KeepHeld(SomeTensors()).ok());
  EXPECT_EQ(OnlyPlace(*mirror), &device);
  EXPECT_EQ(device.allocations(), 2);
  EXPECT_EQ(device.bytes_in_use(), held_bytes);
  ModelParameters back(TinyTestConfig(), SomeTensors());
  CopyValues(*mirror, back);
  CopyGradients(*mirror, back);
  ExpectHeldPartsOfWhole(back, host);
  for (const NamedTensor& named : back.Named()) {
    if (named.grad == nullptr || named.grad->empty()) continue;
    if (SomeTensors().parts.count(named.name) > 0) {
      for (float g : named.grad->HostValues()) ASSERT_EQ(g, 0.f) << named.name;
    } else {
      EXPECT_EQ(named.grad->HostValues(), named.value->HostValues())
          << named.name;
    }
  }
  // ZeroGrad clears the new gradient arena.
  mirror->ZeroGrad();
  CopyGradients(*mirror, back);
  for (const NamedTensor& named : back.Named()) {
    if (named.grad == nullptr) continue;
    for (float g : named.grad->HostValues()) ASSERT_EQ(g, 0.f) << named.name;
  }
}

// A device model that holds the part already keeps its tensors where they
// are.
TEST(ModelParametersTest, KeepHeldOnADeviceModelAlreadyCutMovesNothing) {
  ModelParameters host(TinyTestConfig(), SomeTensors());
  host.InitRandom(3);
  SeparateMemoryAllocator device;
  std::unique_ptr<ModelParameters> mirror = MirrorParameters(host, &device);
  std::vector<const float*> before;
  for (const NamedTensor& named : mirror->Named()) {
    before.push_back(named.value->data());
  }
  ASSERT_TRUE(mirror->KeepHeld(SomeTensors()).ok());
  std::vector<const float*> after;
  for (const NamedTensor& named : mirror->Named()) {
    after.push_back(named.value->data());
  }
  EXPECT_EQ(after, before);
  EXPECT_EQ(device.allocations(), 2);
}

}  // namespace
}  // namespace glm
