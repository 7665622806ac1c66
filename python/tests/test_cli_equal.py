"""test_cli_equal.py - the package's values equal the nnt command's --out for the same request:
every served value of every fixture checkpoint of the four families, edits of each kind, the
logit lens and generation."""

import os

import numpy as np
import pytest

import nnt
import safetensors_reader
from conftest import EXAMPLE, fixture_dirs, run_cli


def reference_rows(ckpt):
    """The prompt rows the fixture's reference was made from (input_ids without the padding); a
    checkpoint without its own (kimi_linear/hub: fp32's weights in another layout) takes fp32's."""
    refs = sorted(f for f in os.listdir(ckpt) if f.startswith("reference") and "bf16" not in f)
    if not refs:
        ckpt = os.path.join(os.path.dirname(ckpt), "fp32")
        refs = sorted(f for f in os.listdir(ckpt) if f.startswith("reference") and "bf16" not in f)
    ref = refs[0]
    r = safetensors_reader.read(os.path.join(ckpt, ref))
    ids, mask = r["input_ids"], r["attention_mask"]
    return [[int(i) for i, m in zip(row, mrow) if m] for row, mrow in zip(ids, mask)]


def served_paths(model):
    return [r.value if r.host == "model" else f"{r.host}.{r.value}" for r in model.support() if r.served]


def cli_rows(rows):
    out = []
    for r in rows:
        out += ["--tokens", " ".join(map(str, r))]
    return out


def assert_same(cli_values, py_values):
    """Same keys (None values are not written by --out) and bitwise-equal arrays."""
    py = {k: v for k, v in py_values.items() if v is not None}
    assert sorted(py) == sorted(cli_values)
    for k, v in cli_values.items():
        assert py[k].shape == v.shape, k
        assert py[k].dtype == v.dtype, k
        assert np.array_equal(py[k], v, equal_nan=True), k


@pytest.mark.parametrize("ckpt", fixture_dirs(), ids=lambda p: os.path.relpath(p, os.path.dirname(os.path.dirname(p))))
def test_every_served_value_equals_cli(ckpt, tmp_path):
    model = nnt.Model(ckpt)
    rows = reference_rows(ckpt)
    paths = served_paths(model)
    assert len(paths) > 50
    out = tmp_path / "values.safetensors"
    args = ["trace", "--model", ckpt, *cli_rows(rows)]
    for p in paths:
        args += ["--save", p]
    run_cli(*args, "--out", str(out))
    cli = safetensors_reader.read(out)
    py = model.trace(rows, save=paths)
    assert_same(cli, py)
    # the values are the model's, not zeros: logits vary
    assert float(np.std(py["logits"])) > 0


EDIT_CASES = [
    # (CLI options, package edits)
    (["--zero", "layers.1.mlp.expert_weights"], [("layers.1.mlp.expert_weights", "zero")]),
    (["--scale", "layers.0.self_attn.attention_output=0.25"], [("layers.0.self_attn.attention_output", "scale", 0.25)]),
    (["--ablate-expert", "1:3"], [nnt.AblateExpert(1, 3)]),
    (["--skip-layers", "1:2"], [nnt.SkipLayers(1, 2)]),
]


@pytest.mark.parametrize("cli_edit,py_edit", EDIT_CASES, ids=lambda c: str(c[0]) if isinstance(c, list) and isinstance(c[0], str) else None)
def test_edits_equal_cli(example_model, cli_edit, py_edit, tmp_path):
    ckpt = EXAMPLE
    rows = [[235, 244, 202, 156, 148, 193, 80, 192], [97, 63, 169, 247, 160]]
    save = ["layers.*.layer_output", "layers.*.mlp.expert_weights", "logits"]
    out = tmp_path / "v.safetensors"
    run_cli("trace", "--model", ckpt, *cli_rows(rows), *cli_edit, *sum((["--save", s] for s in save), []),
            "--save", "next_token_probs", "--out", str(out))
    cli = safetensors_reader.read(out)
    py = example_model.trace(rows, save=save + ["next_token_probs"], edits=py_edit)
    assert_same(cli, py)
    plain = example_model.trace(rows, save=["logits"])
    assert not np.array_equal(plain["logits"], py["logits"])  # the edit changed something


def test_tensor_edits_equal_cli(example_model, tmp_path):
    """set, add and steer take arrays: written to a file for the CLI, passed as numpy here."""
    rows = [[235, 244, 202, 156, 148, 193]]
    rng = np.random.default_rng(7)
    vec = rng.standard_normal(64).astype(np.float32)
    full = rng.standard_normal((1, 6, 64)).astype(np.float32)
    vfile = tmp_path / "vec.safetensors"
    ffile = tmp_path / "full.safetensors"
    _write(vfile, {"v": vec})
    _write(ffile, {"x": full})
    out = tmp_path / "v.safetensors"
    run_cli("trace", "--model", EXAMPLE, *cli_rows(rows), "--add", f"layers.0.layer_output={vfile}:v",
            "--set", f"layers.1.self_attn.attention_output={ffile}:x", "--steer-factor", "2.5",
            "--steer-positions", "1,-1", "--steer", f"2={vfile}:v", "--save", "layers.*.layer_output",
            "--save", "logits", "--out", str(out))
    cli = safetensors_reader.read(out)
    py = example_model.trace(rows, save=["layers.*.layer_output", "logits"], edits=[
        ("layers.0.layer_output", "add", vec), ("layers.1.self_attn.attention_output", "set", full),
        nnt.Steer(2, vec, 2.5, [1, -1])])
    cli.pop("next_token_probs")
    assert_same(cli, py)
    # model.steer is the same request
    py2 = example_model.steer(rows, 2, vec, factor=2.5, positions=[1, -1], save=["layers.2.layer_output"],
                              edits=[("layers.0.layer_output", "add", vec),
                                     ("layers.1.self_attn.attention_output", "set", full)])
    assert np.array_equal(py2["layers.2.layer_output"], cli["layers.2.layer_output"])


def _write(path, tensors):
    """A safetensors file of float32 tensors (the format's header and data, as the spec lays them)."""
    import json
    import struct

    header, blobs, off = {}, [], 0
    for k, v in tensors.items():
        b = np.ascontiguousarray(v, dtype="<f4").tobytes()
        header[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def test_lens_equals_cli(example_model, example_prompt, tmp_path):
    out = tmp_path / "lens.safetensors"
    run_cli("lens", "--model", EXAMPLE, "--prompt", example_prompt, "--out", str(out))
    got = safetensors_reader.read(out)
    cli = got["lens_probs"]  # [rows, layers, columns, vocab]; here every position of the one row
    py = example_model.lens(example_prompt)  # [layers, rows, positions, vocab]
    assert cli.shape[0] == 1 and py.shape == (cli.shape[1], 1) + cli.shape[2:]
    assert np.array_equal(got["lens_positions"][0], np.arange(cli.shape[2]))
    # nnt lens applies expf in C, the package np.exp: equal to float32 rounding
    np.testing.assert_allclose(py[:, 0], cli[0], rtol=2e-6, atol=1e-9)
    # the lens logits are libnnt's own: the last block's lens equals the model's logits
    logits = example_model.trace(example_prompt, save=["logits"])["logits"]
    assert np.array_equal(example_model.lens(example_prompt, probs=False)[-1], logits)
    # positions: the lens at the last position only (one row through lm_head instead of 24 takes
    # another product kernel, so equal to float32 rounding)
    np.testing.assert_allclose(example_model.lens(example_prompt, positions=[-1])[:, :, 0], py[:, :, -1],
                               rtol=1e-5, atol=1e-9)


def test_generate_equals_cli(example_model, tmp_path):
    out = tmp_path / "g.safetensors"
    p = run_cli("generate", "--model", EXAMPLE, "--tokens", "235 244 202 156", "--tokens", "148 193 80",
                "--max-new-tokens", "4", "--ablate-expert", "1:3", "--steps", "1:2", "--zero",
                "layers.0.mlp.expert_weights", "--steps", "0", "--save", "layers.2.layer_output", "--save", "logits",
                "--out", str(out))
    cli = safetensors_reader.read(out)
    g = example_model.generate([[235, 244, 202, 156], [148, 193, 80]], 4, save=["layers.2.layer_output", "logits"],
                               edits=[nnt.AblateExpert(1, 3), nnt.Steps(1, 2), ("layers.0.mlp.expert_weights", "zero")])
    tokens = cli.pop("generated_tokens")  # [rows, max_new_tokens], -1 after a row's stop
    assert tokens.dtype == np.int32 and np.array_equal(tokens, g.tokens)
    assert_same(cli, g.values)
    for r in range(2):
        line = next(x for x in p.stdout.splitlines() if x.startswith(f"new tokens, row {r}:"))
        want = [int(x) for x in line.split(":")[1].split()]
        got = [int(x) for x in g.tokens[r] if x != -1]
        assert got == want
    steps = g.steps("logits")
    assert len(steps) == 4 and steps[1] is g.values["logits@1"]
    assert steps[0].shape[1] == 4 and steps[1].shape[1] == 1  # the prompt, then one token per step
    assert len(g.text) == 2 and all(isinstance(t, str) for t in g.text)


def test_text_prompt_equals_cli_tokens(example_model, example_prompt, tmp_path):
    p = run_cli("tokenize", "--model", EXAMPLE, "--ids", example_prompt)
    ids = [int(x) for x in p.stdout.split()]
    assert example_model.tokenize(example_prompt) == ids
    out = tmp_path / "t.safetensors"
    run_cli("trace", "--model", EXAMPLE, "--prompt", example_prompt, "--save", "layers.1.mlp.expert_indices",
            "--out", str(out))
    cli = safetensors_reader.read(out)
    py = example_model.trace(example_prompt, save=["layers.1.mlp.expert_indices", "next_token_probs"])
    assert_same(cli, py)
    assert example_model.decode(ids, skip_special=True) in (example_prompt, " " + example_prompt)
