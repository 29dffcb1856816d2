#!/usr/bin/env bash
# Fuzzes every parser of untrusted input (the targets of fuzz/) under
# AddressSanitizer and UndefinedBehaviorSanitizer.
#
# Usage: tools/fuzz.sh [SECONDS_PER_TARGET [TARGET...]]   (default 10 s, all)
#
# Builds with --config=fuzz (clang) in an output base of its own, next to the
# default one (GLM_FUZZ_OUTPUT_BASE overrides it), so the gcc build's cache is
# never invalidated by the compiler switch. Each target starts from its seed
# corpus (fuzz/corpus/TARGET, read only) and writes what it finds new to a
# scratch folder. Prints one line per target with its executions; exits 1 on
# any crash, sanitizer report, leak, timeout or out-of-memory, the input that
# caused it kept under fuzz-findings/ (add it to the target's corpus once
# fixed).
set -uo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-10}
shift $(($# > 0 ? 1 : 0))
targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=(layout_parser_fuzzer job_spec_fuzzer hf_config_fuzzer
    safetensors_fuzzer indexed_dataset_fuzzer chat_jsonl_fuzzer
    coordinator_rpc_fuzzer)
fi
output_base=${GLM_FUZZ_OUTPUT_BASE:-$(bazel info output_base)-fuzz}
fuzz_bazel=(bazel "--output_base=$output_base")

start=$SECONDS
if ! "${fuzz_bazel[@]}" build --config=fuzz "${targets[@]/#/\/\/fuzz:}" 2>&1 |
  tail -3; then
  echo "fuzz: build failed"
  exit 1
fi
bin=$("${fuzz_bazel[@]}" info --config=fuzz bazel-bin 2>/dev/null)
echo "fuzz: built in $((SECONDS - start)) s"

# The file-reading targets write each input to a file: on tmpfs that costs
# microseconds, on an overlay /tmp milliseconds.
[[ -w /dev/shm ]] && export TMPDIR=/dev/shm
mkdir -p fuzz-findings
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=0
for target in "${targets[@]}"; do
  mkdir -p "$scratch/$target"
  log="$scratch/$target.log"
  # -timeout: one input taking seconds is a finding (a parser must stay fast);
  # -rss_limit_mb: so must one needing gigabytes.
  "$bin/fuzz/$target" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="fuzz-findings/$target-" \
    "$scratch/$target" "fuzz/corpus/$target" >"$log" 2>&1
  status=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  if ((status == 0)); then
    echo "fuzz: $target pass: ${runs:-?} runs in $seconds s (${speed:-?}/s)"
  else
    failed=1
    echo "fuzz: $target FAIL (exit $status), last lines:"
    tail -40 "$log"
  fi
done
echo "fuzz: $((SECONDS - start)) s in all"
exit "$failed"
