#!/usr/bin/env bash
# One call for one GPU, run from the repository root with `carry: [".gpu"]`
# after tests/gpu/bundle.sh: the whole ops harness on the current build, the
# bench against transformers and the kernel table (at most 560 s; the
# harness alone takes 290-380 s, depending on the host). The training checks
# take a second call (`TRAINING_LIMIT=420 tests/gpu/run_on_device.sh $R
# training recompute`). Results: $OUT/r.tgz.
set -u
tar -xJf .gpu/b.tar.xz -C .gpu && source .gpu/b/env.sh
R=$OUT/r
mkdir -p "$R"
OPS_LIMIT=400 tests/gpu/run_on_device.sh "$R" ops
MTP='' BENCH_LIMIT=110 tests/gpu/run_on_device.sh "$R" bench
GAPS_LIMIT=50 tests/gpu/run_on_device.sh "$R" gaps
cd "$OUT" && tar -czf r.tgz r && rm -rf r
