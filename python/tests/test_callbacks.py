"""test_callbacks.py - Python callables edit values in place through nnt_trace_edit: a callback
that zeroes a value changes every downstream value exactly as the built-in "zero" edit does, and
what a callback writes is what the forward reads."""

import numpy as np


ROWS = [[235, 244, 202, 156, 148, 193, 80, 192, 183], [97, 63, 169, 247, 160]]
DOWNSTREAM = ["layers.1.mlp.mlp_output", "layers.1.layer_output", "layers.2.mlp.expert_indices",
              "layers.2.layer_output", "logits"]


def same(a, b):
    assert sorted(a) == sorted(b)
    for k in a:
        assert np.array_equal(a[k], b[k]), k


def test_zeroing_callback_equals_zero_edit(example_model):
    def zero(v):
        v[...] = 0

    by_data = example_model.trace(ROWS, save=DOWNSTREAM, edits=[("layers.1.mlp.expert_weights", "zero")])
    by_callback = example_model.trace(ROWS, save=DOWNSTREAM, edits=[("layers.1.mlp.expert_weights", zero)])
    plain = example_model.trace(ROWS, save=DOWNSTREAM)
    same(by_data, by_callback)
    assert not np.array_equal(plain["logits"], by_data["logits"])
    assert not np.any(by_callback["layers.1.mlp.mlp_output"])  # zero weights: the MLP adds nothing


def test_scaling_callback_equals_scale_edit(example_model):
    def half(v):
        v *= np.float32(0.5)

    by_data = example_model.trace(ROWS, save=DOWNSTREAM, edits=[("layers.0.self_attn.attention_output", "scale", 0.5)])
    by_callback = example_model.trace(ROWS, save=DOWNSTREAM, edits=[("layers.0.self_attn.attention_output", half)])
    same(by_data, by_callback)


def test_callback_sees_the_value_and_writes_it(example_model):
    seen = {}

    def look(v, *, ctx):
        seen[ctx.path] = (ctx.block, v.copy(), v.flags.writeable, v.flags.owndata)
        v[:, -1] = 1.0  # the last position of every row

    out = example_model.trace(ROWS, save=["layers.*.layer_output"], edits=[("layers.*.layer_output", look)])
    assert sorted(seen) == [f"layers.{i}.layer_output" for i in range(3)]
    for i in range(3):
        layer, before, writable, owns = seen[f"layers.{i}.layer_output"]
        assert layer == i and writable and owns  # its own copy, written back when the callback returns
        after = out[f"layers.{i}.layer_output"]  # saved after the edit
        assert np.all(after[:, -1] == 1.0)
        assert np.array_equal(after[:, :-1], before[:, :-1])
    # the value the callback saw is the unedited forward's (the edit on block 0 changes block 1's input)
    plain = example_model.trace(ROWS, save=["layers.0.layer_output"])
    assert np.array_equal(seen["layers.0.layer_output"][1], plain["layers.0.layer_output"])


def test_returned_array_is_written(example_model):
    other = example_model.trace([ROWS[0]], save=["layers.1.layer_output"])["layers.1.layer_output"]
    patched = example_model.trace([ROWS[0]], save=["logits"], edits=[("layers.1.layer_output", lambda v: other * 2)])
    by_set = example_model.trace([ROWS[0]], save=["logits"], edits=[("layers.1.layer_output", "set", other * 2)])
    same(patched, by_set)


def test_save_before_and_after_an_edit(example_model):
    out = example_model.trace(ROWS, edits=[("layers.1.mlp.expert_weights", "save"),
                                           ("layers.1.mlp.expert_weights", "zero"),
                                           ("layers.1.mlp.expert_weights", "save")])
    assert np.any(out["layers.1.mlp.expert_weights"])  # as routed
    assert not np.any(out["layers.1.mlp.expert_weights#1"])  # the second save: after the zero


def test_one_signature_never_guessed_from_defaults(example_model):
    """fn(value) or fn(value, *, ctx): parameters with defaults keep them (the loop idiom and a
    factor given as a default were once filled with the path and block), ctx comes by keyword or
    through **kwargs, and a callable needing more is refused before any forward."""
    import nnt

    plain = example_model.trace(ROWS, save=["logits"], edits=[("layers.0.layer_output", "scale", 0.5)])
    got = example_model.trace(ROWS, save=["logits"],
                              edits=[("layers.0.layer_output", lambda x, n="h", k=0.5: x.__imul__(np.float32(k)))])
    same(plain, got)
    seen = []
    edits = []
    for b, p in ((0, "layer_output"), (2, "layer_output")):
        def put(x, b=b, p=p):  # the usual closure idiom: b and p stay the loop's
            seen.append((b, p))
        edits.append((f"layers.{b}.{p}", put))
    example_model.trace(ROWS, save=["logits"], edits=edits)
    assert seen == [(0, "layer_output"), (2, "layer_output")]
    ctxs = []
    example_model.trace(ROWS, save=["logits"], edits=[("layers.*.layer_output", lambda x, **kw: ctxs.append(kw["ctx"]))])
    assert [(c.path, c.block) for c in ctxs] == [(f"layers.{i}.layer_output", i) for i in range(3)]
    assert isinstance(ctxs[0], nnt.EditContext)
    calls = []

    def old_style(v, path, layer):
        calls.append(path)
    try:
        example_model.trace(ROWS, save=["logits"], edits=[("layers.1.layer_output", old_style)])
        raise AssertionError("a callback needing three arguments was accepted")
    except nnt.Error as e:
        assert "fn(value) or fn(value, *, ctx)" in str(e) and "old_style(v, path, layer)" in str(e), str(e)
    assert calls == []  # refused before the forward
