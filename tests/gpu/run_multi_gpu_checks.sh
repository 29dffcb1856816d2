#!/usr/bin/env bash
# On a GPU machine with two or more GPUs (nvidia-h200-x2 or larger), from the
# repository root after `source .gpu/b/env.sh`: the NCCL collectives checked
# against host results (nccl_collectives_check), then glm5.2-tiny trained 20 steps on
# one GPU, then split over two GPUs (one worker each: DP2, DP2 with ZeRO-1,
# both with overlapped gradient sums too, EP2, PP2, TP2, CP2), in the CUDA backend's
# fp32 mode and, but for ZeRO-1 and the overlapped sums, in bf16; each two-GPU
# run against the one-GPU run of its precision: the lm loss and grad norm of
# every step and the exported HF weights (tests/gpu/compare_multi_gpu.py;
# limits there). The workers' logs say which groups run over NCCL. Logs and
# the table go to $1.
set -uo pipefail
out=${1:?output folder}
bin=$(dirname "$(command -v glmctl)")
gpus=$(nvidia-smi -L | wc -l)
if ((gpus < 2)); then
  echo "needs two GPUs, found $gpus" >&2
  exit 2
fi
mkdir -p "$out"
state=/tmp/glm-multi-gpu-checks
rm -rf "$state" && mkdir -p "$state/jobs"
# NVLink multicast stays off on lent machines (the device tool's KINDS.md).
export NCCL_NVLS_ENABLE=0

# First every NCCL collective against host results, the exchanges queued on a
# caller's stream included (one rank per GPU, threads of one process).
TEST_TMPDIR=$state timeout 300 "$bin/nccl_collectives_check" \
  >"$out/nccl_collectives_check.txt" 2>&1
echo "nccl_collectives_check: exit $?"

python3 - "$state/jobs" <<'PY'
import json, sys
jobs = sys.argv[1]
base = json.load(open("tests/gpu/jobs/tiny_cuda_fp32_50.json"))
base["training"].update(trainIters=20, saveInterval=20, warmupIters=5,
                        lrDecayIters=20, exportHfDir="hf-export")
splits = {
    "one": {},
    "dp2": {"worldSize": 2},
    "dp2_zero": {"worldSize": 2},
    "dp2_overlap": {"worldSize": 2},
    "dp2_zero_overlap": {"worldSize": 2},
    "ep2": {"worldSize": 2, "ep": 2},
    "pp2": {"worldSize": 2, "pp": 2, "layout": "Etttttt|ttmL"},
    "tp2": {"worldSize": 2, "tp": 2},
    "cp2": {"worldSize": 2, "cp": 2},
}
for precision in ["fp32", "bf16"]:
    for name, parallel in splits.items():
        if precision == "bf16" and ("zero" in name or "overlap" in name):
            continue
        job = json.loads(json.dumps(base))
        job["name"] = f"tiny_{precision}_{name}"
        job["precision"] = precision
        job["parallel"].update(parallel)
        job["training"]["useDistributedOptimizer"] = "zero" in name
        job["training"]["overlapGradReduce"] = "overlap" in name
        json.dump(job, open(f"{jobs}/{precision}_{name}.json", "w"), indent=2)
PY

run() {  # name [CUDA_VISIBLE_DEVICES]
  local name=$1 visible=${2:-0,1} start=$SECONDS
  CUDA_VISIBLE_DEVICES=$visible glmctl local --job="$state/jobs/$name.json" \
    --state-dir="$state/$name" --worker-binary="$bin/glm-worker" \
    >"$out/$name.glmctl.txt" 2>&1
  echo "$name: exit $? in $((SECONDS - start)) s"
  for log in "$state/$name"/logs/worker-*.log; do
    cp "$log" "$out/$name.$(basename "$log")" 2>/dev/null
  done
}

for precision in fp32 bf16; do
  run "${precision}_one" 0
  for name in dp2 dp2_zero dp2_overlap dp2_zero_overlap ep2 pp2 tp2 cp2; do
    [[ -f $state/jobs/${precision}_$name.json ]] && run "${precision}_$name"
  done
done
python3 tests/gpu/compare_multi_gpu.py "$state" "$out"
