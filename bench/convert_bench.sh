#!/bin/bash
# HF import/export benchmark on a large synthetic checkpoint: wall time and
# peak resident memory of `glmctl convert import` (under PP2 x EP2) and
# `glmctl convert export`, each including its bitwise verification.
#
#   bazel build -c opt //cli:glmctl //bench:make_synthetic_hf
#   [BIN=bazel-out/k8-opt/bin] [LAYOUT=...] [FORM=fused] bench/convert_bench.sh [WORKDIR]
#       [PRESET] [DTYPE]
#
# WORKDIR needs about three times the checkpoint size (glm5.2-mini in BF16:
# 5.8 GB each for the source, the native checkpoint and the export).
set -euo pipefail
work="${1:-/tmp/convert_bench}"
preset="${2:-glm5.2-mini}"
dtype="${3:-bf16}"
bin="${BIN:-$(dirname "$0")/../bazel-bin}"
# A pipeline layout for models whose even PP2 split starts on a skip layer.
layout_flag=()
if [[ -n "${LAYOUT:-}" ]]; then layout_flag=(--layout="$LAYOUT"); fi
rm -rf "$work"
mkdir -p "$work"

# Runs a command under /usr/bin/time -v and prints "<label>: <wall> wall,
# <MiB> MiB peak RSS, <MiB> MiB peak anonymous". Peak RSS counts the pages of
# memory-mapped checkpoint files the command touched (clean page cache the
# kernel can drop); the anonymous peak, sampled from /proc every 0.1 s, is the
# memory the command itself allocated.
measure() {
  local label="$1"
  shift
  /usr/bin/time -v -o "$work/$label.time" "$@" >"$work/$label.log" 2>&1 &
  local timer=$! anon=0 child value
  while kill -0 "$timer" 2>/dev/null; do
    for child in $(pgrep -P "$timer"); do
      value=$(awk '/^RssAnon/ {print $2}' "/proc/$child/status" 2>/dev/null)
      if [[ -n "$value" && "$value" -gt "$anon" ]]; then anon=$value; fi
    done
    sleep 0.1
  done
  wait "$timer" || {
    cat "$work/$label.log"
    exit 1
  }
  local wall rss
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$work/$label.time")
  rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$work/$label.time")
  echo "$label: $wall wall, $((rss / 1024)) MiB peak RSS," \
    "$((anon / 1024)) MiB peak anonymous"
  grep -h "verified" "$work/$label.log" || true
}

measure generate "$bin/bench/make_synthetic_hf" --preset="$preset" \
  --dtype="$dtype" --form="${FORM:-per_expert}" --out="$work/hf"
echo "source: $(du -sb "$work/hf" | cut -f1) bytes in" \
  "$(ls "$work/hf" | grep -c safetensors) shards"
sync
measure import "$bin/cli/glmctl" convert import --hf="$work/hf" \
  --out="$work/native" --pp=2 --ep=2 "${layout_flag[@]}"
sync
measure export "$bin/cli/glmctl" convert export --checkpoint="$work/native" \
  --out="$work/export"
cmp "$work/hf/config.json" "$work/export/config.json"
echo "config.json identical"
