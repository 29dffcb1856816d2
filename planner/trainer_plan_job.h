// The planner's model of a job this trainer runs, from a rank's own options:
// what a worker asks the planner about the job it is about to start.
#ifndef GLM_PLANNER_TRAINER_PLAN_JOB_H_
#define GLM_PLANNER_TRAINER_PLAN_JOB_H_

#include "planner/plan_job.h"
#include "training/trainer.h"

namespace glm {

// The same model, batch, recomputation, LoRA adapters, expert chunks and
// latent attention as `options`, in this trainer's store on `device`: with
// `bf16`, the CUDA bf16 mode's (bf16 copies of the product weights); else
// fp32 throughout. Pretraining and SFT hold the same state.
PlanJob TrainerPlanJob(const TrainerOptions& options, bool bf16,
                       RankDevice device);

}  // namespace glm

#endif  // GLM_PLANNER_TRAINER_PLAN_JOB_H_
