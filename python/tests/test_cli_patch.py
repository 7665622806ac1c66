"""test_cli_patch.py - `nnt patch` (activation patching) against single forwards: each cell of the
grid must equal the metric of one `nnt trace` of the corrupted prompt with `--set` putting the
clean run's value at that block and position (the rest of the value is the corrupted run's own),
on the embedded tiny MiniMax-M2 (every cell) and on every fixture checkpoint (a few cells); the
clean and corrupted metrics against plain forwards; and the refusals."""

import json
import os
import struct

import numpy as np
import pytest

import safetensors_reader
from conftest import EXAMPLE, fixture_dirs, run_cli

TOL = 1e-5


def write_f32(path, key, array):
    """One F32 tensor as a safetensors file (the format's header: JSON of dtype, shape, offsets)."""
    data = np.ascontiguousarray(array, dtype="<f4").tobytes()
    header = json.dumps({key: {"dtype": "F32", "shape": list(array.shape), "data_offsets": [0, len(data)]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + data)


def metric(logits, kind, a, b=None):
    """The metric of a [vocab] row of logits, in float64 as nnt computes it."""
    x = logits.astype(np.float64)
    if kind == "logit-diff":
        return x[a] - x[b]
    e = np.exp(x - x.max())
    return e[a] / e.sum()


def ids_text(ids):
    return " ".join(map(str, ids))


def trace_values(model, ids, tmp_path, name, *extra):
    out = tmp_path / f"{name}.safetensors"
    run_cli("trace", "--model", model, "--tokens", ids_text(ids), "--save", "layers.*.layer_output",
            "--save", "logits[:, -1]", *extra, "--out", str(out))
    return safetensors_reader.read(out)


_RUNS = {}


def plain_runs(model, clean, corrupt, tmp_path):
    """The clean and corrupted prompts' values and logits, traced once per model and prompts."""
    key = (model, tuple(clean), tuple(corrupt))
    if key not in _RUNS:
        _RUNS[key] = (trace_values(model, clean, tmp_path, "clean"), trace_values(model, corrupt, tmp_path, "corrupt"))
    return _RUNS[key]


def check_sweep(model, clean, corrupt, metric_arg, positions, cells, tmp_path, batch="4"):
    """Runs nnt patch and compares the chosen cells ((block, position) pairs, or None: all)."""
    out = tmp_path / "patch.safetensors"
    args = ["patch", "--model", model, "--clean-tokens", ids_text(clean), "--corrupt-tokens", ids_text(corrupt),
            "--metric", metric_arg, "--batch", batch, "--out", str(out)]
    if positions is not None:
        args += ["--positions", positions]
    run_cli(*args)
    got = safetensors_reader.read(out)
    kind, toks = metric_arg.split(":")
    toks = [int(t) for t in toks.split(",")]
    c, k = plain_runs(model, clean, corrupt, tmp_path)
    assert abs(got["clean_metric"][0] - metric(c["logits"][0], kind, *toks)) < TOL
    assert abs(got["corrupt_metric"][0] - metric(k["logits"][0], kind, *toks)) < TOL
    blocks, pos, grid = list(got["patch_blocks"]), list(got["patch_positions"]), got["patch_metric"]
    assert grid.shape == (len(blocks), len(pos))
    if cells is None:
        cells = [(b, p) for b in blocks for p in pos]
    for b, p in cells:
        key = f"layers.{b}.layer_output"
        v = k[key].copy()
        v[0, p] = c[key][0, p]
        f = tmp_path / f"set_{b}_{p}.safetensors"
        write_f32(f, "v", v)
        one = trace_values(model, corrupt, tmp_path, "one", "--set", f"{key}={f}:v")
        want = metric(one["logits"][0], kind, *toks)
        have = grid[blocks.index(b), pos.index(p)]
        assert abs(have - want) < TOL, (model, b, p, have, want)
    return got


def test_tiny_every_cell(tmp_path):
    clean = [235, 121, 209, 109, 101, 130, 170]  # "The people of the nation"
    corrupt = [235, 121, 209, 109, 101, 121, 209]  # "The people of the people"
    got = check_sweep(EXAMPLE, clean, corrupt, "logit-diff:97,109", None, None, tmp_path, batch="5")
    assert list(got["patch_positions"]) == list(range(7))
    assert list(got["patch_blocks"]) == [0, 1, 2]
    # the last block at the last position carries everything the logits read
    assert abs(got["patch_metric"][2, 6] - got["clean_metric"][0]) < TOL
    check_sweep(EXAMPLE, clean, corrupt, "prob:97", "0,5,-1", None, tmp_path, batch="2")


@pytest.mark.parametrize("ckpt", fixture_dirs(), ids=lambda p: os.path.relpath(p, os.path.dirname(os.path.dirname(p))))
def test_fixture_cells(ckpt, tmp_path):
    clean = [5, 17, 33, 90, 41, 7, 12, 60]
    corrupt = list(clean)
    corrupt[1], corrupt[4] = 201, 150
    got = check_sweep(ckpt, clean, corrupt, "logit-diff:3,9", "1,4,-1", [(0, 1), (1, 4), (2, 7)], tmp_path)
    L = len(got["patch_blocks"])
    check_sweep(ckpt, clean, corrupt, "prob:3", "4", [(L - 1, 4)], tmp_path, batch="3")


def test_refusals(tmp_path):
    def err(*args):
        p = run_cli("patch", "--model", EXAMPLE, *args, check=False)
        assert p.returncode != 0
        return p.stderr

    base = ["--clean-tokens", "1 2 3", "--corrupt-tokens", "1 2 4"]
    assert "the clean prompt has 3 tokens and the corrupted one 2; patching needs prompts of the same length" in err(
        "--clean-tokens", "1 2 3", "--corrupt-tokens", "1 2", "--metric", "prob:3")
    assert "--metric logit:3: expected logit-diff:A,B" in err(*base, "--metric", "logit:3")
    assert "--metric prob:999: token 999 is outside the model's vocabulary (vocab_size 256)" in err(*base, "--metric", "prob:999")
    assert ("layers.0.self_attn.attention_probabilities: patch needs a value with a token axis after the batch axis"
            in err(*base, "--metric", "prob:3", "--value", "layers.*.self_attn.attention_probabilities"))
    assert "position 3 names no token: the prompts have 3 tokens" in err(*base, "--metric", "prob:3", "--positions", "3")
    assert "patch needs --metric" in err(*base)
    assert "give both prompts as text (--clean, --corrupt) or both as token ids" in err(
        "--clean", "The", "--corrupt-tokens", "1", "--metric", "prob:3")
    assert "--plot x.jpg: expected a file name ending in .png or .svg" in err(*base, "--metric", "prob:3", "--plot", "x.jpg")
