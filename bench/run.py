"""run.py - the CPU benchmark of nnt against transformers, in one run on this machine.

For each family: writes the mid-size checkpoints (make_models.py, fp32 and bf16) unless they
exist, runs transformers' eager forward (bench_transformers.py) and nnt (build/bench_nnt) on each
in separate processes with the same threads, prompts and dtype, and prints the ratios against the
targets of the benchmark: prefill and decode >= 2x transformers, tracing with no requests within
1% of no trace, every value of one block saved within 10%, prefill's matrix products at >= 60% of
the sgemm rate (the faster of OpenBLAS and oneDNN, measured in the same run), peak memory <= 1.2x
the weights (plus caches).
Writes the report, with the commit and the raw measurements, to bench/results/.

    python bench/run.py [--families a,b] [--dtypes fp32,bf16] [--scale mid|small] [--keep]

--layout release measures the checkpoints as the releases ship them instead (bench/run_release.py:
MiniMax-M2 and MiMo-V2-Flash FP8, DeepSeek-V4 FP8 with FP4 experts, Kimi-Linear BF16), nnt in
precision f32 and bf16 on the instruction set it picks and, on an AVX-512 CPU, again on AVX2,
against transformers on the same weights dequantised, and checks the targets of that benchmark;
its report is bench/results/<date>-<commit>-release.md.

The checkpoints go to bench/models/ (git-ignored) and are deleted after each family unless --keep.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import cpuinfo  # bench/cpuinfo.py: the CPU line

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = ("minimax_m2", "mimo_v2_flash", "kimi_linear", "deepseek_v4")


def sh(cmd: list[str], env: dict | None = None) -> str:
    print("$ " + " ".join(str(c) for c in cmd), file=sys.stderr, flush=True)
    res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, timeout=3600)
    if res.returncode != 0:
        sys.stderr.write(res.stderr[-4000:])
        raise RuntimeError(f"{cmd[0]} failed with status {res.returncode}")
    return res.stdout


def checkpoint_bytes(d: Path) -> int:
    return sum(f.stat().st_size for f in d.glob("*.safetensors"))


def decode_bytes(d: Path) -> float:
    """Weight bytes one decoding step reads: every tensor once, except the embedding (one row)
    and the routed experts (top_k of n_experts of them)."""
    cfg = json.loads((d / "config.json").read_text())
    n_exp = next((cfg[k] for k in ("n_routed_experts", "num_local_experts", "num_experts") if cfg.get(k)), 1)
    top_k = next((cfg[k] for k in ("num_experts_per_tok", "num_experts_per_token") if cfg.get(k)), n_exp)
    total = 0.0
    for f in d.glob("*.safetensors"):
        with open(f, "rb") as fh:
            header = json.loads(fh.read(int.from_bytes(fh.read(8), "little")))
        for name, e in header.items():
            if name == "__metadata__":
                continue
            size = e["data_offsets"][1] - e["data_offsets"][0]
            if "embed" in name:
                continue
            if ".experts." in name and "shared" not in name:
                size *= top_k / n_exp
            total += size
    return total


def machine() -> str:
    name, _ = cpuinfo.read()
    return f"{name}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def commit() -> str:
    try:
        rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return rev + ("+uncommitted changes" if dirty else "")
    except OSError:
        return "unknown"


def measure(fam: str, dt: str, ckpt: Path, args, ini: Path, env: dict, lengths: list[int]) -> tuple[dict, dict]:
    """One family and dtype: transformers, then nnt, each in its own process; the table row and
    the raw measurements."""
    hf = json.loads(sh([sys.executable, ROOT / "bench" / "bench_transformers.py", "--model", ckpt, "--dtype", dt,
                        "--prefill", args.prefill, "--decode", args.decode, "--repeats", args.repeats,
                        "--threads", args.threads], env))
    nn = json.loads(sh([args.build / "bench_nnt", "--config", ini, "--model", ckpt, "--prefill", args.prefill,
                        "--decode", args.decode, "--repeats", args.repeats, "--threads", args.threads], env))
    r = {"family": fam, "dtype": dt, "weights_mib": checkpoint_bytes(ckpt) / 2**20}
    for T in lengths:
        r[f"prefill{T}_nnt"] = nn["prefill"][str(T)]["tokens_per_s"]
        r[f"prefill{T}_hf"] = hf["prefill"][str(T)]["tokens_per_s"]
    r["decode_nnt"] = nn["decode"]["tokens_per_s"]
    r["decode_hf"] = hf["decode"]["tokens_per_s"]
    tr = nn["tracing"]
    r["empty_trace"] = tr["empty_trace_s"] / tr["no_trace_s"] - 1
    r["block_saved"] = tr["block_saved_s"] / tr["no_trace_s"] - 1
    T = lengths[-1]
    r["matmul_gflops"] = hf["prefill_matmul_flops"][str(T)] / nn["prefill"][str(T)]["seconds"] / 1e9
    r["sgemm_gflops"] = nn["sgemm_gflops"]
    # ceilings on this machine: prefill if every FLOP ran at the sgemm rate, decode if the step's
    # weights streamed at the measured read rate
    r["prefill_ceiling"] = nn["sgemm_gflops"] * 1e9 * T / hf["prefill_matmul_flops"][str(T)]
    r["decode_ceiling"] = nn["read_gbs"] * 1e9 / decode_bytes(ckpt)
    r["rss_nnt_mib"], r["rss_hf_mib"] = nn["peak_rss_mib"], hf["peak_rss_mib"]
    return r, {"family": fam, "dtype": dt, "nnt": nn, "transformers": hf}


def main() -> int:
    layout = argparse.ArgumentParser(add_help=False)
    layout.add_argument("--layout", choices=("hf", "release"), default="hf")
    if layout.parse_known_args()[0].layout == "release":
        import run_release  # bench/run_release.py, next to this file

        return run_release.main()
    ap = argparse.ArgumentParser()
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--scale", choices=("mid", "small"), default="mid")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prefill", default="128,512")
    ap.add_argument("--decode", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--build", type=Path, default=ROOT / "build")
    ap.add_argument("--models", type=Path, default=ROOT / "bench" / "models")
    ap.add_argument("--keep", action="store_true", help="keep the checkpoints")
    ap.add_argument("--layout", choices=("hf", "release"), default="hf",
                    help="release: the release layouts' benchmark (bench/run_release.py, its own options)")
    args = ap.parse_args()

    bench_nnt = args.build / "bench_nnt"  # measure() runs it
    if not bench_nnt.exists():
        sys.exit(f"run.py: {bench_nnt} is missing: build the project first (cmake --build {args.build})")
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS=str(args.threads))
    # nnt's own INI with the same thread count as torch
    ini = args.build / "bench.ini"
    base = (args.build / "nnt.ini").read_text()
    ini.write_text(base.replace("threads = 2", f"threads = {args.threads}"))

    lengths = [int(x) for x in args.prefill.split(",")]
    rows, raw = [], []
    failures = []
    for fam in args.families.split(","):
        fam_dir = args.models / f"{fam}-{args.scale}"
        try:
            if not (fam_dir / "bf16").exists():
                sh([sys.executable, ROOT / "bench" / "make_models.py", fam, fam_dir, "--scale", args.scale], env)
            for dt in args.dtypes.split(","):
                rows_raw = measure(fam, dt, fam_dir / dt, args, ini, env, lengths)
                rows.append(rows_raw[0])
                raw.append(rows_raw[1])
                print(json.dumps(rows_raw[0]), file=sys.stderr, flush=True)
        except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError, KeyError) as e:
            failures.append(f"{fam}: {e}")
            print(f"run.py: {fam} failed: {e}", file=sys.stderr, flush=True)
        if not args.keep:
            shutil.rmtree(fam_dir, ignore_errors=True)

    T0, T1 = lengths[0], lengths[-1]
    head = (f"| family | dtype | prefill {T0} nnt/hf | prefill {T1} nnt/hf | decode nnt/hf | empty trace | "
            f"one block saved | matmul / sgemm | peak RSS / weights (hf) |")
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        p0 = r[f"prefill{T0}_nnt"] / r[f"prefill{T0}_hf"]
        p1 = r[f"prefill{T1}_nnt"] / r[f"prefill{T1}_hf"]
        lines.append(
            f"| {r['family']} | {r['dtype']} | {p0:.2f}x ({r[f'prefill{T0}_nnt']:.0f} vs {r[f'prefill{T0}_hf']:.0f} tok/s) "
            f"| {p1:.2f}x ({r[f'prefill{T1}_nnt']:.0f} vs {r[f'prefill{T1}_hf']:.0f}) "
            f"| {r['decode_nnt'] / r['decode_hf']:.2f}x ({r['decode_nnt']:.1f} vs {r['decode_hf']:.1f}) "
            f"| {100 * r['empty_trace']:+.1f}% | {100 * r['block_saved']:+.1f}% "
            f"| {r['matmul_gflops'] / r['sgemm_gflops']:.0%} ({r['matmul_gflops']:.0f} of {r['sgemm_gflops']:.0f} GFLOP/s) "
            f"| {r['rss_nnt_mib'] / r['weights_mib']:.2f} ({r['rss_hf_mib'] / r['weights_mib']:.2f}) |")
    lines += ["", f"| family | dtype | prefill {T1} tok/s: nnt / hf / sgemm ceiling | decode tok/s: nnt / hf / "
              f"bandwidth ceiling | 2x hf within the ceiling? (prefill, decode) |", "|---|---|---|---|---|"]
    for r in rows:
        p2 = "yes" if 2 * r[f"prefill{T1}_hf"] <= r["prefill_ceiling"] else "no"
        d2 = "yes" if 2 * r["decode_hf"] <= r["decode_ceiling"] else "no"
        lines.append(f"| {r['family']} | {r['dtype']} | {r[f'prefill{T1}_nnt']:.0f} / {r[f'prefill{T1}_hf']:.0f} / "
                     f"{r['prefill_ceiling']:.0f} | {r['decode_nnt']:.1f} / {r['decode_hf']:.1f} / {r['decode_ceiling']:.1f} "
                     f"| {p2}, {d2} |")
    table = "\n".join(lines)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    hf0 = raw[0]["transformers"] if raw else {}
    report = (f"# nnt vs transformers, CPU\n\n- commit: {commit()}\n- date: {stamp}\n- machine: {machine()}\n"
              f"- threads: {args.threads} (torch.set_num_threads and nnt's INI)\n"
              f"- transformers {hf0.get('transformers', '?')}, torch {hf0.get('torch', '?')}, eager attention\n"
              f"- checkpoints: bench/make_models.py --scale {args.scale} (4 blocks, 32 experts - 16 on DeepSeek-V4 -, "
              f"vocabulary 32768, the released widths)\n- prompts: {args.prefill} tokens; decode: {args.decode} tokens after a "
              f"{T0}-token prompt; best of {args.repeats}\n"
              f"- matmul / sgemm: the matrix-product FLOPs of a {T1}-token prefill (torch's FlopCounterMode on the "
              f"transformers forward) over nnt's whole prefill time, against the faster sgemm of OpenBLAS and oneDNN (bench_nnt's "
              f"sgemm_library) on [512, hidden] x [hidden, hidden] in the same process\n- tracing: prefill of {T0} tokens with an empty trace, and with "
              f"every value of one block saved, against no trace\n- ceilings: prefill at the sgemm rate for every "
              f"counted FLOP (bf16 products on AVX512-BF16 hardware can exceed it); decode streaming each step's "
              f"weights (all but the embedding, top_k / n_experts of the routed experts) at the measured read "
              f"rate\n\n{table}\n\n## Raw measurements\n\n```json\n"
              f"{json.dumps(raw, indent=1)}\n```\n")
    if failures:
        table += "\n\nNot measured: " + "; ".join(failures)
        report += "\nNot measured: " + "; ".join(failures) + "\n"
    print(table)
    out_dir = ROOT / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{datetime.date.today().isoformat()}-{commit().split('+')[0]}-{args.scale}.md"
    out.write_text(report)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
