"""logit_lens.py - the Python twin of examples/logit_lens.c: reads every block's output through the
final norm and lm_head (model.lens) and prints, at the last position, each block's top token and
the probability the lens gives the model's final prediction; checks that the last block's lens is
the model's own prediction.

    python3 logit_lens.py MODEL_DIR TOKEN_ID..."""

import sys

import numpy as np

import nnt


def main(argv):
    if len(argv) < 3:
        print(f"usage: {argv[0]} MODEL_DIR TOKEN_ID...", file=sys.stderr)
        return 2
    model = nnt.Model(argv[1])
    ids = [int(x) for x in argv[2:]]
    probs = model.trace(ids, save=["next_token_probs"])["next_token_probs"][0]
    final = int(np.argmax(probs))
    print(f"model's prediction after the last token: {final} (p = {probs[final]:.4f})")
    lens = model.lens(ids, positions=[-1])[:, 0, 0]  # [layers, vocab] at the last position
    print(f"block  top token  p(top)   p({final})")
    for layer, row in enumerate(lens):
        top = int(np.argmax(row))
        print(f"{layer:5d}  {top:9d}  {row[top]:.4f}   {row[final]:.4f}")
    if int(np.argmax(lens[-1])) != final:
        print(f"logit_lens: the last block's lens ({int(np.argmax(lens[-1]))}) is not the model's prediction ({final})",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
