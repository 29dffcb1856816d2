#!/usr/bin/env bash
# The next call for one GPU, run from the repository root with
# `carry: [".gpu"]` after tests/gpu/bundle.sh: the whole ops harness on the
# current build, the bench against transformers and the kernel table. Then,
# in a second call, the training checks and their recompute part
# (`TRAINING_LIMIT=420 tests/gpu/run_on_device.sh $R training recompute`).
# Results: $OUT/r.tgz.
set -u
tar -xJf .gpu/b.tar.xz -C .gpu && source .gpu/b/env.sh
R=$OUT/r
mkdir -p "$R"
OPS_LIMIT=420 tests/gpu/run_on_device.sh "$R" ops
MTP='' BENCH_LIMIT=130 tests/gpu/run_on_device.sh "$R" bench
GAPS_LIMIT=50 tests/gpu/run_on_device.sh "$R" gaps
cd "$OUT" && tar -czf r.tgz r && rm -rf r
