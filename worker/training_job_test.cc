#include "worker/training_job.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/native_checkpoint.h"
#include "checkpoint/safetensors.h"
#include "data/indexed_dataset.h"
#include "data/packed_sft_dataset.h"
#include "data/tokenizer.h"
#include "gtest/gtest.h"
#include "worker/test_processes.h"
#include "worker/tiny_pretrain_spec.h"

namespace glm {
namespace {

// Byte-tokenized documents of a few repeating sentences.
std::string WriteCorpus(const std::string& dir) {
  const std::string prefix = dir + "/corpus";
  auto builder = IndexedDatasetBuilder::Create(prefix, TokenDtype::kUint16);
  EXPECT_TRUE(builder.ok());
  const std::vector<std::string> documents = {
      "the quick brown fox jumps over the lazy dog. ",
      "a stitch in time saves nine. ", "all that glitters is not gold. "};
  for (int copy = 0; copy < 40; ++copy) {
    for (const std::string& text : documents) {
      std::vector<int32_t> ids(text.begin(), text.end());
      ids.push_back(256);  // end of document
      EXPECT_TRUE((*builder)->AddDocument(ids).ok());
    }
  }
  EXPECT_TRUE((*builder)->Finish().ok());
  return prefix;
}

v1::Assignment TinyJob(const std::string& dir, int64_t iters) {
  v1::Assignment assignment;
  assignment.set_job_id("job-test");
  assignment.set_world_size(1);
  v1::JobSpec& spec = *assignment.mutable_spec();
  spec = TinyPretrainSpec(WriteCorpus(dir), dir + "/checkpoints", 1,
                          static_cast<int>(iters));
  spec.clear_name();
  v1::TrainingSpec& t = *spec.mutable_training();
  t.set_seed(7);
  t.set_deterministic(true);
  t.set_save_interval(3);
  spec.mutable_data()->set_data_seed(11);
  return assignment;
}

struct RunRecord {
  absl::Status status;
  std::vector<double> losses;  // by iteration, from the first one run
  std::vector<v1::CheckpointManifest> checkpoints;
};

RunRecord RunJob(const v1::Assignment& assignment, int64_t stop_after = -1) {
  RunRecord record;
  TrainingJobHooks hooks;
  hooks.log = [](const std::string&) {};
  hooks.on_step = [&](const v1::StepMetrics& metrics) {
    record.losses.push_back(metrics.lm_loss());
    return metrics.iteration() == stop_after;
  };
  hooks.on_checkpoint = [&](const v1::CheckpointManifest& manifest) {
    record.checkpoints.push_back(manifest);
  };
  record.status = RunTrainingJob(assignment, hooks);
  return record;
}

TEST(TrainingJobTest, ResumeReproducesAnUninterruptedRunBitwise) {
  const RunRecord straight = RunJob(TinyJob(TempDir("straight"), 6));
  ASSERT_TRUE(straight.status.ok()) << straight.status;
  ASSERT_EQ(straight.losses.size(), 6u);
  ASSERT_EQ(straight.checkpoints.size(), 2u);  // iterations 3 and 6

  const v1::Assignment job = TinyJob(TempDir("interrupted"), 6);
  const RunRecord first = RunJob(job, /*stop_after=*/3);
  EXPECT_EQ(first.status.code(), absl::StatusCode::kCancelled);
  ASSERT_EQ(first.checkpoints.size(), 1u);
  EXPECT_EQ(first.checkpoints[0].iteration(), 3);
  EXPECT_EQ(first.checkpoints[0].job_id(), "job-test");

  const RunRecord second = RunJob(job);
  ASSERT_TRUE(second.status.ok()) << second.status;
  ASSERT_EQ(second.losses.size(), 3u);  // iterations 4..6 only
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(second.losses[i], straight.losses[3 + i])
        << "iteration " << 4 + i;
  }
  EXPECT_EQ(*ReadLatestIteration(job.spec().training().save_dir()), 6);
}

// A save that fails (here: a file stands where iteration 6's folder goes)
// stops the job with an error naming the checkpoint, and leaves the previous
// checkpoint and `latest` as they were.
TEST(TrainingJobTest, AFailedSaveStopsTheJobAndKeepsThePreviousCheckpoint) {
  const v1::Assignment job = TinyJob(TempDir("failed_save"), 6);
  const std::string save_dir = job.spec().training().save_dir();
  ASSERT_EQ(RunJob(job, /*stop_after=*/3).checkpoints.size(), 1u);
  std::ofstream(save_dir + "/iter_0000006") << "in the way";

  const RunRecord resumed = RunJob(job);
  EXPECT_FALSE(resumed.status.ok());
  EXPECT_NE(resumed.status.message().find("iter_0000006"), std::string::npos)
      << resumed.status;
  // Iterations 4 and 5 reported; 6 ran, and its save failed before its report.
  EXPECT_EQ(resumed.losses.size(), 2u);
  EXPECT_TRUE(resumed.checkpoints.empty());
  EXPECT_EQ(*ReadLatestIteration(save_dir), 3);
  EXPECT_TRUE(std::filesystem::exists(save_dir + "/iter_0000003"));
}

TEST(TrainingJobTest, ExportsTheFinalCheckpointAsHfSafetensors) {
  const std::string dir = TempDir("export");
  v1::Assignment job = TinyJob(dir, 2);
  job.mutable_spec()->mutable_training()->set_export_hf_dir(dir + "/hf");
  std::vector<std::string> log;
  TrainingJobHooks hooks;
  hooks.log = [&](const std::string& line) { log.push_back(line); };
  hooks.on_step = [](const v1::StepMetrics&) { return false; };
  hooks.on_checkpoint = [](const v1::CheckpointManifest&) {};
  ASSERT_TRUE(RunTrainingJob(job, hooks).ok());
  EXPECT_TRUE(std::filesystem::exists(dir + "/hf/config.json"));
  EXPECT_TRUE(
      std::filesystem::exists(dir + "/hf/model.safetensors.index.json"));
  EXPECT_NE(log.back().find("bitwise equal"), std::string::npos) << log.back();

  job.mutable_spec()->mutable_training()->clear_save_dir();
  const absl::Status status = RunTrainingJob(job, hooks);
  EXPECT_NE(status.message().find("training.export_hf_dir"), std::string::npos);
}

TEST(TrainingJobTest, LoraSftFromAnExportTrainsAdaptersOnlyAndExportsMerged) {
  const std::string dir = TempDir("lora");
  v1::Assignment pretrain = TinyJob(dir, 2);
  pretrain.mutable_spec()->mutable_training()->set_export_hf_dir(dir + "/base");
  ASSERT_TRUE(RunJob(pretrain).status.ok());

  v1::Assignment lora = TinyJob(dir, 3);
  v1::JobSpec& spec = *lora.mutable_spec();
  spec.mutable_model()->set_hf_checkpoint_dir(dir + "/base");
  v1::TrainingSpec& t = *spec.mutable_training();
  t.set_mode(v1::LORA);
  t.set_seq_length(64);
  t.set_save_dir(dir + "/lora-checkpoints");
  t.set_export_hf_dir(dir + "/merged");
  t.mutable_lora()->set_rank(4);
  t.mutable_lora()->add_target_modules("q_a_proj");
  t.mutable_lora()->set_merge_on_export(true);
  spec.mutable_data()->mutable_sources(0)->set_path(WritePackedChats(dir));
  const RunRecord run = RunJob(lora);
  ASSERT_TRUE(run.status.ok()) << run.status;
  ASSERT_EQ(run.losses.size(), 3u);

  // The checkpoint holds adapters (and their moments) only.
  ASSERT_FALSE(run.checkpoints.empty());
  EXPECT_EQ(run.checkpoints.back().kind(), "lora");
  for (const v1::TensorEntry& entry : run.checkpoints.back().tensors()) {
    EXPECT_NE(entry.name().find(".lora_"), std::string::npos) << entry.name();
  }
  // The merged export: untouched weights bitwise equal to the base, targeted
  // ones changed.
  auto base = SafetensorsFolder::Open(dir + "/base");
  auto merged = SafetensorsFolder::Open(dir + "/merged");
  ASSERT_TRUE(base.ok() && merged.ok());
  auto bytes = [](const SafetensorsFolder& folder, const std::string& name) {
    return std::string(*folder.FileOf(name)->Bytes(name));
  };
  EXPECT_EQ(bytes(*merged, "model.embed_tokens.weight"),
            bytes(*base, "model.embed_tokens.weight"));
  EXPECT_EQ(bytes(*merged, "model.layers.2.self_attn.o_proj.weight"),
            bytes(*base, "model.layers.2.self_attn.o_proj.weight"));
  EXPECT_NE(bytes(*merged, "model.layers.2.self_attn.q_a_proj.weight"),
            bytes(*base, "model.layers.2.self_attn.q_a_proj.weight"));
}

TEST(TrainingJobTest, UnsupportedSetupsAreClearErrors) {
  v1::Assignment job = TinyJob(TempDir("unsupported"), 2);
  job.set_world_size(2);
  job.mutable_spec()->mutable_parallel()->set_world_size(2);
  job.mutable_spec()->mutable_parallel()->set_etp(2);
  // The same rule the coordinator applies at submission.
  absl::Status status = RunTrainingJob(job, {});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("parallel.etp"), std::string::npos);

  // More than one rank needs the coordinator's rendezvous to find its peers.
  job.mutable_spec()->mutable_parallel()->clear_etp();
  status = RunTrainingJob(job, {});
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("rendezvous"), std::string::npos);

  job.set_world_size(1);
  job.mutable_spec()->mutable_parallel()->set_world_size(1);
  job.mutable_spec()->mutable_data()->clear_sources();
  status = RunJob(job).status;
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("data.sources"), std::string::npos);
}

// The benches' switches in a worker's environment: a value of neither form
// fails the job, naming the variable, before it trains.
TEST(TrainingJobTest, BadEnvironmentSwitchesAreClearErrors) {
  const v1::Assignment job = TinyJob(TempDir("environment"), 2);
  for (const auto& [name, value] :
       {std::pair{"GLM_LATENT_ATTENTION_FROM", "16k"},
        std::pair{"GLM_INDEXER_LOSS_IN_FORWARD", "yes"},
        std::pair{"GLM_OP_TIMES", "true"}}) {
    setenv(name, value, 1);
    const absl::Status status = RunJob(job).status;
    unsetenv(name);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_NE(status.message().find(name), std::string::npos) << status;
  }
}

}  // namespace
}  // namespace glm
