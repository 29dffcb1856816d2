#!/usr/bin/env bash
# The next call for one GPU, run from the repository root with
# `carry: [".gpu"]` after tests/gpu/bundle.sh (about 90 s): RoPE with one
# sincos a position and pair (bench/NOTES.md, twenty-ninth session, has the
# prediction): its harness cases (exact), the op table's RoPE rows, and the
# 4k step (ours only) against the previous build's bundle, .gpu/base.tar.xz
# (0c9fafe), in the same call.
# Results: $OUT/r.tgz (what a killed call leaves under $OUT/r comes back too).
set -u
tar -xJf .gpu/b.tar.xz -C .gpu && mkdir -p .gpu/base &&
  tar -xJf .gpu/base.tar.xz -C .gpu/base && source .gpu/b/env.sh
R=$OUT/r
mkdir -p "$R"
source tests/gpu/timed.sh
OPS_LIMIT=60 OPS_FILTER="Rope" OPTIMES_LIMIT=60 \
  tests/gpu/run_on_device.sh "$R" ops optimes
# Twice each, alternating: the spread between runs beside the difference.
for round in 1 2; do
  MTP='' OURS_ONLY=1 timed "step4k_new$round" 90 bench/gpu_train_bench.sh \
    "/tmp/step4k_new$round"
  (source .gpu/base/b/env.sh && MTP='' OURS_ONLY=1 timed "step4k_base$round" \
    90 bench/gpu_train_bench.sh "/tmp/step4k_base$round")
done
cd "$OUT" && tar -czf r.tgz r && rm -rf r
