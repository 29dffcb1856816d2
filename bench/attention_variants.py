#!/usr/bin/env python3
"""How fast cuDNN's fused attention runs at glm5.2-mini's attention shapes with
and without the selection bias, against torch's other SDPA kernels, on one GPU.

Our bf16 attention core (kernels/cuda/cudnn_attention.cc) is cuDNN's SDPA with a
causal mask and DSA's selection as an additive [queries, keys] bias. This prints
forward and forward + backward times per layer (one sequence, 16 heads, qk and v
head dims 256) for: causal alone, causal + bias, the bias alone (causal folded
into it), the split a DSA layer allows (the first `topk` queries select every
causal key and need no bias), and torch's flash and memory-efficient kernels. TFLOP/s
count the causal pairs (4 * pairs * head dim per head for the forward, 3.5x that
for forward + backward), so masked variants compare with the dense ones.
"""
import argparse

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F


def timed(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(True), torch.cuda.Event(True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def selection_bias(seq, topk, device):
    """Causal keys, and for each query past `topk` a random `topk` of them."""
    causal = torch.ones(seq, seq, dtype=torch.bool, device=device).tril()
    scores = torch.rand(seq, seq, device=device).masked_fill(~causal, -1.0)
    keep = torch.zeros(seq, seq, dtype=torch.bool, device=device)
    keep.scatter_(1, scores.topk(topk, dim=1).indices, True)
    keep &= causal
    bias = torch.zeros(seq, seq, dtype=torch.bfloat16, device=device)
    return bias.masked_fill(~keep, float("-inf"))[None, None]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--topk", type=int, default=2048)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(0)
    dev = "cuda"
    s, h, d, k = args.seq, args.heads, args.dim, args.topk

    def qkv(rows):
        make = lambda n: torch.randn(1, h, n, d, device=dev, dtype=torch.bfloat16,
                                     requires_grad=True)
        return make(rows), make(s), make(s)

    q, key, v = qkv(s)
    bias = selection_bias(s, k, dev)
    pairs = s * (s + 1) / 2
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN "
          f"{torch.backends.cudnn.version()}; seq {s}, heads {h}, head dim {d}, "
          f"top-k {k}; TFLOP/s by the {pairs:.3g} causal pairs")
    rows = []

    def run(name, backend, fwd_fn):
        with sdpa_kernel([backend]):
            try:
                out = fwd_fn()
                grad = torch.randn_like(out)
                fwd = timed(fwd_fn, args.iters)
                both = timed(lambda: fwd_fn().backward(grad), args.iters)
            except RuntimeError as e:
                rows.append((name, None, None, str(e).splitlines()[0][:70]))
                return None
        rows.append((name, fwd, both, ""))
        return fwd, both

    sdpa = F.scaled_dot_product_attention
    cudnn = SDPBackend.CUDNN_ATTENTION
    run("cuDNN, causal", cudnn, lambda: sdpa(q, key, v, is_causal=True))
    run("cuDNN, causal as bias + selection", cudnn,
        lambda: sdpa(q, key, v, attn_mask=bias))
    run("flash (torch), causal", SDPBackend.FLASH_ATTENTION,
        lambda: sdpa(q, key, v, is_causal=True))
    run("mem-efficient (torch), bias + selection", SDPBackend.EFFICIENT_ATTENTION,
        lambda: sdpa(q, key, v, attn_mask=bias))
    # The split: queries [0, topk) causal without a bias, the rest (keys up to
    # each query: all of them) with the selection bias.
    head_q = q[:, :, :k].detach().requires_grad_()
    tail_q = q[:, :, k:].detach().requires_grad_()
    tail_bias = bias[:, :, k:].contiguous()
    a = run("  split: first top-k queries, causal", cudnn,
            lambda: sdpa(head_q, key[:, :, :k], v[:, :, :k], is_causal=True))
    b = run("  split: the rest, bias + selection", cudnn,
            lambda: sdpa(tail_q, key, v, attn_mask=tail_bias))
    if a and b:
        rows.append(("cuDNN split, sum", a[0] + b[0], a[1] + b[1], ""))

    flops_fwd = 4 * pairs * d * h
    print("| variant | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s | note |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for name, fwd, both, note in rows:
        if fwd is None:
            print(f"| {name} | - | - | - | - | {note} |")
            continue
        part = name.startswith(" ")  # half a layer: its rate would mislead
        rate = lambda flops, ms: "-" if part else f"{flops / ms / 1e9:.0f}"
        print(f"| {name} | {fwd:.3f} | {rate(flops_fwd, fwd)} | {both:.3f} | "
              f"{rate(3.5 * flops_fwd, both)} | {note} |")


if __name__ == "__main__":
    main()
