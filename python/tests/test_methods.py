"""test_methods.py - the methods the package runs through libnnt, against the nnt command and against
single forwards: model.patch equals `nnt patch` cell by cell on every fixture; a Session's calls
equal the steps of `nnt generate` (the C API's nnt_generate, which runs a session) on every family;
an edit naming its rows, in one batched forward, equals separate single-row forwards; the lens
equals `nnt lens` on left-padded rows."""

import numpy as np
import pytest

import nnt
import safetensors_reader
from conftest import EXAMPLE, fixture_dirs, run_cli

FIXTURES = fixture_dirs()


def ids_text(ids):
    return " ".join(map(str, ids))


@pytest.fixture(scope="module")
def models():
    cache = {}

    def get(path):
        if path not in cache:
            cache[path] = nnt.Model(path)
        return cache[path]

    return get


@pytest.mark.parametrize("ckpt", FIXTURES + [EXAMPLE], ids=lambda p: p.split("/tests/fixtures/")[-1])
def test_patch_equals_cli(ckpt, models, tmp_path):
    clean = [5, 17, 33, 90, 41, 7, 12, 60]
    corrupt = list(clean)
    corrupt[1], corrupt[4] = 201, 150
    out = tmp_path / "patch.safetensors"
    run_cli("patch", "--model", ckpt, "--clean-tokens", ids_text(clean), "--corrupt-tokens", ids_text(corrupt),
            "--metric", "logit-diff:3,9", "--positions", "1,4,-1", "--batch", "5", "--out", str(out))
    cli = safetensors_reader.read(out)
    got = models(ckpt).patch(clean, corrupt, "logit-diff:3,9", positions=[1, 4, -1], batch=5)
    assert list(got.blocks) == list(cli["patch_blocks"])
    assert list(got.positions) == list(cli["patch_positions"]) == [1, 4, 7]
    assert np.array_equal(got.grid, cli["patch_metric"])  # the same library, the same bytes
    assert got.clean_metric == cli["clean_metric"][0] and got.corrupt_metric == cli["corrupt_metric"][0]
    # a patched cell differs from the corrupted run unless the patch changes nothing there
    assert np.any(got.grid != got.corrupt_metric)


def test_patch_refusals(models):
    m = models(EXAMPLE)
    with pytest.raises(nnt.Error, match=r"patch.corrupt: the clean prompt has 3 tokens and the corrupted one 2"):
        m.patch([1, 2, 3], [1, 2], "prob:3")
    with pytest.raises(nnt.Error, match=r"patch.metric: expected logit-diff:A,B"):
        m.patch([1, 2, 3], [1, 2, 4], "logit:3")
    with pytest.raises(nnt.Error, match=r"patch.positions: position 3 names no token"):
        m.patch([1, 2, 3], [1, 2, 4], "prob:3", positions=[3])


@pytest.mark.parametrize("ckpt", FIXTURES, ids=lambda p: p.split("/tests/fixtures/")[-1])
def test_session_equals_generate(ckpt, models, tmp_path):
    prompt, steps = [3, 14, 15, 92, 65, 35], 3
    save = ["layers.*.layer_output", "logits"]
    out = tmp_path / "gen.safetensors"
    p = run_cli("generate", "--model", ckpt, "--tokens", ids_text(prompt), "--max-new-tokens", str(steps),
                "--ignore-eos", *[a for s in save for a in ("--save", s)], "--out", str(out))
    tokens = [int(t) for t in p.stdout.split("new tokens, row 0:")[1].split("\n")[0].split()]
    want = safetensors_reader.read(out)
    m = models(ckpt)
    s = m.session(1, len(prompt) + steps)
    feed = [prompt] + [[t] for t in tokens[:-1]]  # the last generated token is never fed back
    for k, ids in enumerate(feed):
        got = s.forward([ids], save=save)
        for path in [f"layers.{i}.layer_output" for i in range(m.num_layers)] + ["logits"]:
            key = path if k == 0 else f"{path}@{k}"
            assert np.array_equal(got[path], want[key]), (ckpt, key)
    assert s.length == len(prompt) + steps - 1


ROWS = [[235, 244, 202, 156, 148], [97, 63, 169, 247, 160], [12, 40, 50, 60, 70]]


@pytest.mark.parametrize("edit", [
    {"op": "scale", "path": "layers.1.layer_output", "factor": 0.5, "rows": [1]},
    {"op": "zero", "path": "layers.0.mlp.expert_weights", "rows": [0, 2]},
    {"op": "add", "path": "layers.1.layer_output", "tensor": np.full(64, 0.25, np.float32), "rows": [2],
     "positions": [1, -1]},
])
def test_per_row_edit_equals_single_rows(models, edit):
    m = models(EXAMPLE)
    save = ["layers.2.layer_output", "logits"]
    batched = m.trace(ROWS, save=save, edits=[edit])
    plain = {k: v.copy() for k, v in m.trace(ROWS, save=save).items()}
    for r, row in enumerate(ROWS):
        if r not in edit["rows"]:  # untouched: the batch's own unedited values (to the last bits: an
            for path in save:      # edit of other rows' routing regroups the experts' products)
                np.testing.assert_allclose(batched[path][r], plain[path][r], rtol=1e-5, atol=1e-5, err_msg=f"{r} {path}")
            continue
        # edited: the row run alone with the edit (a batch of one multiplies in another order, so
        # the last bits may differ), and not the unedited values
        one_edit = {k: v for k, v in edit.items() if k != "rows"}
        single = m.trace([row], save=save, edits=[one_edit])
        for path in save:
            np.testing.assert_allclose(batched[path][r], single[path][0], rtol=1e-5, atol=1e-5, err_msg=f"{r} {path}")
        assert not np.allclose(batched["logits"][r], plain["logits"][r], rtol=1e-4, atol=1e-4)


def test_lens_equals_cli_on_padded_rows(models, tmp_path):
    out = tmp_path / "lens.safetensors"
    run_cli("lens", "--model", EXAMPLE, "--tokens", "5 6 7 8 9", "--tokens", "1 2 3", "--positions", "0,-1",
            "--out", str(out))
    cli = safetensors_reader.read(out)
    got = models(EXAMPLE).lens([[5, 6, 7, 8, 9], [1, 2, 3]], positions=[0, -1])  # [layers, rows, columns, vocab]
    assert np.array_equal(got, cli["lens_probs"].transpose(1, 0, 2, 3))
    assert list(cli["lens_positions"][1]) == [0, 2]
