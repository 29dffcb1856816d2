#!/usr/bin/env bash
# The next call for one GPU, run from the repository root with
# `carry: [".gpu"]` after tests/gpu/bundle.sh (about 300 s): the bench against
# transformers and the kernel table, the oracle, compute-sanitizer's synccheck
# on the latent attention's kernels alone (run80's stopped in cuDNN's kernels
# of the fallback cases first), and the latent kernels' times. Results:
# $OUT/r.tgz.
set -u
tar -xJf .gpu/b.tar.xz -C .gpu && source .gpu/b/env.sh
R=$OUT/r
mkdir -p "$R"
MTP='' BENCH_LIMIT=110 tests/gpu/run_on_device.sh "$R" bench
GAPS_LIMIT=50 tests/gpu/run_on_device.sh "$R" gaps
ORACLE_LIMIT=40 tests/gpu/run_on_device.sh "$R" oracle
latent_cases="LatentAttentionForward small q80 k300 h3 d128 dv64 top100 gaps in activation type"
latent_cases+="|LatentAttentionBackward small q80 k300 h3 d128 dv64 top100 gaps in activation type"
timeout --signal=KILL 60 compute-sanitizer --tool synccheck backend_ops_check \
  --precision=bf16 --filter="$latent_cases" >"$R/latent_synccheck.txt" 2>&1
echo "latent synccheck: exit $?" | tee -a "$R/summary.txt"
timeout --signal=KILL 60 latent_attention_bench >"$R/latent_bench.txt" 2>&1
echo "latent bench: exit $?" | tee -a "$R/summary.txt"
cd "$OUT" && tar -czf r.tgz r && rm -rf r
