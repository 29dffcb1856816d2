#!/usr/bin/env bash
# Debian's Prometheus against a running coordinator and a training job:
# promtool checks the shipped scrape config and the coordinator's /metrics,
# Prometheus scrapes the coordinator (the shipped config pointed at it, every
# second) while a two-rank job trains, and then every query of the Grafana
# dashboard must return data. Also checks that long-lived streams stay out of
# the latency histogram and that a finished job's series leave /metrics after
# the retention.
#   deploy/tests/prometheus_test.sh BIN_DIR   (glm-coordinator, glm-worker, glmctl)
set -euo pipefail
cd "$(dirname "$0")/../.."
source deploy/tests/lib.sh
bin=$(require_binaries "${1:-}")

dir=$(mktemp -d /tmp/glm-prometheus.XXXXXX)
pids=()
cleanup() {
  local status=$?
  ((status == 0)) || show_logs "$dir"/*.log
  stop_processes "${pids[@]}"
  rm -rf "$dir"
  exit "$status"
}
trap cleanup EXIT

promtool check config deploy/prometheus/prometheus.yml

grpc_port=$(free_port) metrics_port=$(free_port) prometheus_port=$(free_port)
retention_s=10

for token in operator-token worker-token; do
  (umask 077 && openssl rand -hex 32 > "$dir/$token")
done
"$bin/glm-coordinator" --listen="127.0.0.1:$grpc_port" --state-dir="$dir/coordinator" \
  --metrics-listen="127.0.0.1:$metrics_port" --metrics-retention-s=$retention_s \
  --operator-token-file="$dir/operator-token" \
  --worker-token-file="$dir/worker-token" --path-roots="$dir" \
  2> "$dir/coordinator.log" &
pids+=($!)
for rank in 0 1; do
  "$bin/glm-worker" --coordinator="127.0.0.1:$grpc_port" --token-file="$dir/worker-token" \
    --path-roots="$dir" --device=cpu 2> "$dir/worker-$rank.log" &
  pids+=($!)
done

sed -e 's/scrape_interval: 15s/scrape_interval: 1s/' \
  -e "s/glm-coordinator:9464/127.0.0.1:$metrics_port/" \
  deploy/prometheus/prometheus.yml > "$dir/prometheus.yml"
prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/tsdb" \
  --web.listen-address="127.0.0.1:$prometheus_port" 2> "$dir/prometheus.log" &
pids+=($!)
prometheus_url=http://127.0.0.1:$prometheus_port
wait_for "Prometheus to scrape the coordinator" 60 bash -c \
  "curl -sf '$prometheus_url/api/v1/targets' | grep -q '\"health\":\"up\"'"
wait_for "both workers registered" 60 bash -c \
  "curl -sf http://127.0.0.1:$metrics_port/metrics | grep -q '^glm_workers{status=\"alive\"} 2'"

export GLM_COORDINATOR=127.0.0.1:$grpc_port GLM_TOKEN_FILE=$dir/operator-token
job=$("$bin/glmctl" submit -f deploy/tests/two_rank_job.json --stage-dir="$dir/job" |
  awk '/^submitted /{print $2}')
"$bin/glmctl" watch "$job" > "$dir/watch.log" || fail "$job did not succeed"

curl -sf "http://127.0.0.1:$metrics_port/metrics" > "$dir/metrics.txt"
promtool check metrics < "$dir/metrics.txt"
grep -q "^glm_job_lm_loss{job_id=\"$job\"}" "$dir/metrics.txt" ||
  fail "no glm_job_lm_loss{job_id=\"$job\"} on /metrics"
grep -q '^glm_rpcs_total{.*method="JobService/WatchJob"' "$dir/metrics.txt" ||
  fail "WatchJob calls are not counted"
! grep -q 'glm_rpc_latency_seconds_bucket{.*method="JobService/WatchJob"' "$dir/metrics.txt" ||
  fail "WatchJob streams are in the latency histogram"

# Two more scrapes, so that every rate() has samples after the job's end.
sleep 3
tools_python deploy/tests/check_dashboard.py deploy/grafana/glm-dashboard.json \
  "$prometheus_url" "$job"

wait_for "the finished job's series to leave /metrics" $((retention_s + 20)) bash -c \
  "! curl -sf http://127.0.0.1:$metrics_port/metrics | grep -q 'job_id=\"$job\"'"
echo "prometheus_test: PASS"
