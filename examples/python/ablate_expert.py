"""ablate_expert.py - the Python twin of examples/ablate_expert.c: zeroes one expert in one block
(its weight wherever the router chose it), shows how the next-token distribution moves, and
checks that every weight of that expert was zeroed and that slots routed elsewhere kept theirs.

    python3 ablate_expert.py MODEL_DIR LAYER EXPERT TOKEN_ID..."""

import sys

import numpy as np

import nnt


def main(argv):
    if len(argv) < 5:
        print(f"usage: {argv[0]} MODEL_DIR LAYER EXPERT TOKEN_ID...", file=sys.stderr)
        return 2
    model = nnt.Model(argv[1])
    layer, expert, ids = int(argv[2]), int(argv[3]), [int(x) for x in argv[4:]]
    w, idx = f"layers.{layer}.mlp.expert_weights", f"layers.{layer}.mlp.expert_indices"
    save = [w, idx, "next_token_probs"]
    clean = model.trace(ids, save=save)
    ablated = model.ablate_expert(ids, layer, expert, save=save)
    chosen = ablated[idx] == expert
    want = np.where(chosen, 0.0, clean[w])
    bad = int(np.sum(ablated[w] != want))
    print(f"block {layer}, expert {expert}: chosen in {int(chosen.sum())} of {chosen.size} slots; "
          f"slots whose weight is wrong after the ablation: {bad}")
    p0, p1 = clean["next_token_probs"][0], ablated["next_token_probs"][0]
    best = int(np.argmax(p0))
    tv = 0.5 * float(np.abs(p0.astype(np.float64) - p1).sum())
    print(f"top next token {best}: p = {p0[best]:.4f} clean, {p1[best]:.4f} ablated; total variation {tv:.4f}")
    if bad:
        print(f"ablate_expert: {bad} weights were not zeroed or changed where they should not", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
