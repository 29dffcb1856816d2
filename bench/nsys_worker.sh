#!/usr/bin/env bash
# A glm-worker under Nsight Systems' CUDA trace, for bench/gpu_train_bench.sh:
#   WORKER_BINARY=$PWD/bench/nsys_worker.sh NSYS_OUT=DIR bench/gpu_train_bench.sh OUT
# then `bench/nsys_worker.sh --summary DIR` prints the kernels by total GPU time
# (the op table of GLM_OP_TIMES says which op; this says which kernel inside it,
# with nothing synchronized).
set -euo pipefail
if [[ ${1:-} == --summary ]]; then
  for report in "$2"/*.nsys-rep; do
    nsys stats --report cuda_gpu_kern_sum --format table "$report" |
      cut -c1-220 | head -60
  done
  exit 0
fi
out=${NSYS_OUT:?NSYS_OUT: folder for the trace}
mkdir -p "$out"
exec nsys profile --trace=cuda --sample=none --cpuctxsw=none \
  --output="$out/worker-%p" --force-overwrite=true \
  "$(dirname "$(command -v glmctl)")/glm-worker" "$@"
