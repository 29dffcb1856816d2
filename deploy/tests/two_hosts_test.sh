#!/usr/bin/env bash
# Two hosts on one machine: network namespaces glm-host-a and glm-host-b
# joined by a veth pair, 198.18.0.1 and 198.18.0.2 (RFC 2544's range for
# network tests; each namespace's loopback up, no other route), where the name
# glm-coordinator means host A (ip netns exec reads /etc/netns/NAME/hosts).
# Host A runs glm-coordinator with TLS and worker client certificates (mTLS,
# deploy/tls/make_certs.sh) and split operator and worker tokens; each host
# runs one glm-worker with the default advertised address (its address on the
# route to the coordinator). A two-rank job must train across them to
# SUCCEEDED, each worker having registered with its own host's address.
# Needs root (ip netns).
#   deploy/tests/two_hosts_test.sh BIN_DIR   (glm-coordinator, glm-worker, glmctl)
set -euo pipefail
cd "$(dirname "$0")/../.."
source deploy/tests/lib.sh
bin=$(require_binaries "${1:-}")

# Each run names its namespaces after its process, so two runs never collide.
a=glm-host-a-$$ b=glm-host-b-$$
addr_a=198.18.0.1 addr_b=198.18.0.2
dir=$(mktemp -d /tmp/glm-two-hosts.XXXXXX)
pids=()
cleanup() {
  local status=$?
  ((status == 0)) || show_logs "$dir"/*.log
  stop_processes "${pids[@]}"
  ip netns del "$a" 2>/dev/null || true
  ip netns del "$b" 2>/dev/null || true
  rm -rf "$dir" "/etc/netns/$a" "/etc/netns/$b"
  exit "$status"
}
trap cleanup EXIT

ip netns add "$a"
ip netns add "$b"
for ns in "$a" "$b"; do
  mkdir -p "/etc/netns/$ns"
  printf '127.0.0.1 localhost\n%s glm-coordinator\n' "$addr_a" > "/etc/netns/$ns/hosts"
done
ip link add "veth-$$-a" netns "$a" type veth peer name "veth-$$-b" netns "$b"
ip -n "$a" addr add "$addr_a/24" dev "veth-$$-a"
ip -n "$b" addr add "$addr_b/24" dev "veth-$$-b"
ip -n "$a" link set "veth-$$-a" up
ip -n "$b" link set "veth-$$-b" up
ip -n "$a" link set lo up
ip -n "$b" link set lo up

for token in operator-token worker-token; do
  (umask 077 && openssl rand -hex 32 > "$dir/$token")
done
deploy/tls/make_certs.sh "$dir/tls" glm-coordinator
ip netns exec "$a" "$bin/glm-coordinator" --listen="$addr_a:7070" \
  --state-dir="$dir/coordinator" --metrics-listen="$addr_a:9464" \
  --operator-token-file="$dir/operator-token" \
  --worker-token-file="$dir/worker-token" --path-roots="$dir" \
  --tls-cert="$dir/tls/tls.crt" --tls-client-ca="$dir/tls/ca.crt" \
  --tls-key="$dir/tls/tls.key" 2> "$dir/coordinator.log" &
pids+=($!)
for ns in "$a" "$b"; do
  ip netns exec "$ns" "$bin/glm-worker" --coordinator=glm-coordinator:7070 \
    --token-file="$dir/worker-token" --path-roots="$dir" \
    --tls-ca="$dir/tls/ca.crt" --tls-cert="$dir/tls/worker.crt" \
    --tls-key="$dir/tls/worker.key" --device=cpu \
    2> "$dir/worker-$ns.log" &
  pids+=($!)
done
wait_for "both workers registered" 60 bash -c \
  "grep -q 'peers reach it at $addr_a)' '$dir/worker-$a.log' &&
   grep -q 'peers reach it at $addr_b)' '$dir/worker-$b.log'"

# glmctl runs on host b: it reaches the coordinator over the veth pair too.
# The job's outputs go to a folder both "hosts" see (one machine's disk).
export GLM_COORDINATOR=glm-coordinator:7070 GLM_TOKEN_FILE=$dir/operator-token \
  GLM_TLS_CA=$dir/tls/ca.crt
ip netns exec "$b" "$bin/glmctl" submit -f deploy/tests/two_rank_job.json \
  --stage-dir="$dir/job" > "$dir/submit.log"
job=$(awk '/^submitted /{print $2}' "$dir/submit.log")
[[ -n $job ]] || fail "submitting failed: $(cat "$dir/submit.log")"
# Global flags before the command, as other cluster tools take them.
ip netns exec "$b" "$bin/glmctl" --coordinator=glm-coordinator:7070 \
  watch "$job" | tee "$dir/watch.log" ||
  fail "$job did not succeed"
grep -q "$job SUCCEEDED" "$dir/watch.log" || fail "$job did not succeed"
grep -q "rank 1 of 2" "$dir/worker-$a.log" "$dir/worker-$b.log" ||
  fail "no worker ran rank 1"
expect_file "$dir/job/hf-export/config.json"
echo "two_hosts_test: PASS"
