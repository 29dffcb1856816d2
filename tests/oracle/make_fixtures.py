#!/usr/bin/env python3
"""Builds the oracle fixtures: small random GLM-5.x models run by transformers.

Run where torch and transformers 5.17 are installed (the GPU machine):

    python3 make_fixtures.py --out DIR

Each fixture folder holds config.json, model.safetensors (float32, HF names) and
expected.safetensors (inputs, outputs, losses, top-k sets and gradients); see
README.md beside this script.

transformers' GlmMoeDsaForCausalLM is the reference for the main model. It has
no MTP layer and no indexer loss, so both are written here in torch, from HF's
own modules, as the project defines them (notes in README.md):
  * MTP: x_t = eh_proj(cat(enorm(embed(ids[t+1])), hnorm(h_t))) with h the main
    model's hidden states before model.norm (id 0 after the last token), then
    an HF decoder layer at index L, shared_head.norm and the shared lm_head;
    mtp_logits[t] predicts ids[t+2]. With index_topk_freq > 1 the layer has no
    indexer and reuses the top-k of the last main layer; with freq 1 it has one.
  * Indexer loss: per layer that runs an indexer, index scores recomputed with
    gradient from the indexer's weights on detached inputs; over the selected
    causal keys K_t, KL(q_t || softmax(scores[t, K_t])) with q_t the main
    attention probabilities summed over heads (detached) and L1-normalized;
    mean over queries; summed over layers, times 0.001.
  * total = lm_loss + 0.1 * mtp_loss + indexer_loss; gradients by autograd.
"""

import argparse
import json
import os
import sys
import traceback

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import GlmMoeDsaConfig, GlmMoeDsaForCausalLM
from transformers.models.glm_moe_dsa import modeling_glm_moe_dsa as hf

MTP_LOSS_SCALE = 0.1
INDEXER_LOSS_COEFF = 0.001
# Top-k selections (indexer and router) must not hinge on float rounding: the
# gap at each selection boundary must exceed this, relative to the scores.
MIN_RELATIVE_GAP = 2e-4

FIXTURES = {
    # GLM-5.2 style: index sharing F=4, O=3 over 8 layers (1, 2, 3, 7 compute),
    # seq 24 > index_topk 8, MoE from layer 2, 1 MTP layer; per-expert keys.
    "glm52_sharing": dict(
        config=dict(vocab_size=96, hidden_size=32, num_hidden_layers=8,
                    num_attention_heads=2, q_lora_rank=16, kv_lora_rank=16,
                    qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8,
                    intermediate_size=32, first_k_dense_replace=1,
                    n_routed_experts=4, num_experts_per_tok=2,
                    n_shared_experts=1, moe_intermediate_size=8,
                    n_group=1, topk_group=1, index_n_heads=8,
                    index_head_dim=16, index_topk=8, index_topk_freq=4,
                    index_skip_topk_offset=3),
        batch=2, seq=24, experts="per_expert"),
    # GLM-5 style: every layer computes (F=1), grouped routing (2 groups of 4,
    # 1 group chosen), the MTP layer has its own indexer; fused expert keys.
    "glm5_full": dict(
        config=dict(vocab_size=96, hidden_size=32, num_hidden_layers=4,
                    num_attention_heads=2, q_lora_rank=16, kv_lora_rank=16,
                    qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8,
                    intermediate_size=32, first_k_dense_replace=1,
                    n_routed_experts=8, num_experts_per_tok=2,
                    n_shared_experts=1, moe_intermediate_size=8,
                    n_group=2, topk_group=1, index_n_heads=8,
                    index_head_dim=16, index_topk=12, index_topk_freq=1,
                    index_skip_topk_offset=2),
        batch=2, seq=24, experts="fused"),
    # Packed sequences in one row (cu_seqlens 0, 11, 28, 32): F=2, O=2 over 5
    # layers (1, 2, 4 compute); each sequence runs alone through HF.
    "glm52_packed": dict(
        config=dict(vocab_size=64, hidden_size=24, num_hidden_layers=5,
                    num_attention_heads=2, q_lora_rank=16, kv_lora_rank=16,
                    qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8,
                    intermediate_size=24, first_k_dense_replace=1,
                    n_routed_experts=4, num_experts_per_tok=2,
                    n_shared_experts=1, moe_intermediate_size=8,
                    n_group=1, topk_group=1, index_n_heads=8,
                    index_head_dim=16, index_topk=6, index_topk_freq=2,
                    index_skip_topk_offset=2),
        batch=1, seq=32, cu_seqlens=[0, 11, 28, 32], experts="fused"),
}


def make_config(spec, extra_layers=0, indexer_types=None):
    """HF config of a fixture; `extra_layers` and `indexer_types` build the
    config of the MTP layer (index L of a model with L + 1 layers)."""
    fields = dict(spec["config"])
    freq = fields.pop("index_topk_freq")
    offset = fields.pop("index_skip_topk_offset")
    fields["num_hidden_layers"] += extra_layers
    config = GlmMoeDsaConfig(
        **fields,
        num_key_value_heads=fields["num_attention_heads"],
        routed_scaling_factor=2.5, norm_topk_prob=True, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        max_position_embeddings=4096, tie_word_embeddings=False,
        index_topk_freq=freq, index_skip_topk_offset=offset,
        num_nextn_predict_layers=1, indexer_types=indexer_types,
        attn_implementation="eager", experts_implementation="eager")
    if getattr(config, "_attn_implementation", None) != "eager":
        config._attn_implementation = "eager"
    return config, freq, offset


def config_json(config, freq, offset):
    data = config.to_dict()
    # Our parser reads these; HF keeps them only as extra attributes.
    data.update(index_topk_freq=freq, index_skip_topk_offset=offset,
                num_nextn_predict_layers=1, dtype="float32")
    for key in [k for k in data if k.startswith("_")]:
        del data[key]
    return json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"


class Mtp(torch.nn.Module):
    """One MTP layer (DeepSeek-V3 / Megatron), HF modules inside."""

    def __init__(self, spec, config, computes_topk):
        super().__init__()
        layers = config.num_hidden_layers
        mtp_config, _, _ = make_config(
            spec, extra_layers=1,
            indexer_types=list(config.indexer_types) + [
                "full" if computes_topk else "shared"])
        assert mtp_config.mlp_layer_types[layers] == "sparse"
        hidden = config.hidden_size
        self.enorm = hf.GlmMoeDsaRMSNorm(hidden, config.rms_norm_eps)
        self.hnorm = hf.GlmMoeDsaRMSNorm(hidden, config.rms_norm_eps)
        self.eh_proj = torch.nn.Linear(2 * hidden, hidden, bias=False)
        self.layer = hf.GlmMoeDsaDecoderLayer(mtp_config, layers)
        self.shared_head_norm = hf.GlmMoeDsaRMSNorm(hidden,
                                                    config.rms_norm_eps)

    def hf_state(self, prefix):
        """Parameters and buffers under their HF checkpoint names."""
        state = {}
        for name, value in self.layer.state_dict().items():
            state[f"{prefix}.{name}"] = value
        state[f"{prefix}.enorm.weight"] = self.enorm.weight
        state[f"{prefix}.hnorm.weight"] = self.hnorm.weight
        state[f"{prefix}.eh_proj.weight"] = self.eh_proj.weight
        state[f"{prefix}.shared_head.norm.weight"] = self.shared_head_norm.weight
        return state

    def hf_parameters(self, prefix):
        names = {}
        for name, param in self.layer.named_parameters():
            names[f"{prefix}.{name}"] = param
        names[f"{prefix}.enorm.weight"] = self.enorm.weight
        names[f"{prefix}.hnorm.weight"] = self.hnorm.weight
        names[f"{prefix}.eh_proj.weight"] = self.eh_proj.weight
        names[f"{prefix}.shared_head.norm.weight"] = self.shared_head_norm.weight
        return names


def causal_mask(batch, seq):
    mask = torch.full((seq, seq), torch.finfo(torch.float32).min).triu(1)
    return mask[None, None].expand(batch, 1, seq, seq)


def init_weights(model, mtp, generator):
    """Random weights with O(1) activations, so the test sees real numbers."""
    modules = list(model.named_parameters()) + [
        ("mtp." + n, p) for n, p in mtp.named_parameters()]
    with torch.no_grad():
        for name, param in modules:
            noise = torch.randn(param.shape, generator=generator)
            if name.endswith("embed_tokens.weight"):
                param.copy_(noise)
            elif name.endswith("k_norm.bias"):
                param.copy_(0.1 * noise)
            elif param.dim() == 1:  # RMSNorm and LayerNorm weights
                param.copy_(1.0 + 0.1 * noise)
            else:
                param.copy_(noise / param.shape[-1] ** 0.5)
        for name, buffer in list(model.named_buffers()) + list(
                mtp.named_buffers()):
            if name.endswith("e_score_correction_bias"):
                buffer.copy_(0.1 * torch.randn(buffer.shape,
                                               generator=generator))


class Recorder:
    """Forward hooks: each attention's (weights, top-k), each indexer's and
    router's inputs, and the main model's hidden states before model.norm."""

    def __init__(self, model, mtp):
        self.handles = []
        self.clear()
        layers = list(model.model.layers) + [mtp.layer]
        for number, layer in enumerate(layers, start=1):
            attn = layer.self_attn
            self.handles.append(attn.register_forward_hook(
                self._attention_hook(number)))
            if attn.indexer is not None:
                self.handles.append(attn.indexer.register_forward_hook(
                    self._indexer_hook(number)))
            if hasattr(layer.mlp, "gate"):
                self.handles.append(layer.mlp.gate.register_forward_hook(
                    self._router_hook(number)))
        self.handles.append(model.model.norm.register_forward_hook(
            lambda module, args, out: setattr(self, "pre_norm", args[0])))

    def clear(self):
        self.attention = {}  # layer -> (probs [B, heads, S, S], topk)
        self.indexer_inputs = {}  # layer -> (x, q_resid, cos, sin)
        self.router_inputs = {}  # layer -> x [tokens, hidden]
        self.pre_norm = None

    def _attention_hook(self, number):
        def hook(module, args, output):
            self.attention[number] = (output[1], output[2])
        return hook

    def _indexer_hook(self, number):
        def hook(module, args, output):
            cos, sin = args[2]
            self.indexer_inputs[number] = (args[0], args[1], cos, sin)
        return hook

    def _router_hook(self, number):
        def hook(module, args, output):
            self.router_inputs[number] = args[0]
        return hook


def index_scores(indexer, x, q_resid, cos, sin):
    """HF's GlmMoeDsaIndexer scores, with gradient, before masking: [B, S, S]."""
    batch, seq, _ = x.shape
    rope = indexer.qk_rope_head_dim
    dim = indexer.head_dim
    q = indexer.wq_b(q_resid).view(batch, seq, indexer.n_heads, dim)
    q_rot, q_pass = torch.split(q, [rope, dim - rope], dim=-1)
    k = indexer.k_norm(indexer.wk(x)).unsqueeze(2)
    k_rot, k_pass = torch.split(k, [rope, dim - rope], dim=-1)
    q_rot, k_rot = hf.apply_rotary_pos_emb_interleave(q_rot, k_rot, cos, sin,
                                                      unsqueeze_dim=2)
    q = torch.cat([q_rot, q_pass], dim=-1)
    k = torch.cat([k_rot, k_pass], dim=-1).squeeze(2)
    scores = torch.matmul(q.float(), k.transpose(-1, -2).float().unsqueeze(1))
    scores = F.relu(scores * indexer.softmax_scale)  # [B, S, H, S]
    weights = indexer.weights_proj(x).float() * indexer.n_heads ** -0.5
    return torch.matmul(weights.unsqueeze(-2), scores).squeeze(-2)


def selected_mask(topk, seq):
    """[B, S, S] bool: key s selected for query t and causal (s <= t)."""
    batch = topk.shape[0]
    selected = torch.zeros(batch, seq, seq, dtype=torch.bool)
    selected.scatter_(-1, topk.long().cpu(), True)
    return selected & torch.ones(seq, seq, dtype=torch.bool).tril()


def selection_gap(scores, count):
    """Smallest relative gap between the count-th and next value per row,
    over rows with more than `count` finite values (None when there are none)."""
    finite = torch.isfinite(scores).sum(-1)
    rows = finite > count
    if not rows.any():
        return None
    top = scores[rows].topk(count + 1, dim=-1).values
    gap = (top[:, count - 1] - top[:, count]).abs()
    scale = top[:, 0].abs().clamp_min(1.0)
    return (gap / scale).min().item()


def indexer_loss_layer(indexer, inputs, probs, topk):
    """KL(target || softmax over selected keys), mean over queries, and the
    index scores (with gradient into the indexer's weights only)."""
    x, q_resid, cos, sin = inputs
    scores = index_scores(indexer, x.detach(), q_resid.detach(), cos, sin)
    seq = scores.shape[-1]
    selected = selected_mask(topk, seq).to(scores.device)
    causal = torch.ones(seq, seq, dtype=torch.bool, device=scores.device).tril()
    ours = scores.detach().masked_fill(~causal, float("-inf"))
    ours = ours.topk(min(indexer.index_topk, seq), dim=-1).indices
    if not torch.equal(selected_mask(ours.cpu(), seq).to(scores.device),
                       selected):
        raise RuntimeError("recomputed index scores select other keys than HF")
    log_p = torch.log_softmax(scores.masked_fill(~selected, float("-inf")), -1)
    log_p = log_p.masked_fill(~selected, 0.0)
    target = probs.detach().float().sum(1) * selected
    target = target / target.sum(-1, keepdim=True)
    log_target = torch.log(target.clamp_min(1e-30))
    kl = (target * (log_target - log_p)).sum(-1)  # [B, S]
    return kl, scores


def run_sequence(model, mtp, recorder, ids, computes_topk):
    """Main model (HF) and MTP on ids [B, S] (one sequence per row)."""
    recorder.clear()
    batch, seq = ids.shape
    out = model(input_ids=ids, use_cache=False)
    h_main = recorder.pre_norm
    main_attention = dict(recorder.attention)
    next_ids = torch.cat([ids[:, 1:], torch.zeros_like(ids[:, :1])], dim=1)
    x = mtp.eh_proj(torch.cat([mtp.enorm(model.model.embed_tokens(next_ids)),
                               mtp.hnorm(h_main)], dim=-1))
    positions = torch.arange(seq, device=ids.device)[None].expand(batch, seq)
    cos_sin = model.model.rotary_emb(x, position_ids=positions)
    last_topk = main_attention[model.config.num_hidden_layers][1]
    h, _ = mtp.layer(x, attention_mask=causal_mask(batch, seq).to(x.device),
                     position_embeddings=cos_sin, position_ids=positions,
                     use_cache=False,
                     prev_topk_indices=None if computes_topk else last_topk)
    mtp_logits = model.lm_head(mtp.shared_head_norm(h))
    return out.logits, mtp_logits


def check_margins(recorder, model, mtp):
    """Smallest relative gap at any top-k boundary (indexer and router)."""
    gaps = []
    layers = list(model.model.layers) + [mtp.layer]
    for number, inputs in recorder.indexer_inputs.items():
        indexer = layers[number - 1].self_attn.indexer
        with torch.no_grad():
            scores = index_scores(indexer, *inputs).cpu()
        seq = scores.shape[-1]
        causal = torch.ones(seq, seq, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        gap = selection_gap(scores.reshape(-1, seq), indexer.index_topk)
        if gap is not None:
            gaps.append(gap)
    for number, x in recorder.router_inputs.items():
        router = layers[number - 1].mlp.gate
        with torch.no_grad():
            x = x.reshape(-1, router.hidden_dim).float()
            choice = (F.linear(x, router.weight.float()).sigmoid() +
                      router.e_score_correction_bias).cpu()
        groups = choice.view(-1, router.num_group,
                             router.num_experts // router.num_group)
        group_scores = groups.topk(2, dim=-1).values.sum(-1)
        if router.topk_group < router.num_group:
            gaps.append(selection_gap(group_scores, router.topk_group))
        chosen = group_scores.topk(router.topk_group, dim=-1).indices
        keep = torch.zeros_like(group_scores, dtype=torch.bool).scatter(
            1, chosen, True)
        masked = groups.masked_fill(~keep[..., None], float("-inf"))
        gaps.append(selection_gap(masked.reshape(choice.shape),
                                  router.top_k))
    return min(g for g in gaps if g is not None)


def sanitized_topk(topk, seq, offset=0, width=None):
    """Selected causal keys per query, ascending, as absolute positions
    (+offset), padded with -1 to `width`: I32 [B, S, width]."""
    selected = selected_mask(topk, seq)
    width = width or topk.shape[-1]
    out = torch.full((topk.shape[0], seq, width), -1, dtype=torch.int32)
    for b in range(topk.shape[0]):
        for t in range(seq):
            keys = selected[b, t].nonzero().flatten() + offset
            out[b, t, :len(keys)] = keys.to(torch.int32)
    return out


def build(spec, seed, device):
    config, freq, offset = make_config(spec)
    torch.manual_seed(seed)
    model = GlmMoeDsaForCausalLM(config).float()
    if model.config._attn_implementation != "eager":
        model.set_attn_implementation("eager")
    assert model.config._attn_implementation == "eager", \
        model.config._attn_implementation
    mtp = Mtp(spec, config, computes_topk=freq == 1).float()
    generator = torch.Generator().manual_seed(seed)
    init_weights(model, mtp, generator)
    ids = torch.randint(0, config.vocab_size, (spec["batch"], spec["seq"]),
                        generator=generator)
    return config, freq, offset, model.to(device), mtp.to(device), ids


def segments(spec):
    bounds = spec.get("cu_seqlens", None)
    if bounds is None:
        return [(0, spec["seq"])]
    return list(zip(bounds[:-1], bounds[1:]))


def make_fixture(name, spec, out_dir, device):
    for seed in range(200):
        config, freq, offset, model, mtp, ids = build(spec, seed, device)
        recorder = Recorder(model, mtp)
        gap = float("inf")
        for start, end in segments(spec):
            with torch.no_grad():
                run_sequence(model, mtp, recorder, ids[:, start:end].to(device),
                             freq == 1)
            gap = min(gap, check_margins(recorder, model, mtp))
        if gap > MIN_RELATIVE_GAP:
            break
        for handle in recorder.handles:
            handle.remove()
    else:
        raise RuntimeError(f"{name}: every seed has a top-k near-tie")
    print(f"{name}: seed {seed}, smallest top-k gap {gap:.2e}")
    model.train()  # dropout is 0; training mode changes nothing else
    layers = config.num_hidden_layers

    lm_sum, lm_count, mtp_sum, mtp_count = 0.0, 0, 0.0, 0
    kl_sums = {}
    logits_parts, mtp_parts = [], []
    topk = {}
    for start, end in segments(spec):
        seg = ids[:, start:end].to(device)
        seq = end - start
        logits, mtp_logits = run_sequence(model, mtp, recorder, seg, freq == 1)
        logits_parts.append(logits)
        mtp_parts.append(mtp_logits)
        vocab = logits.shape[-1]
        if seq >= 2:
            lm_sum = lm_sum + F.cross_entropy(
                logits[:, :-1].reshape(-1, vocab), seg[:, 1:].reshape(-1),
                reduction="sum")
            lm_count += seg.shape[0] * (seq - 1)
        if seq >= 3:
            mtp_sum = mtp_sum + F.cross_entropy(
                mtp_logits[:, :-2].reshape(-1, vocab), seg[:, 2:].reshape(-1),
                reduction="sum")
            mtp_count += seg.shape[0] * (seq - 2)
        all_layers = list(model.model.layers) + [mtp.layer]
        for number, inputs in recorder.indexer_inputs.items():
            probs, layer_topk = recorder.attention[number]
            kl, _ = indexer_loss_layer(all_layers[number - 1].self_attn.indexer,
                                       inputs, probs, layer_topk)
            kl_sums[number] = kl_sums.get(number, 0.0) + kl.sum()
            topk.setdefault(number, []).append(sanitized_topk(
                layer_topk.cpu(), seq, offset=start,
                width=config.index_topk))
        if spec.get("cu_seqlens") is None:
            # Cross-check: our LM loss is HF's own loss.
            hf_loss = model(input_ids=seg, labels=seg, use_cache=False).loss
            torch.testing.assert_close(hf_loss, lm_sum / lm_count)
    tokens = ids.numel()
    lm_loss = lm_sum / lm_count
    mtp_loss = mtp_sum / mtp_count
    layer_kl = {n: s / tokens for n, s in kl_sums.items()}
    indexer_loss = INDEXER_LOSS_COEFF * sum(layer_kl.values())
    total = lm_loss + MTP_LOSS_SCALE * mtp_loss + indexer_loss
    total.backward()

    expected = {
        "input_ids": ids.to(torch.int64),
        "logits": torch.cat(logits_parts, dim=1),
        "mtp_logits": torch.cat(mtp_parts, dim=1),
        "loss": lm_loss.reshape(1),
        "mtp_loss": mtp_loss.reshape(1),
        "indexer_loss": indexer_loss.reshape(1),
        "total_loss": total.reshape(1),
    }
    if spec.get("cu_seqlens") is not None:
        expected["cu_seqlens"] = torch.tensor(spec["cu_seqlens"],
                                              dtype=torch.int32)
    for number, kl in layer_kl.items():
        expected[f"indexer_kl.layer.{number}"] = kl.reshape(1)
    for number, parts in topk.items():
        expected[f"topk.layer.{number}"] = torch.cat(parts, dim=1)
    params = dict(model.named_parameters())
    params.update(mtp.hf_parameters(f"model.layers.{layers}"))
    for hf_name, param in params.items():
        if param.grad is None:
            raise RuntimeError(f"{name}: no gradient for {hf_name}")
        if keeps_gradient(hf_name, layers):
            expected[f"grad.{hf_name}"] = param.grad
    weights = {n: t for n, t in model.state_dict().items()}
    weights.update(mtp.hf_state(f"model.layers.{layers}"))
    if spec["experts"] == "per_expert":
        weights = split_experts(weights)

    folder = os.path.join(out_dir, name)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        f.write(config_json(config, freq, offset))
    # clone: per-expert slices share storage, which save_file refuses.
    save_file({k: v.detach().float().cpu().clone()
               for k, v in sorted(weights.items())},
              os.path.join(folder, "model.safetensors"))
    save_file({k: v.detach().cpu().clone()
               for k, v in sorted(expected.items())},
              os.path.join(folder, "expected.safetensors"),
              metadata={"seed": str(seed), "generator": "make_fixtures.py"})
    print(f"{name}: lm_loss {lm_loss.item():.6f} mtp_loss {mtp_loss.item():.6f}"
          f" indexer_loss {indexer_loss.item():.6e} total {total.item():.6f}")
    check_hf_reload(folder, expected, spec)


def keeps_gradient(name, layers):
    """The gradients a fixture keeps (to stay small): embeddings, final norm,
    lm_head, layers 1 (dense), 2 (first MoE) and L (a skip layer when
    freq > 1), every indexer weight, and the MTP layer."""
    if not name.startswith("model.layers."):
        return True
    number = int(name.split(".")[2]) + 1
    return number in (1, 2, layers, layers + 1) or ".indexer." in name


def split_experts(weights):
    """Fused experts (gate rows first) as per-expert checkpoint keys."""
    out = {}
    for name, value in weights.items():
        if name.endswith("mlp.experts.gate_up_proj"):
            prefix = name[: -len("gate_up_proj")]
            inner = value.shape[1] // 2
            for e in range(value.shape[0]):
                out[f"{prefix}{e}.gate_proj.weight"] = value[e, :inner]
                out[f"{prefix}{e}.up_proj.weight"] = value[e, inner:]
        elif name.endswith("mlp.experts.down_proj"):
            prefix = name[: -len("down_proj")]
            for e in range(value.shape[0]):
                out[f"{prefix}{e}.down_proj.weight"] = value[e]
        else:
            out[name] = value
    return out


def check_hf_reload(folder, expected, spec):
    """Does transformers itself load the folder to the same logits?"""
    if spec.get("cu_seqlens") is not None:
        return
    try:
        model, info = GlmMoeDsaForCausalLM.from_pretrained(
            folder, output_loading_info=True, attn_implementation="eager",
            dtype=torch.float32)
        with torch.no_grad():
            logits = model(input_ids=expected["input_ids"].cpu()).logits
        diff = (logits - expected["logits"].cpu()).abs().max().item()
        print(f"{os.path.basename(folder)}: HF reload max |logit diff| {diff:.3e};"
              f" missing {info['missing_keys']}; mismatched "
              f"{info['mismatched_keys']}; unexpected "
              f"{len(info['unexpected_keys'])} (MTP keys expected)")
    except Exception:  # report only: the fixture itself is already written
        print(f"{os.path.basename(folder)}: HF reload failed")
        traceback.print_exc()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", default="", help="comma-separated names")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True, warn_only=True)
    print(f"torch {torch.__version__}")
    failed = []
    for name, spec in FIXTURES.items():
        if args.only and name not in args.only.split(","):
            continue
        try:
            make_fixture(name, spec, args.out, args.device)
        except Exception:
            traceback.print_exc()
            failed.append(name)
    if failed:
        print("FAILED:", ", ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
