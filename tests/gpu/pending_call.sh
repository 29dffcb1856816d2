#!/usr/bin/env bash
# The next call for one GPU, run from the repository root with
# `carry: [".gpu"]` after tests/gpu/bundle.sh (about 100 s): the indexer
# loss's harness cases, whose sparse cases' dik run83 could not judge (the
# harness's repeat check was wrong, mended since), and compute-sanitizer's
# memcheck on the sparse cases. If they pass, turn
# CudaBackendOptions::sparse_indexer_loss on by default, then run
# tests/gpu/pending_call_long.sh.
# Results: $OUT/r.tgz (what a killed call leaves under $OUT/r comes back too).
set -u
tar -xJf .gpu/b.tar.xz -C .gpu && source .gpu/b/env.sh
R=$OUT/r
mkdir -p "$R"
OPS_LIMIT=90 OPS_FILTER="IndexerKlLoss" tests/gpu/run_on_device.sh "$R" ops
source tests/gpu/timed.sh
timed memcheck 60 compute-sanitizer --tool memcheck backend_ops_check \
  --precision=bf16 --filter="IndexerKlLoss sparse packed|IndexerKlLoss glm5.2-mini sparse"
cd "$OUT" && tar -czf r.tgz r && rm -rf r
