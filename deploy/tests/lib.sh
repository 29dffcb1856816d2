# Helpers the deployment tests share (sourced, not run).

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# The folder holding glm-coordinator, glm-worker and glmctl: $1 when given,
# else bazel-bin's three (linked into a temporary folder).
require_binaries() {
  local given=$1
  if [[ -n $given ]]; then
    for b in glm-coordinator glm-worker glmctl; do
      [[ -x $given/$b ]] || fail "no $given/$b"
    done
    echo "$given"
    return
  fi
  local out
  out=$(mktemp -d /tmp/glm-bin.XXXXXX)
  ln -s "$PWD/bazel-bin/coordinator/glm-coordinator" "$out/glm-coordinator"
  ln -s "$PWD/bazel-bin/worker/glm-worker" "$out/glm-worker"
  ln -s "$PWD/bazel-bin/cli/glmctl" "$out/glmctl"
  for b in glm-coordinator glm-worker glmctl; do
    [[ -x $out/$b ]] || fail "no bazel-bin $b: bazel build //:$b first"
  done
  echo "$out"
}

# wait_for WHAT SECONDS COMMAND...: runs COMMAND every half second until it
# succeeds; fails naming WHAT after SECONDS.
wait_for() {
  local what=$1 seconds=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@"; do
    ((SECONDS < deadline)) || fail "timed out after ${seconds}s waiting for $what"
    sleep 0.5
  done
}

expect_equal() {
  [[ $2 == "$3" ]] || fail "$1: expected '$2', got '$3'"
}

expect_file() {
  [[ -s $1 ]] || fail "missing or empty: $1"
}

# The Python of tools/python_requirements.txt (tools/bootstrap.sh).
tools_python() {
  local python=/opt/glm-tools-venv/bin/python3
  [[ -x $python ]] || fail "no $python: run tools/bootstrap.sh"
  "$python" "$@"
}

# The last lines of each log named, after a failure.
show_logs() {
  local log
  for log in "$@"; do
    [[ -f $log ]] || continue
    echo "--- $log" >&2
    tail -n 15 "$log" >&2
  done
}

# A port the kernel says is free on 127.0.0.1.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# SIGTERM to each process named, then SIGKILL to any still running 10 s later
# (a daemon that hangs on its way out must not outlive the test: the next run
# needs its ports).
stop_processes() {
  local pid deadline=$((SECONDS + 10))
  (($#)) || return 0
  kill -TERM "$@" 2>/dev/null || true
  for pid in "$@"; do
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  wait "$@" 2>/dev/null || true
}
