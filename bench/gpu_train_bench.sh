#!/usr/bin/env bash
# One H200, one call: glm5.2-mini without its MTP layer (transformers has none),
# seq 4096, micro batch 1, global batch 8, random tokens: transformers 5.17
# (bench/gpu_transformers_reference.py) and our trainer (`glmctl local
# --device=cuda`, bf16) on the same card; prints one table. Run from the
# repository root after `source .gpu/b/env.sh`; full logs go to $1.
# SEQ, GLOBAL_BATCH and DATA (a jsonl corpus) change the shape and the data
# (bench/gpu_long_context_bench.sh runs one sequence of up to 64k tokens);
# RECOMPUTE=1 recomputes each layer's activations in the backward; GRAPHS=0
# runs every micro batch op by op (default: captured as a CUDA graph,
# training.cudaGraphs).
set -uo pipefail
out=${1:?output folder}
steps=${STEPS:-3}
seq=${SEQ:-4096}
global=${GLOBAL_BATCH:-8}
bin=$(dirname "$(command -v glmctl)")
work=/tmp/glm-gpu-bench
rm -rf "$work" && mkdir -p "$work" "$out"
glmctl model config --preset=glm5.2-mini >"$work/mini.json"
python3 - "$work" "$steps" "$seq" "$global" "${DATA:-}" "${RECOMPUTE:-}" \
  "${GRAPHS:-1}" <<'PY'
import json, sys
work, steps, seq, global_batch, data, recompute, graphs = sys.argv[1], \
    int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], \
    sys.argv[6] == "1", sys.argv[7] != "0"
config = json.load(open(f"{work}/mini.json"))
config["num_nextn_predict_layers"] = 0
json.dump(config, open(f"{work}/mini_no_mtp.json", "w"))
job = json.load(open("examples/pretrain_cuda.json"))
job["name"] = "glm5.2-mini-bench"
job["model"] = {"hfConfigJson": json.dumps(config)}
job["training"].update(trainIters=steps, globalBatchSize=global_batch,
                       microBatchSize=1, seqLength=seq, saveInterval=0,
                       warmupIters=1, lrDecayIters=steps)
job["training"]["recomputeActivations"] = recompute
job["training"]["cudaGraphs"] = graphs
# Speed as a user gets it who lets the attention time its cuDNN plans.
job["training"]["deterministic"] = False
if data:
    job["data"]["sources"] = [{"path": data, "weight": 1.0}]
for key in ["saveDir", "exportHfDir"]:
    job["training"].pop(key, None)
json.dump(job, open(f"{work}/job.json", "w"), indent=2)
job["model"] = {"hfConfigJson": json.dumps(json.load(open(f"{work}/mini.json")))}
json.dump(job, open(f"{work}/job_mtp.json", "w"), indent=2)
PY
flops=$(model_flops "$work/mini_no_mtp.json" "$seq")
echo "FLOPs per token (Megatron + DSA, no MTP): $flops" | tee "$out/bench.txt"
# OURS_ONLY=1 skips transformers (a profiling run: GLM_OP_TIMES=1 makes the
# worker log a table of op times at its end, kernels/op_timing_backend.h;
# GLM_GPU_ACTIVITY=1 a line after each step's with the share of the step the
# GPU was idle and its largest gaps, kernels/cuda/gpu_activity.h, and
# GLM_GPU_ACTIVITY=kernels the step's kernels by total time as well, and
# with GLM_OP_TIMES=1 too each kernel under the op that launched it;
# GLM_TIME_PRODUCTS=1 lets the largest writing products time the cuBLASLt
# algorithms the heuristic lists, kernels/cuda/linear.cu);
# PROFILE=1 adds a torch.profiler table of one transformers step.
if [[ -z ${OURS_ONLY:-} ]]; then
  profile=()
  [[ -n ${PROFILE:-} ]] && profile=(--profile "$out/transformers_profile.txt")
  python3 bench/gpu_transformers_reference.py --config "$work/mini_no_mtp.json" \
    --flops-per-token "$flops" --seq "$seq" --global-batch "$global" \
    --steps "$steps" "${profile[@]}" \
    2>&1 | tee "$out/transformers.txt"
fi
# WORKER_BINARY replaces the worker (bench/ncu_worker.sh times its kernels
# one by one).
gemm=$(sed -n 's/^bf16 GEMM rate.*: \([0-9.]*\) TFLOP\/s$/\1/p' \
  "$out/transformers.txt" 2>/dev/null)
# Our run: its rows join the table (MFU of the GEMM rate when transformers'
# run measured one in this call).
ours() {  # name job flops-per-token label
  glmctl local --job="$2" --state-dir="$work/$1" \
    --worker-binary="${WORKER_BINARY:-$bin/glm-worker}" >"$out/$1.glmctl.txt" 2>&1
  cp "$work/$1/logs/worker-0.log" "$out/$1.worker.txt"
  python3 - "$out" "$1" "$3" "$4" "${gemm:-0}" "$((seq * global))" <<'PY'
import re, sys
out, name, flops, label, gemm = sys.argv[1], sys.argv[2], float(sys.argv[3]), \
    sys.argv[4], float(sys.argv[5])
tokens_per_step = int(sys.argv[6])
lines = re.findall(r"iteration\s+(\d+)/.*?\(ms\): (\S+) \|.*?peak memory \(MiB\): (\S+)",
                   open(f"{out}/{name}.worker.txt").read())
timed = [float(ms) for it, ms, _ in lines if int(it) > 1]
if not timed:
    print(f"{name}: no timed step (see {name}.glmctl.txt)")
    sys.exit(0)
step_s = sum(timed) / len(timed) / 1e3
tokens = tokens_per_step / step_s
tflops = tokens * flops / 1e12
peak = float(lines[-1][2]) / 1024
of_gemm = f"{100 * tflops / gemm:.1f}%" if gemm > 0 else "-"
row = (f"| {label} | {1e3 * step_s:.1f} | {tokens:.0f} | {tflops:.1f} | "
       f"{100 * tflops / 989:.1f}% | {of_gemm} | {peak:.1f} |")
print(row)
open(f"{out}/bench.txt", "a").write(row + "\n")
PY
}
ours_label="ours (CUDA backend, bf16, fp32 AdamW)"
ours ours "$work/job.json" "$flops" "$ours_label"
# MTP=1 adds our run with glm5.2-mini's MTP layer on (transformers has none),
# counted with the MTP layer's FLOPs.
if [[ -n ${MTP:-} ]]; then
  mtp_flops=$(model_flops "$work/mini.json" "$seq")
  ours ours_mtp "$work/job_mtp.json" "$mtp_flops" "ours, MTP layer on"
fi
# Last, the ratio of our main row's tokens/s to transformers' (whose row is in
# transformers.txt).
python3 - "$ours_label" "$out/bench.txt" "$out/transformers.txt" <<'PY'
import os, re, sys
label, files = sys.argv[1], sys.argv[2:]
text = "".join(open(f).read() for f in files if os.path.exists(f))
rows = {m.group(1).strip(): float(m.group(2)) for m in re.finditer(
    r"^\| ([^|]+) \| [0-9.]+ \| ([0-9.]+) \|", text, re.M)}
ours = rows.get(label)
theirs = next((v for k, v in rows.items() if k.startswith("transformers")), None)
if ours and theirs:
    line = f"ratio ours / transformers (tokens/s): {ours / theirs:.2f}"
    print(line)
    open(files[0], "a").write(line + "\n")
PY
