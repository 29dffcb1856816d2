#!/usr/bin/env bash
# Builds the softmax products' epilogue variants (kSoftmaxSourceStages 4 and 6
# of C's subtiles in flight; the tree's CUTLASS builder picks 3) as workers and
# op harnesses packed under .gpu/v2, beside tests/gpu/bundle.sh's bundle, for
# tests/gpu/pending_call.sh. The tree is restored after each build.
set -euo pipefail
cd "$(dirname "$0")/../.."
file=kernels/cuda/attention_products.cu
git diff --quiet -- "$file" || { echo "$file has local changes" >&2; exit 1; }
mkdir -p .gpu/v2
trap 'git checkout -- "$file"' EXIT
for stages in 4 6; do
  # e88782f put the epilogue back on CUTLASS's public builder; its reverse
  # names the stages.
  git show e88782f -- "$file" | git apply -R
  sed -i "s/constexpr int kSoftmaxSourceStages = 3;/constexpr int kSoftmaxSourceStages = $stages;/" "$file"
  grep -q "kSoftmaxSourceStages = $stages;" "$file"
  bazel build --config=cuda //:glm-worker //tests/gpu:backend_ops_check
  xz -T2 -6 -c bazel-bin/worker/glm-worker >".gpu/v2/glm-worker-stages$stages.xz"
  xz -T2 -6 -c bazel-bin/tests/gpu/backend_ops_check \
    >".gpu/v2/backend_ops_check-stages$stages.xz"
  git checkout -- "$file"
done
# bazel-bin as the tree builds it again.
bazel build --config=cuda //:glm-worker //tests/gpu:backend_ops_check
ls -l .gpu/v2
