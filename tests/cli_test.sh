#!/usr/bin/env bash
# cli_test.sh NNT MODEL_DIR TMP FIXTURES WRITE_SHIM - checks the `nnt` command line end to end on the embedded model:
# outputs, exit codes and error messages.
set -u
nnt=$1 model=$2 tmp=$3 fixtures=$4 shim=$5
mkdir -p "$tmp"
fails=0
prompt=$(cat "$model/prompt.txt")
text=$(cat "$model/prompt_text.txt")
# a token with its text, as trace, lens and generate print it when the folder has a tokenizer
tok='[0-9]+ "([^"\\]|\\.)*"'
# the build tree's INI, its plugin directories made absolute, with one setting added after `backend = cpu`
ini_with() {
  local build; build=$(cd "$(dirname "$nnt")" && pwd)
  sed -e "s#^dir = #dir = $build/#" -e "s/^backend = cpu\$/backend = cpu\n$1/" "$build/nnt.ini"
}

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

same() { # name a b: two outputs that must be equal (and not empty)
  if [ -n "$2" ] && [ "$2" = "$3" ]; then echo "ok   $1"; else echo "FAIL $1: '$2' vs '$3'"; fails=$((fails + 1)); fi
}

check "trace prints values and next tokens (with their text)" 0 "top 5 next tokens, row 0:  $tok \(0\.[0-9]+\)" \
  "$nnt" trace --model "$model" --tokens "$prompt" --save layers.1.mlp.expert_weights
check "saved value line" 0 "layers.1.mlp.expert_weights +\[1, 24, 2\] +F32 +min" \
  "$nnt" trace --model "$model" --tokens "$prompt" --save 'layers[1].mlp.expert_weights'
check "two rows, one left-padded" 0 "top 5 next tokens, row 1" \
  "$nnt" trace --model "$model" --tokens "$prompt" --tokens "5 6 7" --save logits
# a row of ids from a file (white space between them, a line per few ids) is the same row as --tokens
tr ', ' '\n\n' <<<"$prompt" | paste -d ' ' - - - > "$tmp/ids.txt"
same "--tokens-file reads the row --tokens gives" \
  "$("$nnt" trace --model "$model" --tokens "$prompt" --tokens "5 6 7" --save layers.1.layer_output 2>&1)" \
  "$("$nnt" trace --model "$model" --tokens-file "$tmp/ids.txt" --tokens "5 6 7" --save layers.1.layer_output 2>&1)"
printf '3 17,42\n' > "$tmp/bad_ids.txt"
check "--tokens-file: a byte outside an id is named" 2 \
  "error: --tokens-file $tmp/bad_ids.txt \(row 0\): $tmp/bad_ids.txt: byte 2 \(id 1\): '17,42' is not a token id" \
  "$nnt" trace --model "$model" --tokens-file "$tmp/bad_ids.txt"
check "--tokens-file cannot mix with text rows" 2 "cannot be mixed with --prompt" \
  "$nnt" trace --model "$model" --tokens-file "$tmp/ids.txt" --prompt "hello"
# three blocks' outputs and the next-token distribution the top-5 line reads
check "wildcard and --out" 0 "wrote 4 values to $tmp/cli.safetensors" \
  "$nnt" trace --model "$model" --tokens "$prompt" --save 'layers.*.layer_output' --out "$tmp/cli.safetensors"
# '*': the 8 model values and 3 blocks x 20 standard ones that support marks served, 3 blocks x 16
# module values (the inputs and outputs of q/k/v_proj and q/k_norm, the two layernorms' inputs, the
# experts' 4 values by routing slot), and the printout's own next_token_probs (#1); a bad block in
# a wildcard is named before anything runs
check "--save '*' saves every served value" 0 "wrote 117 values to $tmp/all.safetensors" \
  "$nnt" trace --model "$model" --tokens "$prompt" --save '*' --out "$tmp/all.safetensors"
check "a wildcard's block out of range" 1 "path 'layers.5.\*': block 5 is out of range" \
  "$nnt" trace --model "$model" --tokens "$prompt" --save 'layers.5.*'
check "--set reads a saved value back" 0 "layers.2.layer_output" \
  "$nnt" trace --model "$model" --tokens "$prompt" --set "layers.2.layer_output=$tmp/cli.safetensors:layers.2.layer_output" --save layers.2.layer_output
check "--zero, --scale, --ablate-expert" 0 "top 5 next tokens" \
  "$nnt" trace --model "$model" --tokens "$prompt" --zero layers.0.self_attn.attention_output --scale layers.1.mlp.mlp_output=0.5 --ablate-expert 1:4
check "unknown path suggests a name" 1 "did you mean 'expert_weights'" \
  "$nnt" trace --model "$model" --tokens "$prompt" --save layers.1.mlp.expert_weight
check "value not served names the reason" 1 "no shared expert" \
  "$nnt" trace --model "$model" --tokens "$prompt" --save layers.1.mlp.shared_expert_output
check "set with a wrong shape fails before the forward" 1 "has shape \[1, 24, 64\], the value layers.0.layer_output is \[1, 3, 64\]" \
  "$nnt" trace --model "$model" --tokens "1 2 3" --set "layers.0.layer_output=$tmp/cli.safetensors:layers.2.layer_output"
check "bad token text" 2 "is not a token id" "$nnt" trace --model "$model" --tokens "1 two 3"
check "token outside the vocabulary" 1 "token id 999 at row 0" "$nnt" trace --model "$model" --tokens "1 999"
check "unknown command" 2 "unknown command 'trcae'" "$nnt" trcae --model "$model"
check "missing --model" 2 "needs --model DIR" "$nnt" print
check "missing model directory" 1 "cannot open" "$nnt" print --model "$tmp/nope"
check "bad --config" 1 "$tmp/bad.ini:1" bash -c "printf 'nonsense\n' > '$tmp/bad.ini'; '$nnt' plugins --config '$tmp/bad.ini'"
check "print groups identical blocks" 0 "\(0-2\): 3 x MiniMaxM2DecoderLayer\(" "$nnt" print --model "$model"
check "print shows standard/native names" 0 "\(mlp/block_sparse_moe\): MiniMaxM2SparseMoeBlock" "$nnt" print --model "$model"
check "support lists reasons" 0 "shared_expert_output +no +MiniMax-M2 has no shared expert" "$nnt" support --model "$model"
check "support --tsv header" 0 "^host	block	value	served	layout	axes	dtype	writable	reason" "$nnt" support --model "$model" --tsv
check "plugins" 0 "family +minimax_m2 +cpu" "$nnt" plugins
check "info: FP8 weights by encoding" 0 "FP8 e4m3 +84 tensors" "$nnt" info --model "$fixtures/minimax_m2/fp8"
check "info: FP4 experts by encoding" 0 "FP4 e2m1 \(packed\) +120 tensors" "$nnt" info --model "$fixtures/deepseek_v4/native"
check "info: held after loading" 0 "held: .* read in place, .* allocated, 0 B on the device \((0\.9|1\.0)[0-9] x the files\)" \
  "$nnt" info --model "$fixtures/deepseek_v4/native"
ini_with "precision = bf16" > "$tmp/bf16.ini"
check "precision = bf16 is named" 0 "precision bf16" "$nnt" info --config "$tmp/bf16.ini" --model "$model"
ini_with "precision = fp8" > "$tmp/p8.ini"
check "a bad precision" 1 "p8.ini:[0-9]+: family '[a-z0-9_]+' has precision = 'fp8'; expected f32 or bf16" \
  "$nnt" plugins --config "$tmp/p8.ini"
ini_with "weights = fp8" > "$tmp/w8.ini"
check "info: weights = fp8 reports what re-encoding changed" 0 \
  "re-encoded at load \(weights = fp8\): 84 weights, 1.18 MB as stored -> 295.25 KB as FP8 e4m3" \
  "$nnt" info --config "$tmp/w8.ini" --model "$model"
ini_with "weights = int4" > "$tmp/w4.ini"
check "a bad weights value" 1 "w4.ini:[0-9]+: family '[a-z0-9_]+' has weights = 'int4'; expected stored or fp8" \
  "$nnt" plugins --config "$tmp/w4.ini"
check "MiMo dense block: mixture values missing with the reason" 0 "router_logits +no +this block's MLP is dense" \
  "$nnt" support --model "$fixtures/mimo_v2_flash/fp32"
check "MiMo printout groups the two sliding blocks" 0 "\(1-2\): 2 x MiMoV2FlashDecoderLayer\(" \
  "$nnt" print --model "$fixtures/mimo_v2_flash/fp32"
check "MiMo-V2.5 printout notes MAX's selected-layer hidden states" 0 \
  "^  - MAX's selected-layer hidden states \(return_hidden_states for target_layer_ids = \[i, \.\.\.\]\) are layers\.\{i\}\.layer_output: .*before the final norm" \
  "$nnt" print --model "$fixtures/mimo_v2/fp4"
check "MiMo trace on the hub-spelled FP8 checkpoint" 0 "layers.1.self_attn.attention_keys +\[1, 2, 5, 48\]" \
  "$nnt" trace --model "$fixtures/mimo_v2_flash/fp8" --tokens "1 2 3 4 5" --save layers.1.self_attn.attention_keys

check "Kimi KDA block has no self_attn, with the reason" 0 "attention_scores +no +this block mixes tokens with Kimi Delta Attention" \
  "$nnt" support --model "$fixtures/kimi_linear/fp32"
check "a value saved by two requests: path#1, per step path@k#1" 0 "^layers.0.layer_output@2#1 +\[1, 1, 64\]" \
  "$nnt" generate --model "$model" --tokens "1 2 3" --max-new-tokens 3 --save layers.0.layer_output --save 'layers.*.layer_output'
check "Kimi's None state_input is shown" 0 "^layers.1.linear_attn.state_input +None" \
  "$nnt" trace --model "$fixtures/kimi_linear/hub" --tokens "5 6 7" --save layers.1.linear_attn.state_input --save layers.1.linear_attn.state_output --out "$tmp/none.safetensors"
if grep -aq '"none_values":"layers.1.linear_attn.state_input"' "$tmp/none.safetensors"; then echo "ok   --out lists the None value in none_values"
else echo "FAIL --out: no none_values entry"; fails=$((fails + 1)); fi
check "--save with a slice keeps [batch, hidden] per block" 0 "^layers.2.layer_output +\[2, 64\] +F32" \
  "$nnt" trace --model "$model" --tokens "$prompt" --tokens "5 6 7" --save 'layers.*.layer_output[:, -1]'
check "a slice index outside its axis, before the forward" 1 "index 7 is outside axis 1 \(num_heads\) of size 4" \
  "$nnt" trace --model "$model" --tokens "1 2 3" --save 'layers.1.self_attn.attention_probabilities[:, 7]'
check "Kimi per-token states" 0 "layers.1.linear_attn.state@2 +\[1, 2, 16, 16\]" \
  "$nnt" trace --model "$fixtures/kimi_linear/hub" --tokens "5 6 7" --save layers.1.linear_attn.state

check "DeepSeek-V4 printout: hyper-connections and the compressor" 0 "\(attention_premix\): Unavailable: a low-rank output projection" \
  "$nnt" print --model "$fixtures/deepseek_v4/native"
check "DeepSeek-V4 streams per step while generating" 0 "layers.0.layer_output@2 +\[1, 1, 4, 64\]" \
  "$nnt" generate --model "$fixtures/deepseek_v4/native" --tokens "1 2 3 4 5 6 7 8 9" --max-new-tokens 3 --save layers.0.layer_output
check "DeepSeek-V4 lens collapses the streams" 0 "^4 +[0-9]+ \(0\.[0-9]+\)" \
  "$nnt" lens --model "$fixtures/deepseek_v4/fp32" --tokens "1 2 3 4 5 6"

# --- lens, generate, steering, skipping ---
top1() { "$nnt" trace --model "$1" --tokens "$2" | sed -n 's/^top 5 next tokens, row 0:  \([0-9]*\) .*/\1/p'; }
want=$(top1 "$model" "$prompt")
check "lens table: a line per block" 0 "^2 +$tok \(0\.[0-9]+\)" "$nnt" lens --model "$model" --tokens "$prompt"
# the lens of the last block at the last position is the model's own next-token distribution
check "lens of the last block is the next-token prediction" 0 "^2 .* $want \"([^\"\\\\]|\\\\.)*\" \(0\.[0-9]+\) *$" \
  "$nnt" lens --model "$model" --tokens "$prompt"
check "lens --out writes [rows, layers, positions, vocab]" 0 \
  "wrote lens_probs \[1, 3, 24, 256\] and lens_positions \[1, 24\] to $tmp/lens.safetensors" \
  "$nnt" lens --model "$model" --tokens "$prompt" --out "$tmp/lens.safetensors"
# lens over rows: each row's table (from its 'block' line on) is the table of the row alone, at
# its own positions, padding not counted
table() { sed -n "/^row $1 /,/^row $(($1 + 1)) /p" | grep -v '^row '; }
same "lens: a left-padded row's table is the row's own" \
  "$("$nnt" lens --model "$model" --tokens "5 6 7 8" --positions 1,-1 | table 0)" \
  "$("$nnt" lens --model "$model" --tokens "$prompt" --tokens "5 6 7 8" --positions 1,-1 | table 1)"
check "lens --positions: the chosen columns of each row" 0 "^block +1 +3\$" \
  "$nnt" lens --model "$model" --tokens "$prompt" --tokens "5 6 7 8" --positions 1,-1
same "lens over rows on DeepSeek-V4's streams" \
  "$("$nnt" lens --model "$fixtures/deepseek_v4/fp32" --tokens "3 4 5 6" | table 0)" \
  "$("$nnt" lens --model "$fixtures/deepseek_v4/fp32" --tokens "1 2 3 4 5 6" --tokens "3 4 5 6" | table 1)"
check "lens --positions past every row" 2 "position 4 names no token: the longest row has 4 tokens" \
  "$nnt" lens --model "$model" --tokens "1 2" --tokens "3 4 5 6" --positions 0,4
check "lens --positions generated" 2 "'generated' names tokens after the prompt" \
  "$nnt" lens --model "$model" --tokens "1 2" --positions generated
check "--positions belongs to lens" 2 "--positions is an option of lens" \
  "$nnt" trace --model "$model" --tokens "1 2" --positions 0
check "greedy generation starts with the top next token" 0 "^new tokens, row 0: $want " \
  "$nnt" generate --model "$model" --tokens "$prompt" --max-new-tokens 4
check "generation over two rows, one left-padded" 0 "new tokens, row 1: [0-9]+ [0-9]+ [0-9]+$" \
  "$nnt" generate --model "$model" --tokens "$prompt" --tokens "5 6 7" --max-new-tokens 3
a=$("$nnt" generate --model "$model" --tokens "$prompt" --max-new-tokens 12 --temperature 1.3 --top-p 0.95 --seed 11 2>&1)
b=$("$nnt" generate --model "$model" --tokens "$prompt" --max-new-tokens 12 --temperature 1.3 --top-p 0.95 --seed 11 2>&1)
if [ -n "$a" ] && [ "$a" = "$b" ]; then echo "ok   sampling is reproducible from its seed"; else echo "FAIL sampling with one seed: '$a' vs '$b'"; fails=$((fails + 1)); fi
check "values saved at every step" 0 "layers.1.mlp.expert_indices@2 +\[1, 1, 2\]" \
  "$nnt" generate --model "$model" --tokens "$prompt" --max-new-tokens 3 --save layers.1.mlp.expert_indices --ablate-expert 1:0
# after --steps 1:1 the save runs once, at the first single-token step: [1, 1, 2], not the prompt's
check "requests limited to steps 1..1" 0 "^layers.1.mlp.expert_weights +\[1, 1, 2\] +F32 +min 0 " \
  "$nnt" generate --model "$model" --tokens "$prompt" --max-new-tokens 3 --steps 1:1 --ablate-expert 1:0 --ablate-expert 1:1 --ablate-expert 1:2 --ablate-expert 1:3 --save layers.1.mlp.expert_weights
check "--max-new-tokens is required" 2 "generate needs --max-new-tokens N" "$nnt" generate --model "$model" --tokens "1 2"
check "--top-p out of range" 2 "--top-p: '1.5' is not a number in \(0, 1\]" \
  "$nnt" generate --model "$model" --tokens "1 2" --max-new-tokens 2 --top-p 1.5

# a steering vector of 64 ones, written as a safetensors file by hand
vec="$tmp/ones.safetensors"
hdr='{"v":{"dtype":"F32","shape":[64],"data_offsets":[0,256]}}'
while [ $(( ${#hdr} % 8 )) != 0 ]; do hdr="$hdr "; done
{ printf "\\x$(printf %02x ${#hdr})\\x00\\x00\\x00\\x00\\x00\\x00\\x00"; printf '%s' "$hdr"
  for _ in $(seq 64); do printf '\x00\x00\x80\x3f'; done; } > "$vec"
plain=$("$nnt" trace --model "$model" --tokens "$prompt" | tail -1)
steered=$("$nnt" trace --model "$model" --tokens "$prompt" --steer-factor 8 --steer "0:2=$vec" | tail -1)
if [ "${plain%%(*}" != "" ] && [ "$plain" != "$steered" ]; then echo "ok   --steer moves the prediction"; else echo "FAIL --steer: '$plain' vs '$steered'"; fails=$((fails + 1)); fi
check "steering adds factor x vector to layer_output" 0 "layers.0.layer_output +\[1, 24, 64\] +F32 +min" \
  "$nnt" trace --model "$model" --tokens "$prompt" --steer-factor 0.5 --steer-positions -1 --steer "0=$vec" --save layers.0.layer_output
check "a steering vector of the wrong length" 1 "must be \[hidden_size\] = \[64\]" \
  "$nnt" trace --model "$model" --tokens "$prompt" --steer "0=$tmp/cli.safetensors:layers.2.layer_output"
skipped=$("$nnt" trace --model "$model" --tokens "$prompt" --skip-layers 1:2 | tail -1)
if [ "$plain" != "$skipped" ]; then echo "ok   --skip-layers moves the prediction"; else echo "FAIL --skip-layers changed nothing"; fails=$((fails + 1)); fi
check "--skip-layers range checked" 1 "skip_layers\(2, 1\)" "$nnt" trace --model "$model" --tokens "$prompt" --skip-layers 2:1

# --- steering positions mean tokens (issue 16): generation steered at some positions gives the
# tokens of greedy decoding by full forwards, each steered at the same tokens of the sequence so
# far (computed here with trace, one forward per new token). The reproduction: MiMo-V2-Flash,
# factor 4 on block 1, v = numpy's RandomState(2).randn(64) (tests/fixtures/steering/make_vector.py).
mimo="$fixtures/mimo_v2_flash/fp32" v="$fixtures/steering/v.safetensors:v" p10="5 6 7 8 9 10 11 12 13 14"
# full_forwards FN: 6 greedy tokens after p10, each from a trace of the sequence so far steered at
# the positions `FN LENGTH` prints (nothing: unsteered)
full_forwards() {
  local seq=$p10 n pos next a
  for _ in 1 2 3 4 5 6; do
    n=$(wc -w <<<"$seq") pos=$($1 "$n") a=()
    [ -n "$pos" ] && a=(--steer-factor 4 --steer-positions "$pos" --steer "1=$v")
    next=$("$nnt" trace --model "$mimo" --tokens "$seq" "${a[@]}" | sed -n 's/^top 5 next tokens, row 0:  \([0-9]*\) .*/\1/p')
    seq="$seq $next"
  done
  cut -d' ' -f11- <<<"$seq"
}
at0() { echo 0; }
at11() { [ "$1" -gt 11 ] && echo 11; }           # the second generated token, once it exists
after_prompt() { [ "$1" -gt 10 ] && seq -s, 10 $(($1 - 1)); }
newest() { seq -s, 9 $(($1 - 1)); }             # -1 in generation: the prompt's last token, then each new one
steered() { "$nnt" generate --model "$mimo" --max-new-tokens 6 --steer-factor 4 --steer-positions "$1" --steer "1=$v" "${@:2}"; }
plain=$("$nnt" generate --model "$mimo" --tokens "$p10" --max-new-tokens 6 | sed -n 's/^new tokens, row 0: //p')
want=$(full_forwards at0)
same "steering position 0 in generate == full forwards steered at position 0" "$want" \
  "$(steered 0 --tokens "$p10" | sed -n 's/^new tokens, row 0: //p')"
case "$want" in "177 102 "*) echo "ok   the reproduction's tokens start 177 102";;
  *) echo "FAIL the reproduction gives '$want'"; fails=$((fails + 1));; esac
# the same row left-padded under a longer one: padding does not count
same "steering position 0 of a left-padded row" "$want" \
  "$(steered 0 --tokens "1 2 3 4 5 6 7 8 9 10 11 12 13" --tokens "$p10" | sed -n 's/^new tokens, row 1: //p')"
want=$(full_forwards at11)
same "steering position 11 (a generated token) == full forwards" "$want" \
  "$(steered 11 --tokens "$p10" | sed -n 's/^new tokens, row 0: //p')"
if [ "$want" != "$plain" ]; then echo "ok   steering position 11 changes the tokens"; else echo "FAIL position 11 changed nothing"; fails=$((fails + 1)); fi
same "steering 'generated' == full forwards steered after the prompt" "$(full_forwards after_prompt)" \
  "$(steered generated --tokens "$p10" | sed -n 's/^new tokens, row 0: //p')"
same "steering -1 == full forwards steered at the prompt's last token and every later one" "$(full_forwards newest)" \
  "$(steered -1 --tokens "$p10" | sed -n 's/^new tokens, row 0: //p')"

# --- refusals ---
check "unknown option named as such" 2 "unknown option --bogus" "$nnt" trace --model "$model" --tokens "1 2" --bogus
check "an option given twice" 2 "--out is given twice" "$nnt" trace --model "$model" --tokens "1 2" --out "$tmp/a.st" --out "$tmp/b.st"
check "--out never replaces a device" 2 "exists and is not a regular file" "$nnt" trace --model "$model" --tokens "1 2" --out /dev/null
check "--out into a missing directory, before the forward" 2 "does not exist or is not writable" \
  "$nnt" trace --model "$model" --tokens "1 2" --out "$tmp/no/such/dir.st"
check "--steps belongs to generate" 2 "--steps is an option of generate" "$nnt" trace --model "$model" --tokens "1 2" --steps 1
check "a steering position no row has" 1 "position 5 names no token of this forward: its longest row has 3 tokens" \
  "$nnt" trace --model "$model" --tokens "1 2 3" --steer-positions 5 --steer "0=$vec"
check "'generated' in a single forward" 1 "position 'generated' names no token of this forward.*no generated token" \
  "$nnt" trace --model "$model" --tokens "1 2 3" --steer-positions generated --steer "0=$vec"
check "a steering position no generation step reaches" 1 "position 5 names no token processed at steps 0..2: .* up to position 4 at step 2" \
  "$nnt" generate --model "$model" --tokens "1 2 3" --max-new-tokens 3 --steer-positions 5 --steer "0=$vec"
check "a bad steering position" 2 "nnt: --steer-positions 0,x: 'x' is neither an integer in -2147483645..2147483647 nor one of prompt, generated, all" \
  "$nnt" trace --model "$model" --tokens "1 2 3" --steer-positions 0,x --steer "0=$vec"
check "a key before any INI section" 1 "comes before any section" \
  bash -c "printf 'threads = 2\n' > '$tmp/nosect.ini'; '$nnt' plugins --config '$tmp/nosect.ini'"

# --- text in, text out: tokenize, --prompt, --prompt-file, token text, eos ---
# A case of the reference files tests/fixtures/tokenizer/*.json (ids from Hugging Face tokenizers;
# each file is one line of JSON, read here with grep and sed): writes the case's text bytes to
# FILE and prints its ids (FIELD: ids, or ids_special with the special tokens added).
ref_case() { # json name field file
  local c
  c=$(grep -o "{\"name\":\"$2\",\"text_hex\":\"[0-9a-f]*\",[^}]*}" "$1") || { echo "missing case $2"; return; }
  printf '%b' "$(sed -e 's/.*"text_hex":"\([0-9a-f]*\)".*/\1/' -e 's/../\\x&/g' <<<"$c")" > "$4"
  sed "s/.*\"$3\":\[\([0-9,]*\)\].*/\1/" <<<"$c" | tr ',' ' '
}
tiny_ref="$fixtures/tokenizer/tiny.json" fb_ref="$fixtures/tokenizer/fallback.json" fallback="$fixtures/tokenizer/fallback"
want=$(ref_case "$tiny_ref" url ids_special "$tmp/url.txt")
same "tokenize --ids gives the reference ids (tiny.json, case url)" "$want" \
  "$("$nnt" tokenize --model "$model" --ids "$(cat "$tmp/url.txt")" 2>&1)"
want=$(ref_case "$tiny_ref" crlf ids_special "$tmp/crlf.txt")
same "tokenize --prompt-file keeps every byte (tiny.json, case crlf)" "$want" \
  "$("$nnt" tokenize --model "$model" --ids --prompt-file "$tmp/crlf.txt" 2>&1)"
# the byte-fallback tokenizer adds <s>; its folder has no weights, which tokenize does not need
want=$(ref_case "$fb_ref" invalid_ff_fe ids_special "$tmp/ff.txt")
same "tokenize adds the BOS, repairs invalid UTF-8 (fallback.json, case invalid_ff_fe)" "$want" \
  "$("$nnt" tokenize --model "$fallback" --ids --prompt-file "$tmp/ff.txt" 2>&1)"
want=$(ref_case "$fb_ref" invalid_ff_fe ids "$tmp/ff.txt")
same "tokenize --no-special leaves the BOS out" "$want" \
  "$("$nnt" tokenize --model "$fallback" --ids --no-special --prompt-file "$tmp/ff.txt" 2>&1)"
check "tokenize: id, tab, quoted text" 0 "^1	\"<s>\"\$" "$nnt" tokenize --model "$fallback" "tab	and \\"
check "tokenize escapes a control byte" 0 "^30	\"\\\\x1b\"\$" "$nnt" tokenize --model "$fallback" "$(printf 'a\033b')"
check "tokenize escapes a tab and a backslash" 0 "\"\\\\t\"" "$nnt" tokenize --model "$model" "$(printf 'a\tb\\')"
lines=$("$nnt" tokenize --model "$model" "Hello world" | cut -f1 | tr '\n' ' ')
same "tokenize lists the ids --ids prints" "$("$nnt" tokenize --model "$model" --ids "Hello world") " "$lines"
check "tokenize needs --model" 2 "tokenize needs --model DIR" "$nnt" tokenize "Hello"
check "tokenize: a folder without a tokenizer" 1 "minimax_m2/fp32: .*neither tokenizer.json nor tiktoken.model" \
  "$nnt" tokenize --model "$fixtures/minimax_m2/fp32" "Hello"
check "--ids belongs to tokenize" 2 "--ids is an option of tokenize" "$nnt" trace --model "$model" --tokens "1 2" --ids

check "trace --prompt shows the prompt's tokens" 0 "^prompt, row 0 \([0-9]+ tokens\):  235 \"The\"  " \
  "$nnt" trace --model "$model" --prompt "$text"
check "trace --prompt shows text beside the top tokens" 0 "^top 5 next tokens, row 0:  $tok \(0\.[0-9]+\)  $tok \(" \
  "$nnt" trace --model "$model" --prompt "$text"
# text rows are the rows tokenize gives, left-padded exactly as --tokens rows
ids1=$("$nnt" tokenize --model "$model" --ids "$text") ids2=$("$nnt" tokenize --model "$model" --ids "We the people")
same "--prompt rows equal the --tokens rows of their ids" \
  "$("$nnt" trace --model "$model" --tokens "$ids1" --tokens "$ids2" --save layers.1.mlp.expert_weights | grep -v '^prompt')" \
  "$("$nnt" trace --model "$model" --prompt "$text" --prompt "We the people" --save layers.1.mlp.expert_weights | grep -v '^prompt')"
check "--prompt-file: the whole file, its final newline included" 0 "14 \"\\.\"  96 \"\\\\n\"\$" \
  "$nnt" trace --model "$model" --prompt-file "$model/prompt_text.txt"
check "--prompt and --tokens together" 2 "--tokens and --tokens-file cannot be mixed with --prompt" \
  "$nnt" trace --model "$model" --prompt "We" --tokens "1 2"
check "--prompt on a folder without a tokenizer" 1 "minimax_m2/fp32: .*neither tokenizer.json nor tiktoken.model" \
  "$nnt" trace --model "$fixtures/minimax_m2/fp32" --prompt "We the people"
check "a missing --prompt-file" 1 "--prompt-file $tmp/none.txt: cannot open: No such file" \
  "$nnt" generate --model "$model" --prompt-file "$tmp/none.txt" --max-new-tokens 2
check "a prompt with no token" 1 "--prompt row 0 encodes to no token" "$nnt" trace --model "$model" --prompt ""
# the tiny weights with the byte-fallback tokenizer (800 ids): ids past the model's 256 are refused
mkdir -p "$tmp/mismatch" && ln -sf "$(cd "$model" && pwd)"/{config.json,model.safetensors} "$tmp/mismatch/" &&
  cp "$fallback"/tokenizer*.json "$tmp/mismatch/"
check "prompt ids outside the model's vocabulary" 1 "token id [0-9]+ \(.*\) at position [0-9]+, outside the model's vocabulary \(vocab_size 256\)" \
  "$nnt" trace --model "$tmp/mismatch" --prompt "The people"
# byte-fallback tokens 30, 242 and 12 are the bytes 1b, ef (a lone UTF-8 lead byte) and 09
check "token text escapes control bytes and bytes outside UTF-8" 0 "^input +30 \"\\\\x1b\" +242 \"\\\\xef\" +12 \"\\\\t\"" \
  "$nnt" lens --model "$tmp/mismatch" --tokens "30 242 12"
check "lens --prompt: the input row has text" 0 "^input +235 \"The\" +121 \" p\"" \
  "$nnt" lens --model "$model" --prompt "The people"
check "lens without a tokenizer keeps ids only" 0 "^input +1 +2 +3\$" "$nnt" lens --model "$fixtures/minimax_m2/fp32" --tokens "1 2 3"
check "generate shows each new token's text" 0 "^tokens, row 1:  $tok  $tok  $tok\$" \
  "$nnt" generate --model "$model" --prompt "$text" --prompt "We" --max-new-tokens 3
check "generate prints the continuation as text" 0 "^text, row 0: \"([^\"\\\\]|\\\\.)*\"\$" \
  "$nnt" generate --model "$model" --prompt "$text" --max-new-tokens 3

# eos (id 0, <|endoftext|>): a temperature so high that the draws hardly depend on the logits, and a
# seed whose draws reach 0 at the 4th token; the row must stop there unless --ignore-eos
gen() { "$nnt" generate --model "$model" --prompt "We the people" --max-new-tokens 12 --temperature 10000 --seed 20 "$@"; }
full=$(gen --ignore-eos | sed -n 's/^new tokens, row 0: //p')
upto=$(awk '{ for (i = 1; i <= NF; i++) { printf "%s%s", (i > 1 ? " " : ""), $i; if ($i == 0) exit } }' <<<"$full")
if [ "$(wc -w <<<"$full")" = 12 ] && [ "$upto" != "$full" ]; then echo "ok   --ignore-eos runs past the eos"; else echo "FAIL --ignore-eos: '$full'"; fails=$((fails + 1)); fi
same "generate stops a row at the eos token" "$upto" "$(gen | sed -n 's/^new tokens, row 0: //p')"
check "a stopped row says so" 0 "^text, row 0: \".*\" \(stopped at 0 \"<\|endoftext\|>\"\)\$" gen
# --stop-id: the greedy run's third token ends the row at its first occurrence
full=$("$nnt" generate --model "$model" --prompt "$text" --max-new-tokens 8 | sed -n 's/^new tokens, row 0: //p')
stop=$(awk '{ print $3 }' <<<"$full")
upto=$(awk -v s="$stop" '{ for (i = 1; i <= NF; i++) { printf "%s%s", (i > 1 ? " " : ""), $i; if ($i == s) exit } }' <<<"$full")
same "--stop-id ends a row" "$upto" \
  "$("$nnt" generate --model "$model" --prompt "$text" --max-new-tokens 8 --stop-id "$stop" | sed -n 's/^new tokens, row 0: //p')"
check "--stop-id outside the vocabulary" 1 "--stop-id 300 is outside the model's vocabulary" \
  "$nnt" generate --model "$model" --tokens "1 2" --max-new-tokens 2 --stop-id 300
check "--ignore-eos belongs to generate" 2 "--ignore-eos is an option of generate" \
  "$nnt" trace --model "$model" --prompt "We" --ignore-eos

# --- hostile and changing inputs (issue 14) ---
# a FIFO in the place of any input file: an error naming it at once, never a hang (timeout: a
# hang fails the check with status 124)
fifo_folder() { # DIR FIFO_NAME FILES...: a model folder of links to the tiny model's files, one name a FIFO
  local dir=$1 name=$2; shift 2
  rm -rf "$dir" && mkdir -p "$dir"
  for f in "$@"; do ln -s "$(cd "$model" && pwd)/$f" "$dir/$f"; done
  mkfifo "$dir/$name"
}
fifo_folder "$tmp/fifo_config" config.json model.safetensors tokenizer.json
check "a FIFO config.json" 1 "cannot load the model: $tmp/fifo_config/config.json: not a regular file \(a FIFO\)" \
  timeout 60 "$nnt" trace --model "$tmp/fifo_config" --tokens "1 2"
fifo_folder "$tmp/fifo_index" model.safetensors.index.json config.json
check "a FIFO index" 1 "$tmp/fifo_index/model.safetensors.index.json: not a regular file \(a FIFO\)" \
  timeout 60 "$nnt" trace --model "$tmp/fifo_index" --tokens "1 2"
fifo_folder "$tmp/fifo_tok" tokenizer.json config.json model.safetensors
check "a FIFO tokenizer.json" 1 "$tmp/fifo_tok/tokenizer.json: not a regular file \(a FIFO\)" \
  timeout 60 "$nnt" trace --model "$tmp/fifo_tok" --prompt "We"
rm -f "$tmp/fifo.safetensors" "$tmp/fifo.txt" "$tmp/fifo.ini"
mkfifo "$tmp/fifo.safetensors" "$tmp/fifo.txt" "$tmp/fifo.ini"
check "a FIFO --set file" 1 "nnt: error: --set: $tmp/fifo.safetensors: not a regular file \(a FIFO\)" \
  timeout 60 "$nnt" trace --model "$model" --tokens "1 2" --set "layers.0.layer_output=$tmp/fifo.safetensors"
check "a FIFO --steer file" 1 "nnt: error: --steer: $tmp/fifo.safetensors: not a regular file \(a FIFO\)" \
  timeout 60 "$nnt" trace --model "$model" --tokens "1 2" --steer "0=$tmp/fifo.safetensors:v"
check "a FIFO --prompt-file" 1 "--prompt-file $tmp/fifo.txt: not a regular file \(a FIFO\)" \
  timeout 60 "$nnt" trace --model "$model" --prompt-file "$tmp/fifo.txt"
check "a FIFO --config" 1 "cannot start: $tmp/fifo.ini: not a regular file \(a FIFO\)" \
  timeout 60 "$nnt" plugins --config "$tmp/fifo.ini"

# --out never replaces an input of the run (a copy of the model folder: a failure must not cost
# the source tree its weights); the file is unchanged afterwards
sum() { sha256sum "$1" | cut -d' ' -f1; }
rm -rf "$tmp/own" && cp -r "$model" "$tmp/own"
before=$(sum "$tmp/own/model.safetensors")
check "--out at the model's own model.safetensors" 2 \
  "nnt: --out $tmp/own/model.safetensors: is a file of the model folder, an input of this run" \
  "$nnt" trace --model "$tmp/own" --tokens "$prompt" --save layers.0.layer_output --out "$tmp/own/model.safetensors"
same "model.safetensors unchanged after --out named it" "$before" "$(sum "$tmp/own/model.safetensors")"
ln -sf "$(cd "$tmp/own" && pwd)/model.safetensors" "$tmp/alias.safetensors"
check "--out through a link to the model's weights" 2 \
  "nnt: --out $tmp/alias.safetensors: is the same file as $tmp/own/model.safetensors \(a file of the model folder\)" \
  "$nnt" trace --model "$tmp/own" --tokens "$prompt" --save layers.0.layer_output --out "$tmp/alias.safetensors"
check "--out at config.json" 2 "is a file of the model folder, an input of this run" \
  "$nnt" lens --model "$tmp/own" --tokens "1 2" --out "$tmp/own/config.json"
same "model.safetensors unchanged after --out named it through a link" "$before" "$(sum "$tmp/own/model.safetensors")"
cp "$tmp/cli.safetensors" "$tmp/addin.safetensors"
before=$(sum "$tmp/addin.safetensors")
check "--out at an --add input" 2 "nnt: --out $tmp/addin.safetensors: is the --add file, an input of this run" \
  "$nnt" trace --model "$model" --tokens "$prompt" --add "layers.1.layer_output=$tmp/addin.safetensors:layers.2.layer_output" \
  --save layers.1.layer_output --out "$tmp/addin.safetensors"
same "the --add input unchanged after --out named it" "$before" "$(sum "$tmp/addin.safetensors")"
printf 'We the people' > "$tmp/prompt.txt"
check "--out at the --prompt-file" 2 "is the --prompt-file file, an input of this run" \
  "$nnt" generate --model "$model" --prompt-file "$tmp/prompt.txt" --max-new-tokens 1 --save logits --out "$tmp/prompt.txt"
ini_with "" > "$tmp/self.ini"
check "--out at the INI" 2 "is the INI configuration, an input of this run" \
  "$nnt" trace --config "$tmp/self.ini" --model "$model" --tokens "1 2" --save logits --out "$tmp/self.ini"
# nor the program running or a library it has mapped (replacing one under a running program breaks
# the next run): checked on copies, a copy of nnt run with a copy of libnnt ahead of the build's
mkdir -p "$tmp/progs"
cp "$nnt" "$tmp/progs/nnt"
libnnt=$(ldd "$nnt" | awk '/libnnt/ {print $3}')
cp "$libnnt" "$tmp/progs/"
before_exe=$(sum "$tmp/progs/nnt") before_lib=$(sum "$tmp/progs/$(basename "$libnnt")")
check "--out at the nnt program running" 2 "progs/nnt: is the nnt program running" \
  env LD_LIBRARY_PATH="$tmp/progs" "$tmp/progs/nnt" trace --config "$tmp/self.ini" --model "$model" --tokens "1 2" \
  --save logits --out "$tmp/progs/nnt"
check "--out at the libnnt it runs on" 2 "libnnt[^:]*: is a file this run has mapped" \
  env LD_LIBRARY_PATH="$tmp/progs" "$tmp/progs/nnt" trace --config "$tmp/self.ini" --model "$model" --tokens "1 2" \
  --save logits --out "$tmp/progs/$(basename "$libnnt")"
same "the program and library unchanged after --out named them" "$before_exe $before_lib" \
  "$(sum "$tmp/progs/nnt") $(sum "$tmp/progs/$(basename "$libnnt")")"
# --plot is checked with --out before the forward: a missing folder, and both naming one file
check "--plot into a missing folder, before the forward" 2 \
  "^nnt: --plot $tmp/nowhere/p.png: the directory '$tmp/nowhere' does not exist or is not writable\$" \
  "$nnt" trace --model "$model" --tokens "1 2" --save layers.1.mlp.expert_weights --plot "$tmp/nowhere/p.png"
check "--plot and --out naming one file" 2 "nnt: --plot $tmp/both.png: is the file --out $tmp/./both.png writes too" \
  "$nnt" trace --model "$model" --tokens "1 2" --save layers.1.mlp.expert_weights --plot "$tmp/both.png" \
  --out "$tmp/./both.png"
# --plot of nothing it can draw, or only of slices: refused before the forward prints anything
out=$("$nnt" trace --model "$model" --tokens "1 2" --save 'layers.1.mlp.expert_weights[:, 0]' --plot "$tmp/s.png" 2>&1)
rc=$?
if [ $rc = 2 ] && grep -qF "nnt: trace --plot: layers.1.mlp.expert_weights[:, 0] saves a slice" <<<"$out" &&
   ! grep -q "saved values" <<<"$out" && [ ! -e "$tmp/s.png" ]; then
  echo "ok   --plot of a sliced save, before the forward"
else
  echo "FAIL --plot of a sliced save, before the forward: rc=$rc"; echo "$out" | head -5; fails=$((fails + 1))
fi
out=$("$nnt" trace --model "$model" --tokens "1 2" --save logits --plot "$tmp/s.png" 2>&1)
rc=$?
if [ $rc = 2 ] && grep -q "trace --plot draws a saved attention_probabilities or expert_weights" <<<"$out" &&
   ! grep -q "saved values" <<<"$out"; then
  echo "ok   --plot with nothing to draw, before the forward"
else
  echo "FAIL --plot with nothing to draw, before the forward: rc=$rc"; echo "$out" | head -5; fails=$((fails + 1))
fi
# refused at argument checking: the model folder is not even looked at
check "--out \"\" refused before anything runs" 2 "nnt: --out: the path is empty" \
  "$nnt" trace --model "$tmp/nope" --tokens "1 2" --out ""

# the write of --out never leaves its temporary file: not after a failed write, not after a
# SIGTERM or SIGINT in the middle of it (tests/cli_write_shim.c fails or interrupts the fsync
# before the rename); the signal still ends the run, once the file is complete
preload() { env LD_PRELOAD="$shim" ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" "$@"; }
rm -f "$tmp"/w_*
check "a failed write of --out" 1 "nnt: error: --out: $tmp/w_fail.safetensors: write failed: Input/output error" \
  preload NNT_TEST_FSYNC=fail "$nnt" trace --model "$model" --tokens "1 2" --save logits --out "$tmp/w_fail.safetensors"
check "SIGTERM during the write of --out ends the run" 143 "saved values" \
  preload NNT_TEST_FSYNC=term "$nnt" trace --model "$model" --tokens "1 2" --save logits --out "$tmp/w_term.safetensors"
check "SIGINT during the write of lens --out ends the run" 130 "logit lens" \
  preload NNT_TEST_FSYNC=int "$nnt" lens --model "$model" --tokens "1 2" --out "$tmp/w_int.safetensors"
same "no temporary file left by a failed or interrupted write" "w_int.safetensors w_term.safetensors" \
  "$(cd "$tmp" && echo w_*)"
check "the interrupted write is complete" 0 "logits +\[1, 2, 256\] +F32" \
  "$nnt" trace --model "$model" --tokens "1 2" --set "logits=$tmp/w_term.safetensors:logits" --save logits

# numbers: the whole argument, in range, or an error naming the option and the value
check "--skip-layers 0:4294967297" 2 "nnt: --skip-layers 0:4294967297: '4294967297' is not an integer in 0..2147483647" \
  "$nnt" trace --model "$model" --tokens "1 2" --skip-layers 0:4294967297
check "--ablate-expert past int" 2 "nnt: --ablate-expert 1:4294967300: '4294967300' is not an integer in 0..2147483647" \
  "$nnt" trace --model "$model" --tokens "1 2" --ablate-expert 1:4294967300
check "--steer past int" 2 "nnt: --steer 4294967296: '4294967296' is not an integer in 0..2147483647" \
  "$nnt" trace --model "$model" --tokens "1 2" --steer "4294967296=$vec"
check "--steer-positions past int" 2 "nnt: --steer-positions 0,4294967295: '4294967295' is neither an integer in -2147483645..2147483647" \
  "$nnt" trace --model "$model" --tokens "1 2" --steer-positions 0,4294967295 --steer "0=$vec"
check "--steer-positions with an empty item" 2 "nnt: --steer-positions 1,,2: '' is neither an integer" \
  "$nnt" trace --model "$model" --tokens "1 2" --steer-positions 1,,2 --steer "0=$vec"
check "--steps past int" 2 "nnt: --steps 4294967297: '4294967297' is not an integer in 0..2147483647" \
  "$nnt" generate --model "$model" --tokens "1 2" --max-new-tokens 2 --steps 4294967297
check "trailing characters" 2 "nnt: --max-new-tokens: '3x' is not an integer in 1..1000000" \
  "$nnt" generate --model "$model" --tokens "1 2" --max-new-tokens 3x
check "a blank before a number" 2 "nnt: --skip-layers  1:2: ' 1' is not an integer" \
  "$nnt" trace --model "$model" --tokens "1 2" --skip-layers " 1:2"
check "--seed below zero" 2 "nnt: --seed: '-1' is not an integer in 0..18446744073709551615" \
  "$nnt" generate --model "$model" --tokens "1 2" --max-new-tokens 2 --temperature 1 --seed -1
check "--tokens past int" 2 "nnt: --tokens: '4294967297' is not a token id \(an integer in 0..2147483647\)" \
  "$nnt" trace --model "$model" --tokens "1, 4294967297"
check "--seed past 2^64" 2 "nnt: --seed: '18446744073709551616' is not an integer" \
  "$nnt" generate --model "$model" --tokens "1 2" --max-new-tokens 2 --temperature 1 --seed 18446744073709551616
check "--scale 1e39" 2 "nnt: --scale logits=1e39: '1e39' is not a finite number with \|F\| <= 1e6" \
  "$nnt" trace --model "$model" --tokens "1 2" --scale logits=1e39
check "--scale nan" 2 "'nan' is not a finite number" "$nnt" trace --model "$model" --tokens "1 2" --scale logits=nan
check "--steer-factor 1e39" 2 "nnt: --steer-factor: '1e39' is not a finite number with \|F\| <= 1e6" \
  "$nnt" trace --model "$model" --tokens "1 2" --steer-factor 1e39 --steer "0=$vec"
check "--steer-factor inf" 2 "'inf' is not a finite number" \
  "$nnt" trace --model "$model" --tokens "1 2" --steer-factor inf --steer "0=$vec"
check "--temperature inf" 2 "nnt: --temperature: 'inf' is not a number in 0..1e6" \
  "$nnt" generate --model "$model" --tokens "1 2" --max-new-tokens 2 --temperature inf
# arguments longer than 63 characters are read whole: a 70-character START:END is 1:2 ...
long="1:$(printf '0%.0s' $(seq 67))2"
same "a 70-character argument is read whole" "${#long} $skipped" \
  "70 $("$nnt" trace --model "$model" --tokens "$prompt" --skip-layers "$long" | tail -1)"
# ... and a 70-character one that is wrong past its 63rd character is refused, not cut
long="0:$(printf '0%.0s' $(seq 67))x"
check "a 70-character argument wrong at its end" 2 "nnt: --skip-layers $long: '$(printf '0%.0s' $(seq 67))x' is not an integer" \
  "$nnt" trace --model "$model" --tokens "1 2" --skip-layers "$long"
check "a value path with a 130-digit block number" 1 "a part of 131 characters, longer than any block number or name" \
  "$nnt" trace --model "$model" --tokens "1 2" --save "layers.$(printf '0%.0s' $(seq 130))1.layer_output"

# INI: a 300-character comment ending in `file = x.so` is a comment (read in 200-byte pieces, its
# tail was a line that loaded x.so); a long line that is not a comment is refused with its number
{ printf '; %s file = x.so\n' "$(printf 'c%.0s' $(seq 286))"; ini_with ""; } > "$tmp/longcomment.ini"
same "the INI's comment line is 300 characters" 300 "$(head -1 "$tmp/longcomment.ini" | tr -d '\n' | wc -c)"
check "a 300-character INI comment ending in file = x.so" 0 "family +minimax_m2 +cpu" \
  "$nnt" plugins --config "$tmp/longcomment.ini"
if "$nnt" plugins --config "$tmp/longcomment.ini" 2>&1 | grep -q "x\.so"; then
  echo "FAIL the comment's x.so was read"; fails=$((fails + 1)); else echo "ok   the comment's x.so is not read"; fi
{ printf '[plugins]\ndir = %s\n' "$(printf 'd%.0s' $(seq 300))"; } > "$tmp/longline.ini"
check "a 306-character INI line" 1 "longline.ini:2: line of 306 characters; the INI reader takes lines of at most 198" \
  "$nnt" plugins --config "$tmp/longline.ini"
printf '[plugins]\nbad = 1\nworse = 2\n' > "$tmp/two.ini"
check "an INI with two errors: the first, with its line" 1 "two.ini:2: unknown key 'bad' in \[plugins\]" \
  "$nnt" plugins --config "$tmp/two.ini"
printf '[plugins]\nno equals sign\n[bogus]\nx = 1\n' > "$tmp/two2.ini"
check "an INI with a syntax error first: its line, its message" 1 "two2.ini:2: syntax error \(expected" \
  "$nnt" plugins --config "$tmp/two2.ini"

# --request: a run of the document --print-request printed is the options' run, byte for byte
rq=$tmp/rq; mkdir -p "$rq"
roundtrip() { # name command options...: the options' output against that of their --request
  local name=$1 cmd=$2; shift 2
  "$nnt" "$cmd" --model "$model" "$@" --print-request > "$rq/$name.json"
  same "--request of --print-request: $name" "$("$nnt" "$cmd" --model "$model" "$@" 2>&1)" \
    "$("$nnt" "$cmd" --model "$model" --request "$rq/$name.json" 2>&1)"
}
roundtrip trace trace --prompt "$text" --save 'layers.*.mlp.expert_weights' --save layers.1.self_attn.attention_probabilities
roundtrip generate generate --prompt "$text" --max-new-tokens 2
roundtrip patch patch --clean "The cat" --corrupt "The end" --metric prob:3
# --out never names a file the document reads
"$nnt" trace --model "$model" --tokens "$prompt" --save layers.0.layer_output --out "$rq/v.safetensors" > /dev/null
printf 'The cat' > "$rq/prompt.txt"; printf 'The end' > "$rq/c2.txt"
printf '{"nnt_request": 1, "rows": [{"tokens": [1, 2, 3]}], "edits": [{"op": "set", "path": "layers.0.layer_output", "tensor": {"file": "v.safetensors", "key": "layers.0.layer_output"}}]}' > "$rq/set.json"
printf '{"nnt_request": 1, "method": "generate", "rows": [{"file": "prompt.txt"}], "generate": {"max_new_tokens": 1}}' > "$rq/rowfile.json"
printf '{"nnt_request": 1, "method": "patch", "patch": {"clean": {"file": "c2.txt"}, "corrupt": {"text": "The cat"}, "metric": "prob:3"}}' > "$rq/pc.json"
cp "$rq/v.safetensors" "$rq/v.keep"
check "--request: --out is the tensor file of an edit" 2 "^nnt: --out v.safetensors: is the file of edits\[0\]\.tensor, an input of this run" \
  bash -c "cd '$rq' && '$nnt' trace --model '$model' --request set.json --out v.safetensors"
same "--request: the refused --out is left alone" "$(cmp "$rq/v.safetensors" "$rq/v.keep" && echo same)" same
check "--request: --out is a row's file" 2 "--out $rq/prompt.txt: is the file of rows\[0\], an input of this run" \
  "$nnt" generate --model "$model" --request "$rq/rowfile.json" --out "$rq/prompt.txt"
check "--request: --out is patch.clean's file" 2 "--out c2.txt: is the file of patch\.clean, an input" \
  bash -c "cd '$rq' && '$nnt' patch --model '$model' --request pc.json --out c2.txt"
# --request: messages name the document's fields, not the options
printf '{"nnt_request": 1, "method": "generate", "rows": [{"tokens": [1, 2]}], "generate": {"max_new_tokens": 1, "stop_ids": [9999]}}' > "$rq/stop.json"
check "--request: a stop id outside the vocabulary" 1 "^nnt: error: $rq/stop.json: generate\.stop_ids\[0\]: 9999 is outside the model's vocabulary" \
  "$nnt" generate --model "$model" --request "$rq/stop.json"
printf '{"nnt_request": 1, "method": "lens", "rows": [{"tokens": [1, 2]}], "lens": {"positions": [50]}}' > "$rq/lpos.json"
check "--request: lens.positions" 1 "^nnt: error: $rq/lpos.json: lens\.positions" "$nnt" lens --model "$model" --request "$rq/lpos.json"
pq() { printf '{"nnt_request": 1, "method": "patch", "patch": {"clean": {"tokens": [1, 2]}, "corrupt": {"tokens": [%s]}, %s}}' "$1" "$2"; }
pq "3, 4" '"metric": "prob:3", "positions": [5]' > "$rq/ppos.json"
check "--request: patch.positions" 1 "^nnt: error: $rq/ppos.json: patch\.positions" "$nnt" patch --model "$model" --request "$rq/ppos.json"
pq "3, 4" '"metric": "prob:999"' > "$rq/pmet.json"
check "--request: patch.metric" 1 "^nnt: error: $rq/pmet.json: patch\.metric: token 999" "$nnt" patch --model "$model" --request "$rq/pmet.json"
pq "3, 4" '"metric": "prob:3", "value": "logits"' > "$rq/pval.json"
check "--request: patch.value" 1 "^nnt: error: $rq/pval.json: patch\.value" "$nnt" patch --model "$model" --request "$rq/pval.json"
pq "3, 4, 5" '"metric": "prob:3"' > "$rq/plen.json"
check "--request: prompts of two lengths name patch.corrupt" 1 "^nnt: error: $rq/plen.json: patch\.corrupt: the clean prompt has 2 tokens" \
  "$nnt" patch --model "$model" --request "$rq/plen.json"
check "options: prompts of two lengths name --corrupt-tokens" 2 "^nnt: error: --corrupt-tokens: the clean prompt has 2 tokens" \
  "$nnt" patch --model "$model" --clean-tokens "1 2" --corrupt-tokens "3 4 5" --metric prob:3

# --plot saves the routing's expert_indices for a --request as for the options
"$nnt" trace --model "$model" --tokens "1 2 3" --save layers.1.mlp.expert_weights --print-request > "$rq/plot.json"
same "--request --plot: the routing picture as the options draw it" \
  "$("$nnt" trace --model "$model" --tokens "1 2 3" --save layers.1.mlp.expert_weights --plot "$rq/r.svg" 2>&1; echo "rc=$?")" \
  "$("$nnt" trace --model "$model" --request "$rq/plot.json" --plot "$rq/r.svg" 2>&1; echo "rc=$?")"
check "--request --plot: no missing expert_indices" 0 "top 5 next tokens" \
  "$nnt" trace --model "$model" --request "$rq/plot.json" --plot "$rq/r.svg"
printf '{"nnt_request": 1, "rows": [{"tokens": [1, 2, 3]}], "edits": [{"op": "masked_fill", "path": "layers.1.mlp.expert_weights", "where": "logits", "equals": 1, "fill": 0}]}' > "$rq/mf.json"
check "--request: a mask of another block names edits[0].where" 1 "mf.json: edits\[0\]\.where: masked fill of" \
  "$nnt" trace --model "$model" --request "$rq/mf.json"

# gradients and attribution
check "trace --grad: every block's gradient and the metric" 0 "^grad:layers\.2\.layer_output +\[1, 24, 64\] +F32" \
  "$nnt" trace --model "$model" --tokens "$prompt" --grad 'layers.*.layer_output' --metric logit-diff:11,29
check "trace --grad: the metric's value" 0 "^metric +\[\] +F32" \
  "$nnt" trace --model "$model" --tokens "$prompt" --grad 'layers.0.layer_output[:, -1]' --metric loss
check "trace --grad without --metric" 2 "--grad needs the scalar it differentiates" \
  "$nnt" trace --model "$model" --tokens "$prompt" --grad layers.0.layer_output
check "trace --metric without --grad" 2 "give --grad PATH too" "$nnt" trace --model "$model" --tokens "$prompt" --metric loss
check "--grad of expert_indices names why" 1 "--grad layers.1.mlp.expert_indices: grad 'layers.1.mlp.expert_indices': no gradient: expert_indices is the router's choice" \
  "$nnt" trace --model "$model" --tokens "$prompt" --grad layers.1.mlp.expert_indices --metric loss
check "--metric-positions: a position no row has" 1 "error: --metric-positions: metric 'prob:3': no row has position 30" \
  "$nnt" trace --model "$model" --tokens "$prompt" --grad layers.1.layer_output --metric prob:3 --metric-positions 30
check "--metric: a token outside the vocabulary, named by its option" 1 "error: --metric prob:999: metric 'prob:999': token id 999 is outside the vocabulary" \
  "$nnt" trace --model "$model" --tokens "$prompt" --grad layers.1.layer_output --metric prob:999
check "--grad under generate" 2 "--grad is an option of trace" \
  "$nnt" generate --model "$model" --tokens "$prompt" --max-new-tokens 1 --grad logits
check "attribute: the AtP grid" 0 "^attribution patching \(AtP\) of layers\.\*\.layer_output" \
  "$nnt" attribute --model "$model" --clean-tokens "1 2 3 4" --corrupt-tokens "1 2 9 4" --metric logit-diff:11,29
check "attribute --out per head" 0 "wrote attr_metric \[3, 4, 4\], attr_blocks" \
  "$nnt" attribute --model "$model" --clean-tokens "1 2 3 4" --corrupt-tokens "1 2 9 4" --metric prob:3 \
  --value 'layers.*.self_attn.attention_head_outputs' --ig-steps 2 --out "$tmp/attr.safetensors"
check "attribute needs a metric" 2 "attribute needs --metric" \
  "$nnt" attribute --model "$model" --clean-tokens "1 2" --corrupt-tokens "1 3"
check "attribute: --ig-steps out of range" 2 "--ig-steps: '5000' is not an integer in 0..1024" \
  "$nnt" attribute --model "$model" --clean-tokens "1 2" --corrupt-tokens "1 3" --metric prob:3 --ig-steps 5000
check "attribute: a value without a gradient" 1 "no gradient" \
  "$nnt" attribute --model "$model" --clean-tokens "1 2" --corrupt-tokens "1 3" --metric prob:3 --value 'layers.*.mlp.expert_indices'
roundtrip grad trace --tokens "$prompt" --grad 'layers.*.mlp.router_logits' --metric logprob:7 --metric-positions -1,-2
roundtrip attribute attribute --clean-tokens "1 2 3 4" --corrupt-tokens "1 2 9 4" --metric logit-diff:11,29 --ig-steps 2

# sparse autoencoders (--sae PATH=DIR, feature edits with a feature list after the path)
sae="$fixtures/sae/relu" feats=layers.1.layer_output.sae.feature_acts
plain=$("$nnt" trace --model "$model" --tokens "$prompt" | tail -1)
check "--sae saves the SAE's outputs" 0 "layers.1.layer_output.sae.feature_acts +\[1, 24, 96\] +F32" \
  "$nnt" trace --model "$model" --tokens "$prompt" --sae "layers.1.layer_output=$sae" --save "$feats" \
  --save layers.1.layer_output.sae.error
same "--sae without a feature edit leaves the forward as it is" "$plain" \
  "$("$nnt" trace --model "$model" --tokens "$prompt" --sae "layers.1.layer_output=$sae" | tail -1)"
edited=$("$nnt" trace --model "$model" --tokens "$prompt" --sae "layers.1.layer_output=$sae" --zero "$feats[3,10]" \
  --scale "$feats[5]=3" --fill "$feats[7]=2.5" | tail -1)
if [ "$plain" != "$edited" ]; then echo "ok   SAE feature edits move the prediction"; else echo "FAIL SAE feature edits changed nothing"; fails=$((fails + 1)); fi
roundtrip sae trace --tokens "$prompt" --sae "layers.1.layer_output=$sae" --zero "$feats[3,10]" --fill "$feats[7]=2.5" \
  --save "$feats"
check "--sae: a folder without cfg.json" 1 "nnt: error: --sae layers.1.layer_output=$tmp: $tmp/cfg.json: cannot open" \
  "$nnt" trace --model "$model" --tokens "1 2" --sae "layers.1.layer_output=$tmp"
check "--sae: a feature outside the SAE" 1 "feature 96 is out of range; the SAE of $sae has features 0..95" \
  "$nnt" trace --model "$model" --tokens "1 2" --sae "layers.1.layer_output=$sae" --zero "$feats[96]"
check "--fill needs a feature list" 2 "expected VALUE.sae.feature_acts\[F,F,...\]=V" \
  "$nnt" trace --model "$model" --tokens "1 2" --fill "layers.1.layer_output=3"
check "--sae needs PATH=DIR" 2 "--sae needs PATH=DIR" "$nnt" trace --model "$model" --tokens "1 2" --sae layers.1.layer_output
check "a save of an SAE output without the SAE" 1 "no SAE is attached to that value" \
  "$nnt" trace --model "$model" --tokens "1 2" --save "$feats"

[ "$fails" = 0 ] && echo "all CLI checks passed" || { echo "$fails CLI checks failed"; exit 1; }
