#!/bin/bash
# Measures the peak resident memory of every CPU rank of real training runs
# (glmctl local: a coordinator and one glm-worker process per rank) under
# DP, ZeRO-1, PP, VPP, EP, TP, CP and their combinations, for the planner's
# comparison (planner/cpu_memory_test.cc reads the output).
#
#   planner/cpu_memory_runs.sh OUT [GLMCTL [CASE...]]
#
# (CASE names pick some of the runs below; OUT is appended to.)
# The model is planner/testdata/cpu_bench_config.json (a GLM-5.2-shaped
# model of 24M parameters, big enough that weights, optimizer state and
# activations outweigh a worker's own ~60 MiB); every run trains 3 steps of
# 8 x 512 tokens (micro batches of 2) on the shipped corpus, without
# checkpoints. Each rank's figure is the "peak memory (MiB)" of its last
# log line (getrusage's ru_maxrss). Run it as is and with
# MALLOC_MMAP_THRESHOLD_=131072 MALLOC_TRIM_THRESHOLD_=131072 in the
# environment (planner/NOTES.md says why both).
set -euo pipefail

out=$1
glmctl=${2:-$(dirname "$0")/../bazel-bin/cli/glmctl}
shift $(( $# < 2 ? $# : 2 ))
only=" $* "
here=$(cd "$(dirname "$0")" && pwd)
config=$here/testdata/cpu_bench_config.json
work=$(mktemp -d /tmp/planner_cpu_memory.XXXXXX)

# name world tp pp vpp cp ep zero model(tiny|bench) layout (-: one stage).
# Layouts start every stage on a computing layer (1, 2, 3, 7 of 8) and keep
# the MTP layer with layer 8, as `glmctl plan --explain` plans them.
cases=(
  "tiny 1 1 1 1 1 1 0 tiny -"
  "one 1 1 1 1 1 1 0 bench -"
  "dp2 2 1 1 1 1 1 0 bench -"
  "dp2_zero1 2 1 1 1 1 1 1 bench -"
  "pp2 2 1 2 1 1 1 0 bench Etttttt|ttmL"
  "pp2_vpp2 2 1 2 2 1 1 0 bench Et|t|tttt|ttmL"
  "ep2 2 1 1 1 1 2 0 bench -"
  "ep2_zero1 2 1 1 1 1 2 1 bench -"
  "tp2 2 2 1 1 1 1 0 bench -"
  "cp2 2 1 1 1 2 1 0 bench -"
  "pp2_dp2 4 1 2 1 1 1 0 bench Etttttt|ttmL"
  "pp2_ep2 4 1 2 1 1 2 0 bench Etttttt|ttmL"
  "tp2_cp2 4 2 1 1 2 1 0 bench -"
  "tp2_ep2_zero1 4 2 1 1 1 2 1 bench -"
)

job_spec() {  # world tp pp vpp cp ep zero model layout
  python3 - "$@" "$config" <<'EOF'
import json, sys
world, tp, pp, vpp, cp, ep, zero = map(int, sys.argv[1:8])
model, layout, config = sys.argv[8], sys.argv[9], sys.argv[10]
spec = {
    "name": "planner-cpu-memory",
    "device": "cpu",
    "model": ({"preset": "glm5.2-tiny"} if model == "tiny"
              else {"hfConfigJson": open(config).read()}),
    "parallel": {"worldSize": world, "tp": tp, "pp": pp, "vpp": vpp,
                 "cp": cp, "ep": ep, "etp": 1,
                 "layout": "" if layout == "-" else layout},
    "training": {
        "mode": "PRETRAIN", "trainIters": 3, "lr": 0.001, "minLr": 0.0001,
        "warmupIters": 1, "lrDecayIters": 3, "globalBatchSize": 8,
        "microBatchSize": 2, "seqLength": 512, "seed": 1234,
        "deterministic": True, "saveDir": "checkpoints",
        "saveInterval": 1000, "weightDecay": 0.1, "clipGrad": 1.0,
        "mtpLossScale": 0.1, "indexerLossCoeff": 0.001,
        "routerBiasUpdateRate": 0.001,
        "useDistributedOptimizer": bool(zero)},
    "data": {"sources": [{"path": "data/corpus/english_text.jsonl",
                          "weight": 1.0}],
             "tokenizer": "byte", "dataSeed": 1234},
}
print(json.dumps(spec, indent=2))
EOF
}

if [[ ! -s $out ]]; then
  {
    echo "# Peak resident memory (MiB) per CPU rank, $(date -u +%Y-%m-%d)," \
      "$(nproc) cores, MALLOC_MMAP_THRESHOLD_=${MALLOC_MMAP_THRESHOLD_:-default}"
    echo "# case world tp pp vpp cp ep zero1 model layout rank peak_mib"
  } > "$out"
fi
for entry in "${cases[@]}"; do
  read -r name world tp pp vpp cp ep zero model layout <<< "$entry"
  [[ $only == "  " || $only == *" $name "* ]] || continue
  dir=$work/$name
  mkdir -p "$dir"
  job_spec "$world" "$tp" "$pp" "$vpp" "$cp" "$ep" "$zero" "$model" \
    "$layout" > "$dir/job.json"
  echo "== $name" >&2
  if ! (cd "$here/.." && "$glmctl" local --job="$dir/job.json" \
         --state-dir="$dir/state" > "$dir/glmctl.log" 2>&1); then
    echo "# $name failed: $(grep -m1 FAILED "$dir/glmctl.log")" >> "$out"
    continue
  fi
  for log in "$dir"/state/logs/worker-*.log; do
    rank=$(sed -n 's/.*attempt 1: rank \([0-9]*\) of.*/\1/p' "$log")
    peak=$(grep -o 'peak memory (MiB): [0-9]*' "$log" | tail -1 |
           grep -o '[0-9]*$')
    echo "$name $world $tp $pp $vpp $cp $ep $zero $model $layout $rank $peak" \
      >> "$out"
  done
done
rm -rf "$work"
