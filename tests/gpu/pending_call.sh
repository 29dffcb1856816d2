#!/usr/bin/env bash
# The next call for one GPU, run from the repository root with
# `carry: [".gpu"]` after tests/gpu/bundle.sh: the whole ops harness on the
# current build, then the training checks' recompute part. Results:
# $OUT/r.tgz.
set -u
tar -xJf .gpu/b.tar.xz -C .gpu && source .gpu/b/env.sh
R=$OUT/r
mkdir -p "$R"
OPS_LIMIT=340 tests/gpu/run_on_device.sh "$R" ops
RECOMPUTE_LIMIT=150 tests/gpu/run_on_device.sh "$R" recompute
cd "$OUT" && tar -czf r.tgz r && rm -rf r
