#!/bin/bash
# glmctl local with training.maxRestarts 1: the worker running the job is
# killed (SIGKILL) after its first checkpoint; glmctl local starts a new worker,
# the coordinator restarts the job on it from that checkpoint, and the job
# succeeds with every checkpoint written.
set -u
GLMCTL="cli/glmctl"
WORK="${TEST_TMPDIR:-$(mktemp -d)}/restart"
rm -rf "$WORK" && mkdir -p "$WORK"
python3 - "$WORK/job.json" <<'PY'
import json, sys
job = json.load(open("examples/pretrain.json"))
job["training"].update(trainIters=40, lrDecayIters=40, saveInterval=10,
                       maxRestarts=1)
job["training"].pop("exportHfDir", None)
json.dump(job, open(sys.argv[1], "w"))
PY
"$GLMCTL" local --job="$WORK/job.json" --state-dir="$WORK/state" \
  --worker-binary=worker/glm-worker >"$WORK/glmctl.log" 2>&1 &
glmctl_pid=$!
log="$WORK/state/logs/worker-0.log"
for _ in $(seq 1 300); do
  grep -q "saved checkpoint" "$log" 2>/dev/null && break
  sleep 0.2
done
worker=$(pgrep -f "glm-worker.*$WORK/state" | head -1)
if [[ -z $worker ]]; then
  echo "FAIL: no worker to kill"; cat "$WORK/glmctl.log"; exit 1
fi
kill -9 "$worker"
wait "$glmctl_pid"
status=$?
grep -v "^ iteration" "$WORK/glmctl.log"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
[[ $status == 0 ]] || fail "glmctl local exited $status"
grep -q "ended (killed by signal 9); starting a new one" "$WORK/glmctl.log" ||
  fail "the killed worker was not replaced"
grep -q "restart 1 of 1" "$WORK/glmctl.log" || fail "the job did not restart"
grep -q "SUCCEEDED" "$WORK/glmctl.log" || fail "the job did not succeed"
grep -q "resumed from iteration" "$log" || fail "the restart did not resume"
[[ -d $WORK/state/checkpoints/iter_0000040 ]] ||
  fail "no checkpoint of the last iteration"
if ((failures > 0)); then exit 1; fi
echo "PASS"
