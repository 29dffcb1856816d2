#!/bin/bash
# The control-plane benchmark runs for two seconds with a few clients, with no
# error, and prints its table and the coordinator's memory.
set -u
out="${TEST_TMPDIR:-$(mktemp -d)}/bench.out"
bench/control_plane_bench --duration-s=2 --watchers=4 --submitters=2 \
  --work-dir="${TEST_TMPDIR:-$(mktemp -d)}" > "$out" 2>&1
code=$?
cat "$out"
[ "$code" -eq 0 ] || { echo "FAIL: exited $code"; exit 1; }
for text in "SubmitJob" "ListJobs" "errors: 0" "VmRSS:"; do
  grep -q "$text" "$out" || { echo "FAIL: no '$text'"; exit 1; }
done
echo PASS
