"""bench_harvest.py - harvest throughput: `nnt harvest` saving one block's residual stream in bf16
over a corpus, against transformers plus a loop that does the same in one run (tokenize with the
same tokenizer.json, pack rows of --context tokens, forward batches with a hook on the block,
round the block's output to bfloat16 and write safetensors shards of --shard-mb, default 16 MiB so
that the shard buffer is not what grows with the corpus), once running every block and once stopped
after the block by an exception from its hook, on the same
checkpoint's weights; tokens/s of each and their ratio, disk bytes per token and the disk's own
write rate (so that it can be seen not to be the limit), and nnt's peak RSS at two corpus sizes
(constant memory: the larger corpus must not need more). Prints a Markdown report.

    python bench_harvest.py --release DIR --bf16 DIR --config INI [--tokens 200000] [--context 512]
                            [--batch 4] [--block 1] [--threads 2] [--work DIR]

--release is the checkpoint nnt reads (make_models.py's release/ layout), --bf16 the same weights
as transformers loads them (its bf16/); --config an nnt INI (e.g. with precision = bf16). The
corpus is tests/fixtures/corpus/corpus.txt repeated until it holds --tokens tokens; the tokenizer
is the tiny example's byte-level tokenizer.json (256 ids, within every mid-size vocabulary),
copied beside symbolic links to each checkpoint's files."""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from cpuinfo import cpu_line  # noqa: E402  (the report's CPU line, shared by the benchmarks)


def with_tokenizer(model_dir: str, dest: str) -> str:
    os.makedirs(dest, exist_ok=True)
    for name in os.listdir(model_dir):
        link = os.path.join(dest, name)
        if not os.path.lexists(link):
            os.symlink(os.path.join(os.path.abspath(model_dir), name), link)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(SOURCE, "examples", "tiny-minimax-m2", name), os.path.join(dest, name))
    return dest


def make_corpus(path: str, tokens: int) -> None:
    """The committed corpus repeated until its lines encode to `tokens` tokens (counted with the
    tokenizers package on the same tokenizer.json)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(SOURCE, "examples", "tiny-minimax-m2", "tokenizer.json"))
    with open(os.path.join(SOURCE, "tests", "fixtures", "corpus", "corpus.txt"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    counts = [len(tok.encode(line).ids) for line in lines]
    out, n = [], 0
    while n < tokens:
        for line, c in zip(lines, counts):
            out.append(line)
            n += c
            if n >= tokens:
                break
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


def peak_anon_mb(p: subprocess.Popen) -> float:
    """The largest RssAnon (/proc/PID/status: memory that is no file's pages, so not the mapped
    weights) seen while p runs, sampled every 0.1 s."""
    peak = 0
    while p.poll() is None:
        try:
            with open(f"/proc/{p.pid}/status", encoding="utf-8") as f:
                for line in f:
                    if line.startswith("RssAnon:"):
                        peak = max(peak, int(line.split()[1]))
        except OSError:
            pass
        time.sleep(0.1)
    return peak / 1024


def run_nnt(a, model: str, corpus: str, out: str) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [os.path.join(SOURCE, "build", "nnt"), "harvest", "--config", a.config,
           "--model", model, "--data", corpus, "--context", str(a.context), "--batch", str(a.batch),
           "--save", f"layers.{a.block}.layer_output", "--dtype", "bf16", "--shard-mb", str(a.shard_mb), "--out", out]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    anon = peak_anon_mb(p)
    _, err = p.communicate()
    took = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"nnt harvest failed:\n{err}")
    import json

    with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
        m = json.load(f)
    disk = sum(os.path.getsize(os.path.join(out, s["file"])) for s in m["shards"])
    return {"tokens": m["tokens_done"], "seconds": took, "disk": disk, "rss_mb": anon}


class _Stop(Exception):
    """Raised by the hook to end a forward after the block (as nnsight's tracer.stop() does)."""


def run_transformers(a, model: str, corpus: str, out: str, stop: bool) -> dict:
    """The baseline, in this process: one run over the corpus as nnt harvest makes it; with stop,
    each forward ends at the block's hook (the blocks after it are not run), as nnt's does."""
    import numpy as np
    import torch
    from safetensors.numpy import save_file
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    torch.set_num_threads(a.threads)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    t0 = time.monotonic()
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(model, "tokenizer.json"))
    lm = AutoModelForCausalLM.from_pretrained(model, dtype=torch.bfloat16).eval()
    kept = {}

    def hook(_module, _inputs, output):
        kept["x"] = output[0] if isinstance(output, tuple) else output
        if stop:
            raise _Stop

    lm.model.layers[a.block].register_forward_hook(hook)
    loaded = time.monotonic()
    stream, rows, pending, shard, shard_bytes, n_shards, done = [], [], [], [], 0, 0, 0

    def flush():
        nonlocal shard, shard_bytes, n_shards
        if not shard:
            return
        x = np.concatenate(shard)
        save_file({f"layers.{a.block}.layer_output": x, "harvest.input_ids": np.concatenate(pending_ids)},
                  os.path.join(out, f"shard-{n_shards:05d}.safetensors"))
        n_shards += 1
        shard, shard_bytes = [], 0
        pending_ids.clear()

    pending_ids = []
    with open(corpus, encoding="utf-8") as f, torch.inference_mode():
        for line in f:
            text = line.rstrip("\n")
            if not text:
                continue
            stream.extend(tok(text)["input_ids"])
            while len(stream) >= a.context:
                rows.append(stream[: a.context])
                del stream[: a.context]
                if len(rows) == a.batch:
                    ids = torch.tensor(rows)
                    try:
                        lm.model(input_ids=ids)  # the hook keeps the block's output; no lm_head needed
                    except _Stop:
                        pass
                    x = kept["x"].to(torch.bfloat16).reshape(-1, kept["x"].shape[-1])
                    shard.append(x.view(torch.int16).numpy().view(np.uint16).copy())
                    pending_ids.append(ids.reshape(-1).numpy().astype(np.int32))
                    shard_bytes += x.numel() * 2
                    done += ids.numel()
                    rows = []
                    if shard_bytes >= a.shard_mb * 1048576:
                        flush()
        flush()
    took = time.monotonic() - t0
    disk = sum(os.path.getsize(os.path.join(out, n)) for n in os.listdir(out))
    return {"tokens": done, "seconds": took, "disk": disk, "after_load": time.monotonic() - loaded}


def disk_rate(path: str) -> float:
    """MB/s of writing and syncing 256 MiB in this folder."""
    buf = os.urandom(1 << 20)
    t0 = time.monotonic()
    with open(path, "wb") as f:
        for _ in range(256):
            f.write(buf)
        f.flush()
        os.fsync(f.fileno())
    took = time.monotonic() - t0
    os.remove(path)
    return 256 * 1.048576 / took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", required=True)
    ap.add_argument("--bf16", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--tokens", type=int, default=200000)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--block", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shard-mb", type=float, default=16)
    ap.add_argument("--work", default="/tmp/nnt-bench-harvest")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    nnt_model = with_tokenizer(a.release, os.path.join(a.work, "release"))
    hf_model = with_tokenizer(a.bf16, os.path.join(a.work, "bf16"))
    small, big = os.path.join(a.work, "half.txt"), os.path.join(a.work, "corpus.txt")
    make_corpus(small, a.tokens // 2)
    make_corpus(big, a.tokens)
    half = run_nnt(a, nnt_model, small, os.path.join(a.work, "nnt-half"))
    whole = run_nnt(a, nnt_model, big, os.path.join(a.work, "nnt"))
    hf = run_transformers(a, hf_model, big, os.path.join(a.work, "hf"), False)
    hf_stop = run_transformers(a, hf_model, big, os.path.join(a.work, "hf"), True)
    rate = disk_rate(os.path.join(a.work, "disk-test"))
    r_nnt, r_hf = whole["tokens"] / whole["seconds"], hf["tokens"] / hf["seconds"]
    r_stop = hf_stop["tokens"] / hf_stop["seconds"]
    print(f"# harvest throughput ({time.strftime('%Y-%m-%d')})\n")
    print(f"CPU: {cpu_line()}\n")
    print(f"checkpoint: {a.release} (nnt) and {a.bf16} (transformers, bf16); INI {a.config}; context {a.context}, "
          f"batch {a.batch}, layers.{a.block}.layer_output in bf16, shards of {a.shard_mb:g} MiB, {a.threads} threads\n")
    print("| run | tokens | seconds | tokens/s | disk bytes/token | peak anonymous RSS MiB |")
    print("|---|---|---|---|---|---|")
    for name, r in (("nnt harvest, half the corpus", half), ("nnt harvest", whole), ("transformers + loop", hf),
                    ("transformers + loop, forwards stopped after the block", hf_stop)):
        rss = f"{r['rss_mb']:.0f}" if "rss_mb" in r else "-"
        print(f"| {name} | {r['tokens']} | {r['seconds']:.1f} | {r['tokens'] / r['seconds']:.1f} | "
              f"{r['disk'] / max(r['tokens'], 1):.0f} | {rss} |")
    print(f"\nnnt harvest runs blocks 0..{a.block} only (nothing after them is read); against transformers "
          f"stopped there too: {r_nnt / r_stop:.2f}x tokens/s ({r_nnt / (hf_stop['tokens'] / hf_stop['after_load']):.2f}x "
          f"of its time after loading).")
    print(f"\nnnt / transformers running every block: {r_nnt / r_hf:.2f}x tokens/s over the whole run; transformers runs "
          f"{hf['tokens'] / hf['after_load']:.1f} tokens/s once its model is loaded (nnt: {r_nnt / (hf['tokens'] / hf['after_load']):.2f}x that)."
          f" Disk: nnt wrote {whole['disk'] / whole['seconds'] / 1e6:.3f} "
          f"MB/s against {rate:.0f} MB/s this folder takes (write + fsync of 256 MiB), so the disk was not the limit. "
          f"Peak anonymous RSS (the mapped weights left out) {half['rss_mb']:.0f} MiB at {half['tokens']} tokens, "
          f"{whole['rss_mb']:.0f} MiB at {whole['tokens']}.")


if __name__ == "__main__":
    main()
