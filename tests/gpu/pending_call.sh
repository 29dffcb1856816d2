#!/usr/bin/env bash
# The next call for one GPU, run from the repository root with
# `carry: [".gpu"]` after tests/gpu/bundle.sh (about 350 s): IndexerScores and
# the sparse indexer loss in 32-key tiles, two blocks an SM (bench/NOTES.md,
# twenty-ninth session, has the predictions). The previous build's bundle,
# .gpu/base.tar.xz (ba0bcc0), runs the same benches in the same call as the
# baseline: the indexer bench, the 64k step and the 4k step (ours only).
# Then the harness's top-k and loss cases, ncu on the two kernels at 64k
# (their occupancy), memcheck and synccheck on their cases, and the bench
# against transformers.
# Results: $OUT/r.tgz (what a killed call leaves under $OUT/r comes back too).
set -u
tar -xJf .gpu/b.tar.xz -C .gpu && mkdir -p .gpu/base &&
  tar -xJf .gpu/base.tar.xz -C .gpu/base && source .gpu/b/env.sh
R=$OUT/r
mkdir -p "$R"
source tests/gpu/timed.sh
base() { (source .gpu/base/b/env.sh && "$@"); }
OPS_LIMIT=150 OPS_FILTER="IndexerTopK|IndexerKlLoss" \
  tests/gpu/run_on_device.sh "$R" ops
timed indexer_bench 60 indexer_bench --queries=2048
base timed indexer_bench_base 60 indexer_bench --queries=2048
export GLM_SPARSE_INDEXER_LOSS=1  # the base build's default was off
for build in new base; do
  run=timed
  [[ $build == base ]] && run="base timed"
  GLM_ATTENTION_PAIRS_PER_CALL=33554432 MTP='' RECOMPUTE=1 SEQS=65536 \
    $run "long64k_$build" 110 bench/gpu_long_context_bench.sh "/tmp/long_$build"
  MTP='' OURS_ONLY=1 $run "step4k_$build" 120 bench/gpu_train_bench.sh \
    "/tmp/step4k_$build"
done
tar -czf "$R/logs.tgz" -C /tmp long_new long_base step4k_new step4k_base
ncu_sections=(--section SpeedOfLight --section WarpStateStats
  --section SchedulerStats --section Occupancy --section LaunchStats)
timed ncu 90 ncu "${ncu_sections[@]}" \
  --kernel-name regex:"IndexerScoresKernel|SparseLossKernel" --launch-count 2 \
  indexer_bench --queries=1024 --seqs=65536 --iterations=1
cases="IndexerKlLoss sparse packed|IndexerKlLoss glm5.2-mini sparse"
cases+="|IndexerTopK 12 heads|IndexerTopK causal"
timed memcheck 60 compute-sanitizer --tool memcheck backend_ops_check \
  --precision=bf16 --filter="$cases"
timed synccheck 60 compute-sanitizer --tool synccheck backend_ops_check \
  --precision=bf16 --filter="$cases"
MTP='' BENCH_LIMIT=110 tests/gpu/run_on_device.sh "$R" bench
cd "$OUT" && tar -czf r.tgz r && rm -rf r
