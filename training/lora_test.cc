#include "training/lora.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"
#include "model/glm_model.h"
#include "training/trainer.h"

namespace glm {
namespace {

ModelParameters TinyModel() {
  ModelParameters params(*PresetConfig("glm5.2-tiny"));
  params.InitRandom(3);
  return params;
}

Batch ShortBatch() {
  std::vector<int32_t> ids;
  for (int i = 0; i < 12; ++i) ids.push_back((i * 37 + 5) % 256);
  return Batch::FromSequences({ids});
}

TEST(LoraTest, StartsFromTheBaseModel) {
  ModelParameters params = TinyModel();
  const std::vector<float> before =
      params.layers[2].self_attn.q_a_proj.value.HostValues();
  auto lora = LoraAdapters::Create(&params, {4, 8, {"q_a_proj", "o_proj"}}, 1);
  ASSERT_TRUE(lora.ok()) << lora.status();
  EXPECT_EQ(lora->targets(), 2 * 9);  // 8 layers + MTP
  CpuBackend backend;
  lora->Merge(backend);
  EXPECT_EQ(params.layers[2].self_attn.q_a_proj.value.HostValues(), before);
  EXPECT_EQ(lora->Trainable()[0].name,
            "model.layers.0.self_attn.q_a_proj.lora_A.weight");
}

TEST(LoraTest, UnknownModuleIsAnError) {
  ModelParameters params = TinyModel();
  auto lora = LoraAdapters::Create(&params, {4, 8, {"q_proj"}}, 1);
  ASSERT_FALSE(lora.ok());
  EXPECT_NE(lora.status().message().find("q_proj"), std::string::npos);
}

// Adapter gradients against central finite differences of the model's loss.
TEST(LoraTest, AdapterGradientsMatchFiniteDifferences) {
  ModelParameters params = TinyModel();
  auto lora = LoraAdapters::Create(&params, {2, 4, {"kv_b_proj"}}, 1);
  ASSERT_TRUE(lora.ok());
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.f, 0.05f);
  for (const TrainableTensor& t : lora->Trainable()) {
    float* v = t.value->data();
    for (int64_t i = 0; i < t.value->numel(); ++i) {
      v[i] += normal(rng);  // B nonzero too
    }
  }
  CpuBackend backend;
  GlmModel model(&params, &backend, LossOptions{0.1f, 0.f});
  auto loss = [&]() {
    lora->Merge(backend);
    return model.Forward(ShortBatch())->total_loss;
  };
  params.ZeroGrad();
  loss();
  ASSERT_TRUE(model.Backward().ok());
  lora->AdapterGradients(backend);
  std::vector<TrainableTensor> adapters = lora->Trainable();
  for (int which : {0, 1, 6, 7}) {  // A and B of two layers
    const TrainableTensor& t = adapters[which];
    for (int64_t i : {int64_t{0}, t.value->numel() / 2}) {
      float& x = t.value->data()[i];
      const float saved = x, h = 1e-2f;
      x = saved + h;
      const double up = loss();
      x = saved - h;
      const double down = loss();
      x = saved;
      const double numeric = (up - down) / (2 * h);
      EXPECT_NEAR(t.grad->data()[i], numeric,
                  2e-3 * std::max(1.0, std::abs(numeric)))
          << t.name << "[" << i << "]";
    }
  }
}

TEST(LoraTest, TrainerUpdatesOnlyAdapters) {
  TrainerOptions options;
  options.model = *PresetConfig("glm5.2-tiny");
  options.train_iters = 3;
  options.global_batch_size = 2;
  options.micro_batch_size = 1;
  options.seq_length = 16;
  options.schedule = {1e-2, 1e-3, 0, 3};
  options.router_bias_update_rate = 1e-3;
  options.lora = LoraOptions{4, 8, {"q_a_proj", "gate_proj"}};
  class Text : public TokenSampleDataset {
   public:
    int64_t size() const override { return 100; }
    int64_t seq_length() const override { return 16; }
    std::vector<int32_t> Sample(int64_t i) const override {
      std::vector<int32_t> ids;
      for (int t = 0; t <= 16; ++t) ids.push_back((i + t * 3) % 200);
      return ids;
    }
  };
  auto params = std::make_unique<ModelParameters>(options.model);
  params->InitRandom(5);
  const std::vector<float> embed = params->embed_tokens.value.HostValues();
  const std::vector<float> bias =
      params->layers[3].moe.e_score_correction_bias.HostValues();
  auto trainer = Trainer::Create(
      options, std::make_unique<PretrainData>(std::make_unique<Text>()),
      std::move(params), std::make_unique<CpuBackend>());
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  while (!(*trainer)->Done()) ASSERT_TRUE((*trainer)->Step().ok());
  ModelParameters& p = (*trainer)->params();
  EXPECT_EQ(p.embed_tokens.value.HostValues(), embed);
  EXPECT_EQ(p.layers[3].moe.e_score_correction_bias.HostValues(), bias);
  const TrainingState state = (*trainer)->State();
  ASSERT_FALSE(state.model.empty());
  for (const StateTensor& t : state.model) {
    EXPECT_NE(t.name.find(".lora_"), std::string::npos) << t.name;
  }
}

}  // namespace
}  // namespace glm
