"""grad_bench.py - the gradient benchmark: a forward and a backward of T tokens in nnt against
transformers' forward and backward() in float32 on the same weights, in one run on this machine.

For each family: the mid-size release-layout checkpoint of the forward benchmark (make_models.py
--layout release: the released widths, 4 blocks; written unless it exists under --models), then
in separate processes with the same threads and tokens:
  nnt    the Python package on the release checkpoint (its own encoding, FP8 / FP4 / BF16 read in
         place): a forward alone (the last position's logits saved), then a forward and backward of
         the language-model loss with every block's layer_output gradient asked (grad:
         layers.*.layer_output, metric loss), in the mode the bound chooses and again with
         [grad] mode = recompute (block by block);
  torch  transformers' eager model on the same weights dequantised to float32 (make_models.py's
         fp32/ folder): a forward alone under no_grad, then a forward whose token embeddings
         require a gradient (the weights do not), every block's output retained, and backward()
         of the same loss.
Each mode is timed best of --repeats after one warm-up, in its own process so that its peak RSS
(ru_maxrss) is its own. Prints and writes (bench/results/<date>-<commit>-grad.md) the ratios:
forward+backward time, torch over nnt (target >= 1.5x); nnt's backward / forward time (target
<= 2.5x, torch's own beside it); nnt's peak RSS of the gradient run over its forward's (the
memory target: <= 1.5x plus the gradients asked), with the CPU model and flags.

    python bench/grad_bench.py [--families minimax_m2] [--tokens 512] [--scale mid|small]
        [--torch-python PY] [--reuse bench/results/DATE-COMMIT-grad.md]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import cpuinfo  # noqa: E402  (the report's CPU line, shared by the benchmarks)
FAMILIES = ("minimax_m2", "mimo_v2_flash", "deepseek_v4", "kimi_linear")


def tokens(n: int, vocab: int) -> list[int]:
    """The forward benchmark's ids (bench_nnt's make_tokens, bench_transformers' tokens: a 32-bit
    LCG from 12345), written again here so that the nnt side never imports torch."""
    out, seed = [], 12345
    while len(out) < n:
        seed = (seed * 1664525 + 1013904223) & 0xFFFFFFFF
        out.append(1 + (seed >> 8) % (vocab - 1))
    return out


def best_of(repeats: int, fn) -> float:
    """The best of `repeats` timed calls after one warm-up."""
    fn()
    return min(_timed(fn) for _ in range(repeats))


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# ---- one mode, in a child process (argv: --child TOOL MODE DIR T REPEATS THREADS) ----

def recompute_ini(path: Path) -> str:
    """The INI of $NNT_CONFIG with [grad] mode = recompute, its folders made absolute (a copy's
    relative folders would be read from the copy's own folder)."""
    src = Path(os.environ["NNT_CONFIG"])
    lines = []
    for line in src.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() in ("dir", "transport") and value.strip() and not os.path.isabs(value.split(";")[0].strip()):
            line = f"{key.strip()} = {src.parent / value.split(';')[0].strip()}"
        lines.append(line)
    path.write_text("\n".join(lines) + "\n[grad]\nmode = recompute\n")
    return str(path)


def child_nnt(mode: str, d: str, n: int, repeats: int) -> dict:
    sys.path.insert(0, str(ROOT / "python"))
    import tempfile

    import nnt

    config = recompute_ini(Path(tempfile.mkdtemp()) / "recompute.ini") if mode == "recompute" else None
    m = nnt.Model(d, config=config)
    ids = [tokens(n, m.vocab_size)]
    if mode == "forward":
        run = lambda: m.trace(ids, save=["logits[:, -1]"])
    else:
        run = lambda: m.trace(ids, grad=["layers.*.layer_output"], metric="loss")
    return {"seconds": best_of(repeats, run), "peak_rss": peak_rss()}


def child_torch(mode: str, d: str, n: int, repeats: int, threads: int) -> dict:
    import torch

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    ids = torch.tensor([tokens(n, model.config.vocab_size)], dtype=torch.long)
    emb = model.get_input_embeddings()

    def forward():
        with torch.no_grad():
            model(input_ids=ids)

    # the token embeddings made to require a gradient as the embedding hands them on (a hook, so
    # that the model still sees input_ids: DeepSeek-V4's hash routing reads them)
    emb.register_forward_hook(lambda module, args, out: out.requires_grad_(torch.is_grad_enabled()))

    def backward():
        out = model(input_ids=ids, labels=ids, output_hidden_states=True)
        for h in out.hidden_states[1:]:
            h.retain_grad()
        out.loss.backward()

    fn = forward if mode == "forward" else backward
    return {"seconds": best_of(repeats, fn), "peak_rss": peak_rss(), "torch": torch.__version__}


def child(argv: list[str]) -> int:
    tool, mode, d, n, repeats, threads = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4]), int(argv[5])
    r = child_nnt(mode, d, n, repeats) if tool == "nnt" else child_torch(mode, d, n, repeats, threads)
    print(json.dumps(r))
    return 0


# ---- the driver ----

def cpu() -> tuple[str, str]:
    """The processor's name (with family and model numbers) and its kernel-relevant flags (bench/cpuinfo.py)."""
    return cpuinfo.describe()


def run_child(tool: str, mode: str, d: Path, args, env: dict) -> dict:
    py = args.torch_python if tool == "torch" else sys.executable
    cmd = [py, __file__, "--child", tool, mode, str(d), str(args.tokens), str(args.repeats), str(args.threads)]
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    if res.returncode != 0:
        sys.stderr.write(res.stderr[-3000:])
        raise RuntimeError(f"{tool} {mode} failed ({res.returncode})")
    return json.loads(res.stdout.strip().splitlines()[-1])


def measure(fam: str, args, env: dict, reused: dict) -> dict:
    base = args.models / f"{fam}-{args.scale}"
    r = dict(reused.get(fam, {"family": fam}))
    modes = (("nnt", "forward"), ("nnt", "backward"), ("nnt", "recompute"), ("torch", "forward"), ("torch", "backward"))
    if all(f"{tool}_{mode}" in r for tool, mode in modes):
        return r
    if not (base / "release" / "config.json").exists():
        subprocess.run([args.torch_python, str(ROOT / "bench" / "make_models.py"), fam, str(base), "--scale", args.scale,
                        "--layout", "release"], check=True, timeout=args.timeout)
    for tool, mode in modes:
        if f"{tool}_{mode}" not in r:
            r[f"{tool}_{mode}"] = run_child(tool, mode, base / ("release" if tool == "nnt" else "fp32"), args, env)
    return r


def reuse(report: Path | None, args) -> dict:
    """The measurements of an earlier report of the same tokens and scale, by family (a rerun then
    measures only what it lacks); {} without one."""
    if report is None:
        return {}
    text = report.read_text()
    if f"scale {args.scale}; {args.tokens} tokens;" not in text:
        raise SystemExit(f"{report}: not a report of scale {args.scale} and {args.tokens} tokens")
    raw = text.split("```json\n", 1)[1].split("\n```", 1)[0]
    return {r["family"]: r for r in json.loads(raw)}


def table(results: list[dict], n: int) -> str:
    lines = [f"| family | forward+backward {n} tokens: nnt s / torch s | torch / nnt (target >= 1.5x) | "
             "nnt backward / forward (target <= 2.5x) | torch's own | nnt peak RSS, gradient / forward run "
             "(target <= 1.5x + gradients) | recomputed: s, peak RSS / forward's | torch's peak RSS ratio |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        nf, nb, nr = r["nnt_forward"], r["nnt_backward"], r["nnt_recompute"]
        tf, tb = r["torch_forward"], r["torch_backward"]
        n_ratio = (nb["seconds"] - nf["seconds"]) / nf["seconds"]
        t_ratio = (tb["seconds"] - tf["seconds"]) / tf["seconds"]
        lines.append(f"| {r['family']} | {nb['seconds']:.2f} / {tb['seconds']:.2f} | {tb['seconds'] / nb['seconds']:.2f}x | "
                     f"{n_ratio:.2f}x | {t_ratio:.2f}x | {nb['peak_rss'] / nf['peak_rss']:.2f} "
                     f"({nb['peak_rss'] / 2**30:.2f} / {nf['peak_rss'] / 2**30:.2f} GiB) | "
                     f"{nr['seconds']:.2f} s, {nr['peak_rss'] / nf['peak_rss']:.2f} | "
                     f"{tb['peak_rss'] / tf['peak_rss']:.2f} |")
    return "\n".join(lines)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(sys.argv[2:])
    ap = argparse.ArgumentParser()
    ap.add_argument("--families", default="minimax_m2")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--scale", choices=("mid", "small"), default="mid")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--models", type=Path, default=ROOT / "bench" / "models")
    ap.add_argument("--torch-python", default=sys.executable, help="a Python with torch and transformers")
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--reuse", type=Path, help="an earlier report (bench/results/...-grad.md) whose measurements "
                    "are kept: only what it lacks is measured")
    args = ap.parse_args()
    reused = reuse(args.reuse, args)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), NNT_LIBRARY=str(ROOT / "build" / "libnnt.so"))
    env.setdefault("NNT_CONFIG", str(ROOT / "build" / "nnt.ini"))
    model, flags = cpu()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    out = ROOT / "bench" / "results" / f"{datetime.date.today()}-{commit}-grad.md"
    results = []
    for fam in args.families.split(","):
        results.append(measure(fam, args, env, reused))
        # written after every family, so that a failure later keeps what was measured (--reuse)
        report = (f"# Gradient benchmark, {datetime.date.today()}, commit {commit}\n\n"
                  f"CPU: {model}; flags: {flags}; {os.cpu_count()} logical CPUs; {args.threads} threads; "
                  f"scale {args.scale}; {args.tokens} tokens; best of {args.repeats} after a warm-up.\n\n"
                  + table(results, args.tokens) + "\n\nRaw measurements:\n\n```json\n"
                  + json.dumps(results, indent=1) + "\n```\n")
        out.write_text(report)
        print(f"wrote {out} ({len(results)} families)", file=sys.stderr, flush=True)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
