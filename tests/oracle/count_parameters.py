#!/usr/bin/env python3
"""Counts the parameters transformers builds for config.json files.

    python3 count_parameters.py CONFIG.json...

Each model is built on the meta device (no memory), so the released GLM-5.2
shapes count too. Prints transformers' parameter count (MTP layers are not
part of GlmMoeDsaForCausalLM), the router correction-bias buffer elements and
the computing (indexer "full") layers, 1-indexed, to compare with
`glmctl model info --config=CONFIG.json`.
"""

import json
import sys

import torch
from transformers import GlmMoeDsaConfig, GlmMoeDsaForCausalLM


def main():
    for path in sys.argv[1:]:
        with open(path) as f:
            config = GlmMoeDsaConfig.from_dict(json.load(f))
        with torch.device("meta"):
            model = GlmMoeDsaForCausalLM(config)
        total = sum(p.numel() for p in model.parameters())
        biases = sum(b.numel() for name, b in model.named_buffers()
                     if name.endswith("e_score_correction_bias"))
        computing = [i + 1 for i, kind in enumerate(config.indexer_types)
                     if kind == "full"]
        print(f"{path}: {total:,} parameters (num_parameters() "
              f"{model.num_parameters():,}), {biases:,} router bias elements, "
              f"computing layers {computing}")


if __name__ == "__main__":
    main()
