"""llama_peer.py - llama.cpp beside nnt on the mid-size checkpoints, in one run on this machine.

llama.cpp is the tree vendored in the llama-cpp-python source distribution on PyPI (version
LLAMA_CPP_PYTHON below): downloaded with pip into bench/peers/.cache/, built there with CMake
(llama-bench, libllama and bench/peers/llama_logits.c, native instructions). For each family:

  convert  llama.cpp's convert_hf_to_gguf.py on the release/ folder nnt reads (the release's
           names and config spelling; the converter dequantises FP8 with its 128x128 scales to
           float32 itself), to GGUF BF16 and Q8_0 (so Q8_0 re-quantises the FP8 values in blocks of
           32, and BF16 rounds them). The benchmark's checkpoints
           carry no tokenizer, so the folder given to the converter links the weights and adds a
           byte-level tokenizer of the config's vocabulary size (256 byte tokens, one merge, the
           rest unused names), and the converter's pre-tokenizer check is told "gpt-2": neither changes a
           weight or a logit, since both sides are handed token ids.
  check    the last position's logits of 64 ids (grad_bench's tokens) in llama.cpp (llama_logits)
           against transformers in float32 on fp32/ (the same weights): the largest difference
           over the largest magnitude, and whether the top 5 agree. A peer that computes another
           function is no fair peer, so the report prints this beside its speed.
  bench    --rounds rounds (default 5), each running once, one after the other with the same
           threads: build/bench_nnt (prefill 512; decode 32 after a 1-token prompt, as
           llama-bench generates from an empty context) on the release/ checkpoint with
           precision f32 and with precision bf16, and llama-bench (prompt 512, 32 generated
           tokens) on each GGUF; the order turns by one each round. On a shared virtual machine
           the memory read rate moves by 1.5x within minutes, so engines run far apart in time
           would be compared on different machines: the report gives each ratio as the median of
           the ratios within a round.

A family whose architecture this llama.cpp cannot convert or load is reported as such. Targets
(issue 31): decode >= 1.2x llama.cpp on the same bytes (FP8 against Q8_0, BF16 against BF16),
prefill 512 >= 1.5x llama.cpp. A family whose release is BF16 (Kimi-Linear) is also run by nnt with
`weights = fp8` (re-encoded at load: the bytes Q8_0 reads, other values than the release's), with
the error `nnt info` reports. Writes bench/results/<date>-<commit>-llama.md.

    PY bench/peers/llama_peer.py [--families minimax_m2,kimi_linear] --torch-python PY

PY is a Python with torch, transformers, tokenizers and numpy (the converter and the check need
them; bench/peers/requirements.txt pins them).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from grad_bench import cpu, tokens  # noqa: E402  (the same ids and CPU line)

LLAMA_CPP_PYTHON = "0.3.36"
CACHE = HERE / ".cache"
CHECK_TOKENS = 64
FAMILIES = ("minimax_m2", "kimi_linear", "mimo_v2_flash", "deepseek_v4")


def sh(cmd, env=None, timeout=7200, cwd=None) -> str:
    print("$ " + " ".join(str(c) for c in cmd), file=sys.stderr, flush=True)
    res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd)
    if res.returncode != 0:
        raise RuntimeError(f"{Path(str(cmd[0])).name} failed ({res.returncode}): " + (res.stderr or res.stdout)[-2000:])
    return res.stdout


# ---- llama.cpp: fetched and built once ----

def fetch(py: str) -> Path:
    tree = CACHE / f"llama_cpp_python-{LLAMA_CPP_PYTHON}" / "vendor" / "llama.cpp"
    if not (tree / "CMakeLists.txt").exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        sdist = CACHE / f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
        if not sdist.exists():
            sh([py, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", f"llama-cpp-python=={LLAMA_CPP_PYTHON}",
                "-d", CACHE])
        with tarfile.open(sdist) as tar:
            tar.extractall(CACHE, filter="data")
    return tree


def build(tree: Path, jobs: int) -> dict:
    b = CACHE / "build"
    if not (b / "CMakeCache.txt").exists():
        sh(["cmake", "-S", tree, "-B", b, "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF",
            "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF", "-DBUILD_SHARED_LIBS=ON"])
    sh(["cmake", "--build", b, "--target", "llama-bench", "llama", "-j", str(jobs)])
    libdir = next(p.parent for p in b.rglob("libllama.so"))
    logits = b / "llama_logits"
    sh(["cc", "-O2", "-o", logits, HERE / "llama_logits.c", "-I", tree / "include", "-I", tree / "ggml" / "include",
        "-L", libdir, "-lllama", f"-Wl,-rpath,{libdir}"] + [f"-Wl,-rpath,{p.parent}" for p in b.rglob("libggml*.so")])
    tool = next(p for p in b.rglob("llama-bench") if p.is_file() and os.access(p, os.X_OK))
    return {"bench": tool, "logits": logits, "tree": tree}


# ---- one family ----

def hf_folder(fam: str, src: Path) -> Path:
    """src's files linked into a folder of their own, with a byte-level tokenizer of the config's
    vocabulary (the converter reads one; the weights are untouched)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    import shutil

    d = CACHE / "hf" / fam
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    for f in src.iterdir():
        if f.name != "config.json":
            (d / f.name).symlink_to(f.resolve())
    config = json.loads((src / "config.json").read_text())
    if fam == "mimo_v2_flash" and "rope_parameters" not in config:
        # this converter's MiMo class reads the rotary fraction from rope_parameters only, where
        # the release's config.json has it at the top level: the same numbers, repeated there
        config["rope_parameters"] = {"rope_type": "default", "rope_theta": config["rope_theta"],
                                     "partial_rotary_factor": config["partial_rotary_factor"]}
    (d / "config.json").write_text(json.dumps(config, indent=1))
    vocab_size = config["vocab_size"]
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {c: i for i, c in enumerate(alphabet)}
    merge = (alphabet[0], alphabet[1])  # llama.cpp loads a BPE vocabulary with merges only: one
    vocab[merge[0] + merge[1]] = len(vocab)
    vocab.update({f"<|unused{i}|>": i for i in range(len(vocab), vocab_size)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[merge]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    return d


CONVERT = """
import sys
sys.path[:0] = [{tree!r}, {gguf_py!r}]
import convert_hf_to_gguf as c
from conversion import base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"  # a tokenizer of our own (above)
sys.argv = ["convert_hf_to_gguf.py", {src!r}, "--outfile", {out!r}, "--outtype", {outtype!r}] + {extra!r}
c.main()
"""


# Converter options per family: its MiMo class counts 3 multi-token-prediction blocks unless told
# there are none (the benchmark's checkpoints, like transformers' model, have none).
CONVERT_ARGS = {"mimo_v2_flash": ["--no-mtp"]}


def convert(tools: dict, fam: str, src: Path, outtype: str, py: str) -> Path:
    out = CACHE / "gguf" / f"{fam}-{outtype}.gguf"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        code = CONVERT.format(tree=str(tools["tree"]), gguf_py=str(tools["tree"] / "gguf-py"), src=str(src),
                              out=str(out), outtype=outtype, extra=CONVERT_ARGS.get(fam, []))
        sh([py, "-c", code])
    return out


def check(tools: dict, fam: str, gguf: Path, models: Path, py: str, threads: int) -> dict:
    import numpy as np

    vocab = json.loads((models / f"{fam}-mid" / "fp32" / "config.json").read_text())["vocab_size"]
    ids = tokens(CHECK_TOKENS, vocab)
    got = CACHE / f"{gguf.stem}.logits.f32"
    sh([tools["logits"], gguf, threads, got] + ids)
    ref = CACHE / f"{fam}-torch-{CHECK_TOKENS}.npy"
    if not ref.exists():
        sh([py, ROOT / "bench" / "long_bench.py", "--child", "torch-fp32", models / f"{fam}-mid" / "fp32", CHECK_TOKENS,
            threads, ref])
    x, y = np.fromfile(got, dtype=np.float32), np.load(ref)
    if x.shape != y.shape:
        return {"error": f"llama.cpp gave {x.shape[0]} logits, transformers {y.shape[0]}"}
    top = lambda v: [int(i) for i in np.argsort(-v, kind="stable")[:5]]
    return {"max_rel": float(np.abs(x - y).max() / np.abs(y).max()), "top5_same": top(x) == top(y)}


def llama_bench(tools: dict, gguf: Path, threads: int) -> dict:
    """One llama-bench repetition: prompt 512 and 32 generated tokens, tokens/s."""
    out = json.loads(sh([tools["bench"], "-m", gguf, "-t", threads, "-p", 512, "-n", 32, "-r", 1, "-o", "json"]))
    rate = {}
    for r in out:
        rate["prefill_512" if r.get("n_prompt") == 512 else "decode_32"] = r["avg_ts"]
    return rate


def nnt_bench(config: Path, ckpt: Path, threads: int) -> dict:
    """One bench_nnt run (a warm-up, then prefill 512 and decode 32 once), tokens/s, and the
    memory read rate it measured in the same run. Decoding follows a 1-token prompt, as
    llama-bench's generation starts from an empty context (bench_nnt's default prompt would be
    the prefill length)."""
    out = json.loads(sh([ROOT / "build" / "bench_nnt", "--config", config, "--model", ckpt, "--prefill", 512,
                         "--decode", 32, "--decode-prompt", 1, "--repeats", 1, "--tracing", 0,
                         "--threads", threads],
                        env=dict(os.environ, OMP_NUM_THREADS=str(threads))))
    return {"prefill_512": out["prefill"]["512"]["tokens_per_s"], "decode_32": out["decode"]["tokens_per_s"],
            "read_gbs": out["read_gbs"]}


# Families whose release stores its weights in BF16: nnt also runs them with `weights = fp8`
# (the linear and expert weights re-encoded at load, 128x128 block scales), the bytes Q8_0 reads.
BF16_RELEASES = ("kimi_linear",)


def config(fam: str, name: str, settings: list[str]) -> Path:
    """build/nnt.ini with its plugin folders made absolute and `settings` added to [family.fam]."""
    lines, done = [], False
    for line in (ROOT / "build" / "nnt.ini").read_text().splitlines():
        if line.startswith("dir = "):
            line = "dir = " + str(ROOT / "build" / line[len("dir = "):])
        lines.append(line)
        if line.strip() == f"[family.{fam}]":
            lines += settings
            done = True
    if not done:
        lines += ["", f"[family.{fam}]"] + settings
    path = CACHE / f"{name}-{fam}.ini"
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def median(v: list[float]) -> float:
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])


def measure(fam: str, tools: dict, args) -> dict:
    """Every engine of one family once per round, the order turned by one each round, so that the
    machine's changes of speed (a shared virtual machine's read rate moves by 1.5x within minutes)
    fall on all of them alike; ratios are taken within a round, then their median."""
    ckpt = args.models / f"{fam}-mid" / "release"
    r = {"family": fam, "rounds": args.rounds}
    runs = {"nnt": lambda: nnt_bench(config(fam, "stored", []), ckpt, args.threads),
            "nnt_bf16": lambda: nnt_bench(config(fam, "bf16", ["precision = bf16"]), ckpt, args.threads)}
    if fam in BF16_RELEASES:
        ini = config(fam, "fp8", ["weights = fp8"])
        runs["nnt_fp8"] = lambda: nnt_bench(ini, ckpt, args.threads)
        info = sh([ROOT / "build" / "nnt", "info", "--config", ini, "--model", ckpt])
        r["fp8_info"] = [l.strip() for l in info.splitlines() if "re-encoded" in l or "relative RMS" in l]
    ggufs = []
    for outtype in ("bf16", "q8_0"):
        try:
            g = convert(tools, fam, hf_folder(fam, ckpt), outtype, args.torch_python)
        except (RuntimeError, StopIteration) as e:
            r[outtype] = {"unsupported": str(e).splitlines()[-1][:200]}
            continue
        ggufs.append(g)
        try:
            r[f"check_{outtype}"] = check(tools, fam, g, args.models, args.torch_python, args.threads)
        except RuntimeError as e:  # the reference or llama.cpp's logits failed: said in the report
            r[f"check_{outtype}"] = {"error": str(e).splitlines()[-1][:200]}
        runs[outtype] = (lambda g=g: llama_bench(tools, g, args.threads))
    names = list(runs)
    r["per_round"] = []
    for k in range(args.rounds):
        order = names[k % len(names):] + names[:k % len(names)]
        got = {}
        for n in order:
            got[n] = runs[n]()
        r["per_round"].append(got)
    for n in names:
        r[n] = {key: median([g[n][key] for g in r["per_round"]]) for key in r["per_round"][0][n]}
    same = "bf16" if fam in BF16_RELEASES else "q8_0"  # FP8 releases against Q8_0, BF16 against BF16
    ratios = {}
    for ours in [n for n in names if n.startswith("nnt")]:
        for theirs in ("bf16", "q8_0"):
            if theirs in runs:
                for key in ("prefill_512", "decode_32"):
                    ratios[f"{ours}/{theirs} {key}"] = median(
                        [g[ours][key] / g[theirs][key] for g in r["per_round"]])
    r["ratios"], r["same_bytes"] = ratios, same
    if not args.keep:
        for g in ggufs:
            g.unlink()  # a mid-size GGUF is GBs: one family's at a time
    return r


def table(rows: list[dict]) -> str:
    lines = ["| family | prefill 512 tok/s: nnt f32 / nnt bf16 / llama.cpp BF16 / Q8_0 | nnt f32 / best llama.cpp "
             "(target >= 1.5x) | nnt bf16 / llama.cpp BF16 | decode tok/s: nnt f32 / nnt bf16 / llama.cpp BF16 / Q8_0 "
             "| nnt / llama.cpp, same bytes (target >= 1.2x): f32, bf16 | read rate GB/s | llama.cpp vs transformers "
             "fp32: BF16; Q8_0 (max rel, top-5) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        q = r["ratios"]
        rate = lambda n, k: f"{r[n][k]:.1f}" if n in r and k in r[n] else "unsupported"
        ratio = lambda key: f"{q[key]:.2f}x" if key in q else "-"
        best = max((n for n in ("bf16", "q8_0") if "prefill_512" in r.get(n, {})),
                   key=lambda n: r[n]["prefill_512"], default=None)
        chk = lambda n: (f"{r['check_' + n]['max_rel']:.2e}, {'same' if r['check_' + n]['top5_same'] else 'differ'}"
                         if "max_rel" in r.get("check_" + n, {})
                         else (r.get("check_" + n, {}).get("error") or r.get(n, {}).get("unsupported", "?"))[:60])
        s = r["same_bytes"]
        lines.append(
            f"| {r['family']} | {rate('nnt', 'prefill_512')} / {rate('nnt_bf16', 'prefill_512')} / "
            f"{rate('bf16', 'prefill_512')} / {rate('q8_0', 'prefill_512')} | "
            + (ratio(f"nnt/{best} prefill_512") if best else "-") + f" | {ratio('nnt_bf16/bf16 prefill_512')} | "
            f"{rate('nnt', 'decode_32')} / {rate('nnt_bf16', 'decode_32')} / {rate('bf16', 'decode_32')} / "
            f"{rate('q8_0', 'decode_32')} | {ratio(f'nnt/{s} decode_32')}, {ratio(f'nnt_bf16/{s} decode_32')} "
            f"(vs {'BF16' if s == 'bf16' else 'Q8_0'}) | {r['nnt']['read_gbs']:.1f} | {chk('bf16')}; {chk('q8_0')} |")
    fp8 = [r for r in rows if "nnt_fp8" in r]
    if fp8:
        lines += ["", "BF16 releases re-encoded at load (`weights = fp8`: not the release's values; the error is "
                  "`nnt info`'s):", "",
                  "| family | nnt decode BF16 / FP8 tok/s | llama.cpp Q8_0 | nnt FP8 / llama.cpp Q8_0 | "
                  "nnt prefill 512 BF16 / FP8 | re-encoding error |", "|---|---|---|---|---|---|"]
        for r in fp8:
            n, f, q = r["nnt"], r["nnt_fp8"], r.get("q8_0", {})
            err = next((l for l in r["fp8_info"] if "relative RMS" in l), "?")
            lines.append(f"| {r['family']} | {n['decode_32']:.1f} / {f['decode_32']:.1f} | "
                         + (f"{q['decode_32']:.1f} | {r['ratios']['nnt_fp8/q8_0 decode_32']:.2f}x" if "decode_32" in q
                            else "unsupported | -")
                         + f" | {n['prefill_512']:.1f} / {f['prefill_512']:.1f} | {err} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", type=Path, default=ROOT / "bench" / "models")
    ap.add_argument("--torch-python", default=sys.executable, help="a Python with torch and transformers")
    ap.add_argument("--keep", action="store_true", help="keep the GGUF files (bench/peers/.cache/gguf/)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of every engine, interleaved (median reported)")
    args = ap.parse_args()
    tools = build(fetch(args.torch_python), args.threads)
    model, flags = cpu()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    families = args.families.split(",")
    subset = "" if set(families) == set(FAMILIES) else "-" + "-".join(families)
    out = ROOT / "bench" / "results" / f"{datetime.date.today()}-{commit}-llama{subset}.md"
    rows = []
    for fam in families:
        rows.append(measure(fam, tools, args))
        report = (f"# nnt beside llama.cpp, {datetime.date.today()}, commit {commit}\n\n"
                  f"CPU: {model}; flags: {flags}; {args.threads} threads; llama.cpp from llama-cpp-python "
                  f"{LLAMA_CPP_PYTHON} (its vendored tree, GGML_NATIVE); mid-size checkpoints (make_models.py): "
                  "nnt on release/ in its stored encoding, llama.cpp on GGUF converted from the same release/ "
                  "(FP8 dequantised by the converter, then BF16 or Q8_0); "
                  f"{args.rounds} rounds, each running bench_nnt (precision f32, and bf16) and llama-bench (BF16, "
                  "Q8_0) once, one after the other in an order turned each round; rates are medians over rounds, "
                  "ratios the median of each round's ratio. The read rate is bench_nnt's (a plain sum, "
                  "both threads).\n\n"
                  + table(rows) + "\n\nRaw measurements:\n\n```json\n" + json.dumps(rows, indent=1) + "\n```\n")
        out.write_text(report)
        print(f"wrote {out} ({len(rows)} families)", file=sys.stderr, flush=True)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
