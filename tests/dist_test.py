#!/usr/bin/env python3
"""dist_test.py - runs over several ranks (mpirun -np N nnt ...) against the same command in one
process, on every family fixture: every value the family serves on every block, saved by
`nnt trace --out`, must be equal (at most 1e-6 relative; the stages run the same kernels, so in
practice bit for bit); `nnt generate` must give the same tokens (greedy and sampled) and values;
`nnt lens --out` the same probabilities; edits on every stage (scale, add, steer, expert
ablation) the same values and tokens; gradients (the stream's gradient passed back rank to rank)
the same as one process's; each rank's peak memory its share. Then the failures: more ranks than blocks, an edit
refused on one rank only, a [distributed] stages split that does not fit, a rank that stops
answering (ended within the [distributed] timeout) and a rank killed mid-run.

usage: dist_test.py NNT MPIEXEC FIXTURES_DIR BUILD_DIR
Needs numpy only (the safetensors files are read by python/tests/safetensors_reader.py)."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))
import safetensors_reader  # noqa: E402

FIXTURES = ["minimax_m2/fp32", "minimax_m2/bf16", "minimax_m2/fp8", "mimo_v2_flash/fp32", "mimo_v2_flash/bf16",
            "mimo_v2_flash/fp8", "mimo_v2_flash/fp8_per_head", "mimo_v2/fp4", "kimi_linear/fp32", "kimi_linear/bf16",
            "kimi_linear/hub", "deepseek_v4/fp32", "deepseek_v4/bf16", "deepseek_v4/native"]
TOKENS = ["--tokens", "3,17,42,5,99", "--tokens", "7,8,9"]  # two rows: left padding too

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def run(cmd, timeout=120):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def served_paths(nnt, model):
    """Every value the family serves, on every block, as `nnt support --tsv` lists them."""
    out = run([nnt, "support", "--model", model, "--tsv"])
    assert out.returncode == 0, out.stderr
    paths = []
    for line in out.stdout.splitlines()[1:]:
        host, block, value, served = line.split("\t")[:4]
        if served != "yes":
            continue
        if host == "model":
            paths.append(value)
        else:  # layers[3].mlp -> layers.3.mlp.VALUE
            head, _, rest = host.partition("]")
            paths.append("layers." + head.split("[")[1] + rest + "." + value)
    return paths


def same_values(a, b, what):
    fa, fb = safetensors_reader.read(a), safetensors_reader.read(b)
    check(sorted(fa) == sorted(fb), f"{what}: keys differ: {sorted(set(fa) ^ set(fb))[:6]}")
    worst = 0.0
    for k in set(fa) & set(fb):
        x, y = fa[k].astype(np.float64), fb[k].astype(np.float64)
        if x.shape != y.shape:
            check(False, f"{what}: {k} has shape {x.shape} in one process, {y.shape} over ranks")
            continue
        special = ~np.isfinite(x) | ~np.isfinite(y)  # -inf of masked scores, NaN: must match exactly
        check(np.array_equal(x[special], y[special], equal_nan=True), f"{what}: {k}: inf/NaN entries differ")
        x, y = x[~special], y[~special]
        if x.size:
            worst = max(worst, float(np.max(np.abs(x - y) / np.maximum(np.abs(x), 1e-30))))
    check(worst <= 1e-6, f"{what}: largest relative difference {worst:g} > 1e-6")
    return len(fa)


def write_checkpoint(folder, layers=4, hidden=512, inter=1024, experts=4, vocab=512, heads=8, kv=4, head_dim=64,
                     top_k=None, dtype="F32"):
    """A MiniMax-M2 checkpoint with random weights (F32 or BF16; the router bias F32), named and
    configured as the fixtures (transformers' MiniMaxM2) are. top_k None: every expert chosen for
    every token (num_experts_per_tok = num_local_experts), so a forward touches every weight.
    Returns the bytes of its tensors. bench/dist_bench.py writes its mid-size checkpoint with it."""
    import json
    import struct
    os.makedirs(folder, exist_ok=True)
    cfg = json.load(open(os.path.join(HERE, "fixtures", "minimax_m2", "fp32", "config.json")))
    cfg.update(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers, num_local_experts=experts,
               num_experts_per_tok=top_k or experts, vocab_size=vocab, num_attention_heads=heads,
               num_key_value_heads=kv, head_dim=head_dim, rotary_dim=head_dim // 2)
    shapes = {"model.embed_tokens.weight": [vocab, hidden], "lm_head.weight": [vocab, hidden], "model.norm.weight": [hidden]}
    for b in range(layers):
        p = f"model.layers.{b}."
        shapes.update({p + "input_layernorm.weight": [hidden], p + "post_attention_layernorm.weight": [hidden],
                       p + "self_attn.q_proj.weight": [heads * head_dim, hidden],
                       p + "self_attn.k_proj.weight": [kv * head_dim, hidden],
                       p + "self_attn.v_proj.weight": [kv * head_dim, hidden],
                       p + "self_attn.o_proj.weight": [hidden, heads * head_dim],
                       p + "self_attn.q_norm.weight": [heads * head_dim], p + "self_attn.k_norm.weight": [kv * head_dim],
                       p + "block_sparse_moe.gate.weight": [experts, hidden],
                       p + "block_sparse_moe.e_score_correction_bias": [experts]})
        for e in range(experts):
            q = p + f"block_sparse_moe.experts.{e}."
            shapes.update({q + "w1.weight": [inter, hidden], q + "w2.weight": [hidden, inter], q + "w3.weight": [inter, hidden]})
    header, offset = {}, 0
    for k, shp in shapes.items():
        dt = "F32" if k.endswith("correction_bias") else dtype
        n = int(np.prod(shp)) * (2 if dt == "BF16" else 4)
        header[k] = {"dtype": dt, "shape": shp, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    rng = np.random.default_rng(0)
    part = os.path.join(folder, "model.safetensors.part")
    with open(part, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for k, shp in shapes.items():
            n, norm = int(np.prod(shp)), k.endswith("norm.weight")
            for i in range(0, n, 1 << 26):  # in pieces: the mid-size experts are 2^22 elements each, the lot 2^31
                x = rng.standard_normal(min(1 << 26, n - i), dtype=np.float32) * (0.1 if norm else 0.02) + norm
                if header[k]["dtype"] == "BF16":
                    f.write((x.view(np.uint32) >> 16).astype("<u2").tobytes())
                else:
                    f.write(x.astype("<f4").tobytes())
    os.replace(part, os.path.join(folder, "model.safetensors"))
    json.dump(cfg, open(os.path.join(folder, "config.json"), "w"), indent=1)
    return offset


def check_edits(nnt, mpi, fixtures, tmp):
    """Edits run on the rank that holds their value: a mix of them on every block, in a trace and in
    a generation, gives one process's values and tokens over 2 and 3 ranks."""
    import struct
    import json
    for fx in ("minimax_m2/fp32", "kimi_linear/fp32", "deepseek_v4/fp32", "mimo_v2_flash/fp8"):
        model = os.path.join(fixtures, fx)
        cfg = json.load(open(os.path.join(model, "config.json")))
        H, L = cfg["hidden_size"], cfg["num_hidden_layers"]
        vec = os.path.join(tmp, "vec.safetensors")  # a [hidden] steering vector, 0.01 * (1, 2, 3, ...)
        h = json.dumps({"v": {"dtype": "F32", "shape": [H], "data_offsets": [0, 4 * H]}}).encode()
        h += b" " * (-len(h) % 8)
        with open(vec, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + (0.01 * np.arange(1, H + 1, dtype="<f4")).tobytes())
        edits = ["--scale", "layers.0.layer_output=0.5", "--scale", f"layers.{L - 1}.layer_input=0.75",
                 "--add", f"layers.1.layer_input={vec}:v", "--steer-factor", "2", "--steer", f"0:{L - 1}={vec}:v",
                 "--ablate-expert", f"{L - 1}:1", "--save", "layers.*.layer_output", "--save", "logits"]
        rows = ["--tokens", "3,17,42,5,99", "--tokens", "7,8,9"]
        one = run([nnt, "trace", "--model", model, *rows, *edits, "--out", os.path.join(tmp, "e1.safetensors")])
        g1 = run([nnt, "generate", "--model", model, *rows, "--max-new-tokens", "3", "--ignore-eos", *edits])
        check(one.returncode == 0 and g1.returncode == 0, f"{fx}: edits in one process: {one.stderr[-300:]} {g1.stderr[-300:]}")
        plain = run([nnt, "trace", "--model", model, *rows, "--save", "logits", "--out", os.path.join(tmp, "e0.safetensors")])
        if plain.returncode == 0 and one.returncode == 0:  # the edits change the logits (the test is not vacuous)
            a = safetensors_reader.read(os.path.join(tmp, "e0.safetensors"))["logits"]
            b = safetensors_reader.read(os.path.join(tmp, "e1.safetensors"))["logits"]
            check(float(np.max(np.abs(a - b))) > 1e-3, f"{fx}: the edits leave the logits as they were")
        for ranks in (2, 3):
            r = run([*mpi, "-np", str(ranks), nnt, "trace", "--model", model, *rows, *edits, "--out",
                     os.path.join(tmp, "en.safetensors")])
            check(r.returncode == 0, f"{fx}: edits over {ranks} ranks: {r.stderr[-300:]}")
            if r.returncode == 0:
                n = same_values(os.path.join(tmp, "e1.safetensors"), os.path.join(tmp, "en.safetensors"),
                                f"{fx}: edits over {ranks} ranks")
                print(f"{fx}: {ranks} ranks with edits on every stage: {n} values equal to one process", flush=True)
            g = run([*mpi, "-np", str(ranks), nnt, "generate", "--model", model, *rows, "--max-new-tokens", "3",
                     "--ignore-eos", *edits])
            check(g.returncode == 0 and g.stdout.splitlines()[-2:] == g1.stdout.splitlines()[-2:],
                  f"{fx}: generation with edits over {ranks} ranks: {g.stdout.splitlines()[-2:]} vs "
                  f"{g1.stdout.splitlines()[-2:]} {g.stderr[-300:]}")


def build_ini(build, path, edit):
    """The build folder's nnt.ini with its folders made absolute, changed by edit(text), written to
    path (a copy elsewhere: the INI's relative folders are read from its own folder)."""
    text = open(os.path.join(build, "nnt.ini")).read()
    text = text.replace("dir = families", "dir = " + os.path.join(build, "families"))
    text = text.replace("dir = kernels", "dir = " + os.path.join(build, "kernels"))
    text = text.replace("transport = transports", "transport = " + os.path.join(build, "transports"))
    with open(path, "w") as f:
        f.write(edit(text))
    return path


def check_grad(nnt, mpi, fixtures, tmp):
    """Gradients over ranks: the stream goes forward rank to rank, its gradient comes back the same
    way (the last rank starts the backward) and every rank's gradients reach rank 0; they must equal
    one process's (every fixture: the loss's gradient at every block's input and output stream and
    the token embeddings, over 2 ranks; with edits on every stage, a logit difference over 2 and 3;
    each stage recomputed block by block, over 2 and 3)."""
    grads = ["--grad", "layers.*.layer_output", "--grad", "layers.*.layer_input", "--grad", "token_embeddings",
             "--save", "layers.*.layer_output"]
    rows = ["--tokens", "3,17,42,5,99", "--tokens", "7,8,9"]
    cases = [(fx, ["--metric", "loss"], (2,)) for fx in FIXTURES]
    for fx in ("minimax_m2/fp32", "kimi_linear/fp32", "deepseek_v4/fp32", "mimo_v2_flash/fp8"):
        L = json.load(open(os.path.join(fixtures, fx, "config.json")))["num_hidden_layers"]
        cases.append((fx, ["--metric", "logit-diff:11,29", "--scale", "layers.0.layer_output=0.5", "--scale",
                           f"layers.{L - 1}.layer_input=0.75", "--ablate-expert", f"{L - 1}:1"], (2, 3)))
    # recomputation inside each rank's stage ([grad] mode = recompute) against one process keeping
    # everything: the same gradients bit for bit
    ini = build_ini(os.path.dirname(os.path.abspath(nnt)), os.path.join(tmp, "recompute.ini"),
                    lambda text: text + "\n[grad]\nmode = recompute\n")
    for fx in ("minimax_m2/fp32", "kimi_linear/fp32", "deepseek_v4/fp32"):
        L = json.load(open(os.path.join(fixtures, fx, "config.json")))["num_hidden_layers"]
        cases.append((fx, ["--metric", "logit-diff:11,29", "--scale", f"layers.{L - 1}.layer_input=0.75"], (2, 3),
                      ["--config", ini]))
    for fx, extra, rank_counts, *many_config in cases:
        many_config = many_config[0] if many_config else []
        model = os.path.join(fixtures, fx)
        one = os.path.join(tmp, "grad1.safetensors")
        r = run([nnt, "trace", "--model", model, *rows, *grads, *extra, "--out", one])
        check(r.returncode == 0, f"{fx} {extra[1]}: one-process gradients: {r.stderr[-400:]}")
        if r.returncode != 0:
            continue
        g = safetensors_reader.read(one)
        check(all(np.max(np.abs(v)) > 0 for k, v in g.items() if k.startswith("grad:layers.")),
              f"{fx} {extra[1]}: a block's gradient is all zeros (the test would be vacuous)")
        for ranks in rank_counts:
            many = os.path.join(tmp, "gradn.safetensors")
            r = run([*mpi, "-np", str(ranks), nnt, "trace", *many_config, "--model", model, *rows, *grads, *extra,
                     "--out", many])
            how = f"{extra[1]}{' recomputed' if many_config else ''}"
            check(r.returncode == 0, f"{fx} {how}: gradients over {ranks} ranks: {r.stderr[-400:]}")
            if r.returncode == 0:
                n = same_values(one, many, f"{fx} {how}: gradients over {ranks} ranks")
                print(f"{fx}: {how} over {ranks} ranks: {n} values and gradients equal to one process", flush=True)


def rss_wrapper(argv):
    """Runs argv and prints this rank's peak resident memory (the child's, in KiB) on stderr."""
    import resource
    rc = subprocess.run(argv).returncode
    rank = os.environ.get("OMPI_COMM_WORLD_RANK", "0")
    # one write: mpirun merges the ranks' stderr, and a line written in pieces can be split
    os.write(2, f"\nRSS {rank} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\n".encode())
    return rc


def check_memory(nnt, mpi, tmp):
    """Each rank's peak memory is its share of the weights: 2 ranks of a 4-block checkpoint of
    about 200 MB hold about half of it each."""
    if os.environ.get("NNT_TEST_SANITIZED"):
        print("memory per rank: not measured in a sanitizer build (its allocator's quarantine and shadow memory "
              "outweigh the weights)", flush=True)
        return
    folder = os.path.join(tmp, "mid")
    weights = write_checkpoint(folder)
    me = [sys.executable, os.path.abspath(__file__), "--rss-wrapper"]
    args = ["trace", "--model", folder, "--tokens", ",".join(str(i) for i in range(1, 33)), "--save", "logits"]
    tiny = run([*me, nnt, "trace", "--model", os.path.join(HERE, "fixtures", "minimax_m2", "fp32"), "--tokens", "1,2"])
    one = run([*me, nnt, *args])
    two = run([*mpi, "-np", "2", *me, nnt, *args])
    import re
    rss = lambda text: {int(r): int(kb) * 1024 for r, kb in re.findall(r"RSS (\d+) (\d+)\n", text)}
    base, whole, ranks = rss(tiny.stderr).get(0, 0), rss(one.stderr).get(0, 0), rss(two.stderr)
    check(one.returncode == 0 and two.returncode == 0 and len(ranks) == 2, f"memory runs: {one.stderr[-300:]} {two.stderr[-300:]}")
    if len(ranks) != 2 or not base:
        return
    mb = 1 << 20
    print(f"{weights / mb:.0f} MB of weights: one process {(whole - base) / mb:.0f} MB over a tiny run's "
          f"{base / mb:.0f} MB; rank 0 {(ranks[0] - base) / mb:.0f} MB, rank 1 {(ranks[1] - base) / mb:.0f} MB", flush=True)
    held = whole - base  # what one process's forward touches of the weights
    check(held > 0.7 * weights, f"one process holds {held} bytes over its base, the weights are {weights}")
    for r in (0, 1):
        check(ranks[r] - base < 0.65 * held, f"rank {r} holds {ranks[r] - base} bytes over its base: more than its half "
              f"of the {held} one process holds (+15%)")


def ranks_started(p, limit=20.0):
    """True once mpirun (p) has started both ranks (two child processes)."""
    end = time.time() + limit
    while time.time() < end and p.poll() is None:
        if len(run(["pgrep", "-P", str(p.pid)]).stdout.split()) >= 2:
            return True
        time.sleep(0.005)
    return False


def main():
    if sys.argv[1] == "--rss-wrapper":
        return rss_wrapper(sys.argv[2:])
    nnt, mpiexec, fixtures, build = sys.argv[1:5]
    build = os.path.abspath(build)
    mpi = [mpiexec, "--oversubscribe"]
    env = os.environ
    if os.geteuid() == 0:  # CI containers run as root; Open MPI refuses that unless told
        env["OMPI_ALLOW_RUN_AS_ROOT"] = env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    env["OMP_NUM_THREADS"] = "1"  # several ranks on 2 cores: no spinning thread pools
    # In a sanitizer build, Open MPI's blocks kept past MPI_Finalize are leaks to LeakSanitizer; they
    # are suppressed by library (tests/lsan.supp), which needs whole stacks: the frame-pointer
    # unwinder stops in Open MPI's components, unloaded by then (an "<unknown module>" frame).
    if "ASAN_OPTIONS" in env:
        env["ASAN_OPTIONS"] += ":fast_unwind_on_malloc=0"
    tmp = tempfile.mkdtemp(prefix="nnt-dist-")
    for fx in FIXTURES:
        model = os.path.join(fixtures, fx)
        saves = []
        for p in served_paths(nnt, model):
            saves += ["--save", p]
        one = os.path.join(tmp, "one.safetensors")
        r = run([nnt, "trace", "--model", model, *TOKENS, *saves, "--out", one])
        check(r.returncode == 0, f"{fx}: one-process trace: {r.stderr[-400:]}")
        gen = ["generate", "--model", model, *TOKENS, "--max-new-tokens", "4", "--ignore-eos", "--save",
               "layers.*.layer_output", "--save", "logits"]
        g1 = run([nnt, *gen, "--out", os.path.join(tmp, "g1.safetensors")])
        s1 = run([nnt, *gen[:-4], "--temperature", "0.9", "--top-k", "20", "--seed", "11"])
        check(g1.returncode == 0 and s1.returncode == 0, f"{fx}: one-process generate: {g1.stderr[-300:]}{s1.stderr[-300:]}")
        lens1 = run([nnt, "lens", "--model", model, *TOKENS, "--out", os.path.join(tmp, "lens1.safetensors")])
        check(lens1.returncode == 0, f"{fx}: one-process lens: {lens1.stderr[-300:]}")
        for ranks in (2, 3):
            many = os.path.join(tmp, f"r{ranks}.safetensors")
            r = run([*mpi, "-np", str(ranks), nnt, "trace", "--model", model, *TOKENS, *saves, "--out", many])
            check(r.returncode == 0, f"{fx}: trace over {ranks} ranks: {r.stderr[-400:]}")
            if r.returncode == 0:
                n = same_values(one, many, f"{fx}: trace over {ranks} ranks")
                print(f"{fx}: {ranks} ranks: {n} values equal to one process", flush=True)
            gn = run([*mpi, "-np", str(ranks), nnt, *gen, "--out", os.path.join(tmp, "gn.safetensors")])
            check(gn.returncode == 0 and gn.stdout.splitlines()[-2:] == g1.stdout.splitlines()[-2:],
                  f"{fx}: greedy tokens over {ranks} ranks: {gn.stdout.splitlines()[-2:]} vs {g1.stdout.splitlines()[-2:]} {gn.stderr[-300:]}")
            if gn.returncode == 0:
                same_values(os.path.join(tmp, "g1.safetensors"), os.path.join(tmp, "gn.safetensors"),
                            f"{fx}: generate values over {ranks} ranks")
            sn = run([*mpi, "-np", str(ranks), nnt, *gen[:-4], "--temperature", "0.9", "--top-k", "20", "--seed", "11"])
            check(sn.returncode == 0 and sn.stdout.splitlines()[-2:] == s1.stdout.splitlines()[-2:],
                  f"{fx}: sampled tokens over {ranks} ranks: {sn.stdout.splitlines()[-2:]} vs {s1.stdout.splitlines()[-2:]}")
            ln = run([*mpi, "-np", str(ranks), nnt, "lens", "--model", model, *TOKENS, "--out",
                      os.path.join(tmp, "lensn.safetensors")])
            printed = [lens1.stdout.splitlines()[:-1], ln.stdout.splitlines()[:-1]]  # less "wrote ... to FILE"
            check(ln.returncode == 0 and printed[0] == printed[1], f"{fx}: lens over {ranks} ranks: {ln.stderr[-300:]}")
            if ln.returncode == 0:
                same_values(os.path.join(tmp, "lens1.safetensors"), os.path.join(tmp, "lensn.safetensors"),
                            f"{fx}: lens over {ranks} ranks")

    check_edits(nnt, mpi, fixtures, tmp)
    check_grad(nnt, mpi, fixtures, tmp)
    check_memory(nnt, mpi, tmp)

    # ---- failures ----
    model = os.path.join(fixtures, "minimax_m2/fp32")  # 3 blocks
    r = run([*mpi, "-np", "2", nnt, "plan", "--model", model, "--ranks", "2"])
    check(r.returncode == 0 and r.stdout.count("plan: ") == 1, f"mpirun nnt plan prints the plan once: {r.stdout[-300:]}")
    r = run([*mpi, "-np", "2", nnt, "print", "--model", model])
    check(r.returncode == 2 and r.stderr.count("print runs in one process") == 1, f"print under mpirun: {r.stderr[-300:]}")
    r = run([*mpi, "-np", "4", nnt, "trace", "--model", model, "--tokens", "1,2,3"])
    check(r.returncode != 0 and "4 ranks for a model of 3 blocks" in r.stderr and r.stderr.count("nnt: error") == 1,
          f"more ranks than blocks: {r.stderr[-400:]}")
    # an edit only the last rank can check: its value [1, 3, 64] does not fit the call's [1, 4, 64]
    bad = os.path.join(tmp, "bad.safetensors")
    import json
    import struct
    h = json.dumps({"x": {"dtype": "F32", "shape": [1, 3, 64], "data_offsets": [0, 768]}}).encode()
    h += b" " * (-len(h) % 8)
    with open(bad, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + bytes(768))
    r = run([*mpi, "-np", "2", nnt, "trace", "--model", model, "--tokens", "1,2,3,4", "--save", "logits",
             "--set", f"layers.2.layer_output={bad}"])
    check(r.returncode != 0 and "rank 1 failed" in r.stderr and "[1, 3, 64]" in r.stderr and
          r.stderr.count("nnt: error") == 1 and "saved values" not in r.stdout,
          f"an edit refused on rank 1 only: rc {r.returncode}: {r.stdout[-200:]} {r.stderr[-400:]}")
    # rank 0 killed in the middle of its --out write (a file size limit on rank 0 alone - mpirun's own
    # files need more - whose SIGXFSZ is a deterministic stand-in for the SIGKILL mpirun sends after
    # SIGTERM): the job fails and leaves no file behind
    outdir = os.path.join(tmp, "killed")
    os.makedirs(outdir, exist_ok=True)
    args = ["trace", "--model", model, "--tokens", "1,2,3,4", "--save", "layers.*.mlp.output", "--save", "logits",
            "--out", os.path.join(outdir, "big.safetensors")]
    limited = "ulimit -f 64; exec " + " ".join(shlex.quote(a) for a in [nnt, *args])
    r = run([*mpi, "-np", "1", "sh", "-c", limited, ":", "-np", "1", nnt, *args])
    check(r.returncode != 0 and "File size limit exceeded" in r.stderr + r.stdout and os.listdir(outdir) == [],
          f"rank 0 killed while writing --out: rc {r.returncode}, left {os.listdir(outdir)}: {r.stderr[-300:]}")
    # [distributed] settings: a fixed split, a split that does not fit, a short timeout
    def ini(extra):
        return build_ini(build, os.path.join(tmp, "dist.ini"), lambda text: text.replace("timeout = 600", extra))
    # ranks that disagree (an MPMD launch gives each rank its own --model and --config): a copy of the
    # fixture whose config.json has fewer blocks (its weights would still load and run 2 of 3 blocks),
    # one whose config.json differs in one number, and two INIs that cut the blocks differently
    with open(os.path.join(model, "config.json")) as f:
        cfg = json.load(f)
    for name, change in (("fewer", {"num_hidden_layers": cfg["num_hidden_layers"] - 1}),
                         ("eps", {"rms_norm_eps": cfg["rms_norm_eps"] * 10})):
        other = os.path.join(tmp, name)
        os.makedirs(other, exist_ok=True)
        for f in os.listdir(model):
            if f != "config.json" and not os.path.exists(os.path.join(other, f)):
                os.symlink(os.path.join(model, f), os.path.join(other, f))
        with open(os.path.join(other, "config.json"), "w") as f:
            json.dump({**cfg, **change}, f)
    mpmd = lambda a, b: [*mpi, "-np", "1", nnt, "trace", *a, "--tokens", "1,2,3", ":", "-np", "1", nnt, "trace", *b,
                         "--tokens", "1,2,3"]
    for a, b, expect in (
            (["--model", model], ["--model", os.path.join(tmp, "fewer")],
             f"rank 1's checkpoint {os.path.join(tmp, 'fewer')} has 2 blocks, rank 0's {model} has 3"),
            (["--model", model], ["--model", os.path.join(tmp, "eps")],
             f"rank 1's {os.path.join(tmp, 'eps')}/config.json differs from rank 0's {model}/config.json"),
            (["--config", ini("timeout = 600\nstages = 1"), "--model", model],
             ["--config", build_ini(build, os.path.join(tmp, "dist2.ini"),
                                    lambda text: text.replace("timeout = 600", "timeout = 600\nstages = 2")),
              "--model", model], "rank 0 cuts at [1], rank 1 at [2]")):
        r = run(mpmd(a, b))
        check(r.returncode != 0 and expect in r.stderr and r.stderr.count("nnt: error") == 1 and not r.stdout.strip(),
              f"ranks that disagree ({expect}): rc {r.returncode}: {r.stdout[-200:]} {r.stderr[-400:]}")
    one = os.path.join(tmp, "fixed1.safetensors")
    run([nnt, "trace", "--model", model, "--tokens", "1,2,3,4", "--save", "layers.*.layer_output", "--out", one])
    r = run([*mpi, "-np", "2", nnt, "trace", "--config", ini("timeout = 600\nstages = 1"), "--model", model,
             "--tokens", "1,2,3,4", "--save", "layers.*.layer_output", "--out", os.path.join(tmp, "fixed2.safetensors")])
    check(r.returncode == 0, f"[distributed] stages = 1: {r.stderr[-300:]}")
    if r.returncode == 0:
        same_values(one, os.path.join(tmp, "fixed2.safetensors"), "[distributed] stages = 1")
    r = run([*mpi, "-np", "2", nnt, "trace", "--config", ini("timeout = 600\nstages = 3"), "--model", model,
             "--tokens", "1,2,3"])
    check(r.returncode != 0 and "[distributed] stages" in r.stderr and "each below 3" in r.stderr,
          f"[distributed] stages = 3 on 3 blocks: {r.stderr[-300:]}")
    # a rank that stops answering: the others give up after the timeout (2 s) and end the job, whenever
    # it stops: at once (the ranks are in MPI_Init, which waits for every rank) or half a second later
    # (loading, generating or finalising, as the machine's speed has it)
    long_gen = [nnt, "generate", "--config", ini("timeout = 2"), "--model", model, "--tokens", "1,2,3,4",
                "--max-new-tokens", "4000", "--ignore-eos"]
    errs = [os.path.join(tmp, f"rank{r}.err") for r in (0, 1)]
    # each rank's stderr to its own file: a message written just before a rank exits can be lost by
    # mpirun, which ends the job as soon as one rank fails
    to_files = ["sh", "-c", "exec " + " ".join(shlex.quote(a) for a in long_gen) +
                f" 2>{shlex.quote(tmp)}/rank$OMPI_COMM_WORLD_RANK.err"]
    # at once: the rank stops before it reaches MPI_Init (it is still loading its plugins), so the
    # other one's bounded start-up must be what ends the job
    for delay, sig, expect in ((0.0, signal.SIGSTOP, "the ranks did not all start within 2 s"),
                               (0.5, signal.SIGSTOP, "within 2 s"), (0.5, signal.SIGKILL, "rank 1")):
        when = f"{delay:g} s after the ranks started"
        for e in errs:
            if os.path.exists(e):
                os.remove(e)
        p = subprocess.Popen([*mpi, "-np", "2", *to_files], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        ready = ranks_started(p)
        time.sleep(delay)
        pids = run(["pgrep", "-P", str(p.pid)]).stdout.split()
        start = time.time()
        if ready and pids:
            os.kill(int(max(pids, key=int)), sig)  # the later-started rank
        try:
            out, err = p.communicate(timeout=30)
            took = time.time() - start
            said = (out + err).decode(errors="replace")
            for e in errs:
                if os.path.exists(e):
                    with open(e) as f:
                        said += f.read()
            check(ready and p.returncode != 0 and expect in said and took < 10,
                  f"a rank sent {sig.name} {when}: ready {ready}, rc {p.returncode} after {took:.1f} s: {said[-400:]}")
            line = [x for x in said.splitlines() if expect in x]
            print(f"{sig.name} on a rank {when}: the job ended in {took:.1f} s with exit status {p.returncode}: "
                  f"{line[0] if line else said[-200:]}", flush=True)
        except subprocess.TimeoutExpired:
            p.kill()
            subprocess.run(["pkill", "-9", "-f", "max-new-tokens 4000"])
            check(False, f"a rank sent {sig.name} {when}: the job did not end within 30 s")

    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("all distributed checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
