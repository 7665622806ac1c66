#!/usr/bin/env python3
"""run.py - nnt's tokenizer encode throughput against Hugging Face tokenizers and tiktoken.

One run, one machine, the same text for everyone: about 10 MB of mixed UTF-8 made from the
tokenizer test corpus (tests/fixtures/tokenizer/corpus.json), encoded as one string per call,
one thread per tokenizer, each tokenizer in a process of its own:

  deepseek_v4    Hugging Face tokenizers on DeepSeek-V4's tokenizer.json    vs nnt, same folder
  kimi_qwen3_6   tiktoken on the Qwen3.5/3.6 ranks with Kimi-Linear's split  vs nnt, same folder
                 pattern, specials and chunking
  qwen           tiktoken on the Qwen ranks with the folder's pat_str        vs nnt, same folder
                 (leave it out with --no-qwen)

The corpus strings longer than 4 KB (long runs of one character, the 100 KB text) are also
timed one by one on each side (--long-repeats), since the mixed text holds them only as a few
percent of its bytes.

The folders are the ones the tests use (tests/fixtures/tokenizer/vocabularies.tar.xz, unpacked
here into BUILD/tokenizer-bench/vocab). nnt loads each as a checkpoint's tokenizer: the Kimi
folder gets a config.json naming KimiLinearForCausalLM, so that the kimi_linear plugin gives its
split pattern, specials and chunking (its tokenizer hints). nnt's ids must equal the reference's ids on the whole
text; a difference is printed (first differing position and the text there), marked in the
report, and makes the script exit with status 1. The target (issue 12): nnt at least as fast
as the faster of the two references on the same text.

    /work/venv/bin/pip install -r bench/tokenizer/requirements.txt
    /work/venv/bin/python bench/tokenizer/run.py [--build build-bench] [--repeats 5]

It configures BUILD (Release) when it holds no CMake cache (else regenerates it), builds the
bench_tokenize target, and writes the Markdown report to bench/results/<date>-<commit>-tokenizer.md (--out to change).
The generated text and the ids stay under BUILD/tokenizer-bench/ (not committed).
"""
from __future__ import annotations

import argparse
import array
import datetime
import importlib.metadata
import json
import os
import platform
import random
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "tokenizer"
PINNED = {"tokenizers": "0.23.3", "tiktoken": "0.14.0"}  # requirements.txt says the same
TEXT_SEED = 20261130
TEXT_BYTES = 10_000_000
LONG_BYTES = 4096  # corpus strings longer than this are also timed one by one (--long-repeats)

# Each reference in a process of its own with one thread: tokenizers' Rayon pool off.
ONE_THREAD_ENV = {"RAYON_NUM_THREADS": "1", "RAYON_RS_NUM_CPUS": "1", "TOKENIZERS_PARALLELISM": "false",
                  "OMP_NUM_THREADS": "1"}

BENCHES = [
    # (folder, reference kind, reference's name in the report)
    ("deepseek_v4", "hf", "Hugging Face tokenizers"),
    ("kimi_qwen3_6", "tiktoken-kimi", "tiktoken"),
    ("qwen", "tiktoken", "tiktoken"),
]


# config.json architectures written into a folder, for the family plugin whose tokenizer hints
# the folder needs (bench_tokenize loads through nnt_runtime_tokenizer)
ARCHITECTURES = {"kimi_qwen3_6": "KimiLinearForCausalLM"}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# the reference tokenizers (run as `run.py --worker KIND ...` in a child process)

def fixtures_module():
    """make_tokenizer_refs.py, for the exact code that built the test references (Kimi's
    pattern, specials and chunking; the tiktoken file reader)."""
    sys.path.insert(0, str(FIXTURES))
    import make_tokenizer_refs  # noqa: E402

    return make_tokenizer_refs


def tiktoken_encoding(kind: str, folder: Path):
    """The tiktoken Encoding of a folder, as make_tokenizer_refs.py builds it for the test
    references."""
    import tiktoken

    R = fixtures_module()
    ranks = R.tiktoken_ranks((folder / "tiktoken.model").read_bytes())
    cfg = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    named = {int(k): v["content"] for k, v in cfg["added_tokens_decoder"].items()}
    if kind == "tiktoken-kimi":
        n = len(ranks)
        specials = {i: named.get(i, "<|reserved_token_%d|>" % i) for i in range(n, n + R.KIMI_RESERVED)}
        pat = R.KIMI_PAT_STR
    else:
        specials = named
        pat = cfg["pat_str"]
    return tiktoken.Encoding(folder.name, pat_str=pat, mergeable_ranks=ranks,
                             special_tokens={v: k for k, v in specials.items()})


def load_reference(kind: str, folder: Path):
    """The reference tokenizer of a folder and its name with version."""
    if kind == "hf":
        import tokenizers

        return tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json")), "tokenizers %s" % tokenizers.__version__
    import tiktoken

    return tiktoken_encoding(kind, folder), "tiktoken %s" % tiktoken.__version__


def reference_call(kind: str, ref, text: str):
    """(encode, ids_of, how the call is made): encode() runs the timed work on `text`, ids_of()
    turns its result into a list of ids."""
    if kind == "hf":
        def encode():
            return ref.encode(text, add_special_tokens=False)

        return encode, (lambda enc: enc.ids), \
            "Tokenizer.encode(text, add_special_tokens=False), the whole text in one call"
    if kind == "tiktoken-kimi":
        R = fixtures_module()
        pieces = R.kimi_pieces(text)  # Kimi's chunking, in Python: not timed
        call = ("Encoding.encode(piece, allowed_special='all', disallowed_special=()) on each of "
                "the %d pieces of Kimi-Linear's chunking (%d-code-point chunks, same-isspace runs cut "
                "after %d; the cutting itself is done before the clock starts)"
                % (len(pieces), R.KIMI_MAX_CHARS, R.KIMI_MAX_RUN))
    else:
        pieces = [text]
        call = "Encoding.encode(text, allowed_special='all', disallowed_special=()), the whole text in one call"

    def encode():
        return [ref.encode(p, allowed_special="all", disallowed_special=()) for p in pieces]

    def ids_of(out):
        ids = []
        for part in out:
            ids.extend(part)
        return ids

    return encode, ids_of, call


def time_calls(encode, ids_of, warmup: int, repeats: int) -> dict:
    """warmup untimed calls then repeats timed ones; the ids of the last call and whether the
    first call gave the same."""
    runs, cpu = [], []
    first, same, result, first_call = None, True, None, 0.0
    for r in range(warmup + repeats):
        result = None  # the previous call's output is freed before the next call
        c0, w0 = time.process_time(), time.perf_counter()
        result = encode()
        w1, c1 = time.perf_counter(), time.process_time()
        if r == 0:
            first_call = w1 - w0
        if r >= warmup:
            runs.append(w1 - w0)
            cpu.append(c1 - c0)
        if r == 0 or r == warmup + repeats - 1:
            ids = ids_of(result)
            if first is None:
                first = ids
            elif ids != first:
                same = False
    ids = ids_of(result)
    s = sorted(runs)
    median = s[len(s) // 2] if len(s) % 2 else 0.5 * (s[len(s) // 2 - 1] + s[len(s) // 2])
    return {"ids": ids, "first_call_s": first_call, "runs_s": runs, "runs_cpu_s": cpu, "best_s": s[0],
            "median_s": median, "same_ids_every_run": same}


def worker(args) -> int:
    folder = Path(args.folder)
    t0 = time.perf_counter()
    ref, version = load_reference(args.worker, folder)
    load_s = time.perf_counter() - t0
    if args.strings:  # each file of the folder on its own: tokens, checksum and times only
        out = []
        for path in sorted(Path(args.text).glob("*.txt")):
            text = path.read_bytes().decode("utf-8")
            encode, ids_of, _ = reference_call(args.worker, ref, text)
            t = time_calls(encode, ids_of, args.warmup, args.repeats)
            ids = t.pop("ids")
            out.append(dict(t, name=path.stem, bytes=len(text.encode("utf-8")), tokens=len(ids),
                            id_hash="%016x" % ids_hash(ids)))
        print(json.dumps({"reference": version, "strings": out}))
        return 0
    text = Path(args.text).read_bytes().decode("utf-8")  # bytes as they are: no newline translation
    n_bytes = len(text.encode("utf-8"))
    encode, ids_of, call = reference_call(args.worker, ref, text)
    t = time_calls(encode, ids_of, args.warmup, args.repeats)
    ids = t.pop("ids")
    arr = array.array("i", ids)
    if sys.byteorder != "little":
        arr.byteswap()
    with open(args.ids_out, "wb") as f:
        arr.tofile(f)
    print(json.dumps(dict({"reference": version, "call": call, "bytes": n_bytes, "tokens": len(ids),
                           "id_sum": sum(ids), "id_hash": "%016x" % ids_hash(ids), "load_s": load_s,
                           "warmup": args.warmup}, **t,
                          best_bytes_per_s=n_bytes / t["best_s"], median_bytes_per_s=n_bytes / t["median_s"])))
    return 0


def ids_hash(ids) -> int:
    """FNV-1a 64 over the ids as 32-bit unsigned values (bench_tokenize.c computes the same)."""
    h = 0xCBF29CE484222325
    for i in ids:
        h = ((h ^ (i & 0xFFFFFFFF)) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


# ---------------------------------------------------------------------------------------------
# the benchmark text

def make_text(path: Path, target: int = TEXT_BYTES, seed: int = TEXT_SEED) -> dict:
    """About `target` bytes of mixed text from the test corpus: every non-empty valid UTF-8
    string of corpus.json (the invalid ones are left out) is repeated so that each contributes about the
    same number of bytes (at least once), the occurrences are shuffled with `seed` and joined
    with newlines. Deterministic: the same corpus and seed give the same bytes."""
    cases = json.loads((FIXTURES / "corpus.json").read_text(encoding="utf-8"))["cases"]
    strings = [(c["name"], bytes.fromhex(c["text_hex"])) for c in cases]
    valid, invalid, empty = [], 0, 0
    for name, raw in strings:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            invalid += 1
            continue
        if raw:
            valid.append((name, raw))
        else:
            empty += 1
    share = target / len(valid)
    occurrences, long_bytes = [], 0
    for name, raw in valid:
        k = max(1, round(share / (len(raw) + 1)))
        occurrences += [raw] * k
        if len(raw) > LONG_BYTES:
            long_bytes += k * len(raw)
    random.Random(seed).shuffle(occurrences)
    data = b"\n".join(occurrences)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_bytes() != data:
        path.write_bytes(data)
    return {"bytes": len(data), "strings": len(valid), "invalid": invalid, "empty": empty,
            "occurrences": len(occurrences), "seed": seed, "long_bytes": long_bytes,
            "chars": len(data.decode("utf-8")), "lines": data.count(b"\n") + 1}


def write_long_strings(dest: Path) -> list[str]:
    """The corpus's valid strings longer than LONG_BYTES, one file each (NN-name.txt, corpus
    order); their names."""
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.txt"):
        old.unlink()
    names = []
    for c in json.loads((FIXTURES / "corpus.json").read_text(encoding="utf-8"))["cases"]:
        raw = bytes.fromhex(c["text_hex"])
        if c["valid_utf8"] and len(raw) > LONG_BYTES:
            (dest / ("%02d-%s.txt" % (len(names), c["name"]))).write_bytes(raw)
            names.append(c["name"])
    return names


def unpack_vocab(dest: Path) -> None:
    archive = FIXTURES / "vocabularies.tar.xz"
    stamp = dest / ".unpacked"
    mtime = str(archive.stat().st_mtime_ns)
    if stamp.exists() and stamp.read_text() == mtime:
        return
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:
            tar.extractall(dest)
    stamp.write_text(mtime)


def write_configs(vocab: Path) -> None:
    for folder, arch in ARCHITECTURES.items():
        (vocab / folder / "config.json").write_text(json.dumps({"architectures": [arch]}) + "\n")


# ---------------------------------------------------------------------------------------------
# the machine and the build

def cpu_info() -> tuple[str, dict]:
    model, flags = "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model == "unknown CPU":
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return model, {f: f in flags for f in ("avx2", "avx512f", "avx512_bf16")}


def git(*args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


def commit() -> tuple[str, bool]:
    rev = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    return rev, dirty


def build(build_dir: Path, configure: bool) -> Path:
    if configure:
        # a new folder is configured Release; an existing one keeps its cache and is regenerated, so
        # that a folder configured before bench/tokenizer existed learns the bench_tokenize target
        # (make alone answers "no rule to make target" there)
        fresh = not (build_dir / "CMakeCache.txt").exists()
        log("configuring %s%s" % (build_dir, " (Release)" if fresh else ""))
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build_dir)]
                       + (["-DCMAKE_BUILD_TYPE=Release"] if fresh else []), check=True, stdout=sys.stderr)
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "bench_tokenize", "-j",
                        str(os.cpu_count() or 1)], check=True, stdout=sys.stderr)
    exe = build_dir / "bench_tokenize"
    if not exe.exists():
        raise SystemExit("%s not found (build the bench_tokenize target)" % exe)
    return exe


def cpu_seconds() -> tuple[float, float]:
    """(seconds the whole machine's CPUs were busy, /proc/stat; CPU seconds of this process and its
    finished children): their growth over a run tells how much other processes took meanwhile."""
    busy = 0.0
    try:
        f = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        # user nice system idle iowait irq softirq steal ... (guest time is inside user)
        busy = (f[0] + f[1] + f[2] + f[5] + f[6] + (f[7] if len(f) > 7 else 0)) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        pass
    t = os.times()
    return busy, t.user + t.system + t.children_user + t.children_system


def build_type(build_dir: Path) -> str:
    try:
        for line in (build_dir / "CMakeCache.txt").read_text().splitlines():
            if line.startswith("CMAKE_BUILD_TYPE:"):
                return line.split("=", 1)[1] or "(none)"
    except OSError:
        pass
    return "unknown"


# ---------------------------------------------------------------------------------------------
# measuring and comparing

def run_json(cmd: list, env: dict) -> dict:
    log("$ " + " ".join(str(c) for c in cmd))
    res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    if res.stderr:
        sys.stderr.write(res.stderr)
    if res.returncode != 0 and not res.stdout.strip():
        raise SystemExit("%s failed with status %d" % (cmd[0], res.returncode))
    return json.loads(res.stdout)


def read_ids(path: Path) -> array.array:
    a = array.array("i")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    if sys.byteorder != "little":
        a.byteswap()
    return a


def describe_mismatch(kind: str, folder: Path, text: bytes, ref, got) -> str:
    """Where the two id lists part: the position, the ids around it and the text there."""
    i = next((k for k in range(min(len(ref), len(got))) if ref[k] != got[k]), min(len(ref), len(got)))
    lines = ["reference %d ids, nnt %d ids; first difference at id %d" % (len(ref), len(got), i),
             "  reference ids[%d:%d] = %s" % (max(0, i - 3), i + 5, list(ref[max(0, i - 3):i + 5])),
             "  nnt       ids[%d:%d] = %s" % (max(0, i - 3), i + 5, list(got[max(0, i - 3):i + 5]))]
    try:  # the byte offset: the reference's decoding of the ids before the difference
        if kind == "hf":
            import tokenizers

            tok = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
            off = len(tok.decode(list(ref[:i]), skip_special_tokens=False).encode("utf-8"))
        else:
            off = len(tiktoken_encoding(kind, folder).decode_bytes(list(ref[:i])))
        lines.append("  text at byte %d: %r" % (off, text[max(0, off - 40):off + 40]))
    except Exception as e:  # a diagnostic only
        lines.append("  (could not locate the text: %s)" % e)
    return "\n".join(lines)


def mbs(x: float) -> str:
    return "%.2f" % (x / 1e6)


def ratio(a: float, b: float) -> str:
    return "%.2fx" % (a / b) if b else "-"


def report(meta: dict, rows: list[dict], longs: list[dict]) -> str:
    model, flags = meta["cpu"]
    yes = lambda b: "yes" if b else "no"  # noqa: E731
    by = {r["folder"]: r for r in rows}
    hf = by.get("deepseek_v4")
    kimi = by.get("kimi_qwen3_6")
    faster_name, faster = max(((("Hugging Face tokenizers on deepseek_v4", hf["ref"]["best_bytes_per_s"]),)
                               if hf else ()) +
                              ((("tiktoken on kimi_qwen3_6", kimi["ref"]["best_bytes_per_s"]),) if kimi else ()),
                              key=lambda t: t[1])
    all_match = all(r["match"] for r in rows)
    text = meta["text"]
    out = []
    out.append("# nnt tokenizer encode throughput vs Hugging Face tokenizers and tiktoken")
    out.append("")
    out.append("- commit: %s%s" % (meta["commit"], " + uncommitted changes" if meta["dirty"] else ""))
    out.append("- date: %s" % meta["date"])
    out.append("- machine: %s, %d cores, %s %s; load average %.2f when the run started%s"
               % (model, os.cpu_count() or 0, platform.system(), platform.release(), meta["load"],
                  " (" + meta["note"] + ")" if meta["note"] else ""))
    out.append("- other load: processes outside this benchmark used %.1f CPU-seconds during its %.0f s of "
               "measuring, %.2f of the %d cores on average (/proc/stat less this run's own CPU time)"
               % (meta["other_cpu_s"], meta["wall_s"], meta["other_cpu_s"] / meta["wall_s"], os.cpu_count() or 0))
    out.append("- CPU flags: avx2 %s, avx512f %s, avx512_bf16 %s"
               % (yes(flags["avx2"]), yes(flags["avx512f"]), yes(flags["avx512_bf16"])))
    out.append("- text: %d bytes (%.2f MB, %d code points, %d lines) of UTF-8 made by bench/tokenizer/run.py "
               "from tests/fixtures/tokenizer/corpus.json: its %d non-empty valid UTF-8 strings (the %d invalid "
               "ones and the %d empty one left out), each repeated to about the same share of bytes (%d "
               "occurrences), shuffled with seed %d, joined by newlines; the same bytes for every tokenizer"
               % (text["bytes"], text["bytes"] / 1e6, text["chars"], text["lines"], text["strings"],
                  text["invalid"], text["empty"], text["occurrences"], text["seed"]))
    out.append("- protocol: each tokenizer in a process of its own on one thread (tokenizers with "
               "RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false); %d untimed call%s, then %d timed call%s of the "
               "whole text; MB/s = 10^6 bytes per second of the best call (median in the second table)"
               % (meta["warmup"], "" if meta["warmup"] == 1 else "s", meta["repeats"],
                  "" if meta["repeats"] == 1 else "s"))
    out.append("- nnt: `bench_tokenize` (bench/tokenizer/bench_tokenize.c), nnt_tokenizer_encode(text, len, 0) "
               "on the whole text; libnnt built %s in %s" % (meta["build_type"], meta["build"]))
    for r in rows:
        out.append("- %s reference: %s %s" % (r["folder"], r["ref"]["reference"], r["ref"]["call"]))
    out.append("- ids: %s" % ("nnt's ids equal the reference's on every vocabulary (all %s)"
                              % ", ".join("%d" % r["ref"]["tokens"] for r in rows) if all_match else
                              "MISMATCH: nnt's ids differ from the reference's (see below)"))
    out.append("")
    out.append("## Throughput")
    out.append("")
    out.append("The target (issue 12): nnt >= 1x the faster of Hugging Face tokenizers and tiktoken on the same "
               "text. The faster reference here: %s, %s MB/s. \"nnt / faster\" divides nnt's rate on each "
               "vocabulary by that; \"nnt / reference\" compares the two on the same vocabulary."
               % (faster_name, mbs(faster)))
    out.append("")
    out.append("| vocabulary | reference | tokens | ids equal | reference MB/s | nnt MB/s | nnt / reference | "
               "nnt / faster | target >= 1x |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ref, nn = r["ref"]["best_bytes_per_s"], r["nnt"]["best_bytes_per_s"]
        out.append("| %s | %s | %d | %s | %s | %s | %s | %s | %s |"
                   % (r["folder"], r["ref_name"], r["ref"]["tokens"], "yes" if r["match"] else "**NO**", mbs(ref),
                      mbs(nn), ratio(nn, ref), ratio(nn, faster), "PASS" if nn >= faster else "FAIL"))
    out.append("")
    out.append("## Details")
    out.append("")
    out.append("| vocabulary | side | best s | median s | median MB/s | CPU s / wall s | load s | first call s |")
    out.append("|---|---|---|---|---|---|---|---|")
    for r in rows:
        for side, d in (("reference", r["ref"]), ("nnt", r["nnt"])):
            cpu = sum(d["runs_cpu_s"]) / sum(d["runs_s"])
            out.append("| %s | %s | %.3f | %.3f | %s | %.2f | %.2f | %.3f |"
                       % (r["folder"], side, d["best_s"], d["median_s"], mbs(d["median_bytes_per_s"]), cpu,
                          d["load_s"], d["first_call_s"]))
    out.append("")
    out.append("CPU s / wall s is the process's CPU time over the wall time of the timed calls: about 1.00 means one "
               "busy thread and nothing else taking the core. Load s: reading the tokenizer files. First call: the "
               "untimed call, with the caches empty (nnt and tokenizers keep a word cache across calls; tiktoken "
               "keeps none).")
    if longs:
        folders = [r["folder"] for r in rows]
        refs = {r["folder"]: r["ref_name"] for r in rows}
        names = list(dict.fromkeys(x["name"] for x in longs))
        by = {(x["folder"], x["name"]): x for x in longs}
        out.append("")
        out.append("## Long strings alone")
        out.append("")
        out.append("The corpus strings longer than %d bytes (runs of one letter, of spaces, of Han, the 100 KB "
                   "text), each encoded on its own: best of %d calls after one untimed call, ms per call. In the "
                   "mixed text they are %.1f%% of the bytes. Ids checked by count and checksum (%s)."
                   % (LONG_BYTES, meta["long_repeats"], 100 * text["long_bytes"] / text["bytes"],
                      "all equal" if all(x["match"] for x in longs) else "**SOME DIFFER**"))
        out.append("")
        out.append("| string | bytes | " + " | ".join("%s %s ms | nnt ms | nnt / ref" % (f, refs[f]) for f in folders)
                   + " |")
        out.append("|---|---|" + "---|---|---|" * len(folders))
        for name in names:
            cells = []
            for f in folders:
                x = by[(f, name)]
                cells.append("%.2f | %.2f | %s%s" % (1e3 * x["ref_s"], 1e3 * x["nnt_s"], ratio(x["ref_s"], x["nnt_s"]),
                                                     "" if x["match"] else " **ids differ**"))
            out.append("| %s | %d | %s |" % (name, by[(folders[0], name)]["bytes"], " | ".join(cells)))
        out.append("")
        out.append("nnt / ref is the reference's time over nnt's (above 1: nnt faster).")
    for r in rows:
        if not r["match"]:
            out.append("")
            out.append("### %s: ids differ" % r["folder"])
            out.append("")
            out.append("```")
            out.append(r["mismatch"])
            out.append("```")
    out.append("")
    out.append("## Raw measurements")
    out.append("")
    out.append("```json")
    raw = [{"folder": r["folder"], "reference": r["ref"], "nnt": r["nnt"]} for r in rows]
    if longs:
        raw.append({"long_strings": longs})
    out.append(json.dumps(raw, indent=1))
    out.append("```")
    out.append("")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", type=Path, default=ROOT / "build-bench",
                    help="CMake build folder holding (or to build) bench_tokenize (default build-bench)")
    ap.add_argument("--no-build", action="store_true", help="use BUILD/bench_tokenize as it is")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per tokenizer (default 5)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed calls first (default 1)")
    ap.add_argument("--no-qwen", action="store_true", help="leave out the qwen folder")
    ap.add_argument("--bytes", type=int, default=TEXT_BYTES, help="size of the text (default 10000000)")
    ap.add_argument("--out", type=Path, help="the report (default bench/results/<date>-<commit>-tokenizer.md)")
    ap.add_argument("--note", default="", help="a remark for the report's machine line")
    ap.add_argument("--long-repeats", type=int, default=20,
                    help="timed calls per long corpus string, each on its own (default 20; 0 leaves them out)")
    # the child-process mode for the reference tokenizers
    ap.add_argument("--worker", choices=("hf", "tiktoken-kimi", "tiktoken"), help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    ap.add_argument("--text", help=argparse.SUPPRESS)
    ap.add_argument("--ids-out", help=argparse.SUPPRESS)
    ap.add_argument("--strings", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)

    for pkg, want in PINNED.items():
        have = importlib.metadata.version(pkg)
        if have != want:
            log("WARNING: %s %s installed; bench/tokenizer/requirements.txt pins %s" % (pkg, have, want))

    build_dir = args.build if args.build.is_absolute() else Path.cwd() / args.build
    exe = build(build_dir, not args.no_build)
    work = build_dir / "tokenizer-bench"
    unpack_vocab(work / "vocab")
    write_configs(work / "vocab")
    text_path = work / "mixed.txt"
    text_meta = make_text(text_path, args.bytes)
    text = text_path.read_bytes()
    log("text: %d bytes, %d strings, %d occurrences" % (text_meta["bytes"], text_meta["strings"],
                                                        text_meta["occurrences"]))

    rev, dirty = commit()
    now = datetime.datetime.now(datetime.timezone.utc)
    meta = {"cpu": cpu_info(), "commit": rev, "dirty": dirty, "date": now.strftime("%Y-%m-%d %H:%M UTC"),
            "load": os.getloadavg()[0], "note": args.note, "text": text_meta, "repeats": args.repeats,
            "warmup": args.warmup, "build": os.path.relpath(build_dir, ROOT) if build_dir.is_relative_to(ROOT)
            else str(build_dir), "build_type": build_type(build_dir)}
    env = dict(os.environ, **ONE_THREAD_ENV)
    busy0, ours0, wall0 = *cpu_seconds(), time.perf_counter()
    rows = []
    for folder, kind, ref_name in BENCHES:
        if folder == "qwen" and args.no_qwen:
            continue
        vdir = work / "vocab" / folder
        ref_ids, nnt_ids = work / (folder + ".ref.ids"), work / (folder + ".nnt.ids")
        ref = run_json([sys.executable, Path(__file__).resolve(), "--worker", kind, "--folder", vdir, "--text",
                        text_path, "--repeats", args.repeats, "--warmup", args.warmup, "--ids-out", ref_ids], env)
        nn = run_json([exe, "--tokenizer", vdir, "--text", text_path, "--repeats", args.repeats, "--warmup",
                       args.warmup, "--ids-out", nnt_ids], env)
        a, b = read_ids(ref_ids), read_ids(nnt_ids)
        match = a == b and ref["id_hash"] == nn["id_hash"] and ref["id_sum"] == nn["id_sum"] and \
            ref["same_ids_every_run"] and nn["same_ids_every_run"]
        row = {"folder": folder, "ref_name": ref_name, "ref": ref, "nnt": nn, "match": match}
        if not match:
            row["mismatch"] = describe_mismatch(kind, vdir, text, a, b) if a != b else \
                "the ids files agree but a checksum or a repeat does not: reference %s, nnt %s" % (
                    {k: ref[k] for k in ("tokens", "id_sum", "id_hash", "same_ids_every_run")},
                    {k: nn[k] for k in ("tokens", "id_sum", "id_hash", "same_ids_every_run")})
            log("\n!!! %s: nnt's ids DIFFER from %s's\n%s\n" % (folder, ref_name, row["mismatch"]))
        log("%s: %s %s MB/s, nnt %s MB/s (%s), ids %s" % (folder, ref_name, mbs(ref["best_bytes_per_s"]),
                                                         mbs(nn["best_bytes_per_s"]),
                                                         ratio(nn["best_bytes_per_s"], ref["best_bytes_per_s"]),
                                                         "equal" if match else "DIFFER"))
        rows.append(row)

    longs = []
    if args.long_repeats > 0:
        long_dir = work / "long"
        names = write_long_strings(long_dir)
        meta["long_repeats"] = args.long_repeats
        for r in rows:
            folder, kind = r["folder"], next(k for f, k, _ in BENCHES if f == r["folder"])
            vdir = work / "vocab" / folder
            ref = run_json([sys.executable, Path(__file__).resolve(), "--worker", kind, "--folder", vdir, "--text",
                            long_dir, "--strings", "--repeats", args.long_repeats, "--warmup", 1], env)["strings"]
            for i, name in enumerate(names):
                path = long_dir / ("%02d-%s.txt" % (i, name))
                nn = run_json([exe, "--tokenizer", vdir, "--text", path, "--repeats", args.long_repeats,
                               "--warmup", 1], env)
                rs = ref[i]
                match = rs["tokens"] == nn["tokens"] and rs["id_hash"] == nn["id_hash"]
                if not match:
                    log("\n!!! %s, long string %s: nnt's ids DIFFER (reference %d ids %s, nnt %d ids %s)\n"
                        % (folder, name, rs["tokens"], rs["id_hash"], nn["tokens"], nn["id_hash"]))
                longs.append({"folder": folder, "name": name, "bytes": nn["bytes"], "ref_s": rs["best_s"],
                              "nnt_s": nn["best_s"], "match": match, "tokens": nn["tokens"]})

    busy1, ours1 = cpu_seconds()
    meta["wall_s"] = time.perf_counter() - wall0
    meta["other_cpu_s"] = max(0.0, (busy1 - busy0) - (ours1 - ours0))
    md = report(meta, rows, longs)
    out = args.out or ROOT / "bench" / "results" / ("%s-%s-tokenizer.md" % (now.strftime("%Y-%m-%d"), rev))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(md, encoding="utf-8")
    print(md)
    log("wrote %s" % out)
    if not all(r["match"] for r in rows + longs):
        log("!!! nnt's ids differ from a reference's: see the report")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
