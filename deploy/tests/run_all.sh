#!/usr/bin/env bash
# The deployment checks, one after another, each bounded in time and timed:
# the slurm script on a real slurm, two hosts in network namespaces, Prometheus
# and the Grafana dashboard, the Kubernetes manifests, and the image's runtime
# packages in a Debian chroot. Builds the three programs first ($BAZEL, default
# `bazel`). Prints "== deploy NAME: pass|fail (Ns)" per check and writes
# "NAME=pass|fail" lines to RESULTS. Needs root and tools/bootstrap.sh's
# packages.
#   deploy/tests/run_all.sh RESULTS
set -uo pipefail
cd "$(dirname "$0")/../.."
results=${1:?usage: run_all.sh RESULTS}
: > "$results"
bazel=${BAZEL:-bazel}

if ! $bazel build //:glmctl //:glm-coordinator //:glm-worker 2>&1 | tail -n 1; then
  echo "deploy=fail" >> "$results"
  exit 1
fi
bin=$(mktemp -d /tmp/glm-deploy-bin.XXXXXX)
trap 'rm -rf "$bin"' EXIT
bazel_bin=$($bazel info bazel-bin 2>/dev/null)
cp "$bazel_bin/cli/glmctl" "$bazel_bin/coordinator/glm-coordinator" \
  "$bazel_bin/worker/glm-worker" "$bin/"

# check NAME SECONDS COMMAND...
check() {
  local name=$1 limit=$2 start=$SECONDS result=pass
  shift 2
  echo "== deploy $name: $*"
  timeout --kill-after=10 "$limit" "$@" || result=fail
  echo "== deploy $name: $result ($((SECONDS - start))s)"
  echo "$name=$result" >> "$results"
}

check deploy_slurm 240 deploy/tests/slurm_test.sh "$bin"
check deploy_two_hosts 120 deploy/tests/two_hosts_test.sh "$bin"
check deploy_prometheus 180 deploy/tests/prometheus_test.sh "$bin"
check deploy_manifests 120 deploy/tests/manifests_test.sh "$bin"
check deploy_image 420 deploy/tests/image_test.sh "$bin"
