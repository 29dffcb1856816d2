#!/usr/bin/env bash
# glm5.2-tiny forward + backward on the CPU: ours (//bench:cpu_model_bench, all three
# losses) against transformers' GlmMoeDsaForCausalLM (LM loss only: it has no MTP or
# indexer loss, so it does less work), same config, threads and tokens per step, in
# one call. Needs torch and transformers; on the GPU machine:
#   bench/cpu_vs_transformers.sh BIN_DIR CONFIG_JSON [threads] [tokens]
# where BIN_DIR has cpu_model_bench and CONFIG_JSON is `glmctl model config
# --preset=glm5.2-tiny`.
set -euo pipefail
bin=$1
config=$2
threads=${3:-$(nproc)}
tokens=${4:-4096}
echo "== ours"
GLM_CPU_THREADS=$threads OPENBLAS_NUM_THREADS=1 "$bin/cpu_model_bench" glm5.2-tiny "$tokens"
echo "== transformers"
python3 "$(dirname "$0")/transformers_cpu_bench.py" --config "$config" \
  --threads "$threads" --tokens "$tokens"
