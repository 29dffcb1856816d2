#!/bin/bash
# End to end: the real glm-coordinator on 127.0.0.1, driven by the real glmctl.
# Submit (refused before a worker of the job's device registers, valid, invalid), list,
# get, cancel, restart the coordinator and find the job with its history (and a live
# glm-worker registered again under a new id), refuse a wrong token and the worker
# token, stop on SIGTERM.
set -u

COORDINATOR="coordinator/glm-coordinator"
GLMCTL="cli/glmctl"
WORKER="worker/glm-worker"
WORK="${TEST_TMPDIR:-$(mktemp -d)}/e2e"
rm -rf "$WORK" && mkdir -p "$WORK/specs"
# The test specs with their data under $WORK, the coordinator's path root.
SPECS="$WORK/specs"
for spec in tiny_job skip_layer_job; do
  sed "s|\"data/|\"$WORK/data/|" "jobspec/testdata/$spec.json" > "$SPECS/$spec.json"
done
echo "e2e-operator-token-$$" > "$WORK/token"
echo "e2e-worker-token-$$" > "$WORK/worker_token"
echo "not-the-token" > "$WORK/wrong_token"
export GLM_TOKEN_FILE="$WORK/token"
unset GLM_COORDINATOR

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# Starts the coordinator on free ports (gRPC on $1 when given) and sets
# COORDINATOR_PID and GLM_COORDINATOR.
start_coordinator() {
  "$COORDINATOR" --listen="${1:-127.0.0.1:0}" --metrics-listen=127.0.0.1:0 \
    --state-dir="$WORK/state" --operator-token-file="$WORK/token" \
    --worker-token-file="$WORK/worker_token" --path-roots="$WORK" \
    2> "$WORK/coordinator.log" &
  COORDINATOR_PID=$!
  local port=""
  for _ in $(seq 100); do
    port=$(sed -n 's/.*serving on port \([0-9]*\),.*/\1/p' "$WORK/coordinator.log")
    [ -n "$port" ] && break
    sleep 0.1
  done
  if [ -z "$port" ]; then
    cat "$WORK/coordinator.log"
    echo "FAIL: coordinator did not start"
    exit 1
  fi
  export GLM_COORDINATOR="127.0.0.1:$port"
}

stop_coordinator() {
  kill -TERM "$COORDINATOR_PID"
  wait "$COORDINATOR_PID"
  local code=$?
  [ "$code" -eq 0 ] || fail "coordinator exited $code on SIGTERM"
  grep -q "shutting down" "$WORK/coordinator.log" || fail "no graceful shutdown"
}

# run NAME EXPECTED_EXIT ARGS...: runs glmctl, keeps stdout/stderr in $WORK/NAME.*
run() {
  local name=$1 expected=$2
  shift 2
  "$GLMCTL" "$@" > "$WORK/$name.out" 2> "$WORK/$name.err"
  local code=$?
  if [ "$code" -ne "$expected" ]; then
    fail "glmctl $* exited $code, expected $expected"
    cat "$WORK/$name.out" "$WORK/$name.err"
  fi
}

expect_in() {
  local file=$1 text=$2
  grep -qF -- "$text" "$WORK/$file" || {
    fail "'$text' not in $file:"
    cat "$WORK/$file"
  }
}

start_coordinator

run no_worker 1 submit -f "$SPECS/tiny_job.json"
expect_in no_worker.err "FAILED_PRECONDITION: device: no registered worker runs cpu jobs"

# A live worker (one of the job's two ranks) outlives the restart: the new
# coordinator does not know its id.
"$WORKER" --coordinator="$GLM_COORDINATOR" --token-file="$WORK/worker_token" \
  --path-roots="$WORK" \
  2> "$WORK/worker.log" &
WORKER_PID=$!
wait_for_line() {
  for _ in $(seq 150); do
    grep -qF -- "$2" "$WORK/$1" && return
    sleep 0.1
  done
  fail "'$2' not in $1 after 15 s:"
  cat "$WORK/$1"
}
wait_for_line worker.log ": registered with"
# Worker ids are "worker-" and 128 random bits.
FIRST_ID=$(sed -n 's/^glm-worker \(worker-[0-9a-f]*\): registered.*/\1/p' "$WORK/worker.log")
[[ $FIRST_ID =~ ^worker-[0-9a-f]{32}$ ]] || fail "worker id '$FIRST_ID'"

run submit 0 submit -f "$SPECS/tiny_job.json"
# Ids are job-TAG-NNNNNN: the store's random tag, then its counter.
JOB=$(awk '/^submitted /{print $2}' "$WORK/submit.out")
[[ $JOB =~ ^job-[0-9a-f]{6}-000001$ ]] || fail "first job id '$JOB'"
expect_in submit.out "submitted $JOB (PENDING)"

run invalid 1 submit -f "$SPECS/skip_layer_job.json"
expect_in invalid.err "INVALID_ARGUMENT: parallel.layout:"
expect_in invalid.err "starts at layer 4"

# Paths outside the coordinator's --path-roots, or relative, are refused.
sed 's|"tokenizer": "byte"|"tokenizer": "/etc/passwd"|' "$SPECS/tiny_job.json" > "$WORK/outside.json"
run outside 1 submit -f "$WORK/outside.json"
expect_in outside.err 'INVALID_ARGUMENT: data.tokenizer: "/etc/passwd" is outside the path roots'
run relative 1 submit -f jobspec/testdata/tiny_job.json
expect_in relative.err 'data.sources[0].path: "data/tiny_text_document" is relative'

echo '{"name": "typo", "trainig": {}}' > "$WORK/typo.json"
run typo 1 submit -f "$WORK/typo.json"
expect_in typo.err "trainig"

run list 0 list
expect_in list.out "$JOB"
expect_in list.out "tiny-pretrain"
expect_in list.out "PENDING"
[ "$(grep -c job- "$WORK/list.out")" -eq 1 ] || fail "the invalid job was stored"

run list_json 0 list --output=json
expect_in list_json.out "\"id\": \"$JOB\""

run get 0 get $JOB
expect_in get.out "state:       PENDING"
expect_in get.out "layout Etttttt|ttmL"

run cancel 0 cancel $JOB --reason="e2e says stop"
expect_in cancel.out "cancelled $JOB"
run cancel_again 1 cancel $JOB
expect_in cancel_again.err "FAILED_PRECONDITION"

run missing 1 get job-000404
expect_in missing.err "NOT_FOUND"

stop_coordinator
start_coordinator "$GLM_COORDINATOR"

wait_for_line worker.log \
  "coordinator no longer knows $FIRST_ID (NOT_FOUND: no worker '$FIRST_ID'"
wait_for_line worker.log "registered again as worker-"

run get_after_restart 0 get $JOB --output=json
expect_in get_after_restart.out '"state": "CANCELLED"'
expect_in get_after_restart.out '"reason": "submitted"'
expect_in get_after_restart.out '"reason": "e2e says stop"'
run history_after_restart 0 get $JOB
expect_in history_after_restart.out "PENDING  CANCELLED  e2e says stop"

run watch_ended 1 watch $JOB
expect_in watch_ended.out "$JOB CANCELLED: e2e says stop"

run second 0 submit -f "$SPECS/tiny_job.json"
expect_in second.out "submitted ${JOB%-000001}-000002"
kill -TERM "$WORKER_PID"
wait "$WORKER_PID" || fail "worker exited $? on SIGTERM"

run wrong_token 1 list --token-file="$WORK/wrong_token"
expect_in wrong_token.err "UNAUTHENTICATED"
run worker_token 1 cancel "${JOB%-000001}-000002" --token-file="$WORK/worker_token"
expect_in worker_token.err "PERMISSION_DENIED: JobService/CancelJob needs the operator token"
run not_cancelled 0 get "${JOB%-000001}-000002"
grep -q CANCELLED "$WORK/not_cancelled.out" && fail "the worker token cancelled a job"
run no_token 2 list --token-file=
expect_in no_token.err "token"
run help 0 submit --help
expect_in help.out "usage: glmctl submit"

stop_coordinator

# The single token of earlier releases is refused with what to do instead.
"$COORDINATOR" --state-dir="$WORK/old" --auth-token-file="$WORK/token" \
  2> "$WORK/old_flag.err" && fail "--auth-token-file was accepted"
expect_in old_flag.err "--auth-token-file was split in two"

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "PASS"
