#!/usr/bin/env bash
# Builds the binaries the GPU machine's checks run and packs them, with the
# shared libraries that machine lacks, into .gpu/b.tar.xz (compressed: the
# device call carries at most 64 MiB). On the GPU machine:
#   tar -xJf .gpu/b.tar.xz -C .gpu && source .gpu/b/env.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
targets=(//tests/gpu:backend_ops_check //tests/gpu:grouped_gemm_check
         //tests/oracle:oracle_test //:glmctl //:glm-worker //bench:model_flops
         //parallel:nccl_collectives_check //bench:latent_attention_bench
         //bench:indexer_bench)
bazel build --config=cuda "${targets[@]}"
rm -rf .gpu/b .gpu/b.tar.xz
../shared/tools/device-bundle .gpu/b bazel-bin/tests/gpu/backend_ops_check \
  bazel-bin/tests/gpu/grouped_gemm_check \
  bazel-bin/tests/oracle/oracle_test bazel-bin/cli/glmctl \
  bazel-bin/worker/glm-worker bazel-bin/bench/model_flops \
  bazel-bin/parallel/nccl_collectives_check \
  bazel-bin/bench/latent_attention_bench bazel-bin/bench/indexer_bench
# The build's commit, and whether the tree had changes beside it: the GPU
# machine's results name the code they checked.
{
  git rev-parse --short HEAD
  git diff --quiet HEAD -- . ':!.gpu' || echo "(with uncommitted changes)"
} | paste -sd' ' >.gpu/b/commit.txt
tar -C .gpu -cf - b | xz -T2 -6 >.gpu/b.tar.xz
rm -rf .gpu/b
ls -l .gpu/b.tar.xz
