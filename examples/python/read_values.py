"""read_values.py - the Python twin of examples/read_values.c: reads standard values out of one
forward pass - the residual stream entering the last block, the router's logits, the weight and
index of each chosen expert, the logits and an attention pattern - and prints the experts the
last token went to. Fails when a value is missing or the routing weights are not probabilities.

    python3 read_values.py MODEL_DIR TOKEN_ID...

libnnt is found as nnt finds it (NNT_LIBRARY, the `nnt` command on PATH, ...)."""

import sys

import numpy as np

import nnt


def main(argv):
    if len(argv) < 3:
        print(f"usage: {argv[0]} MODEL_DIR TOKEN_ID...", file=sys.stderr)
        return 2
    model = nnt.Model(argv[1])
    ids = [int(x) for x in argv[2:]]
    last = model.num_layers - 1
    paths = [f"layers.{last}.layer_input", f"layers.{last}.mlp.router_logits", f"layers.{last}.mlp.expert_weights",
             f"layers.{last}.mlp.expert_indices", "logits"]
    # the attention pattern is served by softmax-attention blocks only: ask the model which
    pattern = next((f"layers.{i}.self_attn.attention_probabilities" for i in range(model.num_layers)
                    if model.value_info(f"layers.{i}.self_attn.attention_probabilities")["served"]), None)
    out = model.trace(ids, save=paths + ([pattern] if pattern else []))
    for p in paths + ([pattern] if pattern else []):
        v = out[p]
        print(f"{p:36s} {'None' if v is None else f'{v.dtype} {list(v.shape)}'}")
        if v is None:
            print(f"read_values: {p} is None", file=sys.stderr)
            return 1
    w, idx = out[paths[2]][0, -1], out[paths[3]][0, -1]
    print(f"last token, block {last}:" + "".join(f"  expert {int(e)} (weight {float(x):.4f})" for e, x in zip(idx, w))
          + f"  sum {float(w.sum()):.4f}")
    if not (np.all(w >= 0) and np.all(np.isfinite(w))):
        print("read_values: routing weights are not non-negative numbers", file=sys.stderr)
        return 1
    if pattern:
        rows = out[pattern].sum(axis=-1)
        if not np.allclose(rows, 1.0, atol=1e-5):
            print(f"read_values: {pattern} rows do not sum to 1", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
