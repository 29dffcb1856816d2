#!/usr/bin/env bash
# Event files written by StepMetricsLog, read back by the tensorboard package
# (PyPI, pinned in tools/python_requirements.txt; tools/bootstrap.sh installs
# it into the tools' virtual environment).
set -euo pipefail
python=${GLM_TOOLS_PYTHON:-/opt/glm-tools-venv/bin/python3}
if [[ ! -x $python ]]; then
  echo "no $python: run tools/bootstrap.sh" >&2
  exit 1
fi
dir=$TEST_TMPDIR/metrics
metrics_log/write_example_steps "$dir"
"$python" metrics_log/read_step_metrics.py "$dir" 3
