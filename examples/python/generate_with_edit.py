"""generate_with_edit.py - the Python twin of examples/generate_with_edit.c: greedy generation
with an intervention at every step - a Python callback halves block 0's output at each step (the
prompt, then every new token) - and the last block's routing saved at each step. Prints the clean
and edited continuations and checks that the edit ran once per step on the shapes a cached
generation has.

    python3 generate_with_edit.py MODEL_DIR N_NEW TOKEN_ID..."""

import sys

import numpy as np

import nnt


def main(argv):
    if len(argv) < 4 or int(argv[2]) < 1:
        print(f"usage: {argv[0]} MODEL_DIR N_NEW TOKEN_ID...", file=sys.stderr)
        return 2
    model = nnt.Model(argv[1])
    n, ids = int(argv[2]), [int(x) for x in argv[3:]]
    seq_of_call = []

    def halve(v):
        seq_of_call.append(v.shape[1])  # the position axis at this step
        v *= np.float32(0.5)

    clean = model.generate(ids, n, ignore_eos=True)
    last = model.num_layers - 1
    routing = f"layers.{last}.mlp.expert_indices"
    edited = model.generate(ids, n, ignore_eos=True, save=[routing], edits=[("layers.0.layer_output", halve)])
    print("clean:  ", " ".join(map(str, clean.tokens[0])))
    print("edited: ", " ".join(map(str, edited.tokens[0])))
    steps = edited.steps(routing)
    ok = len(seq_of_call) == n and seq_of_call[0] == len(ids) and all(s == 1 for s in seq_of_call[1:])
    ok = ok and len(steps) == n
    print(f"the edit ran {len(seq_of_call)} times ({n} steps); block {last}'s routing saved at each step:",
          " ".join(str(int(r[0, -1, 0])) for r in steps))
    if not ok:
        print("generate_with_edit: the edit or the saves did not run once per step", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
