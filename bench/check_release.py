"""check_release.py - do nnt on a release-layout checkpoint and transformers on its dequantised copy
compute the same thing? For a directory make_models.py --layout release wrote, runs one prompt
through nnt (the `nnt trace` command, saving the logits) on DIR/release and through transformers in
float32 on DIR/fp32, and prints the largest logit difference. Both read the same weights, so the
difference is float32 rounding (about 1e-6 of logits of order one); a wrong scale grid or a
misread tensor shows as differences of order one. Exit status 1 when it exceeds --tolerance.

    python bench/check_release.py DIR [--nnt build/nnt] [--config INI] [--tokens 24] [--tolerance 1e-3]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", type=Path)
    ap.add_argument("--nnt", type=Path, default=ROOT / "build" / "nnt")
    ap.add_argument("--config", type=Path, help="nnt's INI file (default: the build tree's)")
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--tolerance", type=float, default=1e-3)
    args = ap.parse_args()
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    vocab = json.loads((args.dir / "release" / "config.json").read_text())["vocab_size"]
    ids = [1 + (7919 * i + 13) % (vocab - 1) for i in range(args.tokens)]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "logits.safetensors"
        cmd = [str(args.nnt), "trace", "--model", str(args.dir / "release"), "--tokens", " ".join(map(str, ids)),
               "--save", "logits", "--out", str(out)]
        if args.config:
            cmd[2:2] = ["--config", str(args.config)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            print(f"check_release: {' '.join(cmd[:4])} ... failed:\n{res.stderr.strip()}", file=sys.stderr)
            return 2
        ours = load_file(str(out))["logits"].float()
    model = AutoModelForCausalLM.from_pretrained(args.dir / "fp32", dtype=torch.float32, attn_implementation="eager")
    with torch.inference_mode():
        ref = model.eval()(torch.tensor([ids])).logits.float()
    ours = ours.reshape(ref.shape)
    diff = (ours - ref).abs().max().item()
    agree = (ours.argmax(-1) == ref.argmax(-1)).float().mean().item()
    print(json.dumps({"dir": str(args.dir), "tokens": args.tokens, "max_abs_diff": diff,
                      "max_abs_logit": ref.abs().max().item(), "argmax_agreement": agree}))
    return 0 if diff <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
