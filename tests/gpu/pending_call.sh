#!/usr/bin/env bash
# The next call for one GPU, run from the repository root with
# `carry: [".gpu"]` after tests/gpu/bundle.sh (about 500 s): the whole ops
# harness in both modes on the current build (every CUDA op against the CPU
# backend; last run whole in run73, before the latent attention and the
# sparse indexer loss), then the 4k bench row with the op table (each op's
# rate against the card's: the per-kernel table of bench/NOTES.md).
# Results: $OUT/r.tgz (what a killed call leaves under $OUT/r comes back too).
set -u
tar -xJf .gpu/b.tar.xz -C .gpu && source .gpu/b/env.sh
R=$OUT/r
mkdir -p "$R"
OPS_LIMIT=420 OPTIMES_LIMIT=110 tests/gpu/run_on_device.sh "$R" ops optimes
cd "$OUT" && tar -czf r.tgz r && rm -rf r
