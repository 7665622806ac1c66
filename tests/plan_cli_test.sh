#!/usr/bin/env bash
# plan_cli_test.sh NNT FIXTURES TMP - checks `nnt plan` end to end: the table on the released
# configurations and on a sharded fixture, the defaults, and the errors (exit codes, messages).
set -u
nnt=$1 fixtures=$2 tmp=$3
mkdir -p "$tmp/plan_no_config"
rel=$fixtures/released_configs
fails=0
check() { # name expected_rc pattern command...
  local name=$1 want=$2 pattern=$3; shift 3
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" != "$want" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL $name: rc=$rc (want $want), pattern '$pattern' in:"; echo "$out" | head -20
    fails=$((fails + 1))
  else
    echo "ok   $name"
  fi
}

check "a release's config.json alone: computed weights" 0 "weights: computed from config.json" \
  "$nnt" plan --model "$rel/minimax_m2" --ranks 4 --memory 256
check "one line per rank, blocks 0.. first" 0 "^0 +0-[0-9]+ " "$nnt" plan --model "$rel/minimax_m2" --ranks 4 --memory 256
check "the last rank ends at the last block" 0 "^3 +[0-9]+-61 " "$nnt" plan --model "$rel/minimax_m2" --ranks 4 --memory 256
check "every rank fits 256 GB" 0 "every rank fits" "$nnt" plan --model "$rel/minimax_m2" --ranks 4 --memory 256
check "too little memory: NO" 0 "^0 +0-30 .* NO$" "$nnt" plan --model "$rel/minimax_m2" --ranks 2 --memory 100
check "too little memory: the verdict" 0 "some ranks do not fit" "$nnt" plan --model "$rel/minimax_m2" --ranks 2 --memory 100
check "cuda defaults to 141 GB per rank" 0 "on cuda, 141.00 GB per rank" \
  "$nnt" plan --model "$rel/kimi_linear" --ranks 8 --device cuda
check "context and batch in the caches line" 0 "caches: 1000 tokens x 3 rows" \
  "$nnt" plan --model "$rel/mimo_v2_flash" --ranks 2 --context 1000 --batch 3
check "a sharded fixture: exact, from its headers" 0 "weights: exact, from the safetensors headers \(3 files\)" \
  "$nnt" plan --model "$fixtures/minimax_m2/bf16" --ranks 3
check "more ranks than blocks" 1 "63 ranks for 62 blocks" "$nnt" plan --model "$rel/minimax_m2" --ranks 63
check "a folder without config.json" 1 "plan_no_config/config.json: cannot open" \
  "$nnt" plan --model "$tmp/plan_no_config" --ranks 1
# Qwen3-MoE's family is not among the build's (tests/install_test.sh plans it with its plugin):
# its headers give the weights, and the caches are not known
check "a family not loaded: the headers' weights" 0 "weights: exact, from the safetensors headers \(1 file\): 274.62 kB" \
  "$nnt" plan --model "$fixtures/qwen3_moe" --ranks 1
check "a family not loaded: caches not known" 0 "caches: not known - no loaded family plugin serves Qwen3MoeForCausalLM" \
  "$nnt" plan --model "$fixtures/qwen3_moe" --ranks 1
mkdir -p "$tmp/plan_q3_config"
cp "$fixtures/qwen3_moe/config.json" "$tmp/plan_q3_config/"
check "no shards and no cost model" 1 "plan_q3_config: no safetensors files .* no loaded family plugin serves Qwen3MoeForCausalLM" \
  "$nnt" plan --model "$tmp/plan_q3_config" --ranks 1
check "--config names the runtime" 1 "nnt plan: cannot start: .*no-such.ini" \
  "$nnt" plan --model "$rel/minimax_m2" --ranks 1 --config "$tmp/no-such.ini"
check "--ranks is needed" 2 "needs --ranks N" "$nnt" plan --model "$rel/minimax_m2"
check "--ranks 0" 2 "--ranks '0': expected a whole number from 1" "$nnt" plan --model "$rel/minimax_m2" --ranks 0
check "--device gpu" 2 "--device 'gpu': expected cpu or cuda" "$nnt" plan --model "$rel/minimax_m2" --ranks 1 --device gpu
check "--memory -1" 2 "--memory '-1': expected gigabytes" "$nnt" plan --model "$rel/minimax_m2" --ranks 1 --memory -1
check "--context x" 2 "--context 'x': expected tokens per row" "$nnt" plan --model "$rel/minimax_m2" --ranks 1 --context x
check "an unknown option" 2 "unknown option '--rank'" "$nnt" plan --model "$rel/minimax_m2" --rank 1
# --grad on the released MiniMax-M2 (62 blocks, hidden 3072, 48 heads of 128, 8 of 256 experts of
# 1536), 1 row x 1000 tokens, by hand from docs/gradients.md's per-token count of one block:
#   4*3072 + 4*3072 + 4 + 4 (streams, norms)          =  24584
#   4*48*128 + 2*48*128 (q, k norms and scores; v)    =  36864
#   2*48*2000 (probabilities twice, keys <= 2T)       = 192000
#   256 + 8 (router) + 9*(2*1536 + 3072 + 1) (rows)   =  55569
#   8*128 (compressors' bound)                        =   1024   -> 310041 floats a token
# a block: 1000 x 310041 x 4 = 1240164000 bytes; the readout 1000 x 3*3072 x 4 = 36864000;
# keep everything 62 x 1240164000 + 36864000 = 76927032000; recompute 62 x 12288000 (the block
# inputs) + 1240164000 + 36864000 = 2038884000
check "--grad: keep everything, by hand" 0 "keep everything: 76.93 GB \(76927032000 bytes\) kept \(1.24 GB \(1240164000 bytes\) a block" \
  "$nnt" plan --grad --model "$rel/minimax_m2" --context 1000 --memory 100
check "--grad: recompute, by hand" 0 "recompute: 2.04 GB \(2038884000 bytes\) held \(62 block inputs of 0.01 GB \(12288000 bytes\)" \
  "$nnt" plan --grad --model "$rel/minimax_m2" --context 1000 --memory 100
check "--grad: keep everything fits 100 GB" 0 "bound: 100.00 GB .*\(--memory\): keep everything$" \
  "$nnt" plan --grad --model "$rel/minimax_m2" --context 1000 --memory 100
check "--grad: recompute under 10 GB" 0 "bound: 10.00 GB .*: recompute block by block$" \
  "$nnt" plan --grad --model "$rel/minimax_m2" --context 1000 --memory 10
check "--grad: refused under 1 GB" 0 "refused: even recomputation exceeds the bound" \
  "$nnt" plan --grad --model "$rel/minimax_m2" --context 1000 --memory 1
check "--grad: the peaks against the forward's" 0 "^peak: the forward's activations .*keep everything [0-9.]+x that, recompute [0-9.]+x$" \
  "$nnt" plan --grad --model "$rel/minimax_m2" --context 1000 --memory 100
check "--grad: the gradient memory" 0 "^gradient memory: 1.25 GB \(1252452000 bytes\)" \
  "$nnt" plan --grad --model "$rel/minimax_m2" --context 1000 --memory 100
check "--grad --context 0" 2 "--grad needs --context T" "$nnt" plan --grad --model "$rel/minimax_m2" --context 0
check "help lists plan" 0 "plan +--model DIR --ranks N" "$nnt" help

[ "$fails" = 0 ] && echo "all plan checks passed" || echo "$fails plan checks failed"
exit $((fails != 0))
