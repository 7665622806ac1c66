"""test_api.py - the package's own behaviour: where libnnt and its INI come from, zero-copy
results and their lifetime, positions, batches, the tokenizer, listings, torch through DLPack."""

import gc
import os
import subprocess
import sys

import numpy as np
import pytest

import nnt
from conftest import EXAMPLE, SOURCE, run_cli


def test_library_and_config(example_model):
    lib = os.environ.get("NNT_LIBRARY")
    if lib:
        assert os.path.realpath(example_model.lib.nnt_path) == os.path.realpath(lib)
    # the INI libnnt picks for itself is the one the nnt command reports
    cli = run_cli("plugins").stdout.splitlines()[0]
    assert cli == f"configuration: {example_model.config_path}"
    # config= and NNT_CONFIG choose another file; a missing one is nnt's error
    m = nnt.Model(EXAMPLE, config=example_model.config_path)
    assert m.config_path == example_model.config_path
    with pytest.raises(nnt.Error, match="/no/such.ini"):
        nnt.Model(EXAMPLE, config="/no/such.ini")


def test_nnt_config_environment(tmp_path):
    code = ("import nnt, sys\ntry:\n    nnt.Model(sys.argv[1])\nexcept nnt.Error as e:\n    print(e)\n")
    env = dict(os.environ, NNT_CONFIG=str(tmp_path / "absent.ini"), PYTHONPATH=os.path.join(SOURCE, "python"))
    p = subprocess.run([sys.executable, "-c", code, EXAMPLE], capture_output=True, text=True, env=env)
    assert str(tmp_path / "absent.ini") in p.stdout, p.stdout + p.stderr


def test_library_found_from_the_command_on_path(tmp_path):
    """Without NNT_LIBRARY, outside a source checkout: the `nnt` command on PATH leads to libnnt."""
    import shutil

    pkg = tmp_path / "site" / "nnt"
    shutil.copytree(os.path.join(SOURCE, "python", "nnt"), pkg)
    cli_dir = os.path.dirname(os.path.realpath(os.environ.get("NNT_CLI") or os.path.join(SOURCE, "build", "nnt")))
    env = {k: v for k, v in os.environ.items() if k != "NNT_LIBRARY"}
    env.update(PYTHONPATH=str(tmp_path / "site"), PATH=cli_dir + os.pathsep + env.get("PATH", ""))
    code = "import nnt; print(nnt.find_library())"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert p.stdout.strip() == os.path.join(cli_dir, "libnnt.so"), p.stderr
    env["PATH"] = "/nonexistent"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if p.returncode != 0:  # unless libnnt is installed system-wide
        assert "libnnt was not found" in p.stderr


def test_results_are_views_that_outlive_the_model():
    model = nnt.Model(EXAMPLE)
    out = model.trace([1, 2, 3, 4], save=["layers.*.layer_output", "logits"])
    x = out["layers.1.layer_output"]
    assert not x.flags.owndata and x.flags.c_contiguous
    want = x.copy()
    del model, out
    gc.collect()
    model2 = nnt.Model(EXAMPLE)
    model2.trace([5, 6, 7, 8], save=["layers.1.layer_output"])
    assert np.array_equal(x, want)  # the trace's memory lives as long as the array


def test_aliases_and_positions(example_model):
    ids = [235, 244, 202, 156, 148, 193]
    out = example_model.trace(ids, save=["layers[1].mlp.expert_weights", "layers.1.self_attn.attention_probabilities"])
    assert "layers.1.mlp.expert_weights" in out
    assert out["layers[1].mlp.expert_weights"] is out["layers.1.mlp.expert_weights"]
    assert out["model.layers.-2.mlp.expert_weights"] is out["layers.1.mlp.expert_weights"]
    last = example_model.trace(ids, save=["layers.1.mlp.expert_weights", "layers.1.self_attn.attention_probabilities",
                                          "next_token_probs"], positions=-1)
    assert np.array_equal(last["layers.1.mlp.expert_weights"], out["layers.1.mlp.expert_weights"][:, -1])
    # the pattern [batch heads query key] keeps the query axis' chosen position
    assert np.array_equal(last["layers.1.self_attn.attention_probabilities"],
                          out["layers.1.self_attn.attention_probabilities"][:, :, -1])
    assert last["next_token_probs"].shape == (1, example_model.vocab_size)  # no seq axis: unchanged
    some = example_model.trace(ids, save=["layers.1.mlp.expert_weights"], positions=[0, 2])
    # without a pattern asked, block 1's attention runs in the backend's one pass, equal to the
    # three ops `out` ran within float32 rounding, not bit for bit
    np.testing.assert_allclose(some["layers.1.mlp.expert_weights"], out["layers.1.mlp.expert_weights"][:, [0, 2]],
                               rtol=1e-5, atol=1e-6)


def test_batch_rows_equal_single_rows(example_model):
    a, b = [235, 244, 202, 156, 148], [97, 63]
    both = example_model.trace([a, b], save=["logits"])["logits"]
    np.testing.assert_allclose(both[0], example_model.trace(a, save=["logits"])["logits"][0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(both[1, -2:], example_model.trace(b, save=["logits"])["logits"][0], rtol=1e-5, atol=1e-5)
    arr = example_model.trace(np.array([a], np.int64), save=["logits"])["logits"]
    assert np.array_equal(arr, example_model.trace(a, save=["logits"])["logits"])


def test_project_on_vocab_is_the_lens(example_model):
    out = example_model.trace([1, 2, 3], save=["layers.2.layer_output", "logits"])
    assert np.array_equal(example_model.project_on_vocab(out["layers.2.layer_output"]), out["logits"])


def test_skip_layers(example_model):
    ids = [235, 244, 202, 156]
    out = example_model.skip_layers(ids, 1, 2, save=["layers.0.layer_output", "layers.2.layer_output"])
    assert np.array_equal(out["layers.2.layer_output"], out["layers.0.layer_output"])


def test_tokenizer(example_model, example_prompt):
    tok = example_model.tokenizer
    ids = tok.encode(example_prompt)
    lines = run_cli("tokenize", "--model", EXAMPLE, example_prompt).stdout.splitlines()
    assert [int(x.split("\t")[0]) for x in lines] == ids
    assert tok.decode(tok.encode(example_prompt, add_special=False)) == example_prompt
    assert tok.vocab_size <= example_model.vocab_size


def test_listings(example_model):
    assert str(example_model) == run_cli("print", "--model", EXAMPLE).stdout
    assert example_model.support(table=True) == run_cli("support", "--model", EXAMPLE).stdout
    tsv = run_cli("support", "--model", EXAMPLE, "--tsv").stdout.splitlines()[1:]
    rows = example_model.support()
    assert len(rows) == len(tsv)
    assert [r.value for r in rows] == [t.split("\t")[2] for t in tsv]
    assert [r.served for r in rows] == [t.split("\t")[3] == "yes" for t in tsv]


def test_notes_mirror_the_printout():
    """Model.notes holds the family's notes, the lines `nnt print` ends with under "notes:"."""
    path = os.path.join(SOURCE, "tests", "fixtures", "mimo_v2", "fp4")
    m = nnt.Model(path)
    printed = run_cli("print", "--model", path).stdout
    assert str(m) == printed
    tail = printed.split("\n)\nnotes:\n", 1)[1]
    assert m.notes == [line[len("  - "):] for line in tail.splitlines()]
    assert len(m.notes) == 2 and m.notes[0].startswith("MAX's selected-layer hidden states")
    assert "moe_router_dtype is 'bfloat16'" in m.notes[1]
    assert nnt.Model(EXAMPLE).notes == []


def test_torch_through_dlpack(example_model):
    torch = pytest.importorskip("torch")  # optional: the package needs numpy only
    out = example_model.trace([1, 2, 3], save=["logits"], output="torch")
    t = out["logits"]
    assert isinstance(t, torch.Tensor)
    ref = example_model.trace([1, 2, 3], save=["logits"])["logits"]
    assert np.array_equal(t.numpy(), ref)
    arr = example_model.trace([1, 2, 3], save=["logits"])["logits"]
    tt = nnt.to_torch(arr)
    arr[0, 0, 0] = 123.0
    assert float(tt[0, 0, 0]) == 123.0  # the same memory


def test_reencoding(example_model, tmp_path):
    """weights = fp8: the record counts the checkpoint's linear and expert weights (from its
    config.json and safetensors header), their stored bytes, and a byte a value plus one float32
    scale a 128 x 128 block; the default INI re-encodes nothing."""
    import json
    import math
    import re

    from safetensors_reader import read

    assert example_model.reencoding()["tensors"] == 0
    base = example_model.config_path
    text = open(base).read()
    text = re.sub(r"^dir = (.*)$", lambda m: "dir = " + os.path.join(os.path.dirname(base), m.group(1)), text,
                  flags=re.M)
    text = text.replace("[family.minimax_m2]", "[family.minimax_m2]\nweights = fp8")
    ini = tmp_path / "fp8.ini"
    ini.write_text(text)
    m = nnt.Model(EXAMPLE, config=ini)
    r = m.reencoding()
    cfg = json.load(open(os.path.join(EXAMPLE, "config.json")))
    weights = {k: v for k, v in read(os.path.join(EXAMPLE, "model.safetensors")).items()
               if re.search(r"\.(q|k|v|o)_proj\.weight$|\.experts\.\d+\.w[123]\.weight$", k)}
    assert r["tensors"] == cfg["num_hidden_layers"] * (4 + 3 * cfg["num_local_experts"]) == len(weights)
    assert r["values"] == sum(w.size for w in weights.values())
    assert r["stored_bytes"] == sum(w.nbytes for w in weights.values())
    blocks = sum(math.ceil(w.shape[0] / 128) * math.ceil(w.shape[1] / 128) for w in weights.values())
    assert r["encoded_bytes"] == r["values"] + 4 * blocks
    assert r["worst"] in weights and 0 < r["rel_rms"] <= r["worst_rel_rms"] < 0.1


def test_steer_per_stream_on_deepseek_v4():
    """DeepSeek-V4: Steer of a [hidden] vector adds it to each of the four streams, of a
    [4, hidden] array one row per stream - each equal to the add edit of the same array."""
    import os

    import nnt
    from conftest import FIXTURES

    m = nnt.Model(os.path.join(FIXTURES, "deepseek_v4", "fp32"))
    h = m.info.hidden_size
    rows = np.zeros((4, h), np.float32)
    rows[1] = np.linspace(-1, 1, h)
    ids = [[3, 17, 42, 5, 99]]
    steered = m.trace(ids, save=["logits"], edits=[nnt.Steer(1, rows, 0.5)])["logits"]
    added = m.trace(ids, save=["logits"], edits=[("layers.1.layer_output", "add", rows, 0.5)])["logits"]
    whole = m.trace(ids, save=["logits"], edits=[nnt.Steer(1, rows[1], 0.5)])["logits"]
    assert np.array_equal(steered, added)
    assert not np.array_equal(steered, whole)


def test_cache_saves_every_value(example_model):
    """cache() (a "*" save) holds every value support lists as served, equal to saving each by its
    path; a slice after a wildcard keeps the [batch seq ...] values' last position."""
    m = example_model
    served = []
    for row in m.support():
        if not row.served:
            continue
        if row.block < 0:
            served.append(row.value)
        else:
            sub = row.host.partition(".")[2]
            served.append(f"layers.{row.block}.{sub + '.' if sub else ''}{row.value}")
    ids = [[3, 17, 42, 5]]
    everything = m.cache(ids)
    assert sorted({k.split("@")[0] for k in everything}) == sorted(served)
    one = m.trace(ids, save=["layers.1.layer_output", "layers.0.mlp.router_logits"])
    for key, arr in one.items():
        np.testing.assert_array_equal(everything[key], arr)
    last = m.cache(ids, "layers.*.*[:, -1]")
    np.testing.assert_array_equal(last["layers.1.layer_output"], one["layers.1.layer_output"][:, -1])
    assert "layers.1.self_attn.attention_probabilities" not in last
    with pytest.raises(nnt.Error, match="block 9 is out of range"):
        m.cache(ids, "layers.9.*")


def test_native_module_values(example_model):
    """A module's input and output by its path, as nnsight reads them: q_proj's output equals
    q_proj's weight applied to its input (the weight read from the checkpoint by safetensors),
    an edit of q_proj's input reaches q_proj alone, and a callback edits a module's output."""
    from safetensors_reader import read

    m = example_model
    ids = [[3, 17, 42, 5]]
    out = m.trace(ids, save=["layers.1.self_attn.q_proj.input", "layers.1.self_attn.q_proj.output",
                             "model.layers[1].mlp.gate.output", "layers.1.mlp.router_logits"])
    w = read(os.path.join(EXAMPLE, "model.safetensors"))["model.layers.1.self_attn.q_proj.weight"]
    x = out["layers.1.self_attn.q_proj.input"]
    np.testing.assert_allclose(out["layers.1.self_attn.q_proj.output"], x @ w.astype(np.float32).T, rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_array_equal(out["layers.1.mlp.router_logits"], out["model.layers[1].mlp.gate.output"])
    edited = m.trace(ids, save=["layers.1.self_attn.q_proj.output", "layers.1.self_attn.k_proj.input"],
                     edits=[("layers.1.self_attn.q_proj.input", "zero")])
    assert not edited["layers.1.self_attn.q_proj.output"].any()
    np.testing.assert_array_equal(edited["layers.1.self_attn.k_proj.input"], x)
    halved = m.trace(ids, save=["layers.1.self_attn.v_proj.output"],
                     edits=[("layers.1.self_attn.v_proj.output", lambda v: v * 0.5)])
    plain = m.trace(ids, save=["layers.1.self_attn.v_proj.output"])
    np.testing.assert_allclose(halved["layers.1.self_attn.v_proj.output"], 0.5 * plain["layers.1.self_attn.v_proj.output"])


def test_native_gradients(example_model):
    """The gradient at a module's input is its weight's transpose applied to the gradient at its
    output (q_proj's input is a copy the product alone reads)."""
    from safetensors_reader import read

    m = example_model
    out = m.trace([[3, 17, 42, 5]], metric="logit-diff:1,2",
                  grad=["layers.1.self_attn.q_proj.input", "layers.1.self_attn.q_proj.output"])
    w = read(os.path.join(EXAMPLE, "model.safetensors"))["model.layers.1.self_attn.q_proj.weight"]
    g_out = out["grad:layers.1.self_attn.q_proj.output"]
    np.testing.assert_allclose(out["grad:layers.1.self_attn.q_proj.input"], g_out @ w.astype(np.float32), rtol=1e-4,
                               atol=1e-6)
    assert np.abs(g_out).max() > 0
