# Sourced by the GPU machine's scripts: `timed NAME SECONDS COMMAND...` runs
# COMMAND, killed after SECONDS, its output in $R/NAME.txt, and appends its
# exit status and time to $R/summary.txt. A hang in one part then leaves the
# others' results.
timed() {
  local name=$1 limit=$2 start=$SECONDS
  shift 2
  timeout --signal=KILL "$limit" "$@" >"$R/$name.txt" 2>&1
  echo "$name: exit $? in $((SECONDS - start)) s" | tee -a "$R/summary.txt"
}
