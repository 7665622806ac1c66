#!/usr/bin/env bash
# make-readme-images.sh - draws README's pictures (docs/images/*.png) from the embedded tiny
# MiniMax-M2 with the nnt command's --plot: the logit lens, a patching sweep, one block's attention
# pattern and its routing. Run from the repository root after building:
#   scripts/make-readme-images.sh [build/nnt]
set -euo pipefail
nnt=${1:-build/nnt}
model=examples/tiny-minimax-m2
out=docs/images
mkdir -p "$out"
prompt="The people of the United States"
"$nnt" lens --model "$model" --prompt "$prompt" --plot "$out/lens.png" > /dev/null
"$nnt" patch --model "$model" --clean "The people of the nation" --corrupt "The people of the people" \
  --metric logit-diff:97,109 --plot "$out/patch.png" > /dev/null
"$nnt" trace --model "$model" --prompt "$prompt" --save layers.1.self_attn.attention_probabilities \
  --plot "$out/attention.png" > /dev/null
"$nnt" trace --model "$model" --prompt "$prompt" --save layers.1.mlp.expert_weights --plot "$out/routing.png" > /dev/null
ls -l "$out"
