"""test_sae.py - sparse autoencoders through the package: sae={path: folder} with saves of the SAE's
outputs gives sae-lens's feature activations, reconstruction and error (the committed references of
tests/fixtures/sae, made by tests/fixtures/make_sae_references.py); feature edits spelled as tuples
give SAELens's spliced forward and equal the same request through the nnt command; an SAE without
edits changes no value; bad arguments raise nnt.Error naming what is wrong."""

import os

import numpy as np
import pytest

import nnt
import safetensors_reader
from conftest import EXAMPLE, FIXTURES, run_cli

SAE = os.path.join(FIXTURES, "sae")
ROWS = [[235, 244, 202, 156, 148, 193, 80, 192, 183, 124], [97, 63, 169, 247, 160, 3, 95, 102, 97, 92]]
VALUE = "layers.1.layer_output"
FEATS = VALUE + ".sae.feature_acts"
EDITS = [(FEATS, "zero", [3, 10]), (FEATS, "scale", [5], 3.0), (FEATS, "masked_fill", 7, 2.5)]


@pytest.fixture(scope="module")
def model():
    return nnt.Model(EXAMPLE)


@pytest.fixture(scope="module")
def expected():
    return safetensors_reader.read(os.path.join(SAE, "expected.safetensors"))


@pytest.mark.parametrize("case", ["relu", "jumprelu", "topk", "relu_cnr", "topk_ln"])
def test_outputs_against_sae_lens(model, expected, case):
    outs = ["feature_acts", "reconstruction", "error"]
    vals = model.trace(ROWS, save=[f"{VALUE}.sae.{o}" for o in outs] + [VALUE], sae={VALUE: os.path.join(SAE, case)})
    assert np.array_equal(vals[VALUE], expected["input"])
    for o in outs:
        got, want = vals[f"{VALUE}.sae.{o}"], expected[f"{case}/{o}"]
        assert got.dtype == np.float32 and got.shape == want.shape
        assert np.abs(got - want).max() <= 1e-5, (case, o)


def test_no_edit_changes_nothing(model):
    plain = model.trace(ROWS, save="*")
    with_sae = model.trace(ROWS, save="*", sae=[(VALUE, os.path.join(SAE, "topk"))])
    for key, arr in plain.items():
        if arr is not None:
            assert np.array_equal(arr, with_sae[key]), key


def test_spliced_forward(model, tmp_path):
    want = safetensors_reader.read(os.path.join(SAE, "spliced.safetensors"))
    vals = model.trace(ROWS, save=["logits"], edits=EDITS, sae={VALUE: os.path.join(SAE, "relu")})
    assert np.abs(vals["logits"] - want["logits"]).max() <= 1e-4
    # the same request through the command: --sae, --zero/--scale/--fill with a feature list
    out = tmp_path / "cli.safetensors"
    cmd = ["trace", "--model", EXAMPLE]
    for r in ROWS:
        cmd += ["--tokens", " ".join(map(str, r))]
    run_cli(*cmd, "--sae", f"{VALUE}={os.path.join(SAE, 'relu')}", "--zero", f"{FEATS}[3,10]",
            "--scale", f"{FEATS}[5]=3", "--fill", f"{FEATS}[7]=2.5", "--save", "logits", "--out", str(out))
    assert np.array_equal(safetensors_reader.read(str(out))["logits"], vals["logits"])


def test_generate_with_sae(model):
    g = model.generate(ROWS[:1], 2, save=[FEATS], edits=[(FEATS, "zero", list(range(96)))],
                       sae={VALUE: os.path.join(SAE, "relu")}, ignore_eos=True)
    assert g.tokens.shape == (1, 2)
    assert g.values[FEATS].shape == (1, 10, 96) and g.values[FEATS + "@1"].shape == (1, 1, 96)


def test_lens_with_sae(model):
    """A lens through an SAE without edits is the plain lens; with edits it moves from block 1 on."""
    relu = {VALUE: os.path.join(SAE, "relu")}
    plain = model.lens(ROWS, probs=False)
    assert np.array_equal(model.lens(ROWS, probs=False, sae=relu), plain)
    edited = model.lens(ROWS, edits=EDITS, sae=relu)
    assert np.array_equal(edited[0], model.lens(ROWS)[0]) and not np.allclose(edited[1], model.lens(ROWS)[1])


def test_errors(model):
    with pytest.raises(nnt.Error, match=r"saes\[0\]\.dir: .*nowhere/cfg.json: cannot open"):
        model.trace(ROWS, sae={VALUE: os.path.join(SAE, "nowhere")})
    with pytest.raises(nnt.Error, match="feature 96 is out of range"):
        model.trace(ROWS, edits=[(FEATS, "zero", [96])], sae={VALUE: os.path.join(SAE, "relu")})
    with pytest.raises(nnt.Error, match="no SAE is attached"):
        model.trace(ROWS, edits=[(FEATS, "zero", [1])])
    with pytest.raises(nnt.Error, match="expected one of"):
        model.trace(ROWS, edits=[(FEATS, "scale", [1])], sae={VALUE: os.path.join(SAE, "relu")})
    with pytest.raises(nnt.Error, match="expected {value path: SAELens folder}"):
        model.trace(ROWS, sae=[VALUE])
