#!/usr/bin/env bash
# One H200, one call: glm5.2-mini without its MTP layer (transformers has none),
# seq 4096, micro batch 1, global batch 8, random tokens: transformers 5.17
# (bench/gpu_transformers_reference.py) and our trainer (`glmctl local
# --device=cuda`, bf16) on the same card; prints one table. Run from the
# repository root after `source .gpu/b/env.sh`; full logs go to $1.
set -uo pipefail
out=${1:?output folder}
steps=${STEPS:-3}
bin=$(dirname "$(command -v glmctl)")
work=/tmp/glm-gpu-bench
rm -rf "$work" && mkdir -p "$work" "$out"
glmctl model config --preset=glm5.2-mini >"$work/mini.json"
python3 - "$work" "$steps" <<'PY'
import json, sys
work, steps = sys.argv[1], int(sys.argv[2])
config = json.load(open(f"{work}/mini.json"))
config["num_nextn_predict_layers"] = 0
json.dump(config, open(f"{work}/mini_no_mtp.json", "w"))
job = json.load(open("examples/pretrain_cuda.json"))
job["name"] = "glm5.2-mini-bench"
job["model"] = {"hfConfigJson": json.dumps(config)}
job["training"].update(trainIters=steps, globalBatchSize=8, microBatchSize=1,
                       seqLength=4096, saveInterval=0, warmupIters=1,
                       lrDecayIters=steps)
for key in ["saveDir", "exportHfDir"]:
    job["training"].pop(key, None)
json.dump(job, open(f"{work}/job.json", "w"), indent=2)
PY
flops=$(model_flops "$work/mini_no_mtp.json" 4096)
echo "FLOPs per token (Megatron + DSA, no MTP): $flops" | tee "$out/bench.txt"
# OURS_ONLY=1 skips transformers (a profiling run: GLM_OP_TIMES=1 makes the
# worker log a table of op times at its end, kernels/op_timing_backend.h);
# PROFILE=1 adds a torch.profiler table of one transformers step.
if [[ -z ${OURS_ONLY:-} ]]; then
  profile=()
  [[ -n ${PROFILE:-} ]] && profile=(--profile "$out/transformers_profile.txt")
  python3 bench/gpu_transformers_reference.py --config "$work/mini_no_mtp.json" \
    --flops-per-token "$flops" --global-batch 8 --steps "$steps" "${profile[@]}" \
    2>&1 | tee "$out/transformers.txt"
fi
# WORKER_BINARY replaces the worker (bench/ncu_worker.sh times its kernels
# one by one).
glmctl local --job="$work/job.json" --state-dir="$work/ours" \
  --worker-binary="${WORKER_BINARY:-$bin/glm-worker}" >"$out/ours.glmctl.txt" 2>&1
cp "$work"/ours/logs/worker-0.log "$out/ours.worker.txt"
python3 - "$out" "$flops" <<'PY'
import re, sys
out, flops = sys.argv[1], float(sys.argv[2])
lines = re.findall(r"iteration\s+(\d+)/.*?\(ms\): (\S+) \|.*?peak memory \(MiB\): (\S+)",
                   open(f"{out}/ours.worker.txt").read())
timed = [float(ms) for it, ms, _ in lines if int(it) > 1]
if not timed:
    print("ours: no timed step (see ours.glmctl.txt)")
    sys.exit(0)
step_s = sum(timed) / len(timed) / 1e3
tokens = 8 * 4096 / step_s
tflops = tokens * flops / 1e12
peak = float(lines[-1][2]) / 1024
row = (f"| ours (CUDA backend, bf16, fp32 AdamW) | {1e3 * step_s:.1f} | {tokens:.0f} | "
       f"{tflops:.1f} | {100 * tflops / 989:.1f}% | {peak:.1f} |")
print(row)
open(f"{out}/bench.txt", "a").write(row + "\n")
PY
