// Distributed training end to end: a real coordinator (in-process, on
// loopback) schedules a job on real glm-worker processes, which connect their
// Gloo groups through the coordinator's rendezvous. Their losses and the
// checkpointed weights and optimizer moments match the same job run by one
// process:
// - two processes: DP2 with and without the distributed optimizer, PP2
//   (1F1B), PP2 with two virtual stages per rank (interleaved 1F1B), EP2,
//   TP2, CP2, and CP2 x EP2 and TP2 x EP2 (the routed experts split over the
//   context or tensor ranks, each routing its own tokens);
// - four processes: PP2 x DP2, PP2 x EP2, TP2 x DP2, PP2 x TP2, PP2 x CP2,
//   and with ZeRO-1 EP2 over DP4 (experts sharded over expert-data pairs),
//   PP2 x EP2 and TP2 x EP2 x DP2.
// LoRA under EP2, PP2, TP2 and PP2 x TP2 exports the merged model one process
// exports.
// Resumes from the ranks' shards (and from whole tensors under TP2) continue
// the run; a killed or missing peer is a clear job error.
#include <signal.h>

#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/hf_name_map.h"
#include "checkpoint/hf_weight_loader.h"
#include "checkpoint/native_checkpoint.h"
#include "coordinator/test_coordinator.h"
#include "gtest/gtest.h"
#include "model/parameters.h"
#include "worker/test_processes.h"
#include "worker/training_job.h"

namespace glm {
namespace {

// Follows the job to its end, passing each step's metrics to `on_metrics`
// once. A watch sees the metrics reported after it starts, and the job as it
// was then: its latest step, which the job may have reported before the
// watch began (it starts as soon as its workers are assigned).
v1::Job WatchSteps(
    const TestCoordinator& server, const std::string& id,
    const std::function<void(const v1::StepMetrics&)>& on_metrics) {
  std::set<int64_t> seen;
  auto pass = [&](const v1::StepMetrics& metrics) {
    if (metrics.iteration() > 0 && seen.insert(metrics.iteration()).second) {
      on_metrics(metrics);
    }
  };
  return WatchToTheEnd(server, id, absl::Seconds(120),
                       [&](const v1::JobEvent& event) {
                         if (event.job().has_latest_metrics()) {
                           pass(event.job().latest_metrics());
                         }
                         if (event.has_metrics()) pass(event.metrics());
                       });
}

// The shared tiny spec with one sample per micro batch (so PP and DP split
// the 4 micro batches) over 3 iterations.
v1::JobSpec DataParallelSpec(const std::string& data, const std::string& save,
                             int world_size) {
  v1::JobSpec spec = TinyPretrainSpec(data, save, world_size, 3);
  spec.set_name("parallel-e2e");
  v1::TrainingSpec& t = *spec.mutable_training();
  // Set, so that a shorter run follows the same schedule.
  t.set_lr_decay_iters(3);
  t.set_warmup_iters(1);
  t.set_micro_batch_size(1);
  // AdamW's default eps (1e-8) steps a weight whose gradient is near 1e-8 by
  // about lr / 2, so float rounding of another summation order moves it by a
  // visible fraction of lr. Tensor and context parallelism change the shape
  // of every GEMM, and so its rounding, everywhere (gradients agree to a few
  // 1e-6; parallel:token_parallel_test); with eps 1e-3 the steps stay linear
  // in the gradients and the comparison measures the parallelism.
  t.set_adam_eps(1e-3);
  return spec;
}

// The model tensors and AdamW moments of the latest checkpoint under
// `save_dir`, by name.
std::map<std::string, std::vector<float>> CheckpointState(
    const std::string& save_dir) {
  const ModelConfig config = *PresetConfig("glm5.2-tiny");
  v1::ParallelLayout layout;
  for (auto set : {&v1::ParallelLayout::set_tp, &v1::ParallelLayout::set_pp,
                   &v1::ParallelLayout::set_cp, &v1::ParallelLayout::set_ep,
                   &v1::ParallelLayout::set_etp, &v1::ParallelLayout::set_dp}) {
    (layout.*set)(1);
  }
  absl::StatusOr<HfNameMap> map =
      HfNameMap::Create(config, ExpertForm::kFused, layout);
  EXPECT_TRUE(map.ok()) << map.status();
  ModelParameters params(config);
  TrainingState state;
  std::map<std::string, Tensor> moments;
  for (const NamedTensor& named : params.Named()) {
    state.model.push_back({named.name, named.value});
    if (named.grad == nullptr) continue;
    for (const char* moment : {"exp_avg/", "exp_avg_sq/"}) {
      const std::string name = moment + named.name;
      moments[name] = Tensor(named.value->shape());
      state.optimizer.push_back({name, &moments[name]});
    }
  }
  absl::StatusOr<v1::CheckpointManifest> loaded =
      LoadCheckpoint(save_dir, *map, /*rank=*/0, &state);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  std::map<std::string, std::vector<float>> values;
  for (const auto* tensors : {&state.model, &state.optimizer}) {
    for (const StateTensor& t : *tensors)
      values[t.name] = t.tensor->HostValues();
  }
  return values;
}

// Runs the job of DataParallelSpec(data, single_save, 1) in this process
// and checks that `metrics` (by iteration) and the latest checkpoint under
// `save_dir` match it: losses and grad norms, weights and moments in
// relative L2 error per tensor (see training/data_parallel_test.cc for why
// not element-wise), all within 1e-5.
// Runs `spec` as one rank in this process; its metrics by iteration.
std::map<int64_t, v1::StepMetrics> RunInThisProcess(const v1::JobSpec& spec) {
  v1::Assignment single;
  single.set_job_id("single");
  single.set_world_size(1);
  *single.mutable_spec() = spec;
  single.mutable_spec()->mutable_parallel()->set_world_size(1);
  std::map<int64_t, v1::StepMetrics> metrics;
  TrainingJobHooks hooks;
  hooks.log = [](const std::string&) {};
  hooks.on_step = [&](const v1::StepMetrics& step) {
    metrics[step.iteration()] = step;
    return false;
  };
  hooks.on_checkpoint = [](const v1::CheckpointManifest&) {};
  const absl::Status status = RunTrainingJob(single, hooks);
  EXPECT_TRUE(status.ok()) << status;
  return metrics;
}

// Relative L2 error within 1e-5 (see ExpectTheRunOfOneProcess).
void ExpectNear(const std::vector<float>& got,
                const std::vector<float>& expected, const std::string& name) {
  ASSERT_EQ(got.size(), expected.size()) << name;
  double norm = 0, error = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    norm += double{expected[i]} * expected[i];
    error += (double{got[i]} - expected[i]) * (double{got[i]} - expected[i]);
  }
  EXPECT_LE(std::sqrt(error), 1e-5 * std::sqrt(norm)) << name;
}

void ExpectTheRunOfOneProcess(const std::string& data,
                              const std::string& single_save,
                              std::map<int64_t, v1::StepMetrics> metrics,
                              const std::string& save_dir) {
  const std::map<int64_t, v1::StepMetrics> reference =
      RunInThisProcess(DataParallelSpec(data, single_save, 1));
  for (const auto& [iteration, expected] : reference) {
    const v1::StepMetrics& got = metrics[iteration];
    EXPECT_NEAR(got.lm_loss(), expected.lm_loss(), 1e-5 * expected.lm_loss())
        << "iteration " << iteration;
    EXPECT_NEAR(got.mtp_loss(), expected.mtp_loss(), 1e-5 * expected.mtp_loss())
        << "iteration " << iteration;
    EXPECT_NEAR(got.grad_norm(), expected.grad_norm(),
                1e-5 * expected.grad_norm())
        << "iteration " << iteration;
  }

  const auto state = CheckpointState(save_dir);
  const auto single_state = CheckpointState(single_save);
  ASSERT_EQ(state.size(), single_state.size());
  for (const auto& [name, expected] : single_state) {
    ExpectNear(state.at(name), expected, name);
  }
}

struct ParallelCase {
  const char* name;
  int world_size, pp;
  const char* layout;
  bool distributed_optimizer;
  int ep = 1;
  int tp = 1;
  int cp = 1;
  bool overlap_grad_reduce = false;
};

class ParallelEndToEndTest : public ::testing::TestWithParam<ParallelCase> {};

TEST_P(ParallelEndToEndTest, WorkerProcessesMatchOneProcess) {
  const ParallelCase& c = GetParam();
  const std::string name = c.name;
  TestCoordinator server(name);
  const std::string dir = TempDir(name);
  const std::string data = WriteDocuments(dir);
  v1::JobSpec spec = DataParallelSpec(data, dir + "/dp2", c.world_size);
  spec.mutable_parallel()->set_pp(c.pp);
  spec.mutable_parallel()->set_layout(c.layout);
  spec.mutable_parallel()->set_ep(c.ep);
  spec.mutable_parallel()->set_tp(c.tp);
  spec.mutable_parallel()->set_cp(c.cp);
  spec.mutable_training()->set_use_distributed_optimizer(
      c.distributed_optimizer);
  spec.mutable_training()->set_overlap_grad_reduce(c.overlap_grad_reduce);
  std::vector<pid_t> workers;
  const std::string id =
      SubmitWithWorkers(server, spec, dir, c.world_size, &workers);
  std::map<int64_t, v1::StepMetrics> distributed;
  const v1::Job ended =
      WatchSteps(server, id, [&](const v1::StepMetrics& metrics) {
        distributed[metrics.iteration()] = metrics;
      });
  StopWorkers(workers);
  ASSERT_EQ(ended.state(), v1::SUCCEEDED) << ended.message();

  ASSERT_EQ(distributed.size(), 3u);
  ExpectTheRunOfOneProcess(data, dir + "/single", distributed, dir + "/dp2");
}

// glm5.2-tiny computes top-k on layers 1, 2, 3 and 7, where stages start.
INSTANTIATE_TEST_SUITE_P(
    Layouts, ParallelEndToEndTest,
    ::testing::Values(
        ParallelCase{"dp2", 2, 1, "", false},
        ParallelCase{"dp2_zero1", 2, 1, "", true},
        ParallelCase{"dp2_overlap", 2, 1, "", false, 1, 1, 1, true},
        ParallelCase{"dp2_zero1_overlap", 2, 1, "", true, 1, 1, 1, true},
        ParallelCase{"pp2", 2, 2, "Etttttt|ttmL", false},
        ParallelCase{"pp2_vpp2", 2, 2, "Et|t|tttt|ttmL", false},
        ParallelCase{"pp2_dp2_zero1", 4, 2, "Etttttt|ttmL", true},
        ParallelCase{"ep2", 2, 1, "", false, 2},
        ParallelCase{"pp2_ep2", 4, 2, "Etttttt|ttmL", false, 2},
        ParallelCase{"tp2", 2, 1, "", false, 1, 2},
        ParallelCase{"cp2", 2, 1, "", false, 1, 1, 2},
        ParallelCase{"tp2_dp2_zero1", 4, 1, "", true, 1, 2},
        ParallelCase{"pp2_tp2", 4, 2, "Etttttt|ttmL", false, 1, 2},
        ParallelCase{"pp2_cp2", 4, 2, "Etttttt|ttmL", false, 1, 1, 2},
        ParallelCase{"cp2_ep2", 2, 1, "", false, 2, 1, 2},
        ParallelCase{"ep2_dp2_zero1", 4, 1, "", true, 2},
        ParallelCase{"tp2_ep2", 2, 1, "", false, 2, 2},
        ParallelCase{"pp2_ep2_zero1", 4, 2, "Etttttt|ttmL", true, 2},
        ParallelCase{"tp2_ep2_dp2_zero1", 4, 1, "", true, 2, 2}),
    [](const ::testing::TestParamInfo<ParallelCase>& info) {
      return std::string(info.param.name);
    });

// Two iterations, then a second job to three that resumes at two from the
// ranks' checkpoint shards: the run matches one process's uninterrupted run.
void ExpectResumingFromShardsContinuesTheRun(
    const std::string& name,
    const std::function<void(v1::ParallelSpec*)>& parallel) {
  const std::string dir = TempDir(name);
  const std::string data = WriteDocuments(dir);
  v1::JobSpec spec = DataParallelSpec(data, dir + "/save", 2);
  parallel(spec.mutable_parallel());
  std::map<int64_t, v1::StepMetrics> metrics;
  std::vector<int64_t> resumed_iterations;
  for (const int64_t iterations : {2, 3}) {
    spec.mutable_training()->set_train_iters(iterations);
    // A coordinator of its own: the first job's workers are gone.
    TestCoordinator server(name + "_" + std::to_string(iterations));
    std::vector<pid_t> workers;
    const std::string id = SubmitWithWorkers(server, spec, dir, 2, &workers);
    const v1::Job ended =
        WatchSteps(server, id, [&](const v1::StepMetrics& step) {
          metrics[step.iteration()] = step;
          if (iterations == 3) resumed_iterations.push_back(step.iteration());
        });
    StopWorkers(workers);
    ASSERT_EQ(ended.state(), v1::SUCCEEDED) << ended.message();
  }
  EXPECT_EQ(resumed_iterations, std::vector<int64_t>{3});
  ASSERT_EQ(metrics.size(), 3u);
  ExpectTheRunOfOneProcess(data, dir + "/single", metrics, dir + "/save");
}

// Every pp rank writes its stages' tensors as its checkpoint shard.
TEST(PipelineResumeTest, ResumingFromTheRanksShardsContinuesTheRun) {
  ExpectResumingFromShardsContinuesTheRun(
      "pp2_resume", [](v1::ParallelSpec* parallel) {
        parallel->set_pp(2);
        parallel->set_layout("Etttttt|ttmL");
      });
}

// Every ep rank writes its routed experts as its checkpoint shard and loads
// them back on resume.
TEST(ExpertParallelResumeTest, ResumingFromTheRanksShardsContinuesTheRun) {
  ExpectResumingFromShardsContinuesTheRun(
      "ep2_resume", [](v1::ParallelSpec* parallel) { parallel->set_ep(2); });
}

// Under TP2 rank 0 writes whole tensors (gathered from both tensor ranks)
// and each rank loads its parts back.
TEST(TensorParallelResumeTest, ResumingFromWholeTensorsContinuesTheRun) {
  ExpectResumingFromShardsContinuesTheRun(
      "tp2_resume", [](v1::ParallelSpec* parallel) { parallel->set_tp(2); });
}

// The adapters and moments of the latest LoRA checkpoint under `save_dir`.
std::map<std::string, std::vector<float>> LoraCheckpointState(
    const std::string& save_dir) {
  absl::StatusOr<int64_t> iteration = ReadLatestIteration(save_dir);
  EXPECT_TRUE(iteration.ok()) << iteration.status();
  if (!iteration.ok()) return {};
  absl::StatusOr<NativeCheckpoint> checkpoint =
      NativeCheckpoint::Open(IterationDirectory(save_dir, *iteration));
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
  if (!checkpoint.ok()) return {};
  std::map<std::string, Tensor> tensors;
  std::vector<StateTensor> state;
  for (const std::string& name : checkpoint->names()) {
    const v1::TensorEntry* entry = checkpoint->Find(name);
    tensors[name] = Tensor({entry->shape().begin(), entry->shape().end()});
    state.push_back({name, &tensors[name]});
  }
  EXPECT_TRUE(LoadLoraCheckpoint(save_dir, state).ok());
  std::map<std::string, std::vector<float>> values;
  for (const auto& [name, tensor] : tensors) values[name] = tensor.values();
  return values;
}

// LoRA fine-tuning of an export on two worker processes split by `parallel`:
// the same losses as one process, and the merged HF export (each rank writes
// its part of the merged model) equal to one process's.
void ExpectLoraOfOneProcess(
    const std::string& name,
    const std::function<void(v1::ParallelSpec*)>& parallel, int workers = 2) {
  const std::string dir = TempDir(name);
  v1::JobSpec pretrain =
      DataParallelSpec(WriteDocuments(dir), dir + "/pretrain", 1);
  pretrain.mutable_training()->set_export_hf_dir(dir + "/base");
  RunInThisProcess(pretrain);

  auto lora_spec = [&](const std::string& run, int world_size) {
    v1::JobSpec spec =
        DataParallelSpec(WritePackedChats(dir), dir + "/" + run, world_size);
    spec.mutable_model()->set_hf_checkpoint_dir(dir + "/base");
    if (world_size > 1) parallel(spec.mutable_parallel());
    v1::TrainingSpec& t = *spec.mutable_training();
    t.set_mode(v1::LORA);
    t.set_seq_length(64);
    t.set_export_hf_dir(dir + "/" + run + "-merged");
    t.mutable_lora()->set_rank(4);
    // Whole, row-parallel and column-parallel weights under TP.
    t.mutable_lora()->add_target_modules("q_a_proj");
    t.mutable_lora()->add_target_modules("o_proj");
    t.mutable_lora()->add_target_modules("kv_b_proj");
    t.mutable_lora()->set_merge_on_export(true);
    return spec;
  };
  TestCoordinator server(name + "_coordinator");
  std::vector<pid_t> worker_pids;
  const std::string id = SubmitWithWorkers(server, lora_spec("two", workers),
                                           dir, workers, &worker_pids);
  std::map<int64_t, v1::StepMetrics> distributed;
  const v1::Job ended =
      WatchSteps(server, id, [&](const v1::StepMetrics& metrics) {
        distributed[metrics.iteration()] = metrics;
      });
  StopWorkers(worker_pids);
  ASSERT_EQ(ended.state(), v1::SUCCEEDED) << ended.message();

  const std::map<int64_t, v1::StepMetrics> reference =
      RunInThisProcess(lora_spec("one", 1));
  ASSERT_EQ(distributed.size(), reference.size());
  for (const auto& [iteration, expected] : reference) {
    EXPECT_NEAR(distributed[iteration].lm_loss(), expected.lm_loss(),
                1e-5 * expected.lm_loss())
        << "iteration " << iteration;
  }
  auto merged = LoadHfModel(dir + "/two-merged");
  auto expected = LoadHfModel(dir + "/one-merged");
  auto base = LoadHfModel(dir + "/base");
  ASSERT_TRUE(merged.ok() && expected.ok() && base.ok());
  const std::vector<NamedTensor> got = (*merged)->Named();
  const std::vector<NamedTensor> want = (*expected)->Named();
  const std::vector<NamedTensor> before = (*base)->Named();
  ASSERT_EQ(got.size(), want.size());
  int changed = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ExpectNear(got[i].value->HostValues(), want[i].value->HostValues(),
               want[i].name);
    changed += want[i].value->HostValues() != before[i].value->HostValues();
  }
  // The targeted weights of 8 layers and the MTP layer moved.
  EXPECT_EQ(changed, 27);
  // Rank 0 wrote every adapter and its moments, as one process does.
  const auto adapters = LoraCheckpointState(dir + "/two");
  const auto expected_adapters = LoraCheckpointState(dir + "/one");
  ASSERT_EQ(adapters.size(), expected_adapters.size());
  ASSERT_EQ(adapters.size(), 27u * 2 * 3);  // A and B, value and 2 moments
  for (const auto& [name, want] : expected_adapters) {
    ExpectNear(adapters.at(name), want, name);
  }
}

TEST(LoraEndToEndTest, ExpertParallelLoraExportsTheMergedModelOfOneProcess) {
  ExpectLoraOfOneProcess(
      "lora_ep2", [](v1::ParallelSpec* parallel) { parallel->set_ep(2); });
}

// Each tensor rank trains its part of the adapters of split weights; rank 0
// writes them whole.
TEST(LoraEndToEndTest, TensorParallelLoraExportsTheMergedModelOfOneProcess) {
  ExpectLoraOfOneProcess(
      "lora_tp2", [](v1::ParallelSpec* parallel) { parallel->set_tp(2); });
}

// PP2 x TP2 on four processes: each rank trains its tensor part of its
// stages' adapters.
TEST(LoraEndToEndTest, PipelineTimesTensorParallelLoraMatchesOneProcess) {
  ExpectLoraOfOneProcess(
      "lora_pp2_tp2",
      [](v1::ParallelSpec* parallel) {
        parallel->set_pp(2);
        parallel->set_layout("Etttttt|ttmL");
        parallel->set_tp(2);
      },
      /*workers=*/4);
}

// Each pp rank trains the adapters of its stages; rank 0 gathers all of them
// for the LoRA checkpoint.
TEST(LoraEndToEndTest, PipelineParallelLoraExportsTheMergedModelOfOneProcess) {
  ExpectLoraOfOneProcess("lora_pp2", [](v1::ParallelSpec* parallel) {
    parallel->set_pp(2);
    parallel->set_layout("Etttttt|ttmL");
  });
}

TEST(DataParallelFailureTest, AWorkerKilledMidRunFailsTheJobWithoutAHang) {
  TestCoordinator server("dp_killed", /*heartbeat_timeout_ms=*/3000);
  const std::string dir = TempDir("dp_killed");
  v1::JobSpec spec = DataParallelSpec(WriteDocuments(dir), dir + "/save", 2);
  spec.mutable_training()->set_train_iters(2000);
  std::vector<pid_t> workers;
  const std::string id = SubmitWithWorkers(server, spec, dir, 2, &workers);
  absl::Time killed = absl::InfiniteFuture();
  const v1::Job ended =
      WatchSteps(server, id, [&](const v1::StepMetrics& metrics) {
        if (metrics.iteration() >= 3 && killed == absl::InfiniteFuture()) {
          kill(workers[1], SIGKILL);
          killed = absl::Now();
        }
      });
  const absl::Duration to_failure = absl::Now() - killed;
  StopWorkers(workers);
  EXPECT_EQ(ended.state(), v1::FAILED);
  EXPECT_LT(to_failure, absl::Seconds(20));
  EXPECT_NE(ended.message().find("rank"), std::string::npos) << ended.message();
}

TEST(DataParallelFailureTest, APeerThatNeverComesIsAClearErrorNotAHang) {
  TestCoordinator server("dp_missing_peer");
  const std::string dir = TempDir("dp_missing_peer");
  v1::Assignment lonely;
  lonely.set_job_id("lonely");
  lonely.set_rank(0);
  lonely.set_world_size(2);
  *lonely.mutable_spec() =
      DataParallelSpec(WriteDocuments(dir), dir + "/save", 2);
  lonely.mutable_rendezvous()->set_scope("lonely/attempt-1");
  lonely.mutable_rendezvous()->set_timeout_ms(500);
  RendezvousStore rendezvous(server.ConnectAsRegisteredWorker(),
                             "lonely/attempt-1");
  TrainingJobHooks hooks;
  hooks.log = [](const std::string&) {};
  const absl::Time start = absl::Now();
  const absl::Status status = RunTrainingJob(lonely, hooks, &rendezvous);
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("rank 0 could not reach its peers"),
            std::string::npos)
      << status;
}

}  // namespace
}  // namespace glm
