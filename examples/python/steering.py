"""steering.py - the Python twin of examples/steering.c: activation steering with a contrastive
vector, the mean of block LAYER's layer_output over one prompt minus its mean over another, added
with a factor to that block's output at every position (model.steer). Prints the next-token
prediction before and after and checks that the block's output moved by exactly factor * vector.

    python3 steering.py MODEL_DIR LAYER FACTOR TOKEN_ID... -- TOKEN_ID..."""

import sys

import numpy as np

import nnt


def main(argv):
    if len(argv) < 7 or "--" not in argv[4:] or argv[-1] == "--" or argv[4] == "--":
        print(f"usage: {argv[0]} MODEL_DIR LAYER FACTOR TOKEN_ID... -- TOKEN_ID...", file=sys.stderr)
        return 2
    sep = len(argv) - 1 - argv[::-1].index("--")
    model = nnt.Model(argv[1])
    layer, factor = int(argv[2]), float(argv[3])
    pos, neg = [int(x) for x in argv[4:sep]], [int(x) for x in argv[sep + 1:]]
    path = f"layers.{layer}.layer_output"
    save = [path, "next_token_probs"]
    a, b = model.trace(pos, save=save), model.trace(neg, save=save)
    hidden = model.hidden_size
    vec = (a[path].reshape(-1, hidden).mean(axis=0) - b[path].reshape(-1, hidden).mean(axis=0)).astype(np.float32)
    norm = float(np.linalg.norm(vec))
    print(f"steering vector at block {layer}: |v| = {norm:.4f}, factor {factor:.2f}")
    steered = model.steer(pos, layer, vec, factor=factor, save=save)
    worst = float(np.max(np.abs(steered[path] - (a[path] + np.float32(factor) * vec))))
    p0, p1 = a["next_token_probs"][0], steered["next_token_probs"][0]
    t0, t1 = int(np.argmax(p0)), int(np.argmax(p1))
    print(f"next token: {t0} (p = {p0[t0]:.4f}) before, {t1} (p = {p1[t1]:.4f}) after; "
          f"block output off by at most {worst:.2g}")
    if worst > 1e-4 * (1 + abs(factor) * norm):
        print("steering: the block's output is not the clean output plus factor * vector", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
