#!/usr/bin/env bash
# Two or more GPUs of one host (nvidia-h200-x2 or larger), one call:
# glm5.2-mini without its MTP layer, seq 4096, micro batch 1, bf16, eight micro
# batches a rank a step, on one GPU and split over two (one worker per GPU):
# DP2 with the gradient sum after the backward and overlapped with it
# (overlapGradReduce), DP2 with ZeRO-1, EP2 and PP2. Prints one table: step
# time, tokens/s in all and per GPU, the scaling over one GPU (tokens/s of
# the two-GPU run over one GPU's), peak memory; and for PP2 the bubble
# measured (its step over the micro batches one stage runs) against the 1F1B
# formula (pp - 1) / (m + pp - 1). With 4 or 8 GPUs visible it adds DP, EP and
# PP2 x EP over all of them. Run from the repository root after
# `source .gpu/b/env.sh`; full logs go to $1.
set -uo pipefail
out=${1:?output folder}
steps=${STEPS:-4}
seq=${SEQ:-4096}
per_rank=${MICRO_BATCHES:-8}
bin=$(dirname "$(command -v glmctl)")
gpus=$(nvidia-smi -L | wc -l)
if ((gpus < 2)); then
  echo "needs two GPUs, found $gpus" >&2
  exit 2
fi
export NCCL_NVLS_ENABLE=0  # the device tool's KINDS.md
work=/tmp/glm-gpu-scaling
rm -rf "$work" && mkdir -p "$work" "$out"
glmctl model config --preset=glm5.2-mini >"$work/mini.json"
python3 - "$work" "$steps" "$seq" "$per_rank" "$gpus" <<'PY'
import json, sys
work, steps, seq, per_rank, gpus = sys.argv[1], int(sys.argv[2]), \
    int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
config = json.load(open(f"{work}/mini.json"))
config["num_nextn_predict_layers"] = 0
json.dump(config, open(f"{work}/mini_no_mtp.json", "w"))
base = json.load(open("examples/pretrain_cuda.json"))
base["model"] = {"hfConfigJson": json.dumps(config)}
base["training"].update(trainIters=steps, microBatchSize=1, seqLength=seq,
                        saveInterval=0, warmupIters=1, lrDecayIters=steps,
                        cudaGraphs=True, deterministic=False)
for key in ["saveDir", "exportHfDir"]:
    base["training"].pop(key, None)
runs = {
    "one": ({}, {}),
    "dp2": ({"worldSize": 2}, {}),
    "dp2_overlap": ({"worldSize": 2}, {"overlapGradReduce": True}),
    "dp2_zero": ({"worldSize": 2}, {"useDistributedOptimizer": True}),
    "dp2_zero_overlap": ({"worldSize": 2}, {"useDistributedOptimizer": True,
                                           "overlapGradReduce": True}),
    "ep2": ({"worldSize": 2, "ep": 2}, {}),
    # Six decoder layers a stage, the embedding on the first and the head on
    # the last (12 layers).
    "pp2": ({"worldSize": 2, "pp": 2, "layout": "Etttttt|ttttttL"}, {}),
}
if gpus in (4, 8):
    runs[f"dp{gpus}_overlap"] = ({"worldSize": gpus}, {"overlapGradReduce": True})
    runs[f"ep{gpus}"] = ({"worldSize": gpus, "ep": gpus}, {})
    runs[f"pp2_ep{gpus // 2}"] = ({"worldSize": gpus, "pp": 2,
                                   "ep": gpus // 2,
                                   "layout": "Etttttt|ttttttL"}, {})
with open(f"{work}/runs.txt", "w") as names:
    for name, (parallel, _) in runs.items():
        names.write(f"{name} {parallel.get('worldSize', 1)}\n")
for name, (parallel, training) in runs.items():
    job = json.loads(json.dumps(base))
    job["name"] = f"mini_{name}"
    job["parallel"].update(parallel)
    job["training"].update(training)
    world = job["parallel"].get("worldSize", 1)
    pp = job["parallel"].get("pp", 1)
    # Each data-parallel rank (each pipeline) runs per_rank micro batches.
    job["training"]["globalBatchSize"] = per_rank * world // pp
    json.dump(job, open(f"{work}/{name}.json", "w"), indent=2)
PY
echo "| run | GPUs | step (ms) | tokens/s | tokens/s per GPU | scaling | peak GiB |" \
  | tee "$out/scaling.txt"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |" | tee -a "$out/scaling.txt"
run() {  # name GPUs
  local visible
  visible=$(seq -s, 0 $(($2 - 1)))
  CUDA_VISIBLE_DEVICES=$visible glmctl local --job="$work/$1.json" \
    --state-dir="$work/$1" --worker-binary="$bin/glm-worker" \
    </dev/null >"$out/$1.glmctl.txt" 2>&1
  for log in "$work/$1"/logs/worker-*.log; do
    cp "$log" "$out/$1.$(basename "$log")" 2>/dev/null
  done
  python3 - "$out" "$1" "$2" "$work/$1.json" <<'PY'
import json, re, sys
out, name, gpus, job = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
spec = json.load(open(job))
tokens_per_step = spec["training"]["globalBatchSize"] * spec["training"]["seqLength"]
peaks, times = [], []
for rank in range(gpus):
    try:
        text = open(f"{out}/{name}.worker-{rank}.log").read()
    except OSError:
        continue
    lines = re.findall(r"iteration\s+(\d+)/.*?\(ms\): (\S+) \|.*?peak memory "
                       r"\(MiB\): (\S+)", text)
    if rank == 0:
        times = [float(ms) for it, ms, _ in lines if int(it) > 1]
    if lines:
        peaks.append(float(lines[-1][2]) / 1024)
if not times:
    print(f"| {name} | {gpus} | did not run (see {name}.glmctl.txt) | | | | |")
    sys.exit(0)
step = sum(times) / len(times)
tokens = tokens_per_step / step * 1e3
one = None
try:
    one = float(open(f"{out}/one.tokens").read())
except OSError:
    open(f"{out}/one.tokens", "w").write(str(tokens))
scaling = f"{tokens / one:.2f}" if one and name != "one" else "1.00"
row = (f"| {name} | {gpus} | {step:.1f} | {tokens:.0f} | {tokens / gpus:.0f} | "
       f"{scaling} | {max(peaks):.1f} |")
print(row)
open(f"{out}/scaling.txt", "a").write(row + "\n")
PY
}
while read -r name count; do run "$name" "$count"; done <"$work/runs.txt"
# PP2's bubble: one GPU's step runs the m micro batches through all 12
# layers, each PP2 stage the same m through half of them, so without a bubble
# PP2's step would be half one GPU's. Measured bubble: PP2's step over that
# half, less one; 1F1B's: (pp - 1) / m of the stage's work.
python3 - "$out/scaling.txt" "$per_rank" <<'PY'
import re, sys
path, m = sys.argv[1], int(sys.argv[2])
rows = {r[0]: float(r[1]) for r in re.findall(
    r"^\| (\w+) \| \d+ \| ([0-9.]+) \|", open(path).read(), re.M)}
if "one" in rows and "pp2" in rows:
    line = (f"PP2 bubble: measured {2 * rows['pp2'] / rows['one'] - 1:.3f} of "
            f"a stage's work, 1F1B formula (pp - 1) / m = {1 / m:.3f}")
    print(line)
    open(path, "a").write(line + "\n")
PY
