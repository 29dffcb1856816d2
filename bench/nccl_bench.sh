#!/bin/bash
# NCCL collectives through our NcclCollectives (ranks as processes, as
# glm-workers run, and as threads of one process) against torch.distributed on
# the same GPUs in the same call; prints one table. On the GPU machine (two or
# more GPUs), from a bundle made with
#   bazel build --config=cuda //bench:nccl_collectives_bench
#   ../shared/tools/device-bundle .gpu/b bazel-bin/bench/nccl_collectives_bench
# run: source .gpu/b/env.sh; bench/nccl_bench.sh .gpu/b/nccl_collectives_bench
set -euo pipefail
ours_bin=${1:?usage: nccl_bench.sh PATH/TO/nccl_collectives_bench}
scratch=$(mktemp -d)
mkdir -p "$scratch/p" "$scratch/t"
processes=$(TEST_TMPDIR=$scratch/p "$ours_bin")
threads=$(TEST_TMPDIR=$scratch/t "$ours_bin" --threads)
torch=$(python3 "$(dirname "$0")/torch_nccl_bench.py")
nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c
echo "| op | MiB | ours ms (processes) | busbw GB/s | ours ms (threads) | busbw GB/s | torch ms | busbw GB/s |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
paste -d' ' <(echo "$processes") <(echo "$threads") <(echo "$torch") |
  awk '{printf "| %s | %d | %s | %s | %s | %s | %s | %s |\n", $1, $2 / 1048576, $3, $4, $7, $8, $11, $12}'
