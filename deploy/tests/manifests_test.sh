#!/usr/bin/env bash
# deploy/k8s offline: every resource against the Kubernetes 1.30 schemas that
# the kubernetes-validate package ships (strict: unknown fields rejected; the
# PodMonitor, a CRD, is checked by check_manifests.py only), then the
# consistency checks of check_manifests.py against the built programs.
#   deploy/tests/manifests_test.sh BIN_DIR   (glm-coordinator, glm-worker, glmctl)
set -euo pipefail
cd "$(dirname "$0")/../.."
source deploy/tests/lib.sh
bin=$(require_binaries "${1:-}")

/opt/glm-tools-venv/bin/kubernetes-validate --strict --kubernetes-version 1.30.0 \
  deploy/k8s/*.yaml
tools_python deploy/tests/check_manifests.py "$bin" deploy/k8s/*.yaml
echo "manifests_test: PASS"
