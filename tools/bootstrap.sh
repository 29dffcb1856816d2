#!/usr/bin/env bash
# Installs everything the build and the tests need on a fresh Debian 12 machine:
# Bazel (Debian's bazel-bootstrap, offline) and the system libraries named in
# DESIGN.md. CUDA is not installed here: where /usr/local/cuda exists, CUDA kernels
# build with --config=cuda; without it everything else still builds and runs.
set -euo pipefail

packages=(
  bazel-bootstrap bazel-rules-java
  g++ python3 git ca-certificates clang-format
  clang-14 libclang-rt-14-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev librocksdb-dev prometheus-cpp-dev libgloo-dev libopenblas-dev
  libsentencepiece-dev libxxhash-dev nlohmann-json3-dev libssl-dev
  libcurl4-openssl-dev libgtest-dev libgmock-dev libbenchmark-dev
  # The deployment checks (deploy/tests/): a one-node slurm cluster, network
  # namespaces, Prometheus, a Debian chroot for the image's runtime packages,
  # and a Python for the pinned packages below.
  slurmctld slurmd slurm-client munge iproute2 prometheus debootstrap
  python3-venv openssl curl
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  echo "bootstrap: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# tools/python_requirements.txt, every version pinned, in a virtual environment
# of Debian's python3; reinstalled when the list changes.
venv=/opt/glm-tools-venv
requirements=$(dirname "$0")/python_requirements.txt
if ! cmp -s "$requirements" "$venv/requirements.txt" 2>/dev/null; then
  echo "bootstrap: installing $requirements into $venv"
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo rm -rf "$venv"
  $sudo /usr/bin/python3 -m venv "$venv"
  $sudo "$venv/bin/pip" install -q --no-deps -r "$requirements"
  $sudo cp "$requirements" "$venv/requirements.txt"
fi
echo "bootstrap: all packages present"
