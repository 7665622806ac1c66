"""long_bench.py - the long-prompt benchmark: one prompt of T tokens traced in nnt (saving the last
position's logits, as `nnt trace --save 'logits[:, -1]'` does) against transformers' forward with
sdpa attention in float32 and in bfloat16 on the same weights, for several T, in one run.

The checkpoint is MiniMax-M2's mid-size release-layout one (make_models.py --layout release: the
release's widths - hidden 3072, 48 query and 8 key/value heads of 128 - with 4 blocks, 32 experts
and a 32768-token vocabulary; written unless it exists under --models): nnt reads release/ (FP8
in place, its default [prefill] bound, so a long prompt runs in chunks); transformers reads fp32/
and bf16/ (the same weights dequantised). Each measurement runs once, in its own process, so that
its peak RSS (ru_maxrss) is its own; lengths past --torch-max run in nnt alone (transformers' time
grows with T^2 and this is a 2-core machine). For every length both ran, the last logits are
compared: the largest difference over the largest magnitude and whether the top 5 agree.

Targets (issue 31): at 32768 tokens nnt's peak RSS within the weights' bytes + the key/value
cache + 2 GB; at 8192 tokens nnt's time >= 1.5x faster than transformers sdpa fp32. Prints and
writes bench/results/<date>-<commit>-long.md with the CPU model and flags.

    python bench/long_bench.py [--lengths 2048,8192,32768] [--torch-max 8192] [--torch-python PY]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grad_bench import ROOT, cpu, peak_rss, tokens  # noqa: E402  (the same ids, CPU line and RSS)


# ---- one measurement, in a child process (argv: --child TOOL DIR T THREADS OUT.npy) ----

def child_nnt(d: str, n: int, out: str) -> dict:
    sys.path.insert(0, str(ROOT / "python"))
    import numpy as np

    import nnt

    m = nnt.Model(d)
    ids = [tokens(n, m.vocab_size)]
    t0 = time.perf_counter()
    res = m.trace(ids, save=["logits[:, -1]"])
    seconds = time.perf_counter() - t0
    np.save(out, np.asarray(res["logits"], dtype=np.float32).reshape(-1))
    return {"seconds": seconds, "peak_rss": peak_rss()}


def child_torch(d: str, n: int, threads: int, out: str, dtype: str) -> dict:
    import numpy as np
    import torch

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    from transformers import AutoModelForCausalLM

    dt = torch.float32 if dtype == "fp32" else torch.bfloat16
    try:
        model = AutoModelForCausalLM.from_pretrained(d, dtype=dt, attn_implementation="sdpa")
        attention = "sdpa"
    except ValueError as e:  # a class without an sdpa path (DeepSeek-V4 in transformers 5.24)
        if "scaled_dot_product_attention" not in str(e):
            raise
        model = AutoModelForCausalLM.from_pretrained(d, dtype=dt, attn_implementation="eager")
        attention = "eager"
    model.eval()
    ids = torch.tensor([tokens(n, model.config.vocab_size)], dtype=torch.long)
    t0 = time.perf_counter()
    with torch.no_grad():
        logits = model(input_ids=ids, logits_to_keep=1).logits  # lm_head at the last position only
    seconds = time.perf_counter() - t0
    np.save(out, logits[0, -1].float().numpy())
    return {"seconds": seconds, "peak_rss": peak_rss(), "torch": torch.__version__, "attention": attention}


def child(argv: list[str]) -> int:
    tool, d, n, threads, out = argv[0], argv[1], int(argv[2]), int(argv[3]), argv[4]
    r = child_nnt(d, n, out) if tool == "nnt" else child_torch(d, n, threads, out, tool.split("-")[1])
    print(json.dumps(r))
    return 0


# ---- the driver ----

def run_child(tool: str, d: Path, n: int, out: Path, args, env: dict) -> dict:
    py = sys.executable if tool == "nnt" else args.torch_python
    cmd = [py, __file__, "--child", tool, str(d), str(n), str(args.threads), str(out)]
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    if res.returncode != 0:
        sys.stderr.write(res.stderr[-3000:])
        return {"failed": res.stderr.strip().splitlines()[-1] if res.stderr.strip() else f"exit {res.returncode}"}
    return json.loads(res.stdout.strip().splitlines()[-1])


def compare(a: Path, b: Path) -> dict:
    import numpy as np

    x, y = np.load(a), np.load(b)
    top = lambda v: list(np.argsort(-v, kind="stable")[:5])
    return {"max_rel": float(np.abs(x - y).max() / np.abs(y).max()), "top5_same": top(x) == top(y)}


def sizes(release: Path, n: int) -> dict:
    """The weights' bytes (the release's safetensors) and nnt's float32 key/value cache for n tokens."""
    c = json.loads((release / "config.json").read_text())
    kv = c["num_hidden_layers"] * c["num_key_value_heads"] * c.get("head_dim", 128) * 2 * n * 4
    return {"weights": sum(f.stat().st_size for f in release.glob("*.safetensors")), "kv_cache": kv}


def table(rows: list[dict]) -> str:
    gib = lambda b: f"{b / 2**30:.2f}"
    lines = ["| tokens | nnt s | nnt peak RSS GiB (weights + KV + 2 GB bound) | torch sdpa fp32 s, GiB | "
             "torch sdpa bf16 s, GiB | fp32 / nnt time | nnt vs fp32 logits: max rel, top-5 |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        nn, f, b = r["nnt"], r.get("torch-fp32"), r.get("torch-bf16")
        cell = lambda m: ("not run" if m is None else m["failed"][:60] if "failed" in m
                          else f"{m['seconds']:.1f}, {gib(m['peak_rss'])}")
        bound = r["weights"] + r["kv_cache"] + 2e9
        speed = f"{f['seconds'] / nn['seconds']:.2f}x" if f and "failed" not in f and "failed" not in nn else "-"
        cmp_ = r.get("compare_fp32")
        lines.append(f"| {r['tokens']} | {nn.get('seconds', float('nan')):.1f} | "
                     f"{gib(nn.get('peak_rss', 0))} ({gib(bound)}) | {cell(f)} | {cell(b)} | {speed} | "
                     + (f"{cmp_['max_rel']:.2e}, {'same' if cmp_['top5_same'] else 'differ'}" if cmp_ else "-") + " |")
    return "\n".join(lines)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(sys.argv[2:])
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", default="2048,8192,32768")
    ap.add_argument("--torch-max", type=int, default=8192, help="the longest prompt transformers runs")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", type=Path, default=ROOT / "bench" / "models")
    ap.add_argument("--torch-python", default=sys.executable, help="a Python with torch and transformers")
    ap.add_argument("--timeout", type=float, default=7200)
    args = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), NNT_LIBRARY=str(ROOT / "build" / "libnnt.so"))
    env.setdefault("NNT_CONFIG", str(ROOT / "build" / "nnt.ini"))
    base = args.models / "minimax_m2-mid"
    if not (base / "release" / "config.json").exists():
        subprocess.run([args.torch_python, str(ROOT / "bench" / "make_models.py"), "minimax_m2", str(base), "--scale",
                        "mid", "--layout", "release"], check=True, timeout=args.timeout)
    model, flags = cpu()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    out = ROOT / "bench" / "results" / f"{datetime.date.today()}-{commit}-long.md"
    scratch = Path(os.environ.get("TMPDIR", "/tmp"))
    rows = []
    for n in (int(x) for x in args.lengths.split(",")):
        r = {"tokens": n, **sizes(base / "release", n)}
        r["nnt"] = run_child("nnt", base / "release", n, scratch / f"long-nnt-{n}.npy", args, env)
        for dt in ("fp32", "bf16"):
            if n <= args.torch_max:
                r[f"torch-{dt}"] = run_child(f"torch-{dt}", base / dt, n, scratch / f"long-{dt}-{n}.npy", args, env)
        if "failed" not in r["nnt"] and "failed" not in r.get("torch-fp32", {"failed": 1}):
            r["compare_fp32"] = compare(scratch / f"long-nnt-{n}.npy", scratch / f"long-fp32-{n}.npy")
        rows.append(r)
        report = (f"# Long-prompt benchmark, {datetime.date.today()}, commit {commit}\n\n"
                  f"CPU: {model}; flags: {flags}; {os.cpu_count()} logical CPUs; {args.threads} threads; "
                  "MiniMax-M2 mid-size release checkpoint (hidden 3072, 48 heads, 4 blocks, 32 experts, FP8); "
                  "one run per measurement; nnt saves logits[:, -1] with its default INI.\n\n"
                  + table(rows) + "\n\nRaw measurements:\n\n```json\n" + json.dumps(rows, indent=1) + "\n```\n")
        out.write_text(report)  # after every length, so that a failure later keeps what was measured
        print(f"wrote {out} ({len(rows)} lengths)", file=sys.stderr, flush=True)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
