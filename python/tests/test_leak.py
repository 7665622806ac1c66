"""test_leak.py - 1,000 traces (saves, data edits and a callback edit, results dropped) leave the
process's resident memory where it was after a warm-up, within a bound far below what keeping
any one trace's buffers would add."""

import gc
import os

import numpy as np


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_no_leak_over_1000_traces(example_model):
    ids = [[235, 244, 202, 156, 148, 193, 80, 192, 183, 124, 97, 63, 169, 247, 160, 3]]
    vec = np.ones(64, np.float32)
    save = ["layers.*.layer_output", "layers.*.self_attn.attention_probabilities", "logits"]

    def halve(v):
        v *= np.float32(0.5)

    def one():
        out = example_model.trace(ids, save=save, edits=[("layers.0.mlp.expert_weights", halve),
                                                         ("layers.1.layer_output", "add", vec),
                                                         ("layers.2.mlp.expert_weights", "zero")])
        return sum(v.nbytes for v in out.values())

    for _ in range(100):
        per_trace = one()
    gc.collect()
    before = rss_bytes()
    for _ in range(1000):
        one()
    gc.collect()
    grown = rss_bytes() - before
    # keeping each trace's saved values would add 1000 * per_trace (about 40 MB), over 8x the bound
    assert per_trace * 1000 > 8 * 4 * 2**20
    print(f"RSS grew {grown / 2**10:.0f} KiB over 1000 traces of {per_trace} bytes of values")
    assert grown < 4 * 2**20, f"RSS grew {grown / 2**20:.1f} MiB over 1000 traces"
