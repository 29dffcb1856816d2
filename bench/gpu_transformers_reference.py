#!/usr/bin/env python3
"""The reference for GPU training speed: transformers' GlmMoeDsaForCausalLM on one
GPU, bf16 weights, sdpa attention, AdamW, as DESIGN.md pins it (glm5.2-mini at seq
4096). Prints tokens/s, TFLOP/s, MFU and peak memory in the table the GPU benchmark
of our trainer will print beside it.

  gpu_transformers_reference.py --config CONFIG.json --flops-per-token F
    [--seq 4096] [--global-batch 8] [--steps 5] [--peak-tflops 989]
    [--profile TABLE.txt]

CONFIG.json is `glmctl model config --preset=glm5.2-mini`; F is
`bazel-bin/bench/model_flops glm5.2-mini 4096` (our Megatron-style count with the
DSA term, so both sides divide by the same work). --profile records one more
optimizer step under torch.profiler after the timed ones and writes its kernels,
by total GPU time, to TABLE.txt: where transformers' time goes.
"""
import argparse
import json
import time

import torch
from transformers import GlmMoeDsaConfig, GlmMoeDsaForCausalLM


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--flops-per-token", type=float, required=True)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--global-batch", type=int, default=1,
                        help="micro batches of 1 sequence per optimizer step")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--peak-tflops", type=float, default=989.0,
                        help="dense bf16 peak of the GPU (H100/H200 SXM: 989)")
    parser.add_argument("--profile", help="write a torch.profiler kernel table here")
    args = parser.parse_args()
    gemm_tflops = bf16_gemm_rate()
    copy_gbs = device_copy_rate()
    torch.manual_seed(1)
    config = GlmMoeDsaConfig(**json.load(open(args.config)))
    config._attn_implementation = "sdpa"
    model = GlmMoeDsaForCausalLM(config).to("cuda", torch.bfloat16).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(0, config.vocab_size, (args.global_batch, args.seq),
                        device="cuda")

    def train_step():
        for micro in range(args.global_batch):
            row = ids[micro:micro + 1]
            loss = model(input_ids=row, labels=row).loss / args.global_batch
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    times = []
    for step in range(args.steps + 2):  # two warm-up steps
        torch.cuda.synchronize()
        start = time.perf_counter()
        train_step()
        torch.cuda.synchronize()
        if step >= 2:
            times.append(time.perf_counter() - start)
    step_s = sum(times) / len(times)
    tokens_per_s = args.global_batch * args.seq / step_s
    tflops = tokens_per_s * args.flops_per_token / 1e12
    peak_gib = torch.cuda.max_memory_allocated() / 2**30
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"seq {args.seq}, micro batch 1, global batch {args.global_batch}, "
          f"{args.steps} timed steps")
    print(f"bf16 GEMM rate, torch.matmul 8192^3, this call: {gemm_tflops:.1f} TFLOP/s")
    print(f"device copy bandwidth, torch copy_ of 1 GiB (read + write), this call: "
          f"{copy_gbs:.0f} GB/s")
    print("| run | step ms | tokens/s | TFLOP/s | MFU | MFU of GEMM rate | "
          "peak memory GiB |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    print(f"| transformers (sdpa, bf16, AdamW) | {1e3 * step_s:.1f} | "
          f"{tokens_per_s:.0f} | {tflops:.1f} | {100 * tflops / args.peak_tflops:.1f}% | "
          f"{100 * tflops / gemm_tflops:.1f}% | {peak_gib:.1f} |")
    if args.profile:
        write_profile(train_step, args.profile)


def bf16_gemm_rate(n=8192, repeats=20):
    """The dense bf16 GEMM rate this GPU reaches now, in TFLOP/s: the MFU
    denominator measured rather than taken from the data sheet."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        torch.matmul(a, b)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        torch.matmul(a, b)
    end.record()
    torch.cuda.synchronize()
    return 2 * n**3 * repeats / (start.elapsed_time(end) / 1e3) / 1e12


def device_copy_rate(gib=1, repeats=20):
    """Bytes read plus written per second by a device-to-device copy, in GB/s:
    the ceiling the memory-bound kernels' byte rates are held against."""
    n = gib * 2**30 // 4
    a = torch.randn(n, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        b.copy_(a)
    end.record()
    torch.cuda.synchronize()
    return 2 * 4 * n * repeats / (start.elapsed_time(end) / 1e3) / 1e9


def write_profile(train_step, path):
    """One optimizer step under torch.profiler; kernels by total CUDA time."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        train_step()
        torch.cuda.synchronize()
    events = prof.key_averages()
    with open(path, "w") as f:
        f.write("one optimizer step (8 micro batches), operators by CUDA time\n")
        f.write(events.table(sort_by="device_time_total", row_limit=60,
                             max_name_column_width=70))


if __name__ == "__main__":
    main()
