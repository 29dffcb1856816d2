#!/usr/bin/env bash
# Nothing waits on main for a one-GPU call: the next change to run is RoPE
# with one sincos a position and pair, on the branch
# gpu-pending/rope-per-position, whose own pending_call.sh runs it against
# main's bundle (tests/gpu/README.md, "Waiting for the next call"). For a
# call on main's build alone, tests/gpu/run_on_device.sh takes any part.
echo "check out gpu-pending/rope-per-position and run its pending_call.sh" >&2
exit 2
