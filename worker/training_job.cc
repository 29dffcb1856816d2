#include "worker/training_job.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/environment.h"
#include "checkpoint/hf_convert.h"
#include "checkpoint/hf_name_map.h"
#include "checkpoint/hf_weight_loader.h"
#include "checkpoint/native_checkpoint.h"
#include "data/gpt_dataset.h"
#include "jobspec/device_rules.h"
#include "kernels/backend_factory.h"
#include "kernels/op_timing_backend.h"
#include "parallel/rank_tensors.h"
#include "training/log_line.h"
#include "worker/attention_pairs_choice.h"
#include "worker/job_groups.h"

#ifdef GLM_WITH_CUDA
#include "kernels/cuda/gpu_activity.h"
#endif

namespace glm {
namespace {

double OrDefault(double value, double fallback) {
  return value == 0 ? fallback : value;
}

// Pretraining reads (blends of) indexed datasets; SFT and LoRA read one packed
// SFT dataset (`glmctl data pack` output), as the fine-tuning recipes do.
absl::StatusOr<std::unique_ptr<TrainingData>> OpenTrainingData(
    const v1::JobSpec& spec, const std::string& data_path,
    const GptDatasetConfig& config) {
  if (spec.training().mode() == v1::SFT || spec.training().mode() == v1::LORA) {
    if (spec.data().sources_size() != 1) {
      return absl::InvalidArgumentError(
          "data.sources: SFT and LoRA read exactly one packed dataset");
    }
    absl::StatusOr<std::unique_ptr<PackedSftDataset>> rows =
        PackedSftDataset::Open(spec.data().sources(0).path(),
                               config.num_samples, config.seed);
    if (!rows.ok()) return rows.status();
    return std::make_unique<SftData>(std::move(*rows));
  }
  absl::StatusOr<std::unique_ptr<TokenSampleDataset>> samples =
      BuildPretrainDataset(data_path, config);
  if (!samples.ok()) return samples.status();
  return std::make_unique<PretrainData>(std::move(*samples));
}

// What `held` names of the weights of model.hf_checkpoint_dir when given
// (SFT, LoRA, continued pretraining), else none: the trainer initializes them
// from the seed.
absl::StatusOr<std::unique_ptr<ModelParameters>> InitialWeights(
    const v1::ModelSpec& spec, const ModelConfig& model,
    const HeldTensors& held) {
  if (spec.hf_checkpoint_dir().empty()) return nullptr;
  absl::StatusOr<std::unique_ptr<ModelParameters>> params =
      LoadHfModel(spec.hf_checkpoint_dir(), held);
  if (!params.ok()) {
    return absl::Status(
        params.status().code(),
        absl::StrCat("model.hf_checkpoint_dir: ", params.status().message()));
  }
  const ModelConfig& loaded = (*params)->config();
  if (ToHfConfigJson(loaded) != ToHfConfigJson(model)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.hf_checkpoint_dir: ", spec.hf_checkpoint_dir(),
        "/config.json describes another model than the job's model spec"));
  }
  return params;
}

// The benches' A/B switches in a worker's environment: where a step forms
// the indexer loss (GLM_INDEXER_LOSS_IN_FORWARD=1: in the forward) and where
// queries move to the latent attention (GLM_LATENT_ATTENTION_FROM, a token
// row; 0: never; model/mla_attention.h). A value of neither form fails the
// job, naming the variable.
absl::Status ReadEnvironment(LossOptions* loss) {
  absl::StatusOr<bool> in_forward =
      EnvironmentSwitch("GLM_INDEXER_LOSS_IN_FORWARD");
  if (!in_forward.ok()) return in_forward.status();
  loss->indexer_loss_in_backward = !*in_forward;
  absl::StatusOr<int64_t> latent_from = EnvironmentWholeNumber(
      "GLM_LATENT_ATTENTION_FROM", 0, loss->latent_attention_from);
  if (!latent_from.ok()) return latent_from.status();
  loss->latent_attention_from = *latent_from;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Trainer>> BuildTrainer(
    const v1::JobSpec& spec, const ModelConfig& model,
    const std::string& device, const TrainingJobHooks& hooks,
    Collectives* data_parallel, std::optional<PipelineRank> pipeline,
    std::optional<ExpertParallelRank> expert_parallel,
    std::optional<TokenParallelRank> token_parallel) {
  TrainerOptions options = TrainerOptionsFromSpec(model, spec.training());
  if (absl::Status read = ReadEnvironment(&options.loss); !read.ok()) {
    return read;
  }
  absl::StatusOr<std::string> data_path = DataPathFromSpec(spec.data());
  if (!data_path.ok()) return data_path.status();
  GptDatasetConfig data_config;
  data_config.seq_length = options.seq_length;
  data_config.num_samples = options.train_iters * options.global_batch_size;
  data_config.seed = spec.data().data_seed();
  absl::StatusOr<std::unique_ptr<TrainingData>> data =
      OpenTrainingData(spec, *data_path, data_config);
  if (!data.ok()) return data.status();
  // The rank reads only its share of the checkpoint.
  absl::StatusOr<std::unique_ptr<ModelParameters>> params = InitialWeights(
      spec.model(), model,
      HeldTensorsOf(model,
                    RankShareOf(pipeline, expert_parallel, token_parallel)));
  if (!params.ok()) return params.status();
  absl::StatusOr<DeviceDescription> described = DescribeDevice(device);
  if (!described.ok()) return described.status();
  absl::StatusOr<AttentionPairsChoice> pairs =
      ChooseAttentionPairsPerCall(spec, options, *described);
  if (!pairs.ok()) return pairs.status();
  if (!pairs->note.empty()) hooks.log(pairs->note);
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      MakeBackend(device, spec.precision(), spec.training().deterministic(),
                  pairs->pairs_per_call);
  if (!backend.ok()) return backend.status();
  return Trainer::Create(options, std::move(*data), std::move(*params),
                         *std::move(backend), data_parallel,
                         std::move(pipeline), expert_parallel, token_parallel);
}

// The layout string of planned stages ("Ettt|tttmL").
std::string LayoutString(const std::vector<StageSlice>& stages) {
  std::vector<std::string> parts;
  for (const StageSlice& stage : stages) {
    parts.push_back(absl::StrCat(
        stage.has_embedding ? "E" : "", std::string(stage.num_layers(), 't'),
        std::string(stage.mtp_layers, 'm'), stage.has_loss ? "L" : ""));
  }
  return absl::StrJoin(parts, "|");
}

// GLM_GPU_ACTIVITY=1 on a CUDA device: how busy the GPU was in each step, from
// the step's start to its return, logged after the step's line
// (kernels/cuda/gpu_activity.h). The step ends on reads from the device (the
// gradient norm, the router biases), so its work is done when it returns;
// whatever it leaves running shows as "busy after end". GLM_GPU_ACTIVITY=
// kernels adds the step's kernels by total time (the longest kKernelRows).
// Nothing otherwise, and nothing in a build without CUDA.
class StepActivity {
 public:
  static constexpr int kKernelRows = 100;

  // Before the backend exists, so that CUPTI sees the device's context made.
  // A recorder that cannot start is logged and the job goes on without it.
  void Start(const std::string& device, const TrainingJobHooks& hooks) {
#ifdef GLM_WITH_CUDA
    if (device == "cpu") return;
    absl::StatusOr<std::unique_ptr<cuda::GpuActivity>> started =
        cuda::GpuActivity::StartIfAsked();
    if (!started.ok()) {
      hooks.log(absl::StrCat("GLM_GPU_ACTIVITY=1, but not recorded: ",
                             started.status().message()));
      return;
    }
    activity_ = *std::move(started);
    if (activity_) {
      hooks.log(
          "gpu activity: recording the device's kernels, copies and memsets "
          "(GLM_GPU_ACTIVITY=1)");
    }
    // With op times (GLM_OP_TIMES=1: every op waits for the device at both
    // ends), each kernel is attributed to the op it started in.
    if (activity_ && activity_->kernel_names()) {
      cuda::GpuActivity* activity = activity_.get();
      OpTimingBackend::SetOpHook([activity](const std::string* group) {
        if (group != nullptr) {
          activity->OpBegan(*group);
        } else {
          activity->OpEnded();
        }
      });
    }
#endif
  }

  ~StepActivity() {
#ifdef GLM_WITH_CUDA
    if (activity_ && activity_->kernel_names()) OpTimingBackend::SetOpHook({});
#endif
  }

  void StepStarts() {
#ifdef GLM_WITH_CUDA
    if (activity_) start_ = activity_->Now();
#endif
  }

  void StepEnds() {
#ifdef GLM_WITH_CUDA
    if (activity_) end_ = activity_->Now();
#endif
  }

  // The line of the step between the last StepStarts() and StepEnds(); empty
  // when not recording. Waits for the device (after the step's end).
  absl::StatusOr<std::string> Line(int64_t iteration) {
#ifdef GLM_WITH_CUDA
    if (activity_) {
      absl::StatusOr<cuda::ActivityWindow> window =
          activity_->Summarize(start_, end_);
      if (!window.ok()) return window.status();
      std::string line =
          absl::StrCat(" gpu activity of iteration ", iteration, " | ",
                       cuda::FormatActivityWindow(*window));
      if (activity_->kernel_names()) {
        absl::StrAppend(&line, "\n kernels of iteration ", iteration, ":\n",
                        cuda::FormatKernelTimes(*window, kKernelRows));
      }
      if (!window->kernels_by_op.empty()) {
        absl::StrAppend(&line, "\n kernels by op of iteration ", iteration,
                        " (each op synchronized):\n",
                        cuda::FormatKernelsByOp(*window, kKernelRows));
      }
      return line;
    }
#endif
    return std::string();
  }

 private:
#ifdef GLM_WITH_CUDA
  std::unique_ptr<cuda::GpuActivity> activity_;
  uint64_t start_ = 0;
  uint64_t end_ = 0;
#endif
};

// Checkpoints of a job: data-parallel ranks hold identical state, so without
// pipeline or expert parallelism rank 0 writes the whole model; with them
// each rank writes what it holds as its shard (a pp rank its stages'
// tensors, of the first data-parallel replica; an ep rank its routed experts)
// and rank 0 finalizes.
class JobCheckpoints {
 public:
  static absl::StatusOr<JobCheckpoints> Create(const v1::Assignment& assignment,
                                               const JobPlan& plan) {
    const v1::TrainingSpec& training = assignment.spec().training();
    const int pp = ParallelSize(assignment.spec().parallel().pp());
    const int ep = ParallelSize(assignment.spec().parallel().ep());
    const bool sharded = pp > 1 || ep > 1;
    v1::ParallelLayout layout;
    layout.set_tp(1);
    layout.set_pp(pp);
    layout.set_cp(1);
    layout.set_ep(ep);
    layout.set_etp(1);
    layout.set_dp(sharded ? assignment.world_size() / pp : 1);
    if (pp > 1) {
      layout.set_vpp(static_cast<int>(plan.stages.size()) / pp);
      layout.set_layout(LayoutString(plan.stages));
    }
    absl::StatusOr<HfNameMap> map =
        HfNameMap::Create(plan.model, ExpertForm::kFused, layout);
    if (!map.ok()) return map.status();
    const std::string load_dir =
        training.load_dir().empty() ? training.save_dir() : training.load_dir();
    JobCheckpoints checkpoints(*std::move(map), layout, assignment.job_id(),
                               training.save_dir(), load_dir,
                               training.save_interval(), assignment.rank() == 0,
                               training.mode() == v1::LORA);
    // Unsharded, the map is of one replica, which every data-parallel rank
    // holds whole: each reads it as that replica's only rank does.
    checkpoints.rank_ = sharded ? assignment.rank() : 0;
    checkpoints.sharded_ = sharded;
    return checkpoints;
  }

  // Continues from the latest checkpoint under the load folder, if any.
  absl::StatusOr<int64_t> Resume(Trainer* trainer) {
    if (load_dir_.empty()) return 0;
    if (!ReadLatestIteration(load_dir_).ok()) return 0;
    TrainingState state = trainer->State();
    absl::StatusOr<v1::CheckpointManifest> loaded =
        lora_ ? LoadLoraCheckpoint(load_dir_, AllTensors(state))
              : LoadCheckpoint(load_dir_, map_, rank_, &state);
    if (!loaded.ok()) return loaded.status();
    if (lora_) {
      // Adapter checkpoints carry the iteration; the rest follows from it.
      state.iteration = loaded->iteration();
      state.consumed_samples =
          loaded->iteration() * trainer->options().global_batch_size;
      state.optimizer_steps = loaded->iteration();
    }
    if (absl::Status restored = trainer->Restore(state); !restored.ok()) {
      return restored;
    }
    return loaded->iteration();
  }

  // Whether this rank writes the checkpoints that are due.
  bool writes() const { return writes_; }

  // The same on every rank.
  bool Due(const Trainer& trainer) const {
    if (save_dir_.empty()) return false;
    return trainer.Done() ||
           (save_interval_ > 0 && trainer.iteration() % save_interval_ == 0);
  }

  // Pipeline- or expert-parallel jobs, on every rank: writes this rank's shard,
  // then waits until every rank has (`world` may be null for one rank).
  absl::Status SaveRankShard(Trainer* trainer, Collectives* world) {
    if (!sharded_ || lora_) return absl::OkStatus();
    if (absl::Status status =
            SaveShard(save_dir_, map_, rank_, trainer->State());
        !status.ok()) {
      return status;
    }
    return world == nullptr ? absl::OkStatus() : world->Barrier();
  }

  // On the writing rank (after SaveRankShard on every rank).
  absl::StatusOr<v1::CheckpointManifest> Save(Trainer* trainer) {
    const TrainingState state = trainer->State();
    // LoRA checkpoints hold the adapters, which every rank has whole.
    absl::StatusOr<v1::CheckpointManifest> manifest =
        lora_
            ? SaveLoraCheckpoint(save_dir_, state.iteration, AllTensors(state))
        : sharded_ ? FinalizeCheckpoint(save_dir_, InfoOf(state, map_, layout_))
                   : SaveCheckpoint(save_dir_, map_, layout_, state);
    if (manifest.ok()) manifest->set_job_id(job_id_);
    return manifest;
  }

  // LoRA, on every rank: the base model with the adapters merged, as a
  // checkpoint under <save_dir>/merged for the HF export (each rank's shard of
  // it when the model is sharded; the writing rank finalizes). Returns the
  // folder.
  absl::StatusOr<std::string> SaveMerged(Trainer* trainer, Collectives* world) {
    absl::StatusOr<TrainingState> state = trainer->MergedModelState();
    if (!state.ok()) return state.status();
    const TrainingState& merged = *state;
    const std::string dir = save_dir_ + "/merged";
    absl::StatusOr<v1::CheckpointManifest> manifest;
    if (sharded_) {
      if (absl::Status status = SaveShard(dir, map_, rank_, merged);
          !status.ok()) {
        return status;
      }
      if (world != nullptr) {
        if (absl::Status status = world->Barrier(); !status.ok()) {
          return status;
        }
      }
      if (!writes_) return dir;
      manifest = FinalizeCheckpoint(dir, InfoOf(merged, map_, layout_));
    } else {
      if (!writes_) return dir;
      manifest = SaveCheckpoint(dir, map_, layout_, merged);
    }
    if (!manifest.ok()) return manifest.status();
    return dir;
  }

  bool lora() const { return lora_; }

 private:
  JobCheckpoints(HfNameMap map, v1::ParallelLayout layout, std::string job_id,
                 std::string save_dir, std::string load_dir,
                 int64_t save_interval, bool writes, bool lora)
      : map_(std::move(map)),
        layout_(std::move(layout)),
        job_id_(std::move(job_id)),
        save_dir_(std::move(save_dir)),
        load_dir_(std::move(load_dir)),
        save_interval_(save_interval),
        writes_(writes),
        lora_(lora) {}

  static std::vector<StateTensor> AllTensors(const TrainingState& state) {
    std::vector<StateTensor> all = state.model;
    all.insert(all.end(), state.optimizer.begin(), state.optimizer.end());
    return all;
  }

  HfNameMap map_;
  v1::ParallelLayout layout_;
  std::string job_id_, save_dir_, load_dir_;
  int64_t save_interval_ = 0;
  bool writes_ = false;
  bool lora_ = false;
  int rank_ = 0;          // in the map's grid
  bool sharded_ = false;  // pipeline-parallel: every rank writes a shard
};

// The final checkpoint as HF safetensors, verified bitwise against it (for
// LoRA, the merged model), written by the writing rank. Called on every rank.
absl::Status ExportIfAsked(const v1::TrainingSpec& training,
                           const ModelConfig& model, Trainer* trainer,
                           JobCheckpoints* checkpoints, Collectives* world,
                           const TrainingJobHooks& hooks) {
  if (training.export_hf_dir().empty()) return absl::OkStatus();
  ExportOptions options;
  options.checkpoint_dir = training.save_dir();
  if (checkpoints->lora()) {
    // Every rank writes its part of the merged model.
    absl::StatusOr<std::string> merged =
        checkpoints->SaveMerged(trainer, world);
    if (!merged.ok()) return merged.status();
    options.checkpoint_dir = *merged;
  }
  if (!checkpoints->writes()) return absl::OkStatus();
  options.out_dir = training.export_hf_dir();
  options.hf_config_json = ToHfConfigJson(model);
  absl::StatusOr<VerifySummary> exported = ExportHfCheckpoint(options);
  if (!exported.ok()) return exported.status();
  hooks.log(absl::StrCat("exported HF safetensors to ", options.out_dir, ": ",
                         exported->Text()));
  return absl::OkStatus();
}

}  // namespace

TrainerOptions TrainerOptionsFromSpec(const ModelConfig& model,
                                      const v1::TrainingSpec& t) {
  TrainerOptions o;
  o.model = model;
  o.train_iters = t.train_iters();
  o.global_batch_size = t.global_batch_size();
  o.micro_batch_size = t.micro_batch_size() == 0 ? 1 : t.micro_batch_size();
  o.seq_length = t.seq_length();
  o.schedule.max_lr = t.lr();
  o.schedule.min_lr = t.min_lr();
  o.schedule.warmup_iters = t.warmup_iters();
  o.schedule.decay_iters =
      t.lr_decay_iters() == 0 ? t.train_iters() : t.lr_decay_iters();
  o.adamw.beta1 = OrDefault(t.adam_beta1(), 0.9);
  o.adamw.beta2 = OrDefault(t.adam_beta2(), 0.999);
  o.adamw.eps = OrDefault(t.adam_eps(), 1e-8);
  o.adamw.weight_decay = OrDefault(t.weight_decay(), 0.01);
  o.clip_grad = OrDefault(t.clip_grad(), 1.0);
  o.loss.mtp_loss_scale =
      static_cast<float>(OrDefault(t.mtp_loss_scale(), 0.1));
  o.loss.indexer_loss_coeff =
      static_cast<float>(OrDefault(t.indexer_loss_coeff(), 0.001));
  o.loss.recompute_layers = t.recompute_activations();
  o.record_micro_batches = t.cuda_graphs();
  o.overlap_grad_reduce = t.overlap_grad_reduce();
  o.router_bias_update_rate = OrDefault(t.router_bias_update_rate(), 1e-3);
  o.distributed_optimizer = t.use_distributed_optimizer();
  if (t.mode() == v1::LORA) {
    LoraOptions lora;
    lora.rank = t.lora().rank() == 0 ? 8 : t.lora().rank();
    lora.alpha = OrDefault(t.lora().alpha(), 2.0 * lora.rank);
    lora.target_modules = {t.lora().target_modules().begin(),
                           t.lora().target_modules().end()};
    if (lora.target_modules.empty()) {
      lora.target_modules = {"q_a_proj", "q_b_proj", "kv_a_proj_with_mqa",
                             "kv_b_proj", "o_proj"};
    }
    o.lora = lora;
  }
  o.seed = t.seed();
  return o;
}

absl::StatusOr<std::string> DataPathFromSpec(const v1::DataSpec& data) {
  if (data.sources().empty()) {
    return absl::InvalidArgumentError("data.sources: no dataset given");
  }
  std::vector<std::string> parts;
  for (int i = 0; i < data.sources_size(); ++i) {
    const v1::DatasetSource& source = data.sources(i);
    if (source.path().empty() || source.weight() <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.sources[", i, "]: needs a path and a positive weight"));
    }
    parts.push_back(absl::StrCat(source.weight(), " ", source.path()));
  }
  return absl::StrJoin(parts, " ");
}

namespace {

// The stages of this rank's pp coordinate, in virtual-chunk order (every
// rank allocates the whole model's weights, but computes, updates and saves
// only its stages' tensors), when pp > 1.
std::optional<PipelineRank> PipelineRankOf(const v1::Assignment& assignment,
                                           const JobPlan& plan,
                                           ProcessGroups* groups) {
  if (groups == nullptr || groups->pipeline_edges() == nullptr) {
    return std::nullopt;
  }
  PipelineRank pipeline;
  pipeline.plan = plan.stages;
  pipeline.group = &groups->group(GroupKind::kPp);
  pipeline.links = groups->pipeline_edges()->Links();
  const int pp_rank = plan.grid.ranks.at(assignment.rank()).pp;
  for (const StageSlice& stage : plan.stages) {
    if (stage.pp_rank == pp_rank) pipeline.stages.push_back(stage);
  }
  std::sort(pipeline.stages.begin(), pipeline.stages.end(),
            [](const StageSlice& a, const StageSlice& b) {
              return a.virtual_chunk < b.virtual_chunk;
            });
  return pipeline;
}

// The expert-parallel groups when ep > 1.
std::optional<ExpertParallelRank> ExpertParallelRankOf(ProcessGroups* groups) {
  if (groups == nullptr || groups->group(GroupKind::kEp).size() == 1) {
    return std::nullopt;
  }
  return ExpertParallelRank{&groups->group(GroupKind::kEp),
                            &groups->group(GroupKind::kExpertDp)};
}

// The tensor- and context-parallel groups when tp or cp > 1.
std::optional<TokenParallelRank> TokenParallelRankOf(ProcessGroups* groups) {
  if (groups == nullptr) return std::nullopt;
  Collectives* tensor = &groups->group(GroupKind::kTp);
  Collectives* context = &groups->group(GroupKind::kCp);
  if (tensor->size() == 1 && context->size() == 1) return std::nullopt;
  return TokenParallelRank{tensor->size() > 1 ? tensor : nullptr,
                           context->size() > 1 ? context : nullptr};
}

}  // namespace

absl::Status RunTrainingJob(const v1::Assignment& assignment,
                            const TrainingJobHooks& hooks,
                            RendezvousStore* rendezvous,
                            const std::string& device,
                            const std::string& host) {
  absl::StatusOr<JobPlan> plan = ValidateForWorker(assignment.spec(), device);
  if (!plan.ok()) return plan.status();
  std::optional<ProcessGroups> groups;
  if (assignment.world_size() > 1) {
    absl::StatusOr<ProcessGroups> connected =
        ConnectJobGroups(assignment, plan->grid, rendezvous, host, device);
    if (!connected.ok()) return connected.status();
    groups = *std::move(connected);
  }
  Collectives* world = groups ? &groups->group(GroupKind::kWorld) : nullptr;
  for (const auto& [kind, name] :
       {std::pair{GroupKind::kDp, "data-parallel"},
        std::pair{GroupKind::kEp, "expert-parallel"},
        std::pair{GroupKind::kTp, "tensor-parallel"},
        std::pair{GroupKind::kCp, "context-parallel"},
        std::pair{GroupKind::kPp, "pipeline"}}) {
    if (!groups || groups->group(kind).size() == 1) continue;
    const bool nccl =
        groups->group(kind).buffer_place() == BufferPlace::kDevice;
    hooks.log(absl::StrCat(
        "rank ", assignment.rank(), ": ", name, " group ",
        nccl ? "over NCCL (GPU buffers)" : "over Gloo (host buffers)"));
  }
  const std::optional<PipelineRank> pipeline =
      PipelineRankOf(assignment, *plan, groups ? &*groups : nullptr);
  if (pipeline) {
    for (const StageSlice& stage : pipeline->stages) {
      hooks.log(absl::StrCat("rank ", assignment.rank(), ": pipeline stage ",
                             stage.stage, " (decoder layers ",
                             stage.first_layer, "-", stage.last_layer, ")"));
    }
  }
  StepActivity activity;
  activity.Start(device, hooks);
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      BuildTrainer(assignment.spec(), plan->model, device, hooks,
                   groups ? &groups->group(GroupKind::kDp) : nullptr, pipeline,
                   ExpertParallelRankOf(groups ? &*groups : nullptr),
                   TokenParallelRankOf(groups ? &*groups : nullptr));
  if (!trainer.ok()) return trainer.status();
  if ((*trainer)->trains_on_device()) {
    hooks.log(absl::StrCat("rank ", assignment.rank(),
                           ": weights and AdamW stay on ", device));
  }
  if (const OverlappedGradientSum* sum = (*trainer)->overlapped_sum()) {
    hooks.log(
        absl::StrCat("rank ", assignment.rank(),
                     ": gradient sums overlapped with the last backward, ",
                     sum->buckets().size(), " buckets"));
  }
  absl::StatusOr<JobCheckpoints> checkpoints =
      JobCheckpoints::Create(assignment, *plan);
  if (!checkpoints.ok()) return checkpoints.status();
  absl::StatusOr<int64_t> resumed = checkpoints->Resume(trainer->get());
  if (!resumed.ok()) return resumed.status();
  (*trainer)->ReleaseCheckpointState();
  if (*resumed > 0) {
    hooks.log(absl::StrCat("resumed from iteration ", *resumed));
  }
  const int64_t global_batch = assignment.spec().training().global_batch_size();
  while (!(*trainer)->Done()) {
    activity.StepStarts();
    absl::StatusOr<v1::StepMetrics> metrics = (*trainer)->Step();
    activity.StepEnds();
    if (!metrics.ok()) return metrics.status();
    hooks.log(FormatLogLine(*metrics, global_batch));
    absl::StatusOr<std::string> activity_line =
        activity.Line(metrics->iteration());
    if (!activity_line.ok()) return activity_line.status();
    if (!activity_line->empty()) hooks.log(*activity_line);
    if (checkpoints->Due(**trainer)) {
      // Every rank brings its distributed-optimizer shard (and its parts of
      // tensor-parallel tensors) before rank 0 writes.
      if (absl::Status status = (*trainer)->GatherCheckpointState();
          !status.ok()) {
        return status;
      }
      if (absl::Status status =
              checkpoints->SaveRankShard(trainer->get(), world);
          !status.ok()) {
        return status;
      }
      if (checkpoints->writes()) {
        absl::StatusOr<v1::CheckpointManifest> saved =
            checkpoints->Save(trainer->get());
        if (!saved.ok()) return saved.status();
        hooks.log("saved checkpoint " + saved->directory());
        hooks.on_checkpoint(*saved);
      }
      (*trainer)->ReleaseCheckpointState();
    }
    absl::StatusOr<bool> stop = AnyRankStops(hooks.on_step(*metrics), world);
    if (!stop.ok()) return stop.status();
    if (*stop) {
      return absl::CancelledError(absl::StrCat(
          "stopped after iteration ", metrics->iteration(), " on request"));
    }
  }
  return ExportIfAsked(assignment.spec().training(), plan->model,
                       trainer->get(), &*checkpoints, world, hooks);
}

}  // namespace glm
