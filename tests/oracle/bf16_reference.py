#!/usr/bin/env python3
"""How far transformers' own bf16 forward lands from its fp32 fixtures.

Run on the GPU machine from the repository root:

    python3 tests/oracle/bf16_reference.py

For each fixture with one sequence per row (transformers has no packed-row
input), loads model.safetensors in bfloat16 and prints the normalized mean
squared error of its logits against the fixture's fp32 logits. The oracle
test's bf16 limit for our logits is set from these numbers: rounding to bf16
moves near-tied indexer scores, so some queries attend to other keys in any
bf16 implementation, not only ours.
"""
import pathlib

import torch
from safetensors.torch import load_file
from transformers import GlmMoeDsaForCausalLM

TESTDATA = pathlib.Path(__file__).parent / "testdata"


def main():
    print("| fixture | transformers bf16 logits NMSE vs its fp32 |")
    print("| --- | ---: |")
    for folder in sorted(TESTDATA.iterdir()):
        expected = load_file(str(folder / "expected.safetensors"))
        if "cu_seqlens" in expected:
            continue
        model = GlmMoeDsaForCausalLM.from_pretrained(
            folder, attn_implementation="eager", dtype=torch.bfloat16).cuda()
        with torch.no_grad():
            logits = model(input_ids=expected["input_ids"].long().cuda()).logits
        reference = expected["logits"].cuda().double()
        error = (logits.double() - reference).pow(2).sum()
        nmse = (error / reference.pow(2).sum()).item()
        print(f"| {folder.name} | {nmse:.3e} |")


if __name__ == "__main__":
    main()
