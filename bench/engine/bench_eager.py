#!/usr/bin/python3
"""Eager PyTorch (Debian's python3-torch) training throughput for the same Llama preset, batch,
sequence length and thread count as bench_engine_train: nn.Module blocks written as Hugging Face's
modeling_llama does (eager attention, RMSNorm in fp32), AdamW, next-token cross entropy.
Prints one JSON object.

usage: bench_eager.py --config CONFIG_JSON --batch 4 --seq 256 --steps 6 --threads 2
                      [--precision fp32|bf16-mixed]
bf16-mixed runs forward and loss under torch.autocast("cpu", torch.bfloat16) with fp32 weights,
gradients and optimizer, as the engine's bf16-mixed does.
"""
import argparse
import contextlib
import json
import math
import time

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, h, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-b, a), dim=-1)


class Attention(nn.Module):
    # sdpa: torch's scaled_dot_product_attention (flash / memory-efficient kernels on a GPU), as
    # torchtitan's Llama; else the eager softmax of Hugging Face's modeling_llama.
    sdpa = False

    def __init__(self, c):
        super().__init__()
        self.H, self.KV = c["num_attention_heads"], c["num_key_value_heads"]
        self.D = c["hidden_size"] // self.H
        h = c["hidden_size"]
        self.q_proj = nn.Linear(h, self.H * self.D, bias=False)
        self.k_proj = nn.Linear(h, self.KV * self.D, bias=False)
        self.v_proj = nn.Linear(h, self.KV * self.D, bias=False)
        self.o_proj = nn.Linear(self.H * self.D, h, bias=False)

    def forward(self, x, cos, sin, mask):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.H, self.D).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.KV, self.D).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.KV, self.D).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.H // self.KV
        if Attention.sdpa:
            out = nn.functional.scaled_dot_product_attention(
                q, k, v, is_causal=True, enable_gqa=rep > 1)
            return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))
        if rep > 1:
            k = k[:, :, None].expand(b, self.KV, rep, s, self.D).reshape(b, self.H, s, self.D)
            v = v[:, :, None].expand(b, self.KV, rep, s, self.D).reshape(b, self.H, s, self.D)
        w = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.D) + mask
        w = torch.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        return self.o_proj(torch.matmul(w, v).transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, i = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = MLP(c)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Block(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        if c.get("tie_word_embeddings"):
            self.lm_head.weight = self.embed_tokens.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, ids):
        s = ids.shape[1]
        dev = ids.device
        D = self.c.get("head_dim") or self.c["hidden_size"] // self.c["num_attention_heads"]
        inv = 1.0 / (self.c.get("rope_theta", 10000.0)
                     ** (torch.arange(0, D, 2, dtype=torch.int64, device=dev).float() / D))
        inv = rope_scaled(inv, self.c.get("rope_scaling"))
        freqs = torch.outer(torch.arange(s, device=dev).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        mask = None if Attention.sdpa else torch.full((s, s), float("-inf"), device=dev).triu(1)
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.lm_head(self.norm(x))


def rope_scaled(inv, scaling):
    """Llama 3's rope scaling (rope_type "llama3"): long wavelengths divided by the factor, short
    ones kept, a smooth blend between low_freq_factor and high_freq_factor."""
    if not scaling or scaling.get("rope_type", scaling.get("type")) != "llama3":
        return inv
    factor = scaling["factor"]
    low, high = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
    orig = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    smooth = (orig / wavelen - low) / (high - low)
    blended = (1 - smooth) * inv / factor + smooth * inv
    out = torch.where(wavelen > orig / low, inv / factor, inv)
    return torch.where((wavelen >= orig / high) & (wavelen <= orig / low), blended, out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16-mixed"])
    ap.add_argument("--profile-steps", type=int, default=0,
                    help="self CPU time per op over N extra steps (torch.profiler), in 'profile'")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    c = json.load(open(a.config))
    model = Llama(c)
    params = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if not n.endswith("norm.weight")]
    no_decay = [p for n, p in model.named_parameters() if n.endswith("norm.weight")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.0},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    V = c["vocab_size"]
    bf16 = a.precision == "bf16-mixed"
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 \
        else contextlib.nullcontext
    times = []
    cpu = []
    phases = [0.0, 0.0, 0.0]
    losses = []
    for step in range(a.steps):
        ids = torch.randint(0, V, (a.batch, a.seq))
        t0 = time.perf_counter()
        c0 = time.process_time()
        with autocast():
            logits = model(ids)
            loss = nn.functional.cross_entropy(logits[:, :-1].float().reshape(-1, V),
                                               ids[:, 1:].reshape(-1), ignore_index=-100)
        c1 = time.process_time()
        loss.backward()
        c2 = time.process_time()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # as the engine (clip 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step > 0:
            phases[0] += c1 - c0
            phases[1] += c2 - c1
            phases[2] += time.process_time() - c2
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        losses.append(loss.item())
    profile = {}
    if a.profile_steps > 0:
        from torch.profiler import ProfilerActivity, profile as prof
        ids = torch.randint(0, V, (a.batch, a.seq))
        wall = time.perf_counter()
        for _ in range(a.profile_steps):
            parts = []
            with prof(activities=[ProfilerActivity.CPU]) as pf:
                with autocast():
                    logits = model(ids)
                    loss = nn.functional.cross_entropy(logits[:, :-1].float().reshape(-1, V),
                                                       ids[:, 1:].reshape(-1), ignore_index=-100)
            parts.append(("fwd", pf))
            with prof(activities=[ProfilerActivity.CPU]) as pb:
                loss.backward()
            parts.append(("bwd", pb))
            with prof(activities=[ProfilerActivity.CPU]) as po:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)
            parts.append(("opt", po))
            for tag, p in parts:
                for e in p.key_averages():
                    key = ("bwd|" if tag == "bwd" else "fwd|") + e.key
                    if tag == "opt" and not e.key.startswith("Optimizer"):
                        key = "fwd|shard::optimizer_step"  # the same family as the engine's
                    profile[key] = profile.get(key, 0.0) + e.self_cpu_time_total / 1e6 / a.profile_steps
        profile["wall_per_step"] = (time.perf_counter() - wall) / a.profile_steps
    timed = times[1:] if len(times) > 1 else times
    tps = a.batch * a.seq * len(timed) / sum(timed)
    cpu_timed = cpu[1:] if len(cpu) > 1 else cpu
    cpu_tps = a.batch * a.seq * len(cpu_timed) / sum(cpu_timed)
    print(json.dumps({"impl": "eager", "torch": torch.__version__, "precision": a.precision,
                      "params": params, "batch": a.batch, "seq": a.seq,
                      "threads": torch.get_num_threads(), "tokens_per_sec": tps, "cpu_tokens_per_sec": cpu_tps,
                      "step_sec": sum(timed) / len(timed),
                      "phase_cpu_sec": {"forward": phases[0] / max(1, len(timed)),
                                        "backward": phases[1] / max(1, len(timed)),
                                        "optimizer": phases[2] / max(1, len(timed))}, "losses": losses,
                      "profile": profile}))


if __name__ == "__main__":
    main()
