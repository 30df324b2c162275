#!/usr/bin/python3
"""Independent reference for tst_reference: a Llama / Qwen2 forward written from the Hugging Face
formulas in plain PyTorch (Debian's python3-torch), reading the same config.json, safetensors and
tokens the engine used. Prints logits, the loss, and the loss after one torch.optim.AdamW step.

usage: reference_llama.py MODEL_DIR CASE_JSON OUT_JSON
"""
import json
import math
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "F64": torch.float64}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        t = torch.frombuffer(bytearray(blob[base + begin:base + end]), dtype=DTYPES[info["dtype"]])
        out[name] = t.reshape(info["shape"]).to(torch.float32)
    return out


def inv_freq(cfg, head_dim):
    base = cfg.get("rope_theta", 10000.0)
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    rs = cfg.get("rope_scaling")
    if rs:
        kind = rs.get("rope_type", rs.get("type"))
        if kind == "linear":
            inv = inv / rs["factor"]
        elif kind == "llama3":
            factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
            old = rs["original_max_position_embeddings"]
            low_wl, high_wl = old / low, old / high
            wl = 2 * math.pi / inv
            scaled = torch.where(wl > low_wl, inv / factor, inv)
            smooth = (old / wl - low) / (high - low)
            smoothed = (1 - smooth) * scaled / factor + smooth * scaled
            medium = ~(wl < high_wl) * ~(wl > low_wl)
            inv = torch.where(medium, smoothed, scaled)
    return inv


def rms(x, w, eps):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h


def rot(x):
    a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-b, a), dim=-1)


def forward(cfg, P, ids):
    h = cfg["hidden_size"]
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", H)
    D = cfg.get("head_dim") or h // H
    eps = cfg["rms_norm_eps"]
    b, s = ids.shape
    x = torch.nn.functional.embedding(ids, P["model.embed_tokens.weight"])
    pos = torch.arange(s, dtype=torch.int64).float()
    freqs = torch.outer(pos, inv_freq(cfg, D))
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    mask = torch.full((s, s), float("-inf")).triu(1)
    window = cfg.get("sliding_window") if cfg.get("use_sliding_window", cfg.get("model_type") == "mistral") else None
    if window and window < s:
        i = torch.arange(s).unsqueeze(1)
        j = torch.arange(s).unsqueeze(0)
        mask = mask.masked_fill((i - j) >= window, float("-inf"))

    def lin(t, name):
        bias = P.get(name + ".bias")
        return torch.nn.functional.linear(t, P[name + ".weight"], bias)

    for layer in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{layer}."
        r = rms(x, P[pre + "input_layernorm.weight"], eps)
        q = lin(r, pre + "self_attn.q_proj").view(b, s, H, D).transpose(1, 2)
        k = lin(r, pre + "self_attn.k_proj").view(b, s, KV, D).transpose(1, 2)
        v = lin(r, pre + "self_attn.v_proj").view(b, s, KV, D).transpose(1, 2)
        q = q * cos + rot(q) * sin
        k = k * cos + rot(k) * sin
        k = k.repeat_interleave(H // KV, dim=1)
        v = v.repeat_interleave(H // KV, dim=1)
        att = torch.softmax(q @ k.transpose(2, 3) / math.sqrt(D) + mask, dim=-1)
        o = (att @ v).transpose(1, 2).reshape(b, s, H * D)
        x = x + lin(o, pre + "self_attn.o_proj")
        r = rms(x, P[pre + "post_attention_layernorm.weight"], eps)
        g = torch.nn.functional.silu(lin(r, pre + "mlp.gate_proj")) * lin(r, pre + "mlp.up_proj")
        x = x + lin(g, pre + "mlp.down_proj")
    x = rms(x, P["model.norm.weight"], eps)
    head = P["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else P["lm_head.weight"]
    return torch.nn.functional.linear(x, head)


def loss_fn(logits, labels):
    V = logits.shape[-1]
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1), ignore_index=-100)


def main():
    model_dir, case_path, out_path = sys.argv[1:4]
    torch.set_num_threads(1)
    cfg = json.load(open(model_dir + "/config.json"))
    case = json.load(open(case_path))
    P = read_safetensors(model_dir + "/model.safetensors")
    if cfg.get("tie_word_embeddings"):
        P.pop("lm_head.weight", None)
    for t in P.values():
        t.requires_grad_(True)
    ids = torch.tensor(case["input_ids"], dtype=torch.int64)
    labels = torch.tensor(case["labels"], dtype=torch.int64)
    logits = forward(cfg, P, ids)
    loss = loss_fn(logits, labels)
    loss.backward()
    decay = [t for n, t in P.items() if not (n.endswith("norm.weight") or n.endswith(".bias"))]
    no_decay = [t for n, t in P.items() if n.endswith("norm.weight") or n.endswith(".bias")]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": case["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=case["lr"], betas=(case["beta1"], case["beta2"]), eps=case["eps"])
    opt.step()
    with torch.no_grad():
        after = loss_fn(forward(cfg, P, ids), labels)
    json.dump({"logits": logits.detach().reshape(-1).tolist(), "loss": loss.item(),
               "loss_after": after.item()}, open(out_path, "w"))


if __name__ == "__main__":
    main()
