#!/usr/bin/python3
"""Writes bench/engine/RESULTS.md from the JSON lines of run_bench.sh.

usage: summarize.py RESULTS_JSONL LOAD_JSON OUT_MD THREADS ROUNDS
"""
import json
import statistics
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
load = {}
for line in open(sys.argv[2]):
    load.update(json.loads(line))
out, threads, rounds = sys.argv[3], sys.argv[4], sys.argv[5]
med = statistics.median


def of(variant):
    return [r for r in rows if r.get("variant") == variant]


def spread(xs):
    return "%.1f-%.1f" % (min(xs), max(xs)) if xs else "-"


L = ["## Engine core: training throughput vs eager PyTorch (CPU)", "",
     ("Command: `bench/engine/run_bench.sh build/release %s %s` (about 15-25 minutes on a loaded "
     "2-core machine, most of it eager PyTorch's bf16 step) — the 112M Llama of issue 17 (hidden "
     "768, 10 layers, 12 heads / 4 KV heads, vocabulary 32000, intermediate 2048, untied head), "
     "batch 4 x 256, AdamW, clip 1.0, %s threads, random tokens, %s alternating rounds in one run; "
     "the engine runs 3 steps per round (the first excluded), eager fp32 3 (the first excluded), "
     + ("eager bf16 autocast at the same 4 x 256 in every round (this CPU has AVX-512: "
        "LibTorch 1.13 multiplies bf16 through oneDNN), and "
        if any(r.get("variant") == "eager-bf16" for r in rows) else "") +
     "bf16 like for like at batch 1 x 256 (`-b1`; eager 1 step, see run_bench.sh). `worker` is the "
     "product path, `shard-worker train` at one rank with its default strategy (what `shard run`, "
     "the studio and the demo start; 4 steps, the first excluded, tokens per CPU-second from the "
     "records' `cpu_time`): the primary figures. `engine` is the in-process harness "
     "`bench_engine_train` (one process, no launcher, the single-process strategy). `before` is this engine with its old paths (`SHARD_BF16_GEMM=native "
     "SHARD_ALLOC_CACHE_MB=0`). Eager is Debian's python3-torch 1.13 running a Hugging Face style "
     "`nn.Module` Llama (`bench/engine/bench_eager.py`).") % (threads, rounds, threads, rounds), "",
     "Load: `%s` at the start, `%s` at the end (other engineers' builds share the 2 cores): "
     "wall-clock figures swing between rounds; compare the ratios and the per-CPU-second "
     "figures." % (load.get("load_start", "?").strip(), load.get("load_end", "?").strip()), "",
     "| variant | tok/s wall, median (spread) | tok/CPU-s, median (spread) | vs eager, wall | "
     "vs eager, CPU | achieved FLOP/s (CPU) | MFU vs fp32 at::mm | MFU vs bf16 at::mm |",
     "|---|---|---|---|---|---|---|---|"]
eng = [r for r in rows if r.get("impl") == "engine" and not r["variant"].startswith("prof")]
fp32mm = med(r["matmul_cpu_flops"] for r in eng) if eng else 0
bf16mm = med(r["bf16_matmul_cpu_flops"] for r in eng) if eng else 0
fpt = eng[0]["flops_per_token"] if eng else 0
# bf16: eager at the same 4 x 256 batch where it ran (AVX-512), else its batch-1 run.
base = {"fp32": of("eager-fp32"), "bf16-mixed": of("eager-bf16") or of("eager-bf16-b1")}
for v in ("worker-fp32", "engine-fp32", "before-fp32", "eager-fp32", "worker-bf16", "engine-bf16",
          "eager-bf16",
          "engine-bf16-b1", "before-bf16-b1", "eager-bf16-b1"):
    rs = of(v)
    if not rs:
        continue
    w = [r["tokens_per_sec"] for r in rs]
    c = [r["cpu_tokens_per_sec"] for r in rs]
    b = base[rs[0]["precision"]]
    if v.endswith("-b1"):
        b = of("eager-bf16-b1")
    bw = med(r["tokens_per_sec"] for r in b) if b else 0
    bc = med(r["cpu_tokens_per_sec"] for r in b) if b else 0
    ach = med(c) * fpt
    L.append("| %s | %.1f (%s) | %.1f (%s) | %s | %s | %.1f G | %.0f%% | %.0f%% |" % (
        v, med(w), spread(w), med(c), spread(c),
        "**%.2fx**" % (med(w) / bw) if bw else "-", "**%.2fx**" % (med(c) / bc) if bc else "-",
        ach / 1e9, 100 * ach / fp32mm if fp32mm else 0, 100 * ach / bf16mm if bf16mm else 0))
if of("eager26-fp32") or of("eager26-bf16"):
    L += ["", "Against eager PyTorch %s (Debian 13's python3-torch in the root of "
          "scripts/ci-roots.sh, the same model code, batch, threads and steps, in the same rounds):"
          % (of("eager26-fp32") or of("eager26-bf16"))[0].get("torch", "2.6"), "",
          "| precision | shard-worker tok/s wall | eager 2.6 tok/s wall | shard-worker tok/CPU-s | "
          "eager 2.6 tok/CPU-s | **worker / eager 2.6, wall** | **worker / eager 2.6, CPU** |",
          "|---|---:|---:|---:|---:|---:|---:|"]
    for prec, ev, e26 in (("fp32", "worker-fp32", "eager26-fp32"),
                          ("bf16-mixed", "worker-bf16", "eager26-bf16")):
        a, b = of(ev), of(e26)
        if not a or not b:
            continue
        aw, bw = med(r["tokens_per_sec"] for r in a), med(r["tokens_per_sec"] for r in b)
        ac, bc = med(r["cpu_tokens_per_sec"] for r in a), med(r["cpu_tokens_per_sec"] for r in b)
        L.append("| %s | %.1f | %.1f | %.1f | %.1f | **%.2fx** | **%.2fx** |"
                 % (prec, aw, bw, ac, bc, aw / bw, ac / bc))
L += ["", "FLOPs per token: 6·P + 12·L·h·s = %.3g (torchtitan's MFU formula, P = %.1fM). Matmul "
      "rates: a 2048x2048 `at::mm` in the same engine processes right after training, per "
      "CPU-second, median: fp32 %.1f GFLOP/s, bf16 %.2f GFLOP/s." % (
          fpt, eng[0]["params"] / 1e6 if eng else 0, fp32mm / 1e9, bf16mm / 1e9), "",
      "Per-round ratios (shard-worker or harness / eager of the same round, wall): " + ", ".join(
          "%s %s r%d %.2f" % (ev.split("-")[0], p, r["round"],
                              r["tokens_per_sec"] / e["tokens_per_sec"])
          for p, ev in (("fp32", "worker-fp32"), ("fp32", "engine-fp32"),
                        ("bf16-mixed", "worker-bf16"), ("bf16-mixed", "engine-bf16"))
          for r in of(ev) for e in base[p]
          if e["round"] == r["round"]) + ".", ""]

FAM = [("matmul", ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear",
                   "aten::baddbmm")),
       ("casts and copies", ("aten::copy_", "aten::to", "aten::_to_copy", "aten::contiguous",
                             "aten::clone", "aten::empty_like", "aten::reshape", "aten::_reshape_alias")),
       ("attention softmax and mask", ("aten::_softmax", "aten::softmax",
                                       "aten::_softmax_backward_data", "aten::masked_fill",
                                       "aten::masked_fill_", "aten::add_")),
       ("cross-entropy over the vocabulary", ("aten::_log_softmax", "aten::log_softmax",
                                              "aten::_log_softmax_backward_data", "aten::nll_loss",
                                              "aten::nll_loss_forward", "aten::nll_loss_backward",
                                              "aten::cross_entropy_loss")),
       ("RMSNorm / RoPE / SwiGLU / residual elementwise", ("aten::mul", "aten::add", "aten::div",
                                                          "aten::neg", "aten::silu",
                                                          "aten::silu_backward", "aten::rsqrt",
                                                          "aten::pow", "aten::mean", "aten::sum",
                                                          "aten::cat", "aten::sub",
                                                          "aten::narrow", "aten::slice",
                                                          "shard::rms_norm",
                                                          "shard::rms_norm_backward",
                                                          "shard::rope", "shard::rope_backward",
                                                          "shard::swiglu",
                                                          "shard::swiglu_backward")),
       ("zero fill (gradient buffers)", ("aten::fill_", "aten::zero_", "aten::zeros")),
       ("embedding", ("aten::embedding", "aten::embedding_dense_backward",
                      "aten::embedding_backward", "aten::index_select", "aten::index_add_")),
       ("optimizer (clip + AdamW)", ("shard::optimizer_step", "Optimizer")),
       ("allocation", ("aten::empty", "aten::empty_strided"))]


def family(name):
    for f, keys in FAM:
        for k in keys:
            if name == k or (k == "Optimizer" and name.startswith("Optimizer")):
                return f
    return "other (autograd nodes, views, small ops)"


L += ["### Where a step's time goes (self time per op family, seconds per step, one profiled step)",
      "", "ATen-level profile: RecordFunction callbacks in the engine (`--profile-steps`), "
      "`torch.profiler` in eager; `fwd` / `bwd` = forward (with the loss) / backward. Wall "
      "seconds under the load above: compare the columns of one table, not with the throughput "
      "table.", ""]
profs = [(v, of(v)) for v in ("prof-before-fp32", "prof-engine-fp32", "prof-eager-fp32",
                             "prof-engine-bf16")]
profs = [(v, r[0]["profile"]) for v, r in profs if r and r[0].get("profile")]
if profs:
    L.append("| family | " + " | ".join(v[5:] for v, _ in profs) + " |")
    L.append("|---|" + "---|" * len(profs))
    table = {}
    for v, p in profs:
        for k, sec in p.items():
            if k == "wall_per_step":
                continue
            phase, name = k.split("|", 1)
            f = family(name)
            if f == "matmul":
                f = "matmul " + phase
            table.setdefault(f, {}).setdefault(v, 0.0)
            table[f][v] += sec
    order = sorted(table, key=lambda f: -max(table[f].values()))
    for f in order:
        L.append("| %s | " % f + " | ".join("%.2f (%.0f%%)" % (
            table[f].get(v, 0.0), 100 * table[f].get(v, 0.0) / p["wall_per_step"])
            for v, p in profs) + " |")
    L.append("| **step (wall)** | " + " | ".join("%.2f" % p["wall_per_step"] for _, p in profs) + " |")
    L.append("")

rk = of("ranks")
if rk:
    L += ["### Ranks (shard-worker train / launch, Gloo over loopback, global batch 4 x 256, "
          "%s threads in total)" % threads, "",
          "| precision | ddp 2 ranks | zero3 2 ranks | zero3 1 rank | zero3 / ddp at 2 | "
          "zero3 2 ranks / 1 rank |", "|---|---|---|---|---|---|"]
    for p in ("fp32", "bf16-mixed"):
        g = {r["name"].rsplit("-", 1)[0] if False else r["strategy"] + "-" + str(r["ranks"]):
             r["tokens_per_sec"] for r in rk if r["precision"] == p}
        if {"ddp-2", "zero3-2", "zero3-1"} <= set(g):
            L.append("| %s | %.1f | %.1f | %.1f | **%.2fx** | **%.2fx** |" % (
                p, g["ddp-2"], g["zero3-2"], g["zero3-1"], g["zero3-2"] / g["ddp-2"],
                g["zero3-2"] / g["zero3-1"]))
    L.append("")
wk = [r for r in rows if r.get("impl") == "worker"]
if wk:
    L += ["shard-worker per run: process wall and CPU seconds (loading, %s steps and the "
          "final save), host reads per logged step: " % wk[0]["steps"] + "; ".join(
              "%s r%d %.1f s wall, %.1f CPU-s, %d" % (r["variant"], r["round"], r["process_wall_s"],
                                                      r["process_cpu_s"], r["host_reads_per_step"])
              for r in wk) + ".", ""]
    L += ["| precision | shard-worker / harness, wall | shard-worker / harness, CPU |",
          "|---|---:|---:|"]
    for p, a, b in (("fp32", "worker-fp32", "engine-fp32"),
                    ("bf16-mixed", "worker-bf16", "engine-bf16")):
        if of(a) and of(b):
            L.append("| %s | **%.2fx** | **%.2fx** |" % (
                p, med(r["tokens_per_sec"] for r in of(a)) / med(r["tokens_per_sec"] for r in of(b)),
                med(r["cpu_tokens_per_sec"] for r in of(a))
                / med(r["cpu_tokens_per_sec"] for r in of(b))))
    L.append("")
L += ["Per run (tokens/s wall, tokens per CPU-second):", ""]
for r in rows:
    if "cpu_tokens_per_sec" in r and not r["variant"].startswith("prof"):
        L.append("- %s round %d: %.1f, %.1f" % (r["variant"], r["round"], r["tokens_per_sec"],
                                                r["cpu_tokens_per_sec"]))
L.append("")
open(out, "w").write("\n".join(L))
print("\n".join(L))
