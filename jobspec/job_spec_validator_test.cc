#include "jobspec/job_spec_validator.h"

#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include "gtest/gtest.h"
#include "jobspec/test_specs.h"

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

// Inputs that once crashed the coordinator or were accepted though they made
// no sense: each is refused, naming the field and quoting a bounded part.
TEST(JobSpecValidatorTest, OutOfBoundsInputIsRefused) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  ExpectRejected(
      "name", [](v1::JobSpec* s) { s->set_name(std::string(100000, 'n')); },
      "more than 128");
  ExpectRejected(
      "name", [](v1::JobSpec* s) { s->set_name("a\x1b[2Jb"); },
      "\"a\\x1b[2Jb\"");
  ExpectRejected(
      "name", [](v1::JobSpec* s) { s->set_name("../x y"); }, "only letters");
  ExpectRejected(
      "spec",
      [](v1::JobSpec* s) {
        s->mutable_model()->set_hf_config_json(std::string(3 << 20, ' '));
      },
      "more than 2097152");
  ExpectRejected(
      "model.hf_config_json",
      [](v1::JobSpec* s) {
        s->mutable_model()->set_hf_config_json(std::string(1500000, ' '));
      },
      "more than the 1048576");
  ExpectRejected(
      "training.save_dir",
      [](v1::JobSpec* s) { s->mutable_training()->set_save_dir("ckpt\n"); },
      "control characters");
  ExpectRejected(
      "data.sources[0].path",
      [](v1::JobSpec* s) {
        s->mutable_data()->mutable_sources(0)->set_path(std::string(5000, 'p'));
      },
      "more than 4096");
  ExpectRejected(
      "data.sources",
      [](v1::JobSpec* s) {
        for (int i = 0; i < 2000; ++i) s->mutable_data()->add_sources();
      },
      "more than 1024");
  ExpectRejected("training.lora.target_modules", [](v1::JobSpec* s) {
    for (int i = 0; i < 100; ++i) {
      s->mutable_training()->mutable_lora()->add_target_modules("o_proj");
    }
  });
  ExpectRejected(
      "training.lr",
      [nan](v1::JobSpec* s) { s->mutable_training()->set_lr(nan); },
      "must be finite");
  ExpectRejected(
      "training.lr",
      [inf](v1::JobSpec* s) { s->mutable_training()->set_lr(inf); },
      "must be finite");
  ExpectRejected("training.min_lr", [inf](v1::JobSpec* s) {
    s->mutable_training()->set_min_lr(inf);
  });
  ExpectRejected("data.sources[0].weight", [inf](v1::JobSpec* s) {
    s->mutable_data()->mutable_sources(0)->set_weight(inf);
  });
  ExpectRejected("training.weight_decay", [](v1::JobSpec* s) {
    s->mutable_training()->set_weight_decay(-0.1);
  });
  ExpectRejected(
      "training.adam_beta2",
      [](v1::JobSpec* s) { s->mutable_training()->set_adam_beta2(1); },
      "below 1");
  ExpectRejected("training.lora.alpha", [nan](v1::JobSpec* s) {
    s->mutable_training()->mutable_lora()->set_alpha(nan);
  });
  ExpectRejected(
      "parallel.world_size",
      [](v1::JobSpec* s) { s->mutable_parallel()->set_world_size(1 << 30); },
      "more than the 1048576");
  // 65536 * 65536 is 0 in 32 bits; the product is taken in 64.
  ExpectRejected(
      "parallel.world_size",
      [](v1::JobSpec* s) {
        s->mutable_parallel()->set_world_size(65536);
        s->mutable_parallel()->set_tp(65536);
        s->mutable_parallel()->set_pp(65536);
      },
      "tp*pp*cp = 4294967296");
  ExpectRejected("parallel.vpp", [](v1::JobSpec* s) {
    s->mutable_parallel()->set_vpp(1 << 30);
  });
  ExpectRejected(
      "training.micro_batch_size",
      [](v1::JobSpec* s) {
        s->mutable_training()->set_micro_batch_size(int64_t{1} << 62);
      },
      "more than the 16777216");
  ExpectRejected("training.train_iters", [](v1::JobSpec* s) {
    s->mutable_training()->set_train_iters(int64_t{1} << 50);
  });
  ExpectRejected(
      "training.seq_length",
      [](v1::JobSpec* s) { s->mutable_training()->set_seq_length(4097); },
      "max_position_embeddings 4096");
  ExpectRejected("training.seq_length", [](v1::JobSpec* s) {
    s->mutable_training()->set_seq_length(int64_t{1} << 40);
  });
  ExpectRejected("data.pad_seq_to_mult", [](v1::JobSpec* s) {
    s->mutable_data()->set_pad_seq_to_mult(1 << 30);
  });
  ExpectRejected("training.max_restarts", [](v1::JobSpec* s) {
    s->mutable_training()->set_max_restarts(1 << 30);
  });
  ExpectRejected(
      "parallel.layout",
      [](v1::JobSpec* s) {
        s->mutable_parallel()->set_layout(std::string(40000, '('));
      },
      "longer than the 8192");
  ExpectRejected(
      "parallel.layout",
      [](v1::JobSpec* s) {
        s->mutable_parallel()->set_layout(std::string(4000, '('));
      },
      "nest more than 32");
  ExpectRejected(
      "device", [](v1::JobSpec* s) { s->set_device(std::string(4000, 'd')); },
      "(4000 bytes)");
}

TEST(JobSpecValidatorTest, RefusalsQuoteABoundedPart) {
  v1::JobSpec spec = LoadTestSpec("tiny_job.json");
  spec.mutable_parallel()->set_layout(std::string(8000, 't') + "x");
  absl::StatusOr<JobPlan> plan = ValidateJobSpec(spec);
  ASSERT_FALSE(plan.ok());
  EXPECT_LT(plan.status().message().size(), 400u) << plan.status();
}

// The refusals a worker once made minutes after the job was scheduled; each
// now comes at submission, naming the field.
TEST(JobSpecValidatorTest, WhatOnlyAWorkerRefusedIsRefusedUpFront) {
  ExpectRejected(
      "parallel.etp",
      [](v1::JobSpec* s) {
        s->mutable_parallel()->set_world_size(4);
        s->mutable_parallel()->set_ep(2);
        s->mutable_parallel()->set_etp(2);
      },
      "routed experts are split by ep only");
  ExpectRejected(
      "training.seq_length",
      [](v1::JobSpec* s) { s->mutable_training()->set_seq_length(1); },
      "must be at least 2");
  ExpectRejected(
      "training.lr",
      [](v1::JobSpec* s) {
        s->mutable_training()->set_lr(0);
        s->mutable_training()->set_min_lr(0);
      },
      "must be positive, got 0");
  ExpectRejected(
      "training.lr_decay_iters",
      [](v1::JobSpec* s) { s->mutable_training()->set_lr_decay_iters(1); },
      "1 is below training.warmup_iters 2");
  ExpectRejected(
      "training.warmup_iters",
      [](v1::JobSpec* s) { s->mutable_training()->set_warmup_iters(21); },
      "21 exceeds training.train_iters 20");
  ExpectRejected(
      "training.global_batch_size",
      [](v1::JobSpec* s) {
        s->mutable_parallel()->set_layout("Ett|tttt|tt|mL");  // vpp 2
        s->mutable_parallel()->set_vpp(2);
        s->mutable_training()->set_global_batch_size(3);
      },
      "the interleaved pipeline schedule needs the micro batches per step (3) "
      "to be a multiple of pp 2");
  ExpectRejected(
      "training.export_hf_dir",
      [](v1::JobSpec* s) { s->mutable_training()->set_export_hf_dir("/x"); },
      "exporting needs training.save_dir");
  ExpectRejected(
      "data.sources",
      [](v1::JobSpec* s) {
        s->mutable_training()->set_mode(v1::SFT);
        *s->mutable_data()->add_sources() = s->data().sources(0);
      },
      "SFT and LoRA read exactly one packed dataset, got 2");
}

v1::JobSpec LoraSpec() {
  v1::JobSpec spec = LoadTestSpec("tiny_job.json");
  spec.mutable_training()->set_mode(v1::LORA);
  spec.mutable_training()->mutable_lora()->set_rank(4);
  return spec;
}

TEST(JobSpecValidatorTest, RecomputationNeedsOneModelPerRank) {
  // The test spec runs pp 2.
  ExpectRejected(
      "training.recompute_activations",
      [](v1::JobSpec* s) {
        s->mutable_training()->set_recompute_activations(true);
      },
      "needs parallel.pp = 1 (one model per rank; data parallelism is fine), "
      "got 2");
  v1::JobSpec data_parallel = LoadTestSpec("tiny_job.json");
  data_parallel.mutable_training()->set_recompute_activations(true);
  data_parallel.mutable_parallel()->set_pp(1);
  data_parallel.mutable_parallel()->clear_layout();
  const absl::StatusOr<JobPlan> plan = ValidateJobSpec(data_parallel);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->grid.dp, 2);
}

TEST(JobSpecValidatorTest, CudaGraphsNeedTheGpuAndOneModelPerRank) {
  // The test spec runs on the CPU with pp 2.
  ExpectRejected(
      "training.cuda_graphs",
      [](v1::JobSpec* s) { s->mutable_training()->set_cuda_graphs(true); },
      "needs device \"cuda\", got \"cpu\"");
  ExpectRejected(
      "training.cuda_graphs",
      [](v1::JobSpec* s) {
        s->set_device("cuda");
        s->mutable_training()->set_cuda_graphs(true);
      },
      "needs parallel.pp = 1 (one model per rank; data parallelism is fine), "
      "got 2");
  v1::JobSpec data_parallel = LoadTestSpec("tiny_job.json");
  data_parallel.set_device("cuda");
  data_parallel.mutable_training()->set_cuda_graphs(true);
  data_parallel.mutable_parallel()->set_pp(1);
  data_parallel.mutable_parallel()->clear_layout();
  const absl::StatusOr<JobPlan> plan = ValidateJobSpec(data_parallel);
  ASSERT_TRUE(plan.ok()) << plan.status();
}

TEST(JobSpecValidatorTest, OverlappedGradientSumsNeedPlainDataParallelism) {
  // The test spec runs pp 2.
  ExpectRejected(
      "training.overlap_grad_reduce",
      [](v1::JobSpec* s) {
        s->mutable_training()->set_overlap_grad_reduce(true);
      },
      "needs parallel.pp = 1 (one model per rank; data parallelism is fine), "
      "got 2");
  v1::JobSpec lora = LoraSpec();
  lora.mutable_training()->set_overlap_grad_reduce(true);
  const absl::Status refused = ValidateJobSpec(lora).status();
  EXPECT_NE(refused.message().find("training.overlap_grad_reduce: needs a "
                                   "mode other than LORA"),
            std::string::npos)
      << refused;
  v1::JobSpec data_parallel = LoadTestSpec("tiny_job.json");
  data_parallel.mutable_training()->set_overlap_grad_reduce(true);
  data_parallel.mutable_parallel()->set_pp(1);
  data_parallel.mutable_parallel()->clear_layout();
  for (bool zero1 : {false, true}) {
    data_parallel.mutable_training()->set_use_distributed_optimizer(zero1);
    const absl::StatusOr<JobPlan> plan = ValidateJobSpec(data_parallel);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->grid.dp, 2);
  }
}

TEST(JobSpecValidatorTest, LoraTargetsAndExportAreCheckedAtSubmit) {
  // Under pp 2 with the default targets (the attention projections).
  EXPECT_TRUE(ValidateJobSpec(LoraSpec()).ok());
  v1::JobSpec named = LoraSpec();
  named.mutable_training()->mutable_lora()->add_target_modules("o_proj");
  named.mutable_training()->mutable_lora()->add_target_modules("gate_proj");
  EXPECT_TRUE(ValidateJobSpec(named).ok()) << ValidateJobSpec(named).status();

  v1::JobSpec unknown = LoraSpec();
  unknown.mutable_training()->mutable_lora()->add_target_modules("o_proj");
  unknown.mutable_training()->mutable_lora()->add_target_modules("qkv_proj");
  absl::StatusOr<JobPlan> plan = ValidateJobSpec(unknown);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().message(),
            "training.lora.target_modules: no 2-D weight named qkv_proj "
            "(modules look like q_a_proj, kv_b_proj, o_proj, gate_proj)");

  // With MTP, the last stage reads the embedding again: an adapter on it
  // would belong to two pp ranks.
  v1::JobSpec shared = LoraSpec();
  shared.mutable_training()->mutable_lora()->add_target_modules("embed_tokens");
  plan = ValidateJobSpec(shared);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().message(),
            "training.lora.target_modules: model.embed_tokens.weight is read "
            "on several pipeline stages; LoRA on it needs pp 1");
  shared.mutable_parallel()->set_world_size(1);
  shared.mutable_parallel()->set_pp(1);
  shared.mutable_parallel()->clear_layout();
  EXPECT_TRUE(ValidateJobSpec(shared).ok()) << ValidateJobSpec(shared).status();

  v1::JobSpec no_merge = LoraSpec();
  no_merge.mutable_training()->set_save_dir("/ckpt");
  no_merge.mutable_training()->set_export_hf_dir("/hf");
  plan = ValidateJobSpec(no_merge);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(
      plan.status().message().rfind(
          "training.export_hf_dir: a LoRA job exports the merged model", 0),
      0u)
      << plan.status();
  no_merge.mutable_training()->mutable_lora()->set_merge_on_export(true);
  EXPECT_TRUE(ValidateJobSpec(no_merge).ok());
}

}  // namespace
}  // namespace glm
