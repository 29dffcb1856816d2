#include "coordinator/job_spec_validator.h"

#include <functional>
#include <string>

#include "coordinator/test_specs.h"
#include "gtest/gtest.h"

namespace glm {
namespace {

TEST(JobSpecValidatorTest, TinySpecPlansRanksAndStages) {
  absl::StatusOr<JobPlan> plan = ValidateJobSpec(LoadTestSpec("tiny_job.json"));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->model.num_hidden_layers, 8);
  EXPECT_EQ(plan->grid.dp, 1);
  ASSERT_EQ(plan->grid.ranks.size(), 2u);
  EXPECT_EQ(plan->grid.ranks[1].pp, 1);
  ASSERT_EQ(plan->stages.size(), 2u);
  EXPECT_EQ(plan->stages[0].first_layer, 1);
  EXPECT_EQ(plan->stages[0].last_layer, 6);
  EXPECT_TRUE(plan->stages[0].has_embedding);
  EXPECT_EQ(plan->stages[1].first_layer, 7);
  EXPECT_EQ(plan->stages[1].last_layer, 8);
  EXPECT_EQ(plan->stages[1].mtp_layers, 1);
  EXPECT_TRUE(plan->stages[1].has_loss);
}

void ExpectRejected(const std::string& field_prefix,
                    const std::function<void(v1::JobSpec*)>& edit,
                    const std::string& also = "") {
  v1::JobSpec spec = LoadTestSpec("tiny_job.json");
  edit(&spec);
  absl::StatusOr<JobPlan> plan = ValidateJobSpec(spec);
  ASSERT_FALSE(plan.ok()) << "expected " << field_prefix << " to be rejected";
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(plan.status().message());
  EXPECT_EQ(message.rfind(field_prefix + ": ", 0), 0u) << message;
  EXPECT_NE(message.find(also), std::string::npos) << message;
}

TEST(JobSpecValidatorTest, StageStartingOnSkipLayerNamesLayout) {
  absl::StatusOr<JobPlan> plan =
      ValidateJobSpec(LoadTestSpec("skip_layer_job.json"));
  ASSERT_FALSE(plan.ok());
  const std::string message(plan.status().message());
  EXPECT_EQ(message.rfind("parallel.layout: ", 0), 0u) << message;
  EXPECT_NE(
      message.find("stage 1 (pp rank 1, virtual chunk 0) starts at layer 4"),
      std::string::npos)
      << message;
  EXPECT_NE(message.find("source computing layer 3"), std::string::npos)
      << message;
}

TEST(JobSpecValidatorTest, EachBadFieldIsNamed) {
  ExpectRejected("device", [](v1::JobSpec* s) { s->set_device("tpu"); });
  ExpectRejected(
      "scheduling_timeout_seconds",
      [](v1::JobSpec* s) { s->set_scheduling_timeout_seconds(-3); },
      "must not be negative, got -3");
  ExpectRejected("model", [](v1::JobSpec* s) { s->clear_model(); });
  ExpectRejected(
      "model.preset",
      [](v1::JobSpec* s) { s->mutable_model()->set_preset("nope"); },
      "unknown model preset");
  ExpectRejected("model.hf_config_json", [](v1::JobSpec* s) {
    s->mutable_model()->set_hf_config_json("{}");
  });
  ExpectRejected("parallel.world_size", [](v1::JobSpec* s) {
    s->mutable_parallel()->set_world_size(0);
  });
  ExpectRejected(
      "parallel.world_size",
      [](v1::JobSpec* s) { s->mutable_parallel()->set_world_size(3); },
      "tp*pp*cp");
  ExpectRejected("parallel.tp",
                 [](v1::JobSpec* s) { s->mutable_parallel()->set_tp(-1); });
  ExpectRejected(
      "parallel.tp",
      [](v1::JobSpec* s) {
        s->mutable_parallel()->set_world_size(6);  // pp 2
        s->mutable_parallel()->set_tp(3);
      },
      "does not divide the model's num_attention_heads");
  ExpectRejected("parallel.collective_timeout_seconds", [](v1::JobSpec* s) {
    s->mutable_parallel()->set_collective_timeout_seconds(-1);
  });
  ExpectRejected(
      "parallel.ep",
      [](v1::JobSpec* s) {
        s->mutable_parallel()->set_world_size(6);
        s->mutable_parallel()->set_ep(3);
      },
      "3 does not divide model n_routed_experts 8");
  ExpectRejected("parallel.layout", [](v1::JobSpec* s) {
    s->mutable_parallel()->set_layout("Etttttt|ttL");
  });
  ExpectRejected("training.mode",
                 [](v1::JobSpec* s) { s->mutable_training()->clear_mode(); });
  ExpectRejected("training.lora.rank", [](v1::JobSpec* s) {
    s->mutable_training()->set_mode(v1::LORA);
  });
  ExpectRejected("training.train_iters", [](v1::JobSpec* s) {
    s->mutable_training()->set_train_iters(0);
  });
  ExpectRejected("training.seq_length", [](v1::JobSpec* s) {
    s->mutable_training()->set_seq_length(-5);
  });
  ExpectRejected("training.min_lr",
                 [](v1::JobSpec* s) { s->mutable_training()->set_min_lr(-1); });
  ExpectRejected(
      "training.lr",
      [](v1::JobSpec* s) { s->mutable_training()->set_lr(1e-5); },
      "below training.min_lr");
  ExpectRejected(
      "training.global_batch_size",
      [](v1::JobSpec* s) {
        s->mutable_training()->set_micro_batch_size(2);
        s->mutable_training()->set_global_batch_size(3);
      },
      "micro_batch_size * dp = 2 * 1 = 2");
  ExpectRejected("training.max_restarts", [](v1::JobSpec* s) {
    s->mutable_training()->set_max_restarts(-1);
  });
  ExpectRejected("data.sources",
                 [](v1::JobSpec* s) { s->mutable_data()->clear_sources(); });
  ExpectRejected("data.sources[0].weight", [](v1::JobSpec* s) {
    s->mutable_data()->mutable_sources(0)->set_weight(0);
  });
  ExpectRejected("data.sources[1].path", [](v1::JobSpec* s) {
    s->mutable_data()->add_sources()->set_weight(1);
  });
  ExpectRejected("data.tokenizer",
                 [](v1::JobSpec* s) { s->mutable_data()->clear_tokenizer(); });
}

}  // namespace
}  // namespace glm
