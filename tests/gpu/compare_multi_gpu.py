#!/usr/bin/env python3
"""Compares the runs of run_multi_gpu_checks.sh and writes the summary table.

  compare_multi_gpu.py STATE_DIR OUT_DIR

Each two-GPU run is held against the one-GPU run of its precision: the lm loss
and grad norm of every step (rank 0's steps.jsonl, full precision) and every
exported HF tensor (relative L2 error over the tensor). Limits: fp32 1e-5
relative (the issue's bar); bf16 2e-3 for the losses, 1e-2 for the grad norms
and 1e-3 for the weights (the two runs add the micro batches' gradients in
another order, which bf16 products round differently).
"""
import array
import json
import math
import pathlib
import struct
import sys

from check_table import write_table

SPLITS = ["dp2", "dp2_zero", "dp2_overlap", "dp2_zero_overlap", "ep2", "pp2",
          "tp2", "cp2"]
LIMITS = {"fp32": (1e-5, 1e-5, 1e-5), "bf16": (2e-3, 1e-2, 1e-3)}


def steps(state, run):
    path = state / run / "checkpoints" / "metrics" / "steps.jsonl"
    if not path.exists():
        return {}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line]
    return {r["iteration"]: r for r in rows}


def values(raw, dtype):
    """A tensor's elements as floats (F32, or BF16 widened)."""
    if dtype == "BF16":
        halves = array.array("H", raw)
        widened = array.array("I", (h << 16 for h in halves))
        return array.array("f", widened.tobytes())
    return array.array("f", raw)


def tensors(state, run):
    out = {}
    for path in sorted((state / run / "hf-export").glob("*.safetensors")):
        data = path.read_bytes()
        (length,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + length])
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            begin, end = entry["data_offsets"]
            out[name] = values(data[8 + length + begin:8 + length + end],
                               entry["dtype"])
    return out


def relative_l2(got, want):
    diff = math.fsum((a - b) ** 2 for a, b in zip(got, want))
    norm = math.fsum(b * b for b in want)
    return math.sqrt(diff / norm) if norm > 0 else math.sqrt(diff)


def rel(a, b):
    return abs(a - b) / abs(b) if b != 0 else abs(a - b)


def nccl_groups(state, run):
    text = "".join(p.read_text(errors="replace")
                   for p in (state / run / "logs").glob("worker-*.log"))
    return text.count("over NCCL"), text.count("over Gloo")


def main():
    state, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    rows = []
    for precision, (loss_limit, norm_limit, weight_limit) in LIMITS.items():
        one = steps(state, f"{precision}_one")
        one_weights = tensors(state, f"{precision}_one")
        for split in SPLITS:
            run = f"{precision}_{split}"
            if not (state / run).exists():
                continue
            got = steps(state, run)
            common = sorted(set(got) & set(one))
            complete = len(common) == 20 and len(one) == 20
            loss = max((rel(got[s]["lm_loss"], one[s]["lm_loss"])
                        for s in common), default=math.nan)
            norm = max((rel(got[s]["grad_norm"], one[s]["grad_norm"])
                        for s in common), default=math.nan)
            weights = tensors(state, run)
            worst, worst_name = math.nan, ""
            if weights and weights.keys() == one_weights.keys():
                errors = {n: relative_l2(weights[n], w)
                          for n, w in one_weights.items()}
                worst_name = max(errors, key=errors.get)
                worst = errors[worst_name]
            nccl, gloo = nccl_groups(state, run)
            ok = (complete and loss <= loss_limit and norm <= norm_limit and
                  worst <= weight_limit)
            rows.append((f"{split.upper()} {precision}, two GPUs vs one",
                         "PASS" if ok else "FAIL",
                         f"{len(common)} steps; lm loss {loss:.2e}, grad norm "
                         f"{norm:.2e}, weights {worst:.2e} ({worst_name}); "
                         f"groups over NCCL {nccl}, over Gloo {gloo}",
                         f"{loss_limit:g} / {norm_limit:g} / {weight_limit:g}"))
    write_table(rows, out / "multi_gpu_checks.md")


if __name__ == "__main__":
    main()
