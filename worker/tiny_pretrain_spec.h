// A CPU pretraining job of the tiny preset, small enough for the tests and
// benchmarks that submit or run real jobs.
#ifndef GLM_WORKER_TINY_PRETRAIN_SPEC_H_
#define GLM_WORKER_TINY_PRETRAIN_SPEC_H_

#include <string>

#include "proto/job_spec.pb.h"

namespace glm {

// glm5.2-tiny over the byte-token dataset `data` on `world_size` data-parallel
// ranks, `train_iters` iterations of 4 sequences of 32 tokens, saving under
// `save_dir`.
v1::JobSpec TinyPretrainSpec(const std::string& data,
                             const std::string& save_dir, int world_size,
                             int train_iters);

}  // namespace glm

#endif  // GLM_WORKER_TINY_PRETRAIN_SPEC_H_
