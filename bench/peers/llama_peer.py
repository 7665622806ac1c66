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
  bench    llama-bench (prompt 512, 32 generated tokens, --threads, 3 repetitions) on each GGUF,
           and build/bench_nnt (prefill 512, decode 32) on the release/ checkpoint, one after
           the other with the same threads.

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
        (d / f.name).symlink_to(f.resolve())
    vocab_size = json.loads((src / "config.json").read_text())["vocab_size"]
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
sys.argv = ["convert_hf_to_gguf.py", {src!r}, "--outfile", {out!r}, "--outtype", {outtype!r}]
c.main()
"""


def convert(tools: dict, fam: str, src: Path, outtype: str, py: str) -> Path:
    out = CACHE / "gguf" / f"{fam}-{outtype}.gguf"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        code = CONVERT.format(tree=str(tools["tree"]), gguf_py=str(tools["tree"] / "gguf-py"), src=str(src),
                              out=str(out), outtype=outtype)
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
    out = json.loads(sh([tools["bench"], "-m", gguf, "-t", threads, "-p", 512, "-n", 32, "-r", 3, "-o", "json"]))
    rate = {}
    for r in out:
        rate["prefill_512" if r.get("n_prompt") == 512 else "decode_32"] = r["avg_ts"]
    return rate


def nnt_bench(fam: str, models: Path, threads: int, config: Path = ROOT / "build" / "nnt.ini") -> dict:
    out = json.loads(sh([ROOT / "build" / "bench_nnt", "--config", config, "--model",
                         models / f"{fam}-mid" / "release", "--prefill", 512, "--decode", 32, "--repeats", 3,
                         "--threads", threads], env=dict(os.environ, OMP_NUM_THREADS=str(threads))))
    return {"prefill_512": out["prefill"]["512"]["tokens_per_s"], "decode_32": out["decode"]["tokens_per_s"]}


# Families whose release stores its weights in BF16: nnt also runs them with `weights = fp8`
# (the linear and expert weights re-encoded at load, 128x128 block scales), the bytes Q8_0 reads.
BF16_RELEASES = ("kimi_linear",)


def fp8_config(fam: str) -> Path:
    """build/nnt.ini with its plugin folders made absolute and `weights = fp8` for family fam."""
    lines, done = [], False
    for line in (ROOT / "build" / "nnt.ini").read_text().splitlines():
        if line.startswith("dir = "):
            line = "dir = " + str(ROOT / "build" / line[len("dir = "):])
        lines.append(line)
        if line.strip() == f"[family.{fam}]":
            lines.append("weights = fp8")
            done = True
    if not done:
        lines += ["", f"[family.{fam}]", "weights = fp8"]
    path = CACHE / f"fp8-{fam}.ini"
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def nnt_fp8(fam: str, models: Path, threads: int) -> dict:
    """bench_nnt with weights = fp8, and what `nnt info` says re-encoding changed."""
    ini = fp8_config(fam)
    r = nnt_bench(fam, models, threads, ini)
    info = sh([ROOT / "build" / "nnt", "info", "--config", ini, "--model", models / f"{fam}-mid" / "release"])
    r["info"] = [l.strip() for l in info.splitlines() if "re-encoded" in l or "relative RMS" in l]
    return r


def measure(fam: str, tools: dict, args) -> dict:
    r = {"family": fam}
    r["nnt"] = nnt_bench(fam, args.models, args.threads)
    if fam in BF16_RELEASES:
        r["nnt_fp8"] = nnt_fp8(fam, args.models, args.threads)
    for outtype in ("bf16", "q8_0"):
        try:
            g = convert(tools, fam, hf_folder(fam, args.models / f"{fam}-mid" / "release"), outtype, args.torch_python)
            r[outtype] = {"check": check(tools, fam, g, args.models, args.torch_python, args.threads),
                          **llama_bench(tools, g, args.threads)}
            if not args.keep:
                g.unlink()  # a mid-size GGUF is GBs: one family's at a time
        except (RuntimeError, StopIteration) as e:
            r[outtype] = {"unsupported": str(e).splitlines()[-1][:200]}
    return r


def table(rows: list[dict]) -> str:
    lines = ["| family | nnt prefill 512 tok/s | llama.cpp BF16 / Q8_0 | nnt / best llama.cpp (target >= 1.5x) | "
             "nnt decode tok/s | llama.cpp BF16 / Q8_0 | nnt / llama.cpp, same bytes (target >= 1.2x) | "
             "llama.cpp vs transformers fp32: BF16, Q8_0 (max rel, top-5) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        n, b, q = r["nnt"], r["bf16"], r["q8_0"]
        rate = lambda m, k: f"{m[k]:.1f}" if k in m else "unsupported"
        best_p = max([m["prefill_512"] for m in (b, q) if "prefill_512" in m], default=None)
        same = q if r["family"] != "kimi_linear" else b  # FP8 releases against Q8_0, BF16 against BF16
        chk = lambda m: (f"{m['check']['max_rel']:.2e}, {'same' if m['check']['top5_same'] else 'differ'}"
                         if "check" in m and "max_rel" in m["check"] else m.get("unsupported", "?")[:60])
        lines.append(f"| {r['family']} | {n['prefill_512']:.1f} | {rate(b, 'prefill_512')} / {rate(q, 'prefill_512')} | "
                     + (f"{n['prefill_512'] / best_p:.2f}x" if best_p else "-") + f" | {n['decode_32']:.1f} | "
                     f"{rate(b, 'decode_32')} / {rate(q, 'decode_32')} | "
                     + (f"{n['decode_32'] / same['decode_32']:.2f}x" if "decode_32" in same else "-")
                     + f" | {chk(b)}; {chk(q)} |")
    fp8 = [r for r in rows if "nnt_fp8" in r]
    if fp8:
        lines += ["", "BF16 releases re-encoded at load (`weights = fp8`: not the release's values; the error is "
                  "`nnt info`'s):", "",
                  "| family | nnt decode BF16 / FP8 tok/s | llama.cpp Q8_0 | nnt FP8 / llama.cpp Q8_0 | "
                  "nnt prefill 512 BF16 / FP8 | re-encoding error |", "|---|---|---|---|---|---|"]
        for r in fp8:
            n, f, q = r["nnt"], r["nnt_fp8"], r["q8_0"]
            err = next((l for l in f["info"] if "relative RMS" in l), "?")
            lines.append(f"| {r['family']} | {n['decode_32']:.1f} / {f['decode_32']:.1f} | "
                         + (f"{q['decode_32']:.1f} | {f['decode_32'] / q['decode_32']:.2f}x" if "decode_32" in q
                            else "unsupported | -")
                         + f" | {n['prefill_512']:.1f} / {f['prefill_512']:.1f} | {err} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--families", default="minimax_m2,kimi_linear,mimo_v2_flash,deepseek_v4")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", type=Path, default=ROOT / "bench" / "models")
    ap.add_argument("--torch-python", default=sys.executable, help="a Python with torch and transformers")
    ap.add_argument("--keep", action="store_true", help="keep the GGUF files (bench/peers/.cache/gguf/)")
    args = ap.parse_args()
    tools = build(fetch(args.torch_python), args.threads)
    model, flags = cpu()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    out = ROOT / "bench" / "results" / f"{datetime.date.today()}-{commit}-llama.md"
    rows = []
    for fam in args.families.split(","):
        rows.append(measure(fam, tools, args))
        report = (f"# nnt beside llama.cpp, {datetime.date.today()}, commit {commit}\n\n"
                  f"CPU: {model}; flags: {flags}; {args.threads} threads; llama.cpp from llama-cpp-python "
                  f"{LLAMA_CPP_PYTHON} (its vendored tree, GGML_NATIVE); mid-size checkpoints (make_models.py): "
                  "nnt on release/ in its stored encoding, llama.cpp on GGUF converted from the same release/ "
                  "(FP8 dequantised by the converter, then BF16 or Q8_0); llama-bench and bench_nnt, 3 repetitions "
                  "each.\n\n"
                  + table(rows) + "\n\nRaw measurements:\n\n```json\n" + json.dumps(rows, indent=1) + "\n```\n")
        out.write_text(report)
        print(f"wrote {out} ({len(rows)} families)", file=sys.stderr, flush=True)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
