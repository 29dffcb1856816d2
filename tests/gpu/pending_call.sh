#!/usr/bin/env bash
# One call for one GPU, run from the repository root with `carry: [".gpu"]`
# after tests/gpu/bundle.sh and tests/gpu/build_stage_variants.sh: the
# attention, indexer-loss and combine-gradient op cases, the bench against
# transformers, the kernel table, the indexer loss back in the forward
# (fae3301's A/B), the softmax epilogue stage variants and the bundle's worker
# again (ours only, same call), the variants' attention cases. Results: $OUT/r.tgz.
set -u
tar -xJf .gpu/b.tar.xz -C .gpu && source .gpu/b/env.sh
for s in 4 6; do
  xz -dc .gpu/v2/glm-worker-stages$s.xz >.gpu/w$s
  xz -dc .gpu/v2/backend_ops_check-stages$s.xz >.gpu/o$s
  chmod +x .gpu/w$s .gpu/o$s
done
R=$OUT/r
mkdir -p "$R"
nvidia-smi -q -d CLOCK,POWER >"$R/card_clocks.txt" 2>&1
OPS_FILTER="SparseAttentionBackward|IndexerKlLoss|ScatterAddRowsBackward" OPS_LIMIT=110 tests/gpu/run_on_device.sh "$R" ops
MTP='' BENCH_LIMIT=200 tests/gpu/run_on_device.sh "$R" bench
GAPS_LIMIT=100 tests/gpu/run_on_device.sh "$R" gaps
GLM_INDEXER_LOSS_IN_FORWARD=1 MTP='' OURS_ONLY=1 BENCH_LIMIT=100 tests/gpu/run_on_device.sh "$R/kl_forward" bench
for s in 4 6; do
  WORKER_BINARY=$PWD/.gpu/w$s MTP='' OURS_ONLY=1 BENCH_LIMIT=100 tests/gpu/run_on_device.sh "$R/stages$s" bench
done
MTP='' OURS_ONLY=1 BENCH_LIMIT=100 tests/gpu/run_on_device.sh "$R/again" bench
for s in 4 6; do
  OPS_BINARY=$PWD/.gpu/o$s OPS_FILTER=SparseAttentionBackward OPS_LIMIT=100 \
    tests/gpu/run_on_device.sh "$R/stages$s" ops
done
cd "$OUT" && tar -czf r.tgz r && rm -rf r
