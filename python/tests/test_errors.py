"""test_errors.py - a failure raises nnt.Error carrying nnt's own message and the status that goes
with it: the text the nnt command prints after "nnt: error: " for the same request, each front end
naming its own argument first (the command its option, "--save PATH", the package the request's
field, "saves[0]"), the same message after it."""

import os

import numpy as np
import pytest

import nnt
from conftest import EXAMPLE, FIXTURES, run_cli


def cli_message(*args):
    p = run_cli(*args, check=False)
    assert p.returncode == 1, p.stderr
    line = p.stderr.strip().splitlines()[-1]
    assert line.startswith("nnt: error: ")
    return line[len("nnt: error: "):]


# status codes as nnt_types.h numbers them
NNT_ERR_PATH, NNT_ERR_INDEX, NNT_ERR_NOT_SERVED, NNT_ERR_READ_ONLY = 12, 13, 14, 15


def same_message(py, cli, field):
    """The package's message is its request's field, then what the command prints after its option."""
    assert py == f"request: {field}: " + cli.split(": ", 1)[1], (py, cli)


@pytest.mark.parametrize("option,path,edit,code", [
    ("--save", "layers.1.mlp.expert_weightz", None, NNT_ERR_PATH),
    ("--save", "layers.9.layer_output", None, NNT_ERR_INDEX),
    ("--zero", "input_ids", ("input_ids", "zero"), NNT_ERR_READ_ONLY),
    ("--save", "layers.0.mlp.mlp_neurons", None, NNT_ERR_NOT_SERVED),
])
def test_request_errors_carry_nnts_message(example_model, option, path, edit, code):
    want = cli_message("trace", "--model", EXAMPLE, "--tokens", "1 2", option, path)
    assert want.startswith(f"{option} {path}: ")
    with pytest.raises(nnt.Error) as e:
        if edit:
            example_model.trace([1, 2], edits=[edit])
        else:
            example_model.trace([1, 2], save=[path])
    same_message(str(e.value), want, "edits[0].path" if edit else "saves[0]")
    assert e.value.code == code
    assert e.value.status == example_model.lib.nnt_status_str(code).decode()


def test_load_error():
    want = cli_message("trace", "--model", "/nonexistent-nnt-dir", "--tokens", "1")
    with pytest.raises(nnt.Error) as e:
        nnt.Model("/nonexistent-nnt-dir")
    assert str(e.value) == want


def test_forward_error(example_model):
    want = cli_message("trace", "--model", EXAMPLE, "--tokens", "1 999")
    with pytest.raises(nnt.Error) as e:
        example_model.trace([1, 999])
    same_message(str(e.value), want, "rows[0].tokens[1]")


def test_text_without_tokenizer():
    ckpt = os.path.join(FIXTURES, "minimax_m2", "fp32")
    cli = cli_message("trace", "--model", ckpt, "--prompt", "hi")
    reason = cli.split(": ", 1)[1]  # the tokenizer's own message, after the CLI's option name
    model = nnt.Model(ckpt)
    assert model.tokenizer is None
    with pytest.raises(nnt.Error) as e:
        model.trace("hi")
    assert str(e.value) == "request: rows[0].text: " + reason
    # ids still work
    assert model.trace([1, 2, 3], save=["logits"])["logits"].shape == (1, 3, model.vocab_size)


def test_set_of_the_wrong_shape(example_model):
    with pytest.raises(nnt.Error) as e:
        example_model.trace([1, 2, 3], edits=[("layers.0.layer_output", "set", np.zeros((1, 2, 64), np.float32))])
    assert "layers.0.layer_output" in str(e.value)


def test_malformed_edit_and_prompt(example_model):
    with pytest.raises(nnt.Error, match="expected one of"):
        example_model.trace([1, 2], edits=[("layers.0.layer_output", "double")])
    with pytest.raises(nnt.Error, match=r"rows\[1\].tokens: expected at least one"):
        example_model.trace([[1, 2], []])


def test_callback_exception(example_model):
    def boom(v):
        raise ValueError("no thanks")

    with pytest.raises(nnt.Error) as e:
        example_model.trace([1, 2, 3], edits=[("layers.1.mlp.expert_weights", boom)])
    msg = str(e.value)
    assert msg.startswith("request: edits[0]: edit callback on layers.1.mlp.expert_weights failed")
    assert "ValueError: no thanks" in msg
    assert isinstance(e.value.__cause__, ValueError)
    # the model still works afterwards
    assert example_model.trace([1, 2, 3], save=["logits"])["logits"].shape[1] == 3


@pytest.mark.parametrize("kw,words", [
    (dict(batch=-1, seq=3), "batch >= 1"),
    (dict(batch=2, seq=0), "seq >= 1"),
    (dict(batch=-1), "batch and seq together"),
    (dict(batch=2**40, seq=3), "not a 32-bit integer"),
    (dict(batch=1.5, seq=3), "not a 32-bit integer"),
])
def test_value_info_dims_in_range(example_model, kw, words):
    """A call's dims that no call can have are refused, not turned into negative shapes."""
    with pytest.raises(nnt.Error, match=words):
        example_model.value_info("layers.0.layer_output", **kw)
