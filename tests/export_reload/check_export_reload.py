#!/usr/bin/env python3
"""Checks that an HF export of ours reloads in transformers and computes our logits.

Run on a machine with torch and transformers (GlmMoeDsaForCausalLM):
  check_export_reload.py --hf DIR --tokens FILE --ours LOGITS.npy

Loads DIR with from_pretrained (float32, eager attention), requires no missing and
no mismatched keys, and no unexpected keys other than the MTP layer
(model.layers.<num_hidden_layers>.*, which transformers does not run), then runs
the token rows and compares the logits with ours. Exits 1 on any failure.
"""
import argparse
import json
import re
import sys

import numpy as np
import torch
from transformers import GlmMoeDsaForCausalLM


def count_topk_ties(model, ids):
    """Queries whose k-th and (k+1)-th best causal index scores are equal, per
    computing layer: there the top-k set depends on tie-breaking order, which
    torch.topk leaves unspecified."""
    ties = {}

    def hook(layer):
        def run(module, args, kwargs):
            hidden, q_resid, (cos, sin) = args[0], args[1], args[2]
            b, s, _ = hidden.shape
            q = module.wq_b(q_resid).view(b, s, module.n_heads, module.head_dim)
            k = module.k_norm(module.wk(hidden))
            r = module.qk_rope_head_dim
            from transformers.models.glm_moe_dsa.modeling_glm_moe_dsa import (
                apply_rotary_pos_emb_interleave)
            q_rot, k_rot = apply_rotary_pos_emb_interleave(
                q[..., :r], k[..., :r].unsqueeze(2), cos, sin, unsqueeze_dim=2)
            q = torch.cat([q_rot, q[..., r:]], -1)
            k = torch.cat([k_rot.squeeze(2), k[..., r:]], -1)
            scores = torch.relu(torch.einsum("bshd,btd->bsht", q, k) * module.softmax_scale)
            w = module.weights_proj(hidden) * module.n_heads ** -0.5
            index = torch.einsum("bsh,bsht->bst", w, scores)
            n = 0
            for t in range(module.index_topk, s):
                row = torch.sort(index[:, t, : t + 1], dim=-1, descending=True).values
                n += int((row[:, module.index_topk - 1] == row[:, module.index_topk]).sum())
            ties[layer] = n
        return run

    handles = []
    for i, layer in enumerate(model.model.layers):
        if layer.self_attn.indexer is not None:
            handles.append(layer.self_attn.indexer.register_forward_pre_hook(
                hook(i + 1), with_kwargs=True))
    with torch.no_grad():
        model(input_ids=ids)
    for h in handles:
        h.remove()
    return ties


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--hf", required=True)
    parser.add_argument("--tokens", required=True)
    parser.add_argument("--ours", required=True)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args()

    config = json.load(open(f"{args.hf}/config.json"))
    model, info = GlmMoeDsaForCausalLM.from_pretrained(
        args.hf, torch_dtype=torch.float32, attn_implementation="eager",
        output_loading_info=True)
    mtp = re.compile(rf"^model\.layers\.{config['num_hidden_layers']}\.")
    unexpected = [k for k in info["unexpected_keys"] if not mtp.match(k)]
    problems = {
        "missing": info["missing_keys"],
        "unexpected (besides the MTP layer)": unexpected,
        "mismatched": info.get("mismatched_keys", []),
    }
    ok = True
    for kind, keys in problems.items():
        print(f"{kind} keys: {len(keys)} {sorted(keys)[:5]}")
        ok &= not keys
    print(f"MTP-layer keys transformers leaves unused: "
          f"{sum(1 for k in info['unexpected_keys'] if mtp.match(k))}")
    print(f"parameters: {sum(p.numel() for p in model.parameters())}")

    rows = [[int(t) for t in line.split()] for line in open(args.tokens) if line.strip()]
    ids = torch.tensor(rows)
    with torch.no_grad():
        theirs = model(input_ids=ids).logits.float().numpy()
    ours = np.load(args.ours)
    if ours.shape != theirs.shape:
        print(f"shape: ours {ours.shape} vs transformers {theirs.shape}")
        return 1
    scale = float(np.abs(theirs).max())
    err = float(np.abs(ours - theirs).max()) / scale
    print(f"queries with a tie at the top-k boundary, by layer: {count_topk_ties(model, ids)}")
    print(f"logits {theirs.shape}: max |ours - transformers| / max |logit| = {err:.3e} "
          f"(tolerance {args.tolerance:g})")
    ok &= err <= args.tolerance
    print("RELOAD OK" if ok else "RELOAD FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
