#!/usr/bin/env bash
# The GPU machine's checks in one call, each part under its own time limit so a
# hang in one leaves the others' results: run from the repository root after
# `source .gpu/b/env.sh`, as `tests/gpu/run_on_device.sh OUT PART...` with
# parts from: ops gemm oracle training bench optimes opkernels eager gaps
# gaps_eager recompute long (MTP=1 adds the MTP row to the bench part only;
# OPS_BINARY replaces the ops part's harness, WORKER_BINARY the bench's
# worker). Each part's output goes to OUT/PART.txt; logs of the multi-run
# parts are packed into OUT/PART-logs.tgz (the device tool returns at most 8
# files).
set -uo pipefail
out=${1:?output folder}
shift
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
  >"$out/card.txt" 2>&1
date -u +%FT%TZ >>"$out/card.txt"
cp .gpu/b/commit.txt "$out/commit.txt" 2>/dev/null

R=$out
source "$(dirname "$0")/timed.sh"

for name in "$@"; do
  case $name in
    ops) timed ops "${OPS_LIMIT:-150}" "${OPS_BINARY:-backend_ops_check}" --precision=both \
      ${OPS_FILTER:+--filter="$OPS_FILTER"} ;;
    gemm) timed gemm "${GEMM_LIMIT:-240}" grouped_gemm_check ;;
    oracle)
      for precision in fp32 bf16; do
        GLM_TEST_DEVICE=cuda:0 GLM_TEST_PRECISION=$precision \
          timed "oracle_$precision" "${ORACLE_LIMIT:-90}" oracle_test
      done ;;
    training)
      timed training "${TRAINING_LIMIT:-360}" tests/gpu/run_training_checks.sh /tmp/training
      tar -czf "$out/training-logs.tgz" -C /tmp training ;;
    bench)
      timed bench "${BENCH_LIMIT:-400}" bench/gpu_train_bench.sh /tmp/bench
      tar -czf "$out/bench-logs.tgz" -C /tmp bench ;;
    optimes)  # the 4k bench row, ours only, with the worker's op-time table;
      # outputs poisoned (kernels/tensor.h): its losses must equal the bench's
      MTP='' OURS_ONLY=1 GLM_OP_TIMES=1 GLM_POISON_OUTPUTS=1 timed optimes "${OPTIMES_LIMIT:-120}" \
        bench/gpu_train_bench.sh /tmp/optimes
      cp /tmp/optimes/ours.worker.txt "$out/optimes.worker.txt" ;;
    eager)  # the 4k bench row, ours only, every micro batch op by op
      MTP='' OURS_ONLY=1 GRAPHS=0 timed eager "${EAGER_LIMIT:-120}" \
        bench/gpu_train_bench.sh /tmp/eager
      cp /tmp/eager/ours.worker.txt "$out/eager.worker.txt" ;;
    gaps_eager)  # the GPU's idle share with every micro batch op by op
      MTP='' OURS_ONLY=1 GRAPHS=0 GLM_GPU_ACTIVITY=1 timed gaps_eager \
        "${GAPS_LIMIT:-120}" bench/gpu_train_bench.sh /tmp/gaps_eager
      cp /tmp/gaps_eager/ours.worker.txt "$out/gaps_eager.worker.txt" ;;
    opkernels)  # the 4k bench row, ours only, each op synchronized and its
      # kernels listed under it (which op launches which kernel)
      MTP='' OURS_ONLY=1 GLM_OP_TIMES=1 GLM_GPU_ACTIVITY=kernels timed opkernels \
        "${OPKERNELS_LIMIT:-150}" bench/gpu_train_bench.sh /tmp/opkernels
      cp /tmp/opkernels/ours.worker.txt "$out/opkernels.worker.txt" ;;
    gaps)  # the 4k bench row, ours only, with the GPU's idle share of each
      # step and its kernels by total time (recorded, not serialized)
      MTP='' OURS_ONLY=1 GLM_GPU_ACTIVITY=kernels timed gaps "${GAPS_LIMIT:-120}" \
        bench/gpu_train_bench.sh /tmp/gaps
      cp /tmp/gaps/ours.worker.txt "$out/gaps.worker.txt" ;;
    recompute)  # the 4k bench row with every layer recomputed, ours only
      MTP='' RECOMPUTE=1 OURS_ONLY=1 timed recompute "${RECOMPUTE_LIMIT:-150}" \
        bench/gpu_train_bench.sh /tmp/recompute
      tar -czf "$out/recompute-logs.tgz" -C /tmp recompute ;;
    long)  # one sequence of each length in SEQS, recomputing every layer
      MTP='' RECOMPUTE=1 timed long "${LONG_LIMIT:-400}" \
        bench/gpu_long_context_bench.sh /tmp/long
      tar -czf "$out/long-logs.tgz" -C /tmp long ;;
    *) echo "unknown part $name" | tee -a "$out/summary.txt" ;;
  esac
done
