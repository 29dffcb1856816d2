#!/usr/bin/env bash
# The image's runtime stage without a container runtime: a Debian 12 chroot
# (debootstrap, minbase) with deploy/docker/runtime-packages.txt installed,
# the three programs and glm-workers copied in as the Dockerfile copies them.
# In it, as user 10001 like the image: every program's shared libraries
# resolve and --version answers; then a coordinator starts, glm-workers starts
# two CPU workers that register, and SIGTERM to glm-workers stops both, each
# deregistering. The chroot is cached per package list in
# /var/cache/glm-image-test (debootstrap downloads take minutes).
#   deploy/tests/image_test.sh BIN_DIR   (glm-coordinator, glm-worker, glmctl)
set -euo pipefail
cd "$(dirname "$0")/../.."
source deploy/tests/lib.sh
bin=$(require_binaries "${1:-}")

packages=$(grep -v '^#' deploy/docker/runtime-packages.txt | paste -sd, -)
cache=/var/cache/glm-image-test
tarball=$cache/bookworm-$(sha256sum <<< "$packages" | cut -c1-16).tar
root=$(mktemp -d /tmp/glm-image.XXXXXX)
pids=()
cleanup() {
  local status=$?
  ((status == 0)) || show_logs "$root"/tmp/*.log
  stop_processes "${pids[@]}"
  umount "$root/proc" 2>/dev/null || true
  rm -rf "$root"
  exit "$status"
}
trap cleanup EXIT

if [[ ! -f $tarball ]]; then
  mkdir -p "$cache"
  debootstrap --variant=minbase --include="$packages" bookworm "$root/new" \
    http://deb.debian.org/debian > "$root/debootstrap.log" ||
    { tail -n 20 "$root/debootstrap.log"; fail "debootstrap failed"; }
  tar -C "$root/new" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
  rm -rf "$root/new"
fi
tar -C "$root" -xf "$tarball"
cp -L "$bin/glm-coordinator" "$bin/glm-worker" "$bin/glmctl" \
  deploy/docker/glm-workers "$root/usr/local/bin/"
mount -t proc proc "$root/proc"

# The image's user and environment, in the chroot (`exec`: the process started
# in the background is the program itself, so that it can be signalled).
in_image=(chroot --userspec=10001:10001 "$root" /usr/bin/env -i
  PATH=/usr/local/bin:/usr/bin:/bin)
for program in glm-coordinator glm-worker glmctl; do
  missing=$(chroot "$root" ldd "/usr/local/bin/$program" | grep 'not found' || true)
  [[ -z $missing ]] || fail "$program in the image: $missing"
  "${in_image[@]}" "$program" --version
done

mkdir -p "$root/tmp/state"
chown 10001:10001 "$root/tmp/state"
for token in operator-token worker-token; do
  (umask 077 && openssl rand -hex 32 > "$root/tmp/$token")
  chown 10001:10001 "$root/tmp/$token"
done
port=$(free_port) metrics_port=$(free_port)
metrics=http://127.0.0.1:$metrics_port/metrics
"${in_image[@]}" glm-coordinator --listen="127.0.0.1:$port" \
  --state-dir=/tmp/state/coordinator --metrics-listen="127.0.0.1:$metrics_port" \
  --operator-token-file=/tmp/operator-token --worker-token-file=/tmp/worker-token \
  --path-roots=/tmp/state \
  2> "$root/tmp/coordinator.log" &
pids+=($!)
"${in_image[@]}" GLM_DEVICE=cpu GLM_WORKERS=2 glm-workers \
  --coordinator="127.0.0.1:$port" --token-file=/tmp/worker-token --path-roots=/tmp/state 2> "$root/tmp/workers.log" &
launcher=$!
pids+=($launcher)
wait_for "two workers registered in the image" 60 bash -c \
  "curl -sf $metrics | grep -q '^glm_workers{status=\"alive\"} 2'"
kill -TERM "$launcher"
wait "$launcher" || true
expect_equal "workers that deregistered" 2 "$(grep -o ': deregistered' "$root/tmp/workers.log" | wc -l)"
wait_for "the coordinator to forget them" 10 bash -c \
  "curl -sf $metrics | grep -q '^glm_workers{status=\"registered\"} 0'"
echo "image_test: PASS"
