#!/usr/bin/env bash
# A glm-worker whose kernels Nsight Compute times, for bench/gpu_train_bench.sh:
#   WORKER_BINARY=$PWD/bench/ncu_worker.sh NCU_OUT=DIR bench/gpu_train_bench.sh OUT
# times NCU_COUNT kernel launches (default 2000) after skipping NCU_SKIP (default
# 3000: past the first micro batch, whose calls build cuDNN's plans), each alone on
# the GPU; then `bench/ncu_worker.sh --summary DIR` prints them grouped by kernel
# name, by total time. The op table of GLM_OP_TIMES says which op; this says
# which kernel inside it.
set -euo pipefail
if [[ ${1:-} == --summary ]]; then
  exec python3 - "$2/kernels.csv" <<'PY'
import collections, csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
header, rows = rows[0], rows[1:]
name, unit, value = (header.index(k) for k in ("Kernel Name", "Metric Unit", "Metric Value"))
scale = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3,
         "msecond": 1.0, "ms": 1.0}
total = collections.defaultdict(float)
calls = collections.Counter()
for r in rows:
    total[r[name]] += float(r[value].replace(",", "")) * scale[r[unit]]
    calls[r[name]] += 1
whole = sum(total.values())
print(f"{sum(calls.values())} kernel launches, {whole:.1f} ms of kernel time")
print("| kernel | calls | total ms | us per call | share |")
print("| --- | ---: | ---: | ---: | ---: |")
for kernel, ms in sorted(total.items(), key=lambda kv: -kv[1])[:40]:
    short = kernel.split("(")[0][:90]
    print(f"| {short} | {calls[kernel]} | {ms:.2f} | {1e3 * ms / calls[kernel]:.1f} | "
          f"{100 * ms / whole:.1f}% |")
PY
fi
out=${NCU_OUT:?NCU_OUT: folder for the kernel times}
mkdir -p "$out"
# NCU_KERNEL=REGEX: the launches of the kernels it names instead (NCU_SKIP and
# NCU_COUNT count those), each in detail (throughputs, memory, occupancy, warp
# stalls) into $NCU_OUT/detail.txt.
report=(--metrics gpu__time_duration.sum --csv --log-file "$out/kernels.csv")
if [[ -n ${NCU_KERNEL:-} ]]; then
  report=(--kernel-name "regex:$NCU_KERNEL" --section SpeedOfLight
    --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats
    --section WarpStateStats --section SchedulerStats
    --log-file "$out/detail.txt")
fi
ncu --target-processes all "${report[@]}" \
  --launch-skip "${NCU_SKIP:-3000}" --launch-count "${NCU_COUNT:-2000}" \
  "$(dirname "$(command -v glmctl)")/glm-worker" "$@" &
profiler=$!
# glmctl stops its workers with SIGTERM: the worker gets it, and the profiler
# lives to write its results when the worker exits.
trap 'pkill -TERM -P "$profiler"' TERM INT
wait "$profiler" || wait "$profiler"
