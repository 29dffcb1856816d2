#!/usr/bin/env python3
"""The reference side of bench/cpu_vs_transformers.sh: transformers'
GlmMoeDsaForCausalLM (float32, eager attention) forward + backward on the CPU, with
the same config, tokens per step and sequence lengths as //bench:cpu_model_bench.
Prints the same columns."""
import argparse
import json
import resource
import time

import torch
from transformers import GlmMoeDsaConfig, GlmMoeDsaForCausalLM


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--tokens", type=int, default=4096)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    config = GlmMoeDsaConfig(**json.load(open(args.config)))
    config._attn_implementation = "eager"
    model = GlmMoeDsaForCausalLM(config).float().train()
    print(f"transformers {torch.__version__}, {args.threads} threads, "
          f"{args.tokens} tokens per step")
    print(f"{'seq_len':>8} {'steps':>8} {'fwd ms':>10} {'fwd+bwd ms':>10} "
          f"{'tokens/s':>12} {'loss':>10}")
    steps = 3
    for seq in (256, 1024):
        ids = torch.randint(0, config.vocab_size, (args.tokens // seq, seq))
        forward = total = 0.0
        for step in range(steps + 1):  # step 0 warms up
            model.zero_grad(set_to_none=True)
            start = time.perf_counter()
            loss = model(input_ids=ids, labels=ids).loss
            forward_done = time.perf_counter()
            loss.backward()
            done = time.perf_counter()
            if step:
                forward += forward_done - start
                total += done - start
        print(f"{seq:>8} {steps:>8} {1e3 * forward / steps:>10.1f} "
              f"{1e3 * total / steps:>10.1f} {steps * ids.numel() / total:>12.0f} "
              f"{loss.item():>10.4f}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {rss:.0f} MiB")


if __name__ == "__main__":
    main()
