"""test_harvest.py - `nnt harvest` and `nnt experts` (libnnt's nnt_harvest) on the committed corpus
(tests/fixtures/corpus): every harvested row against a trace of that row alone, run by the Python
package on the same libnnt; a run killed at several moments and continued against one never
interrupted, byte for byte; folders made by another run, bad data lines; the routing statistics
against counts made here from the saved expert_indices, and at two batch sizes; the moments
against numpy."""

import json
import os
import random
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

import safetensors_reader
from conftest import CLI, CLI_ENV, EXAMPLE, FIXTURES, run_cli

CORPUS = os.path.join(FIXTURES, "corpus")
TXT = os.path.join(CORPUS, "corpus.txt")
JSONL = os.path.join(CORPUS, "corpus.jsonl")
FAMILIES = [os.path.join(FIXTURES, f, "fp32") for f in ("minimax_m2", "mimo_v2_flash", "kimi_linear", "deepseek_v4")]


def with_tokenizer(model_dir, tmp_path):
    """A folder with model_dir's checkpoint and the tiny example's tokenizer (the fixtures have none;
    its 256 ids are every fixture's vocabulary)."""
    d = tmp_path / ("model-" + os.path.basename(os.path.dirname(model_dir)))
    d.mkdir()
    for name in os.listdir(model_dir):
        os.symlink(os.path.join(model_dir, name), d / name)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(EXAMPLE, name), d / name)
    return str(d)


def shards(out):
    """The manifest and every shard's tensors, concatenated along the tokens in shard order."""
    with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    parts = [safetensors_reader.read(os.path.join(out, s["file"])) for s in manifest["shards"]]
    return manifest, {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def harvest(*args, check=True):
    return run_cli("harvest", *args, check=check)


@pytest.mark.parametrize("model_dir", FAMILIES, ids=lambda d: os.path.basename(os.path.dirname(d)))
def test_rows_equal_single_traces(model_dir, tmp_path):
    import nnt

    model = with_tokenizer(model_dir, tmp_path)
    out = str(tmp_path / "h")
    harvest("--model", model, "--data", TXT, "--context", "40", "--rows", "split", "--batch", "6", "--dtype", "f32",
            "--save", "layers.*.layer_output", "--out", out, "--max-tokens", "3000")
    manifest, v = shards(out)
    assert manifest["complete"] and manifest["settings"]["rows"] == "split"
    m = nnt.Model(model)
    with open(TXT, encoding="utf-8") as f:
        docs = f.read().split("\n")
    rows = v["harvest.rows"]
    keys = [k for k in v if not k.startswith("harvest.")]
    assert len(keys) == nnt_blocks(model) and manifest["tokens_done"] == len(rows)
    starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
    ends = np.r_[starts[1:], len(rows)]
    assert np.array_equal(rows[starts], np.arange(len(starts)))  # every row, in order
    offset = {}
    for a, b in zip(starts, ends):
        ids = v["harvest.input_ids"][a:b]
        doc = v["harvest.documents"][a]
        assert (v["harvest.documents"][a:b] == doc).all()  # split: a row never crosses documents
        assert np.array_equal(v["harvest.positions"][a:b], np.arange(b - a))
        # the row is the next piece of its document's encoding
        enc = offset.setdefault(doc, [np.asarray(m.tokenize(docs[doc])), 0])
        assert np.array_equal(ids, enc[0][enc[1]:enc[1] + (b - a)])
        enc[1] += b - a
        ref = m.trace([ids.tolist()], save=keys)
        for k in keys:
            np.testing.assert_allclose(v[k][a:b], ref[k][0], rtol=1e-5, atol=1e-5, err_msg=f"{k} row {rows[a]}")
    for doc, (enc, used) in offset.items():  # documents taken whole (the last may be cut by max_tokens)
        assert used == len(enc) or doc == max(offset)


def nnt_blocks(model):
    with open(os.path.join(model, "config.json"), encoding="utf-8") as f:
        return json.load(f)["num_hidden_layers"]


def test_packed_rows_and_positions(tmp_path):
    out = str(tmp_path / "h")
    harvest("--model", EXAMPLE, "--data", JSONL, "--context", "16", "--batch", "3", "--positions", "0,-1",
            "--save", "layers.1.layer_output", "--out", out)
    manifest, v = shards(out)
    import nnt

    m = nnt.Model(EXAMPLE)
    with open(JSONL, encoding="utf-8") as f:
        stream = np.concatenate([np.asarray(m.tokenize(json.loads(line)["text"])) for line in f])
    rows = manifest["rows_done"]
    assert rows == len(stream) // 16 and manifest["dropped_tokens"] == len(stream) % 16
    assert np.array_equal(v["harvest.positions"], np.tile([0, 15], rows))
    assert np.array_equal(v["harvest.input_ids"], stream[: rows * 16].reshape(rows, 16)[:, [0, 15]].ravel())
    assert manifest["values"]["layers.1.layer_output"] == {"dtype": "BF16", "shape": ["tokens", 64]}
    # a harvest reading block 0 only stops its forwards there: the values are still the whole model's
    out0 = str(tmp_path / "h0")
    harvest("--model", EXAMPLE, "--data", JSONL, "--context", "16", "--batch", "3", "--dtype", "f32",
            "--save", "layers.0.layer_output", "--max-tokens", "48", "--out", out0)
    _, v0 = shards(out0)
    ref = m.trace([stream[16 * r:16 * (r + 1)].tolist() for r in range(3)], save=["layers.0.layer_output"])
    np.testing.assert_allclose(v0["layers.0.layer_output"], ref["layers.0.layer_output"].reshape(-1, 64),
                               rtol=1e-5, atol=1e-5)


def shards_done(out):
    try:
        with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
            return len(json.load(f)["shards"])
    except (OSError, ValueError):
        return 0


def run_to_end(args, out, targets, pause, seed):
    """Runs harvest with args, each run killed with SIGKILL a random time under `pause` seconds
    after the folder holds targets[k] shards (whatever the machine's speed), then to the end.
    Returns how many runs were killed before they finished."""
    rng = random.Random(seed)
    killed = 0
    for target in targets:
        p = subprocess.Popen([CLI, "harvest", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=CLI_ENV)
        while p.poll() is None and shards_done(out) < target:
            time.sleep(0.002)
        time.sleep(rng.uniform(0, pause))
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            killed += 1
        p.wait()
    p = subprocess.run([CLI, "harvest", *args], capture_output=True, text=True, env=CLI_ENV)
    assert p.returncode == 0, p.stderr
    return killed


def test_killed_and_resumed_equals_uninterrupted(tmp_path):
    corpus = tmp_path / "big.txt"
    with open(TXT, encoding="utf-8") as f:
        text = f.read()
    corpus.write_text(text * 3, encoding="utf-8")
    common = ["--model", EXAMPLE, "--data", str(corpus), "--context", "24", "--batch", "2", "--shard-mb", "0.02",
              "--save", "layers.0.layer_output", "--save", "layers.1.mlp.expert_weights", "--routing-stats",
              "--reduce", "layers.1.layer_output", "--top-contexts", "layers.1.layer_output=3"]
    whole = str(tmp_path / "whole")
    t0 = time.monotonic()
    harvest(*common, "--out", whole)
    took = time.monotonic() - t0
    n = shards_done(whole)
    assert n > 10
    resumed = str(tmp_path / "resumed")
    rng = random.Random(7)
    # five kills: at the start, then after random numbers of shards, each within about a shard's time
    targets = [0] + sorted(rng.sample(range(1, n - 1), 4))
    killed = run_to_end([*common, "--out", resumed], resumed, targets, 1.5 * took / n, 11)
    assert killed >= 4  # the last target may leave a run too little to do before its kill
    names = sorted(os.listdir(whole))
    assert names == sorted(os.listdir(resumed)), "the same files, no temporary left behind"
    for name in names:
        with open(os.path.join(whole, name), "rb") as a, open(os.path.join(resumed, name), "rb") as b:
            assert a.read() == b.read(), name
    # a finished folder is left as it is
    p = harvest(*common, "--out", resumed)
    assert "continued an earlier run" in p.stdout


def test_refuses_another_run(tmp_path):
    out = str(tmp_path / "h")
    base = ["--model", EXAMPLE, "--data", TXT, "--context", "16", "--max-tokens", "64", "--out", out]
    harvest(*base, "--save", "layers.0.layer_output")
    cases = [
        (["--save", "layers.1.layer_output"], "request"),
        (["--save", "layers.0.layer_output", "--dtype", "f32"], "settings.dtype"),
        (["--save", "layers.0.layer_output", "--batch", "3"], "settings.batch"),
    ]
    for extra, field in cases:
        p = harvest(*base, *extra, check=False)
        assert p.returncode != 0 and f"its {field}" in p.stderr and "made by another run" in p.stderr, p.stderr
    other = with_tokenizer(FAMILIES[1], tmp_path)  # another family: another config.json
    p = harvest(*[a if a != EXAMPLE else other for a in base], "--save", "layers.0.layer_output", check=False)
    assert p.returncode != 0 and "its model.architecture" in p.stderr, p.stderr
    # the example's config.json with other weights (tests/fixtures/minimax_m2/fp32 is the same checkpoint)
    reweighed = tmp_path / "reweighed"
    shutil.copytree(EXAMPLE, reweighed)
    with open(reweighed / "model.safetensors", "r+b") as f:
        f.seek(-4, os.SEEK_END)
        f.write(b"\x00\x00\x80\x3f")  # the last float32 of the file becomes 1.0
    p = harvest(*[a if a != EXAMPLE else str(reweighed) for a in base], "--save", "layers.0.layer_output", check=False)
    assert p.returncode != 0 and "its model.weights" in p.stderr, p.stderr
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    (stranger / "notes.txt").write_text("mine")
    p = harvest(*base[:-1], str(stranger), "--save", "layers.0.layer_output", check=False)
    assert p.returncode != 0 and "holds files but no manifest.json" in p.stderr, p.stderr
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "manifest.json").write_text("{not json")
    p = harvest(*base[:-1], str(broken), "--save", "layers.0.layer_output", check=False)
    assert p.returncode != 0 and "not a harvest manifest" in p.stderr, p.stderr
    p = harvest(*base[:-1], str(tmp_path / "pattern"), "--save", "layers.0.self_attn.attention_probabilities",
                check=False)
    assert p.returncode != 0 and "[batch seq ...] whole" in p.stderr, p.stderr


def test_bad_lines(tmp_path):
    bad = tmp_path / "bad.jsonl"
    lines = [b'{"text": "fine words"}', b'{"text": "more', b'{"body": "no text member"}', b'{"text": 7}',
             b'{"text": "bad \\udc80 surrogate"}', b'', b'{"text": "last words"}']
    bad.write_bytes(b"\n".join(lines) + b"\n")
    out = str(tmp_path / "h")
    args = ["--model", EXAMPLE, "--data", str(bad), "--context", "4", "--save", "layers.0.layer_output"]
    p = harvest(*args, "--out", out, check=False)
    assert p.returncode != 0 and f"{bad}:2: not a JSON object" in p.stderr, p.stderr
    p = harvest(*args, "--out", out, "--skip-bad")
    with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    assert manifest["skipped_lines"] == 4 and manifest["documents"] == 7
    docs = set(shards(out)[1]["harvest.documents"].tolist())
    assert docs <= {0, 6} and 6 in docs  # line 1 and line 7 (blank line 6 is no document)
    txt = tmp_path / "bad.txt"
    txt.write_bytes(b"good line\nbad \xff byte\n")
    p = harvest("--model", EXAMPLE, "--data", str(txt), "--context", "4", "--save", "layers.0.layer_output",
                "--out", str(tmp_path / "t"), check=False)
    assert p.returncode != 0 and f"{txt}:2: not well-formed UTF-8" in p.stderr, p.stderr
    p = harvest("--model", EXAMPLE, "--data", str(tmp_path / "absent.txt"), "--context", "4", "--save",
                "layers.0.layer_output", "--out", str(tmp_path / "u"), check=False)
    assert p.returncode != 0 and "absent.txt: cannot open" in p.stderr, p.stderr


def routing_from_indices(v, block, experts, top):
    idx = v[f"layers.{block}.mlp.expert_indices"]
    w = v[f"layers.{block}.mlp.expert_weights"]
    ids = v["harvest.input_ids"]
    counts = np.bincount(idx.ravel(), minlength=experts)
    sums = np.zeros(experts)
    np.add.at(sums, idx.ravel(), w.ravel().astype(np.float64))
    cooc = np.zeros((experts, experts), np.int64)
    for row in idx:
        for a in row:
            for b in row:
                cooc[a, b] += 1
    tops = np.full((experts, top), -1, np.int32)
    top_counts = np.zeros((experts, top), np.int64)
    for e in range(experts):
        ids_e, n = np.unique(ids[(idx == e).any(1)], return_counts=True)
        order = sorted(range(len(ids_e)), key=lambda i: (-n[i], ids_e[i]))[:top]
        tops[e, : len(order)] = ids_e[order]
        top_counts[e, : len(order)] = n[order]
    return counts, sums, cooc, tops, top_counts


def test_routing_statistics(tmp_path):
    stats = {}
    for batch in (1, 5):
        out = str(tmp_path / f"b{batch}")
        harvest("--model", EXAMPLE, "--data", JSONL, "--context", "32", "--batch", str(batch), "--dtype", "f32",
                "--save", "layers.*.mlp.expert_indices", "--save", "layers.*.mlp.expert_weights", "--routing-stats",
                "--top-tokens", "5", "--out", out)
        stats[batch] = safetensors_reader.read(os.path.join(out, "stats.safetensors"))
        manifest, v = shards(out)
        with open(os.path.join(EXAMPLE, "config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        E = cfg["num_local_experts"]
        assert stats[batch]["tokens"][0] == manifest["tokens_kept"] == len(v["harvest.input_ids"])
        for block in range(cfg["num_hidden_layers"]):
            counts, sums, cooc, tops, top_counts = routing_from_indices(v, block, E, 5)
            s = stats[batch]
            assert np.array_equal(s[f"layers.{block}.mlp.expert_counts"], counts)
            np.testing.assert_allclose(s[f"layers.{block}.mlp.expert_weight_sums"], sums, rtol=1e-6)
            assert np.array_equal(s[f"layers.{block}.mlp.expert_cooccurrence"], cooc)
            assert np.array_equal(s[f"layers.{block}.mlp.expert_top_tokens"], tops)
            assert np.array_equal(s[f"layers.{block}.mlp.expert_top_token_counts"], top_counts)
    for k in stats[1]:
        if "weight_sums" in k:
            np.testing.assert_allclose(stats[1][k], stats[5][k], rtol=1e-6)
        else:
            assert np.array_equal(stats[1][k], stats[5][k]), k
    p = run_cli("experts", "--stats", os.path.join(str(tmp_path / "b1"), "stats.safetensors"),
                "--plot", str(tmp_path / "usage.png"))
    counts = stats[1]["layers.0.mlp.expert_counts"]
    top = int(np.argmax(counts))
    share = 100 * counts[top] / stats[1]["tokens"][0]
    line = [ln for ln in p.stdout.splitlines() if ln.split()[:1] == ["0"]][0]
    assert line.split()[2] == str(top) and line.split()[3] == f"{share:.2f}%", p.stdout
    assert os.path.getsize(tmp_path / "usage.png") > 0


def test_moments(tmp_path):
    out = str(tmp_path / "h")
    harvest("--model", EXAMPLE, "--data", TXT, "--context", "32", "--batch", "4", "--dtype", "f32",
            "--save", "layers.1.layer_output", "--reduce", "layers.1.layer_output", "--positions", "1,2,-1",
            "--out", out)
    _, v = shards(out)
    s = safetensors_reader.read(os.path.join(out, "stats.safetensors"))
    x = v["layers.1.layer_output"].astype(np.float64)
    assert s["layers.1.layer_output.count"][0] == len(x)
    np.testing.assert_allclose(s["layers.1.layer_output.mean"], x.mean(0), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(s["layers.1.layer_output.var"], x.var(0), rtol=1e-7, atol=1e-12)


def test_python_reader(tmp_path):
    import nnt

    out = str(tmp_path / "h")
    harvest("--model", EXAMPLE, "--data", TXT, "--context", "16", "--batch", "3", "--shard-mb", "0.01",
            "--save", "layers.1.layer_output", "--save", "layers.0.mlp.expert_indices", "--routing-stats",
            "--max-tokens", "2000", "--out", out)
    manifest, v = shards(out)
    h = nnt.harvest.open(out)
    assert h.complete and sorted(h.keys()) == ["layers.0.mlp.expert_indices", "layers.1.layer_output"]
    assert len(manifest["shards"]) > 3 and len(h) == len(v["harvest.input_ids"])
    x = h["layers.1.layer_output"]
    assert x.shape == v["layers.1.layer_output"].shape and x.dtype == np.float32
    assert all(isinstance(p, np.memmap) and p.dtype == np.uint16 for p in x.parts)  # BF16 kept as its bits
    np.testing.assert_array_equal(x[:], v["layers.1.layer_output"])  # the same numbers, widened
    border = int(x.offsets[1])
    for idx in (0, -1, border - 1, border, slice(border - 5, border + 7), slice(3, 200, 7),
                np.array([border + 2, 1, border - 1]), (slice(10, 40), 3)):
        np.testing.assert_array_equal(x[idx], v["layers.1.layer_output"][idx], err_msg=str(idx))
    for name in ("input_ids", "rows", "positions", "documents"):
        np.testing.assert_array_equal(getattr(h, name)[:], v["harvest." + name])
    np.testing.assert_array_equal(h["layers.0.mlp.expert_indices"][5:9], v["layers.0.mlp.expert_indices"][5:9])
    stats = h.stats()
    assert np.array_equal(stats["layers.0.mlp.expert_counts"],
                          np.bincount(v["layers.0.mlp.expert_indices"].ravel(), minlength=len(stats["layers.0.mlp.expert_counts"])))
    with pytest.raises(KeyError, match="not a value of this harvest"):
        h["layers.2.layer_output"]
    with pytest.raises(IndexError):
        x[len(x)]


def test_sae_features(tmp_path):
    """A harvest with an SAE attached keeps its feature activations, each row equal to a trace of
    that row with the same SAE; the SAE's files are part of the folder's identity."""
    import nnt

    sae = tmp_path / "sae"
    shutil.copytree(os.path.join(FIXTURES, "sae", "relu"), sae)
    out = str(tmp_path / "h")
    args = ["--model", EXAMPLE, "--data", TXT, "--context", "16", "--max-tokens", "96", "--dtype", "f32",
            "--sae", f"layers.1.layer_output={sae}", "--save", "layers.1.layer_output.sae.feature_acts", "--out", out]
    harvest(*args)
    _, v = shards(out)
    key = "layers.1.layer_output.sae.feature_acts"
    m = nnt.Model(EXAMPLE)
    for r in range(6):
        ids = v["harvest.input_ids"][16 * r:16 * (r + 1)]
        ref = m.trace([ids.tolist()], save=[key], sae={"layers.1.layer_output": str(sae)})
        np.testing.assert_allclose(v[key][16 * r:16 * (r + 1)], ref[key][0], rtol=1e-5, atol=1e-5)
    with open(sae / "cfg.json", "a", encoding="utf-8") as f:
        f.write(" ")
    p = harvest(*args, check=False)
    assert p.returncode != 0 and "its sae_files" in p.stderr, p.stderr


def test_sparse_features_and_top_contexts(tmp_path):
    """--top-features writes each token's K largest SAE features, --top-contexts each feature's K
    largest tokens over the corpus: both against the same harvest's dense values, sorted here."""
    sae = os.path.join(FIXTURES, "sae", "relu")
    key = "layers.1.layer_output.sae.feature_acts"
    base = ["--model", EXAMPLE, "--data", TXT, "--context", "16", "--max-tokens", "480", "--batch", "3", "--dtype",
            "f32", "--sae", f"layers.1.layer_output={sae}", "--save", key, "--shard-mb", "0.05"]
    dense, sparse = str(tmp_path / "dense"), str(tmp_path / "sparse")
    harvest(*base, "--out", dense)
    harvest(*base, "--top-features", f"{key}=5", "--top-contexts", f"{key}=4", "--out", sparse)
    _, d = shards(dense)
    manifest, sp = shards(sparse)
    assert key not in sp and manifest["values"][key + ".top_indices"] == {"dtype": "I32", "shape": ["tokens", 5]}
    x = d[key]
    order = np.argsort(-x, axis=1, kind="stable")[:, :5]  # the smaller index first among equal values
    assert np.array_equal(sp[key + ".top_indices"], order)
    assert np.array_equal(sp[key + ".top_values"], np.take_along_axis(x, order, 1))
    s = safetensors_reader.read(os.path.join(sparse, "stats.safetensors"))
    rows, pos = d["harvest.rows"], d["harvest.positions"]
    for f in range(x.shape[1]):
        top = np.argsort(-x[:, f], kind="stable")[:4]  # the earlier token first among equal values
        assert np.array_equal(s[key + ".top_context_values"][f], x[top, f]), f
        assert np.array_equal(s[key + ".top_context_rows"][f], rows[top]), f
        assert np.array_equal(s[key + ".top_context_positions"][f], pos[top]), f
    p = harvest(*base, "--top-features", "layers.0.layer_output=5", "--out", str(tmp_path / "x"), check=False)
    assert p.returncode != 0 and "top_features[0]: 'layers.0.layer_output' is not a value the request saves" in p.stderr
