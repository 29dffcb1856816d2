#!/usr/bin/env python3
"""Reads a metrics folder written by StepMetricsLog with TensorBoard's own
event reader and checks it against the folder's steps.jsonl: every step of the
JSON lines is in the event files, every value equal as a float32.

Usage: read_step_metrics.py DIR [MIN_STEPS]
Prints "DIR: N steps, M scalar tags read by tensorboard X" and exits 0, or
names the first difference and exits 1.
"""
import json
import math
import pathlib
import struct
import sys

import tensorboard
from tensorboard.backend.event_processing import event_accumulator


def as_float32(value):
    return struct.unpack("f", struct.pack("f", value))[0]


def expected_scalars(line):
    """(tag, value) pairs the event file holds for one JSON line."""
    for key, value in line.items():
        if key in ("wall_time", "iteration"):
            continue
        if isinstance(value, list):
            for layer, item in enumerate(value):
                yield f"{key}/layer_{layer}", item
        else:
            yield key, value


def main():
    folder = pathlib.Path(sys.argv[1])
    min_steps = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    lines = [json.loads(l) for l in (folder / "steps.jsonl").read_text().splitlines() if l]
    accumulator = event_accumulator.EventAccumulator(
        str(folder), size_guidance={event_accumulator.SCALARS: 0})
    accumulator.Reload()
    tags = set(accumulator.Tags()["scalars"])
    by_tag = {tag: {e.step: e.value for e in accumulator.Scalars(tag)} for tag in tags}
    for line in lines:
        step = line["iteration"]
        for tag, value in expected_scalars(line):
            if tag not in by_tag or step not in by_tag[tag]:
                sys.exit(f"{folder}: step {step} has no '{tag}' in the event files")
            got = by_tag[tag][step]
            want = math.nan if value is None else as_float32(float(value))
            if not (got == want or (math.isnan(want) and not math.isfinite(got))):
                sys.exit(f"{folder}: step {step} '{tag}': event file {got}, JSON {want}")
    steps = {line["iteration"] for line in lines}
    if len(steps) < min_steps:
        sys.exit(f"{folder}: {len(steps)} steps, expected at least {min_steps}")
    print(f"{folder}: {len(steps)} steps, {len(tags)} scalar tags read by "
          f"tensorboard {tensorboard.__version__}")


if __name__ == "__main__":
    main()
