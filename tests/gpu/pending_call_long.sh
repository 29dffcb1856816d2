#!/usr/bin/env bash
# The second call for one GPU (an H100: 64k has never fit one), run from the
# repository root with `carry: [".gpu"]` after tests/gpu/bundle.sh (about
# 400 s): 64k long context with cuDNN's attention in chunks of 2^25
# query-key pairs (GLM_ATTENTION_PAIRS_PER_CALL) and the routed experts in
# chunks of 16k tokens (the planner predicts 73.6 GiB against 90.8 with
# neither, and overestimated the H200's peaks by 1-7%), 16k with 2^28 and
# 2^25 (what the smaller chunks cost in time), then
# the bench against transformers and the oracle. If the first call's sparse
# indexer loss cases passed, run with GLM_SPARSE_INDEXER_LOSS=1 exported.
# Results: $OUT/r (what a killed call leaves there comes back too).
set -u
tar -xJf .gpu/b.tar.xz -C .gpu && source .gpu/b/env.sh
R=$OUT/r
mkdir -p "$R"
source tests/gpu/timed.sh
for run in "65536 33554432" "16384 268435456" "16384 33554432"; do
  read -r seq pairs <<<"$run"
  GLM_ATTENTION_PAIRS_PER_CALL=$pairs MTP='' RECOMPUTE=1 SEQS=$seq \
    timed "long${seq}_pairs$pairs" 110 bench/gpu_long_context_bench.sh \
    "/tmp/long_${seq}_$pairs"
done
tar -czf "$R/long-logs.tgz" -C /tmp long_65536_33554432 long_16384_268435456 \
  long_16384_33554432
MTP='' BENCH_LIMIT=110 tests/gpu/run_on_device.sh "$R" bench
ORACLE_LIMIT=40 tests/gpu/run_on_device.sh "$R" oracle
