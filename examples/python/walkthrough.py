# walkthrough.py - a notebook-style tour of the nnt Python package on the embedded tiny MiniMax-M2
# checkpoint (examples/tiny-minimax-m2): read the routing, ablate an expert, run the logit lens,
# steer, patch a value from one prompt into another, generate. Each `# %%` starts a cell (VS Code,
# Jupytext and Spyder run them one by one); run as a script, it checks what each cell claims and
# exits non-zero if a claim fails.
#
#     python3 examples/python/walkthrough.py [MODEL_DIR]
#
# libnnt is found as nnt finds it: NNT_LIBRARY, else the `nnt` command on PATH (e.g.
# PATH=$PWD/build:$PATH after building), else the system's library path.

# %% Load the model and look at it
import os
import sys

import numpy as np

import nnt

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "tiny-minimax-m2")

model = nnt.Model(MODEL)
print(repr(model), "- libnnt:", model.lib.nnt_path, "- configuration:", model.config_path)
print(model.info)
served = [r for r in model.support() if r.served]
print(f"{len(served)} standard values served, e.g.", ", ".join(sorted({r.value for r in served})[:8]), "...")

with open(os.path.join(MODEL, "prompt_text.txt"), encoding="utf-8") as f:
    prompt = f.read().rstrip("\n")
ids = model.tokenize(prompt)
show = lambda i: f"{i}:{model.tokenizer.token_bytes(i).decode('utf-8', 'replace')!r}"  # noqa: E731
print("prompt tokens:", " ".join(show(i) for i in ids))

# %% 1. Read the routing: which experts each token goes to, and with what weight
L = model.num_layers
out = model.trace(prompt, save=["layers.*.mlp.expert_indices", "layers.*.mlp.expert_weights", "next_token_probs"])
for layer in range(L):
    idx = out[f"layers.{layer}.mlp.expert_indices"][0]  # [seq, top_k]
    w = out[f"layers.{layer}.mlp.expert_weights"][0]
    use = np.bincount(idx.ravel(), minlength=model.info.num_experts)
    print(f"block {layer}: tokens per expert {use.tolist()}; last token -> experts {idx[-1].tolist()} "
          f"with weights {[round(float(x), 4) for x in w[-1]]}")
    # each token picks top_k distinct experts, and MiniMax-M2 normalises the chosen weights to sum to 1
    assert all(len(set(row)) == model.info.top_k for row in idx.tolist())
    assert np.allclose(w.sum(-1), 1.0, atol=1e-5)
clean_probs = out["next_token_probs"][0]
top = int(np.argmax(clean_probs))
print("next token:", show(top), f"p = {clean_probs[top]:.4f}")

# %% 2. Ablate an expert: the busiest expert of block 1 gets weight 0 wherever it is routed
LAYER = 1
busiest = int(np.bincount(out[f"layers.{LAYER}.mlp.expert_indices"].ravel()).argmax())
save = [f"layers.{LAYER}.mlp.expert_weights", f"layers.{LAYER}.mlp.expert_indices", "next_token_probs"]
ablated = model.ablate_expert(prompt, LAYER, busiest, save=save)
hit = ablated[f"layers.{LAYER}.mlp.expert_indices"] == busiest
assert np.all(ablated[f"layers.{LAYER}.mlp.expert_weights"][hit] == 0)
assert np.array_equal(ablated[f"layers.{LAYER}.mlp.expert_weights"][~hit], out[f"layers.{LAYER}.mlp.expert_weights"][~hit])
tv = 0.5 * float(np.abs(ablated["next_token_probs"][0] - clean_probs).sum())
print(f"expert {busiest} of block {LAYER} ablated in {int(hit.sum())} slots: p(next = {show(top)}) "
      f"{clean_probs[top]:.4f} -> {ablated['next_token_probs'][0, top]:.4f}, total variation {tv:.4f}")
# the same ablation as data (a masked fill) and as a Python callback give the same forward
masked = model.trace(prompt, save=["logits"], edits=[
    (f"layers.{LAYER}.mlp.expert_weights", "masked_fill", f"layers.{LAYER}.mlp.expert_indices", busiest, 0.0)])
routed = model.trace(prompt, save=[f"layers.{LAYER}.mlp.expert_indices"])[f"layers.{LAYER}.mlp.expert_indices"]


def zero_busiest(weights):  # a writable view of nnt's own buffer, during the forward
    weights[routed == busiest] = 0.0


by_callback = model.trace(prompt, save=["logits"], edits=[(f"layers.{LAYER}.mlp.expert_weights", zero_busiest)])
assert np.array_equal(masked["logits"], by_callback["logits"])
assert np.array_equal(model.ablate_expert(prompt, LAYER, busiest, save=["logits"])["logits"], masked["logits"])

# %% 3. The logit lens: every block's output read through the final norm and lm_head
lens = model.lens(prompt)  # [layers, batch, seq, vocab] probabilities
for layer in range(L):
    tops = lens[layer, 0].argmax(-1)
    print(f"block {layer}: top token at the last 6 positions:", " ".join(show(int(t)) for t in tops[-6:]))
# the last block's lens is the model's own prediction
assert int(lens[-1, 0, -1].argmax()) == top
assert np.allclose(lens[-1, 0, -1], clean_probs, atol=1e-6)

# %% 4. Steer: a contrastive vector between two prompts, added to block 1's output
a, b = "The people shall have justice.", "The people shall have liberty."
path = f"layers.{LAYER}.layer_output"
va = model.trace(a, save=[path])[path][0].mean(0)
vb = model.trace(b, save=[path])[path][0].mean(0)
vec = (va - vb).astype(np.float32)
FACTOR = 4.0
before = model.trace(prompt, save=[path, "next_token_probs"])
steered = model.steer(prompt, LAYER, vec, factor=FACTOR, save=[path, "next_token_probs"])
moved = float(np.abs(steered[path] - (before[path] + np.float32(FACTOR) * vec)).max())
s_top = int(np.argmax(steered["next_token_probs"][0]))
print(f"|v| = {np.linalg.norm(vec):.3f}; next token {show(top)} -> {show(s_top)}; block output off by {moved:.2g}")
assert moved <= 1e-4 * (1 + FACTOR * float(np.linalg.norm(vec)))
# steering only the last position (positions count from the end when negative)
last_only = model.steer(prompt, LAYER, vec, factor=FACTOR, positions=[-1], save=[path])
assert np.array_equal(last_only[path][:, :-1], before[path][:, :-1])

# %% 5. Patch: a value from one prompt's run set into another's
clean_ids, corrupt_ids = model.tokenize(a), model.tokenize(b)
assert len(clean_ids) == len(corrupt_ids)  # same length, so whole values can be swapped
clean = model.trace(clean_ids, save=[path, "logits", "next_token_probs"])
corrupt = model.trace(corrupt_ids, save=["next_token_probs"])
# the whole residual stream after block 1 from the clean run: everything downstream is the clean run's
patched = model.trace(corrupt_ids, save=["logits"], edits=[(path, "set", clean[path])])
assert np.array_equal(patched["logits"], clean["logits"])
# one position at a time (a Python callback writes that position only): where does the difference live?
target = int(np.argmax(clean["next_token_probs"][0]))
print(f"clean next {show(target)}: p = {clean['next_token_probs'][0, target]:.4f} clean, "
      f"{corrupt['next_token_probs'][0, target]:.4f} corrupted")
for pos in range(len(clean_ids)):
    def put(v, pos=pos):
        v[:, pos] = clean[path][:, pos]

    p = model.trace(corrupt_ids, save=["next_token_probs"], edits=[(path, put)])["next_token_probs"][0, target]
    print(f"  patch block {LAYER}'s output at position {pos:2d} ({show(clean_ids[pos])}): p = {p:.4f}")
# tokens before the first difference are the same in both prompts, so patching them changes nothing
first_diff = next(i for i, (x, y) in enumerate(zip(clean_ids, corrupt_ids)) if x != y)
same = model.trace(corrupt_ids, save=["next_token_probs"],
                   edits=[(path, lambda v: v.__setitem__((slice(None), slice(0, first_diff)),
                                                         clean[path][:, :first_diff]))])
assert np.allclose(same["next_token_probs"], corrupt["next_token_probs"], atol=1e-6)

# %% 6. Generate, with and without the steering vector at every step
plain = model.generate(prompt, 8)
steered_gen = model.generate(prompt, 8, edits=[nnt.Steer(LAYER, vec, FACTOR)], save=["layers.2.mlp.expert_indices"])
print("continuation:        ", repr(plain.text[0]))
print("steered continuation:", repr(steered_gen.text[0]))
routing = steered_gen.steps("layers.2.mlp.expert_indices")
print("block 2's experts for the newest token at each step:", [r[0, -1].tolist() for r in routing])
assert len(routing) == int((steered_gen.tokens[0] != -1).sum())
print("walkthrough: every check passed")
