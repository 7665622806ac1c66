#!/usr/bin/env python3
"""dist_bench.py - what the pipeline hand-off costs: one process against `mpirun -np 2` on the
same checkpoint, per decoded token and per prefill, with the same cpu threads per rank.

    python3 bench/dist_bench.py [--build build] [--model DIR]... [--family F]... [--out FILE]

Without --model or --family it writes a MiniMax-M2 checkpoint of the CPU benchmark's mid size
(make_models.py --scale mid: hidden 3072, 48 query / 8 key-value heads of 128, 32 experts of width
1536, top-8, 4 blocks, vocabulary 32768) in BF16 with random weights (numpy; throughput does not
depend on the values), about 4.4 GB, into bench/models/dist-minimax-m2 (kept for the next run).
--family F (minimax_m2, mimo_v2_flash, kimi_linear, deepseek_v4; repeatable) measures that
family's mid-size checkpoint in its release's layout and encoding - the one the release benchmark
measures, bench/models/F-mid-release/release, written by make_models.py --layout release when
absent (that needs the pinned torch and transformers; it is kept). --model DIR measures any
checkpoint folder.

Timing, from the wall clock of whole commands (best of --repeats, the two sides in turn, after a
warm-up run so the checkpoint sits in the page cache): a decoded token is (generate of 1 + N new tokens - generate
of 1 new token) / N after the same prompt, so loading, start-up and the prompt cancel out; a
prefill is trace of --prefill tokens - trace of 1 token. Both sides run `threads` cpu threads per
rank (the INI's [backend.cpu] threads): the ranks of a pipeline compute one after the other, so
1 process and 2 ranks do the same arithmetic and differ by the hand-off (and by each rank's
caches and memory). Prints a Markdown report with the CPU model and flags, and each checkpoint's
bytes by encoding (from its safetensors headers)."""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import cpuinfo  # noqa: E402  (the report's CPU line, shared by the benchmarks)


def write_minimax(folder: Path) -> int:
    """The mid-size MiniMax-M2 checkpoint in BF16 (tests/dist_test.py writes it); returns its bytes."""
    sys.path.insert(0, str(ROOT / "tests"))
    from dist_test import write_checkpoint
    return write_checkpoint(str(folder), layers=4, hidden=3072, inter=1536, experts=32, vocab=32768, heads=48, kv=8,
                            head_dim=128, top_k=8, dtype="BF16")


def encodings(folder: Path) -> tuple[int, str]:
    """The checkpoint's tensor bytes and their split by dtype, from the safetensors headers."""
    by: dict[str, int] = {}
    for f in sorted(folder.glob("*.safetensors")):
        with open(f, "rb") as fh:
            header = json.loads(fh.read(int.from_bytes(fh.read(8), "little")))
        for name, e in header.items():
            if name != "__metadata__":
                by[e["dtype"]] = by.get(e["dtype"], 0) + e["data_offsets"][1] - e["data_offsets"][0]
    total = sum(by.values())
    split = ", ".join(f"{k} {100 * v / total:.0f}%" if 100 * v >= 0.5 * total else f"{k} <1%"
                      for k, v in sorted(by.items(), key=lambda kv: -kv[1]) if v)
    return total, split


def release_model(family: str) -> Path:
    """bench/models/FAMILY-mid-release/release, written by make_models.py when absent."""
    d = ROOT / "bench" / "models" / f"{family}-mid-release"
    if not (d / "release" / "model.safetensors.index.json").exists():
        print(f"writing {d} (make_models.py --layout release) ...", flush=True)
        r = subprocess.run([sys.executable, str(ROOT / "bench" / "make_models.py"), family, str(d), "--scale", "mid",
                            "--layout", "release"])
        if r.returncode != 0:
            sys.exit(f"dist_bench: make_models.py {family} failed (exit {r.returncode})")
    return d / "release"


def cpu() -> str:
    name, flags = cpuinfo.describe()
    return f"{name} ({os.cpu_count()} cores; {flags})"


def timed(cmd, env) -> float:
    start = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    took = time.perf_counter() - start
    if r.returncode != 0:
        sys.exit(f"dist_bench: {' '.join(cmd[:6])} ...: exit {r.returncode}: {r.stderr[-600:]}")
    return took


def measure(model: Path, nnt: str, ini: Path, env: dict, a) -> tuple[float, float, float, float]:
    """(ms per decoded token, s per prefill) for 1 process and for 2 ranks, in that order."""
    mpirun = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "2"]
    prompt = ",".join(str(1 + i % 1000) for i in range(a.prompt))
    long = ",".join(str(1 + i % 1000) for i in range(a.prefill))
    runs = {}
    for name, launch in (("1 process", []), ("2 ranks", mpirun)):
        base = [*launch, nnt]
        gen = lambda n, base=base: [*base, "generate", "--config", str(ini), "--model", str(model), "--tokens",
                                    prompt, "--max-new-tokens", str(n), "--ignore-eos"]
        trace = lambda ids, base=base: [*base, "trace", "--config", str(ini), "--model", str(model), "--tokens", ids]
        runs[name] = [gen(1), gen(1 + a.decode), trace("1"), trace(long)]
    # warm-up, then the two sides in turn at every repeat, so a slow spell of the machine falls on both
    for cmds in runs.values():
        for c in cmds:
            timed(c, env)
    times = {name: [[] for _ in cmds] for name, cmds in runs.items()}
    for _ in range(a.repeats):
        for name, cmds in runs.items():
            for i, c in enumerate(cmds):
                times[name][i].append(timed(c, env))
    out = []
    for name in runs:
        g1, gn, t1, tn = (min(t) for t in times[name])
        out += [1000 * (gn - g1) / a.decode, tn - t1]
        print(f"{model}: {name}: {out[-2]:.1f} ms per decoded token, {out[-1]:.2f} s per prefill of {a.prefill}",
              flush=True)
    return out[0], out[1], out[2], out[3]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", type=Path, default=ROOT / "build")
    ap.add_argument("--model", type=Path, action="append", default=[])
    ap.add_argument("--family", action="append", default=[],
                    choices=("minimax_m2", "mimo_v2_flash", "kimi_linear", "deepseek_v4"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    build = a.build.resolve()
    nnt = str(build / "nnt")
    models = [m.resolve() for m in a.model] + [release_model(f) for f in a.family]
    if not models:
        model = ROOT / "bench" / "models" / "dist-minimax-m2"
        if not (model / "model.safetensors").exists():
            print(f"writing {model} ...", flush=True)
            write_minimax(model)
        models = [model]
    tmp = Path(tempfile.mkdtemp(prefix="nnt-dist-bench-"))
    ini = (build / "nnt.ini").read_text()
    for key in ("dir = families", "dir = kernels", "transport = transports"):
        ini = ini.replace(key, key.replace("= ", f"= {build}/"))
    ini = ini.replace("threads = 2", f"threads = {a.threads}")
    (tmp / "nnt.ini").write_text(ini)
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    args = " ".join([f"--threads {a.threads}", f"--repeats {a.repeats}"] + [f"--family {f}" for f in a.family] +
                    [f"--model {m}" for m in a.model])
    lines = [f"# Pipeline hand-off: 1 process against 2 ranks ({time.strftime('%Y-%m-%d')}, {head.stdout.strip()})", "",
             f"CPU: {cpu()}", f"{a.threads} cpu thread(s) per rank; prompt {a.prompt} tokens, {a.decode} decoded, "
             f"prefill {a.prefill}; best of {a.repeats}.", f"Command: `python3 bench/dist_bench.py {args}`", "",
             "| checkpoint | GB | encodings (bytes) | ms per decoded token, 1 process / 2 ranks | decode hand-off "
             "(target < 5%) | s per prefill, 1 process / 2 ranks | prefill hand-off |", "|---|---|---|---|---|---|---|"]
    for model in models:
        nbytes, split = encodings(model)
        d1, p1, d2, p2 = measure(model, nnt, tmp / "nnt.ini", env, a)
        name = f"{model.parent.name}/{model.name}"
        lines.append(f"| {name} | {nbytes / 1e9:.2f} | {split} | {d1:.1f} / {d2:.1f} | {100 * (d2 / d1 - 1):+.1f}% | "
                     f"{p1:.2f} / {p2:.2f} | {100 * (p2 / p1 - 1):+.1f}% |")
    report = "\n".join(lines) + "\n"
    print(report)
    if a.out:
        a.out.write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
