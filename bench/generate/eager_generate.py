#!/usr/bin/python3
"""Eager PyTorch (Debian's python3-torch 1.13) generate-style loop with a KV cache on a Hugging
Face Llama folder's safetensors weights: prefill a prompt, then greedy decode one token per step,
appending keys and values to the cache with torch.cat (as transformers' DynamicCache does), eager
attention, RMSNorm and softmax in fp32. Prints one JSON object.

usage: eager_generate.py --model DIR --prompt-tokens 64 --new-tokens 128 --dtype fp32 --threads 1
"""
import argparse
import json
import struct
import time

import torch

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        dtype = DTYPES[info["dtype"]]
        if dtype == torch.bfloat16:
            t = torch.frombuffer(bytearray(data[b:e]), dtype=torch.int16).view(torch.bfloat16)
        else:
            t = torch.frombuffer(bytearray(data[b:e]), dtype=dtype)
        out[name] = t.reshape(info["shape"])
    return out


def rms_norm(x, w, eps):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Model:
    def __init__(self, folder, dtype):
        c = json.load(open(f"{folder}/config.json"))
        self.c = c
        w = load_safetensors(f"{folder}/model.safetensors")
        self.w = {k: v.to(dtype) for k, v in w.items()}
        if "lm_head.weight" not in self.w:
            self.w["lm_head.weight"] = self.w["model.embed_tokens.weight"]
        self.L = c["num_hidden_layers"]
        self.H = c["num_attention_heads"]
        self.KV = c.get("num_key_value_heads", self.H)
        self.D = c.get("head_dim") or c["hidden_size"] // self.H
        self.eps = c["rms_norm_eps"]
        ctx = c["max_position_embeddings"]
        inv = 1.0 / (c.get("rope_theta", 10000.0) ** (torch.arange(0, self.D, 2).float() / self.D))
        freqs = torch.outer(torch.arange(ctx).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.cos, self.sin = emb.cos().to(dtype), emb.sin().to(dtype)
        self.dtype = dtype

    def forward(self, ids, cache):
        w, b, s = self.w, ids.shape[0], ids.shape[1]
        pos = cache[0][0].shape[2] if cache[0] is not None else 0
        cos, sin = self.cos[pos:pos + s], self.sin[pos:pos + s]
        x = torch.nn.functional.embedding(ids, w["model.embed_tokens.weight"])
        for i in range(self.L):
            p = f"model.layers.{i}."
            h = rms_norm(x, w[p + "input_layernorm.weight"], self.eps)
            q = (h @ w[p + "self_attn.q_proj.weight"].t()).view(b, s, self.H, self.D).transpose(1, 2)
            k = (h @ w[p + "self_attn.k_proj.weight"].t()).view(b, s, self.KV, self.D).transpose(1, 2)
            v = (h @ w[p + "self_attn.v_proj.weight"].t()).view(b, s, self.KV, self.D).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            if cache[i] is not None:
                k = torch.cat((cache[i][0], k), dim=2)
                v = torch.cat((cache[i][1], v), dim=2)
            cache[i] = (k, v)
            rep = self.H // self.KV
            kk = k.repeat_interleave(rep, dim=1) if rep > 1 else k
            vv = v.repeat_interleave(rep, dim=1) if rep > 1 else v
            scores = (q @ kk.transpose(2, 3)) / (self.D ** 0.5)
            t = kk.shape[2]
            if s > 1:
                mask = torch.ones(s, t, dtype=torch.bool).triu(t - s + 1)
                scores = scores.masked_fill(mask, float("-inf"))
            probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
            a = (probs @ vv).transpose(1, 2).reshape(b, s, self.H * self.D)
            x = x + a @ w[p + "self_attn.o_proj.weight"].t()
            h = rms_norm(x, w[p + "post_attention_layernorm.weight"], self.eps)
            g = torch.nn.functional.silu(h @ w[p + "mlp.gate_proj.weight"].t())
            x = x + (g * (h @ w[p + "mlp.up_proj.weight"].t())) @ w[p + "mlp.down_proj.weight"].t()
        h = rms_norm(x, w["model.norm.weight"], self.eps)
        return h[:, -1:] @ w["lm_head.weight"].t()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dtype = torch.float32 if a.dtype == "fp32" else torch.bfloat16
    m = Model(a.model, dtype)
    vocab = m.c["vocab_size"]
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, vocab, (1, a.prompt_tokens), generator=g)
    with torch.inference_mode():
        m.forward(prompt[:, :8], [None] * m.L)  # warm-up
        cache = [None] * m.L
        t0 = time.perf_counter()
        logits = m.forward(prompt, cache)
        nxt = logits[0, -1].float().argmax().view(1, 1)
        t1 = time.perf_counter()
        for _ in range(a.new_tokens - 1):
            logits = m.forward(nxt, cache)
            nxt = logits[0, -1].float().argmax().view(1, 1)
        t2 = time.perf_counter()
    print(json.dumps({"impl": "eager", "dtype": a.dtype, "prompt_tokens": a.prompt_tokens,
                      "tokens": a.new_tokens,
                      "prefill_tokens_per_sec": a.prompt_tokens / (t1 - t0),
                      "decode_tokens_per_sec": (a.new_tokens - 1) / (t2 - t1)}))


if __name__ == "__main__":
    main()
