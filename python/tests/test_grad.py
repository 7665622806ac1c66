"""test_grad.py - gradients from Python: model.trace(grad=..., metric=...) against torch autograd's
reference gradients of the fixtures (tests/fixtures/*/grad_reference.safetensors, written by
tests/fixtures/make_grad_fixtures.py), the cotangent form (model.backward) against the built-in
metric, model.attribute against `nnt attribute --out`, and the refusals as nnt.Error."""

import json
import os
import struct

import numpy as np
import pytest

import nnt
from conftest import EXAMPLE, FIXTURES, run_cli
from safetensors_reader import read

GRAD_FIXTURES = ["minimax_m2/fp32", "mimo_v2_flash/fp8", "mimo_v2/fp4"]


def metadata(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)).get("__metadata__", {})


def rows_of(meta):
    """The fixture's prompts without their left padding (nnt pads them again)."""
    ids, mask = json.loads(meta["input_ids"]), json.loads(meta["attention_mask"])
    return [[t for t, m in zip(r, mr) if m] for r, mr in zip(ids, mask)]


@pytest.mark.parametrize("fixture", GRAD_FIXTURES)
@pytest.mark.parametrize("metric", ["logit-diff:11,29", "loss"])
def test_trace_grad_matches_torch(fixture, metric):
    path = os.path.join(FIXTURES, fixture, "grad_reference.safetensors")
    ref, meta = read(path), metadata(path)
    m = nnt.Model(os.path.join(FIXTURES, fixture))
    prefix = metric + "/grad:"
    # the block values laid out [batch seq ...]; the attention pattern's masked pairs differ by
    # design (torch gives them dO . v) and are left to tests/test_grad.c
    paths = [k[len(prefix):] for k in ref if k.startswith(prefix) and ref[k].shape[:2] == (2, ref[k].shape[1])
             and not k.endswith("attention_probabilities") and not k.endswith(("expert_weights", "expert_outputs"))]
    assert len(paths) >= 10
    v = m.trace(rows_of(meta), grad=paths, metric=metric)
    assert abs(float(v["metric"]) - float(ref[metric + "/metric"])) <= 1e-4 * max(1.0, abs(float(ref[metric + "/metric"])))
    for p in paths:
        want = ref[prefix + p]
        got = v["grad:" + p]
        assert got.shape == want.shape, p
        assert np.abs(got - want).max() <= 1e-4 * max(np.abs(want).max(), 1e-30), p


def test_backward_equals_metric():
    m = nnt.Model(EXAMPLE)
    ids = [[235, 121, 209, 109, 101, 195, 167], [3, 4, 5]]
    v = m.trace(ids, save=["logits"], grad=["layers.*.layer_output"], metric="logprob:7", metric_positions=[-1, -2])
    lg = v["logits"].astype(np.float64)
    p = np.exp(lg - lg.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    cot = np.zeros_like(lg)
    for pos in (-1, -2):  # rows are left-padded: the last two tokens of each row are its last two
        cot[:, pos] -= p[:, pos]
        cot[:, pos, 7] += 1
    w = m.backward(ids, {"logits": cot.astype(np.float32)}, ["layers.*.layer_output"])
    for layer in range(m.num_layers):
        a, b = v[f"grad:layers.{layer}.layer_output"], w[f"grad:layers.{layer}.layer_output"]
        assert np.abs(a - b).max() <= 1e-5 * np.abs(a).max()
    assert float(v["metric"]) == pytest.approx(float(np.log(p[:, -1, 7]).sum() + np.log(p[:, -2, 7]).sum()), rel=1e-5)


def test_attribute_equals_cli(tmp_path):
    m = nnt.Model(EXAMPLE)
    clean, corrupt = [1, 2, 3, 4, 5], [1, 2, 9, 4, 5]
    a = m.attribute(clean, corrupt, "logit-diff:11,29", value="layers.*.self_attn.attention_head_outputs")
    out = tmp_path / "a.safetensors"
    run_cli("attribute", "--model", EXAMPLE, "--clean-tokens", "1 2 3 4 5", "--corrupt-tokens", "1 2 9 4 5",
            "--metric", "logit-diff:11,29", "--value", "layers.*.self_attn.attention_head_outputs", "--out", str(out))
    f = read(str(out))
    assert a.grid.shape == f["attr_metric"].shape == (3, 5, 4)
    assert np.array_equal(a.grid, f["attr_metric"])
    assert a.clean_metric == f["clean_metric"][0] and a.corrupt_metric == f["corrupt_metric"][0]
    assert (a.forwards, a.backwards) == (3, 1)


def test_refusals():
    m = nnt.Model(EXAMPLE)
    with pytest.raises(nnt.Error, match="a choice has no gradient"):
        m.trace([[1, 2, 3]], grad=["layers.0.mlp.expert_indices"], metric="loss")
    with pytest.raises(nnt.Error, match="grad: needs a scalar"):
        m.trace([[1, 2, 3]], grad=["layers.0.layer_output"])
    with pytest.raises(nnt.Error, match="cotangent 'logits' is \\[3\\]"):
        m.backward([[1, 2, 3]], {"logits": np.zeros(3, np.float32)}, ["layers.0.layer_output"])
