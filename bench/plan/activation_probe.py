#!/usr/bin/python3
# Measures the bytes an eager Llama block (Hugging Face-style ops, PyTorch CPU fp32) saves for
# backward and compares them with the planner's per-block activation formula, using the
# coefficients `shard plan --show-calibration` prints. Run with Debian's python3-torch:
#   build/release/app/shard plan --show-calibration > /tmp/cal.json
#   /usr/bin/python3 bench/plan/activation_probe.py /tmp/cal.json
import json
import math
import sys

import torch


def rms(x, w, eps=1e-5):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def block(x, p, nh, nkv, hd):
    b, s, h = x.shape
    y = rms(x, p["ln1"])
    q = (y @ p["q"].t()).view(b, s, nh, hd).transpose(1, 2)
    k = (y @ p["k"].t()).view(b, s, nkv, hd).transpose(1, 2)
    v = (y @ p["v"].t()).view(b, s, nkv, hd).transpose(1, 2)
    inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
    f = torch.outer(torch.arange(s).float(), inv)
    emb = torch.cat((f, f), -1)
    q, k = rope(q, emb.cos(), emb.sin()), rope(k, emb.cos(), emb.sin())
    rep = nh // nkv
    if rep > 1:
        k = k[:, :, None].expand(b, nkv, rep, s, hd).reshape(b, nh, s, hd)
        v = v[:, :, None].expand(b, nkv, rep, s, hd).reshape(b, nh, s, hd)
    scores = (q @ k.transpose(2, 3)) / math.sqrt(hd)
    probs = torch.softmax(scores + torch.full((s, s), float("-inf")).triu(1), dim=-1)
    x = x + (probs @ v).transpose(1, 2).reshape(b, s, nh * hd) @ p["o"].t()
    y2 = rms(x, p["ln2"])
    m = torch.nn.functional.silu(y2 @ p["gate"].t()) * (y2 @ p["up"].t())
    return x + m @ p["down"].t()


def measure(b, s, h, nh, nkv, inter):
    hd = h // nh
    shapes = dict(ln1=(h,), ln2=(h,), q=(nh * hd, h), k=(nkv * hd, h), v=(nkv * hd, h),
                  o=(h, nh * hd), gate=(inter, h), up=(inter, h), down=(h, inter))
    p = {k: (torch.randn(*sh) * 0.02).requires_grad_() for k, sh in shapes.items()}
    x = torch.randn(b, s, h, requires_grad=True)
    skip = {t.data_ptr() for t in p.values()}
    saved = {}

    def pack(t):
        if t.data_ptr() not in skip:
            saved[t.storage().data_ptr()] = t.storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block(x, p, nh, nkv, hd)
    return sum(saved.values())


def predict(cal, b, s, h, nh, nkv, inter):
    T, hd = b * s, h // nh
    q, kv = nh * hd, nkv * hd
    elems = (cal["act_per_hidden"] * h + cal["act_per_q"] * q + cal["act_per_kv"] * kv
             + (cal["act_per_q_gqa"] * q if nkv < nh else 0)
             + cal["act_per_intermediate"] * inter)
    return (T * (4 * elems + 4 * cal["act_fp32_per_token"])
            + b * nh * s * s * cal["score_bytes_cpu_fp32_compute"])


def main():
    cal = json.load(open(sys.argv[1]))
    print("| b | s | h | heads | kv heads | ffn | measured bytes | planner bytes | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for dims in [(2, 128, 128, 4, 4, 384), (4, 256, 384, 6, 2, 1024), (1, 512, 768, 12, 4, 2048),
                 (2, 256, 512, 8, 8, 1408)]:
        got, want = measure(*dims), predict(cal, *dims)
        print("| %s | %d | %d | %.3f |" % (" | ".join(map(str, dims)), got, want, got / want))


if __name__ == "__main__":
    main()
