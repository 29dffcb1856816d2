#!/usr/bin/env bash
# The next call for one GPU, run from the repository root with
# `carry: [".gpu"]` after tests/gpu/bundle.sh (about 480 s), most needed
# first: the indexer loss's and the latent attention's harness cases (the
# sparse loss kernel, kernels/cuda/indexer_sparse_loss.cu, and the latent
# forward's scores split by columns have not run on a GPU yet), the indexer
# bench and 32k long context without and with the sparse loss (its time per
# token in the step), then the column split's cases and the latent bench
# without and with it,
# ncu on the latent forward, the sparse loss and the top-k at 64k (its
# scores and selection, 24 us a token of the 64k step), and compute-sanitizer's
# synccheck on those kernels alone (run80's stopped in cuDNN's kernels of the
# fallback cases first). The bench against transformers and the oracle
# (unchanged by this code at 4k) wait for a later call:
#   MTP='' tests/gpu/run_on_device.sh $OUT/r bench oracle
# Results: $OUT/r.tgz (what a killed call leaves under $OUT/r comes back too).
set -u
tar -xJf .gpu/b.tar.xz -C .gpu && source .gpu/b/env.sh
R=$OUT/r
mkdir -p "$R"
OPS_LIMIT=150 OPS_FILTER="IndexerKlLoss|LatentAttention" \
  tests/gpu/run_on_device.sh "$R" ops
source tests/gpu/timed.sh
# The sparse path is off unless GLM_SPARSE_INDEXER_LOSS=1 (the harness turns
# it on itself): the bench's "ordered" rows and the first 32k run are the
# baseline of the same call.
GLM_SPARSE_INDEXER_LOSS=1 timed indexer_bench 90 indexer_bench \
  --queries=2048
for sparse in 0 1; do
  GLM_SPARSE_INDEXER_LOSS=$sparse MTP='' RECOMPUTE=1 SEQS=32768 \
    timed "long32k_sparse$sparse" 90 bench/gpu_long_context_bench.sh \
    "/tmp/long_sparse$sparse"
done
tar -czf "$R/long-logs.tgz" -C /tmp long_sparse0 long_sparse1
# The latent forward's scores experiment: its cases, then both forms timed.
timed latent_bench 60 latent_attention_bench
timed ops_latent_by_columns 60 backend_ops_check --precision=bf16 \
  --filter=LatentAttentionForward --latent-scores-by-columns
GLM_LATENT_SCORES_BY_COLUMNS=1 timed latent_bench_by_columns 60 \
  latent_attention_bench
ncu_sections=(--section SpeedOfLight --section MemoryWorkloadAnalysis
  --section WarpStateStats --section SchedulerStats --section Occupancy
  --section LaunchStats --section SourceCounters)
timed latent_ncu 90 ncu "${ncu_sections[@]}" --kernel-name regex:ForwardKernel \
  --launch-count 1 latent_attention_bench --queries=1024 --seqs=65536 \
  --iterations=1
GLM_SPARSE_INDEXER_LOSS=1 timed sparse_loss_ncu 90 ncu "${ncu_sections[@]}" \
  --kernel-name regex:SparseLossKernel --launch-count 1 indexer_bench \
  --queries=1024 --seqs=65536 --iterations=1
timed topk_ncu 90 ncu "${ncu_sections[@]}" \
  --kernel-name regex:"IndexerScoresKernel|SelectInKeyOrderKernel" \
  --launch-count 2 indexer_bench --queries=1024 --seqs=65536 --iterations=1
sync_cases="LatentAttentionForward small q80 k300 h3 d128 dv64 top100 gaps in activation type"
sync_cases+="|LatentAttentionBackward small q80 k300 h3 d128 dv64 top100 gaps in activation type"
sync_cases+="|IndexerKlLoss sparse packed"
timed synccheck 60 compute-sanitizer --tool synccheck backend_ops_check \
  --precision=bf16 --filter="$sync_cases"
cd "$OUT" && tar -czf r.tgz r && rm -rf r
