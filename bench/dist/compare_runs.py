#!/usr/bin/env python3
"""Compare two runs of shard-worker train: per-step losses (metrics.jsonl) and final weights
(<run>/model/*.safetensors), as max relative differences. Used by the multirank equivalence test
and the benchmark. Reads safetensors with the standard library only (F32/BF16)."""
import json
import struct
import sys
import glob
import os
import array


def losses(run):
    out = []
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("type") == "metric":
                out.append(rec["loss"])
    return out


def tensors(run):
    result = {}
    for path in sorted(glob.glob(os.path.join(run, "model", "*.safetensors"))):
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
            data = f.read()
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            b, e = meta["data_offsets"]
            raw = data[b:e]
            if meta["dtype"] == "F32":
                vals = array.array("f", raw)
            elif meta["dtype"] == "BF16":
                vals = array.array("f", b"".join(b"\0\0" + raw[i:i + 2] for i in range(0, len(raw), 2)))
            else:
                raise SystemExit(f"{path}: unsupported dtype {meta['dtype']}")
            result[name] = vals
    return result


def main():
    a, b = sys.argv[1], sys.argv[2]
    la, lb = losses(a), losses(b)
    if len(la) != len(lb) or not la:
        print(json.dumps({"error": f"step counts differ: {len(la)} vs {len(lb)}"}))
        return 2
    loss_rel = max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(la, lb))
    ta, tb = tensors(a), tensors(b)
    if set(ta) != set(tb):
        print(json.dumps({"error": "tensor names differ"}))
        return 2
    # Relative to each tensor's largest magnitude (elementwise relative errors explode near 0).
    weight_rel = 0.0
    for name in ta:
        x, y = ta[name], tb[name]
        scale = max(max(abs(v) for v in x), 1e-12)
        weight_rel = max(weight_rel, max(abs(p - q) for p, q in zip(x, y)) / scale)
    print(json.dumps({"steps": len(la), "loss_max_rel": loss_rel, "weight_max_rel": weight_rel,
                      "tensors": len(ta)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
