#!/usr/bin/env bash
# Checks that every C++ and CUDA source of the project (*.h *.cc *.cu *.cuh that
# git tracks or would track, third_party/ aside) is as clang-format writes it with
# the root .clang-format (Google style). Lists the files that differ and exits 1
# when any does; `--fix` rewrites them in place instead.
set -uo pipefail
cd "$(dirname "$0")/.."

files=()
while IFS= read -r file; do
  [[ -f $file ]] && files+=("$file")  # a deletion not yet staged is skipped
done < <(git ls-files --cached --others --exclude-standard \
  '*.h' '*.cc' '*.cu' '*.cuh' | grep -v '^third_party/' | sort -u)

if [[ ${1:-} == --fix ]]; then
  exec clang-format -i "${files[@]}"
fi
mapfile -t unformatted < <(clang-format --dry-run --Werror "${files[@]}" 2>&1 |
  sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' |
  sort -u)
if ((${#unformatted[@]})); then
  printf 'not clang-formatted: %s\n' "${unformatted[@]}"
  echo "${#unformatted[@]} of ${#files[@]} files differ (tools/format_check.sh --fix rewrites them)"
  exit 1
fi
echo "all ${#files[@]} files clang-formatted"
