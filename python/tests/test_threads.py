"""test_threads.py - the package under threads and re-entry: threads sharing one Model get the
values of single-threaded runs (traces, a generation beside traces, sessions), threads sharing one
Tokenizer get its single-threaded ids, a callback calling back into the model that runs it is
refused by libnnt (the outer call fails, its values are never silently changed), a callback's
array stays valid after the model is gone, KeyboardInterrupt and SystemExit raised in a callback
reach the caller as themselves, token ids that are not 32-bit integers are refused, and a streamed
generation (its own thread) gives generate's tokens and stops when closed."""

import threading
import time

import numpy as np
import pytest

import nnt

ROWS = [[235, 244, 202, 156, 148, 193, 80, 192, 183], [97, 63, 169, 247, 160, 12, 8, 99, 1]]
SAVES = ["layers.1.mlp.expert_indices", "layers.1.layer_output", "logits"]


def run_threads(n, fn):
    """fn(i) in n threads at once; the first exception any raised is raised here."""
    errors = []

    def body(i):
        try:
            fn(i)
        except BaseException as e:  # noqa: B902 - reported to the test
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def test_threads_share_a_model(example_model):
    want = example_model.trace(ROWS, save=SAVES)
    wrong = []

    def work(i):
        for k in range(15):
            rows = ROWS if (i + k) % 2 == 0 else ROWS[::-1]
            got = example_model.trace(rows, save=SAVES)
            for key in SAVES:
                ref = want[key] if rows is ROWS else want[key][::-1]
                if not np.array_equal(got[key], ref):
                    wrong.append((i, k, key))

    run_threads(4, work)
    assert wrong == []


def test_generation_beside_traces(example_model):
    want_tokens = example_model.generate(ROWS, 6).tokens
    want = example_model.trace(ROWS, save=SAVES)
    wrong = []

    def work(i):
        for _ in range(6):
            if i == 0:
                if not np.array_equal(example_model.generate(ROWS, 6).tokens, want_tokens):
                    wrong.append("tokens")
            else:
                got = example_model.trace(ROWS, save=SAVES)
                wrong.extend(k for k in SAVES if not np.array_equal(got[k], want[k]))

    run_threads(3, work)
    assert wrong == []


def test_sessions_in_threads(example_model):
    def run_session():
        s = example_model.session(2, 64)
        first = s.forward(ROWS, save=["logits"])["logits"].copy()
        nxt = s.forward([[5], [6]], save=["logits"])["logits"].copy()
        return first, nxt

    want = run_session()
    wrong = []

    def work(i):
        for _ in range(5):
            got = run_session()
            wrong.extend(j for j in range(2) if not np.array_equal(got[j], want[j]))

    run_threads(3, work)
    assert wrong == []


def test_threads_share_a_tokenizer(example_model):
    tok = nnt.Tokenizer(example_model.path)
    texts = ["The people of the United States shall have a new birth of freedom.",
             "freedom freedom of the people, by the people", "caf\u00e9 na\u00efve \u2014 1234.5", "  spaces\tand\nlines "]
    want = [tok.encode(t) for t in texts]
    want_text = [tok.decode(w) for w in want]
    tok = nnt.Tokenizer(example_model.path)  # a fresh word cache, filled under the threads
    wrong = []

    def work(i):
        for _ in range(100):
            for t, w, wt in zip(texts, want, want_text):
                ids = tok.encode(t)
                if ids != w or tok.decode(ids) != wt:
                    wrong.append(t)

    run_threads(4, work)
    assert wrong == []


def test_callback_reentering_the_model_is_refused(example_model):
    want = example_model.trace(ROWS, save=["logits"])["logits"]
    seen = []

    def reenter(v):
        try:
            example_model.trace(ROWS, save=["logits"])
        except nnt.Error as e:
            seen.append(str(e))
            raise

    with pytest.raises(nnt.Error) as info:
        example_model.trace(ROWS, save=["logits"], edits=[("layers.1.layer_input", reenter)])
    assert seen and "busy" in seen[0] and "edit callback of nnt_request_run" in seen[0]
    assert "busy" in str(info.value)
    # the model runs again, with its values
    assert np.array_equal(example_model.trace(ROWS, save=["logits"])["logits"], want)


def test_callback_swallowing_the_refusal_leaves_values_alone(example_model):
    want = example_model.trace(ROWS, save=["logits"])["logits"]
    caught = []

    def reenter(v):
        try:
            example_model.trace(ROWS, save=["logits"])
        except nnt.Error as e:
            caught.append(e)

    got = example_model.trace(ROWS, save=["logits"], edits=[("layers.1.layer_input", reenter)])["logits"]
    assert len(caught) == 1
    assert np.array_equal(got, want)


def test_callback_array_outlives_the_model():
    from conftest import EXAMPLE
    m = nnt.Model(EXAMPLE)
    kept = []
    m.trace(ROWS, edits=[("layers.1.layer_output", lambda v: kept.append(v))])
    want = kept[0].copy()
    del m
    import gc
    gc.collect()
    assert np.array_equal(kept[0], want)  # its own memory: reading it is safe
    kept[0] += 1.0  # and writable


def test_callback_writes_back(example_model):
    zero = example_model.trace(ROWS, save=["logits"], edits=[("layers.1.mlp.expert_weights", "zero")])["logits"]

    def zero_in_place(v):
        v[...] = 0

    assert np.array_equal(
        example_model.trace(ROWS, save=["logits"], edits=[("layers.1.mlp.expert_weights", zero_in_place)])["logits"], zero)


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_interrupt_in_callback_reaches_the_caller(example_model, exc):
    def stop(v):
        raise exc()

    with pytest.raises(exc):
        example_model.trace(ROWS, save=["logits"], edits=[("layers.1.layer_input", stop)])
    example_model.trace(ROWS, save=["logits"])  # and the model still runs


@pytest.mark.parametrize("ids,words", [
    ([[1.5, 2.0]], "integer"),
    ([[2**32 + 7, 3]], "4294967303"),
    ([[-2**31, 3]], "-2147483648"),
    (np.array([[1.0, 2.0]]), "integer"),
])
def test_ids_must_be_integers_in_range(example_model, ids, words):
    with pytest.raises(nnt.Error) as info:
        example_model.trace(ids, save=["logits"])
    assert words in str(info.value)


def test_decode_refuses_wide_and_float_ids(example_model):
    tok = example_model.tokenizer
    with pytest.raises(nnt.Error, match="outside the 32-bit range"):
        tok.decode([2**32 + 7])
    with pytest.raises(nnt.Error, match="must be integers"):
        tok.decode(np.array([1.5]))


def test_shard_truncated_under_a_model(tmp_path):
    """A shard truncated while a Model maps it: the next trace raises nnt.Error naming the file
    (the package installs libnnt's SIGBUS handler), where the interpreter died of a bus error."""
    import shutil
    from conftest import EXAMPLE
    d = tmp_path / "ckpt"
    shutil.copytree(EXAMPLE, d)
    m = nnt.Model(str(d))
    m.trace(ROWS, save=["logits"])
    shard = d / "model.safetensors"
    with open(shard, "r+b") as f:
        f.truncate(4096)
    with pytest.raises(nnt.Error, match="model.safetensors"):
        m.trace(ROWS, save=["logits"])


def test_generate_stream(example_model):
    """Model.generate_stream's steps are the tokens generate returns, stopped rows as -1, its result
    is generate's; a stream closed early stops its generation (libnnt's progress handler) long
    before its end, and the model then runs as before on this thread and others."""
    want = example_model.generate(ROWS, 6, save=["logits[:, -1]"], ignore_eos=True)
    s = example_model.generate_stream(ROWS, 6, save=["logits[:, -1]"], ignore_eos=True)
    steps = list(s)
    assert [k for k, _ in steps] == list(range(6))
    assert np.array_equal(np.stack([t for _, t in steps], axis=1), want.tokens)
    assert np.array_equal(s.result.tokens, want.tokens)
    assert all(np.array_equal(s.result.values[k], v) for k, v in want.values.items())
    stop = int(want.tokens[0, 1])
    stopped = example_model.generate(ROWS, 6, stop_ids=[stop], ignore_eos=True).tokens
    got = np.stack([t for _, t in example_model.generate_stream(ROWS, 6, stop_ids=[stop], ignore_eos=True)], axis=1)
    assert np.array_equal(got, stopped[:, :got.shape[1]]) and got[0, 2:].tolist() == [-1] * (got.shape[1] - 2)

    long = example_model.generate_stream(ROWS * 4, 5000, ignore_eos=True)
    for k, _ in long:
        if k == 3:
            break
    t0 = time.monotonic()
    long.close()  # returns once the generation stopped, well before its 5000 steps
    assert long.result is None and time.monotonic() - t0 < 5
    run_threads(2, lambda i: np.testing.assert_array_equal(example_model.generate(ROWS, 6, ignore_eos=True).tokens,
                                                           want.tokens))
