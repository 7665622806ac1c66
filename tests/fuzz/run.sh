#!/usr/bin/env bash
# run.sh - runs nnt's libFuzzer harnesses (tests/fuzz/fuzz_*.c) for a given time each.
#
#   tests/fuzz/run.sh TARGET|all SECONDS
#
# TARGET: safetensors, index, ini, path, config, cli, tokenizer, request or serve (nnt serve's HTTP
# side, over loopback); all runs each in turn.
# The build folder is $NNT_FUZZ_BUILD (default build-fuzz at the top of the repository); when it
# has not been configured yet it is configured with clang (-DNNT_FUZZ=ON), and the harnesses
# are (re)built before running. Results go to $NNT_FUZZ_RESULTS (default BUILD/fuzz-results):
# per target a corpus folder that grows from run to run, log.txt (libFuzzer's output), and any
# crash-*, leak-*, timeout-* or oom-* input that reproduces a failure
# (BUILD/fuzz/fuzz_TARGET FILE runs it again; those of earlier runs are moved to earlier/). The seeds are the files under
# tests/fuzz/corpus/TARGET plus fixtures of tests/fixtures and examples/ (and, for request, the
# examples of docs/requests.md). Before fuzzing, each
# file of tests/fuzz/crashes/TARGET (inputs that once failed) is run through the harness.
#
# NNT_FUZZ_KEEP_GOING=1 keeps fuzzing past failures (libFuzzer's -fork=1 with -ignore_crashes,
# -ignore_timeouts and -ignore_ooms), every failing input kept: for long runs that must get past
# a known fault.
#
# Exit status: 0 when every target ran its time without a failure; 1 when any libFuzzer run
# reported one (crash, sanitizer report, leak, timeout of 10 s on one input, or more than
# 2 GB of memory); 2 on a usage or build error.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
targets=(safetensors index ini path config cli tokenizer request serve)

usage() {
  echo "usage: tests/fuzz/run.sh TARGET|all SECONDS   (TARGET: ${targets[*]})" >&2
  exit 2
}
[ $# -eq 2 ] || usage
case "$2" in '' | *[!0-9]*) usage ;; esac
seconds=$2
if [ "$1" = all ]; then
  run=("${targets[@]}")
else
  found=0
  for t in "${targets[@]}"; do [ "$t" = "$1" ] && found=1; done
  [ $found -eq 1 ] || { echo "run.sh: unknown target '$1'" >&2; usage; }
  run=("$1")
fi

build="${NNT_FUZZ_BUILD:-$root/build-fuzz}"
results="${NNT_FUZZ_RESULTS:-$build/fuzz-results}"
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DNNT_FUZZ=ON -DNNT_BUILD_TESTS=OFF -DCMAKE_C_COMPILER="${CC:-clang}" || exit 2
fi
cmake --build "$build" --target nnt_fuzz -j "$(nproc)" || exit 2

# Seeds taken from the fixtures, written into DIR (the tokenizer's in its three-part format).
fixture_seeds() {
  local t=$1 dir=$2 sep=$'\n#nnt-fuzz-part#\n' i=0 f
  rm -rf "$dir" && mkdir -p "$dir"
  case "$t" in
    safetensors)
      # the small fixtures as they are (the large ones would mostly fuzz tensor bytes)
      for f in "$root"/tests/fixtures/qwen3_moe/reference.safetensors "$root"/tests/fixtures/deepseek_v4/fp32/reference_L3.safetensors; do
        cp "$f" "$dir/$(basename "$(dirname "$f")")-$(basename "$f")"
      done ;;
    config)
      for f in "$root"/examples/tiny-minimax-m2/config.json "$root"/tests/fixtures/*/*/config.json; do
        cp "$f" "$dir/config-$i.json"; i=$((i + 1))
      done ;;
    tokenizer)
      { cat "$root/examples/tiny-minimax-m2/tokenizer.json"; printf '%s' "$sep"
        cat "$root/examples/tiny-minimax-m2/tokenizer_config.json"; printf '%s' "$sep"
        cat "$root/examples/tiny-minimax-m2/prompt_text.txt"; } > "$dir/tiny-minimax-m2"
      { cat "$root/tests/fixtures/tokenizer/fallback/tokenizer.json"; printf '%s' "$sep"
        cat "$root/tests/fixtures/tokenizer/fallback/tokenizer_config.json"; printf '%s' "$sep"
        printf 'fallback \xf0\x9f\x98\x80 bytes\n'; } > "$dir/fallback"
      for f in "$root"/tests/fixtures/tokenizer/deepseek_v4_{bytelevel,norms,split,template,whitespace}.json; do
        { cat "$f"; printf '%s' "$sep$sep"; printf 'Hello  world 123\t\xe4\xb8\xad\xe6\x96\x87 <|end|>'; } > "$dir/$(basename "$f" .json)"
      done ;;
    request)
      # every ```json example of the specification, one file each
      awk -v dir="$dir" '/^```json$/ { n++; f = sprintf("%s/example-%02d.json", dir, n); on = 1; next }
                         /^```$/ { on = 0; next } on { print > f }' "$root/docs/requests.md"
      # each again with the steering vector as its attachment (the examples' {"key": "v"})
      for f in "$dir"/example-*.json; do
        { cat "$f"; printf '%s' "$sep"; cat "$root/tests/fixtures/steering/v.safetensors"; } > "${f%.json}-attached"
      done ;;
  esac
}

# the longest input each target tries, in bytes
max_len() {
  case "$1" in
    tokenizer) echo 131072 ;;
    request) echo 16384 ;;
    safetensors) echo 16384 ;;
    *) echo 8192 ;;
  esac
}

failed=()
summary=()
for t in "${run[@]}"; do
  bin="$build/fuzz/fuzz_$t"
  [ -x "$bin" ] || { echo "run.sh: $bin was not built" >&2; exit 2; }
  out="$results/$t"
  # the harness's files live in memory when /dev/shm can take them (35x more inputs a second
  # here than on disk), else under the results folder; removed after the run either way
  mkdir -p "$out/corpus"
  # failing inputs of earlier runs move aside, so that what lies in $out is this run's
  for f in "$out"/crash-* "$out"/leak-* "$out"/timeout-* "$out"/oom-* "$out"/slow-unit-*; do
    [ -e "$f" ] && mkdir -p "$out/earlier" && mv "$f" "$out/earlier/"
  done
  tmp=$( { [ -d /dev/shm ] && [ -w /dev/shm ] && mktemp -d /dev/shm/nnt-fuzz-XXXXXX; } || mktemp -d "$out/tmp-XXXXXX")
  fixture_seeds "$t" "$out/fixture-seeds"
  seeds=()
  [ -d "$here/corpus/$t" ] && seeds=("$here/corpus/$t")
  keep_going=()
  [ "${NNT_FUZZ_KEEP_GOING:-0}" = 1 ] && keep_going=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
  dict=()
  [ -f "$here/dict/$t.dict" ] && dict=(-dict="$here/dict/$t.dict")
  # the inputs that once failed (tests/fuzz/crashes/TARGET) must pass first
  if [ -d "$here/crashes/$t" ] && [ -n "$(ls -A "$here/crashes/$t")" ]; then
    if ! TMPDIR="$tmp" OMP_NUM_THREADS=1 NNT_CONFIG= "$bin" -close_fd_mask=3 "$here/crashes/$t"/* > "$out/regressions.txt" 2>&1; then
      summary+=("fuzz_$t: FAILED on an input of tests/fuzz/crashes/$t (see $out/regressions.txt)")
      failed+=("$t")
      echo "${summary[-1]}"
      if [ ${#keep_going[@]} -eq 0 ]; then
        rm -rf "$tmp"
        continue
      fi
    fi
  fi
  echo "== fuzz_$t for ${seconds}s (log: $out/log.txt)"
  # -close_fd_mask=3: the code under test prints its errors; libFuzzer's own report and the
  # sanitizers' still reach the log
  TMPDIR="$tmp" OMP_NUM_THREADS=1 NNT_CONFIG= \
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:${ASAN_OPTIONS:-}" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}" \
    "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="$(max_len "$t")" \
    -close_fd_mask=3 -print_final_stats=1 -artifact_prefix="$out/" "${dict[@]}" "${keep_going[@]}" \
    "$out/corpus" "${seeds[@]}" "$out/fixture-seeds" > "$out/log.txt" 2>&1
  rc=$?
  rm -rf "$tmp"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/log.txt" | tail -1)
  # fork mode prints no final stats: its last "#N: cov: ..." line counts the inputs
  [ -n "$execs" ] || execs=$(sed -n 's/^#\([0-9]*\): cov:.*/\1/p' "$out/log.txt" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$out/log.txt" | tail -1)
  kept=$(ls "$out" | grep -cE '^(crash|leak|timeout|oom|slow-unit)-')
  if [ $rc -eq 0 ] && [ "$kept" -gt 0 ]; then
    summary+=("fuzz_$t: FAILED (kept going), ${execs:-?} inputs, ${cov:-cov: ?}; $kept failing inputs kept in $out")
    failed+=("$t")
  elif [ $rc -eq 0 ]; then
    summary+=("fuzz_$t: ok, ${execs:-?} inputs, ${cov:-cov: ?}")
  else
    artifacts=$(ls "$out" | grep -E '^(crash|leak|timeout|oom|slow-unit)-' | head -3 | tr '\n' ' ')
    [ "$kept" -gt 3 ] && artifacts="$artifacts... ($kept in all)"
    summary+=("fuzz_$t: FAILED (libFuzzer exit $rc), ${execs:-?} inputs; kept: ${artifacts:-none}")
    failed+=("$t")
    grep -m1 -E 'ERROR: |runtime error|check failed|deadly signal|out-of-memory|timeout' "$out/log.txt" | sed 's/^/    /'
    # the run closed the harness's stderr (-close_fd_mask), so a failed FUZZ_CHECK said nothing
    # there: the first kept input runs again with stderr open, and its first report is shown
    first=$(ls "$out" | grep -m1 -E '^(crash|leak|timeout|oom|slow-unit)-')
    if [ -n "$first" ]; then
      TMPDIR="$out" OMP_NUM_THREADS=1 NNT_CONFIG= timeout 60 "$bin" -runs=1 "$out/$first" 2>&1 |
        grep -m4 -E 'check failed|ERROR: |runtime error|SUMMARY|#[0-3] ' | sed 's/^/    replay: /'
      # small inputs are printed whole (base64), so that a CI log alone reproduces the failure
      [ "$(wc -c < "$out/$first")" -le 4096 ] && echo "    input (base64): $(base64 -w0 "$out/$first")"
    fi
  fi
  echo "${summary[-1]}"
done

echo "== summary"
printf '%s\n' "${summary[@]}"
[ ${#failed[@]} -eq 0 ] || { echo "run.sh: failures in: $(printf '%s\n' "${failed[@]}" | uniq | tr '\n' ' ')(inputs kept in $results)" >&2; exit 1; }
