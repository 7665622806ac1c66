#!/usr/bin/env bash
# run_gpu_checks.sh - everything the cuda backend needs checked on a machine with a GPU, in one
# go: a fresh Release build into build-gpu, nvidia-smi, the `cuda` ctest suite (cpu against cuda,
# op by op - linear and embedding on weights in every stored encoding, F32 / BF16 / F16 / FP8 /
# FP4 with their block scales, in float32 and bfloat16 numerics, and every other op into outputs
# flagged NNT_TENSOR_BF16_VALUES with its rounding styles - and on every fixture, the FP8 and FP4
# checkpoints included, then the bf16 fixtures again at precision = bf16; and every backward op,
# linear_backward on every weight encoding and Kimi Delta Attention's (the delta rule over more
# tokens than its 16-token recomputed stretch), plus gradient requests on MiniMax-M2 and
# Kimi-Linear fp32), then the cpu/cuda benchmark (float32 checkpoints). Run from the repository
# root:
#
#   tests/cuda/run_gpu_checks.sh
#
# Output goes to stdout and, when $OUT is set, also to $OUT/gpu_checks.log. When the suite fails,
# it is run again with the backend's `sync = 1` option (every op waits for its work, so a kernel
# fault is reported by the op that caused it) and, if compute-sanitizer is installed, once more
# under its memcheck tool. Exit status: 0 when the build and the suite passed.
set -u
cd "$(dirname "$0")/../.." || exit 1
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  exec > >(tee -a "$OUT/gpu_checks.log") 2>&1
fi
BUILD=${BUILD:-build-gpu}
JOBS=${JOBS:-16}
status=0
step() { printf '\n==== %s (%s)\n' "$1" "$(date +%T)"; }

step "configure and build into $BUILD"
if ! { cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release && cmake --build "$BUILD" -j"$JOBS"; }; then
  echo "BUILD FAILED"
  exit 1
fi
ls -l "$BUILD/kernels/cuda/cuda.so" || { echo "the cuda backend was not built (no nvcc found by CMake?)"; exit 1; }

step "nvidia-smi"
nvidia-smi || echo "(nvidia-smi failed)"

step "ctest -R cuda"
ctest --test-dir "$BUILD" -R 'cuda' --output-on-failure --timeout 300 | tee "$BUILD/ctest-cuda.txt"
rc=${PIPESTATUS[0]}
if grep -q "Skipped" "$BUILD/ctest-cuda.txt"; then
  echo "WARNING: the cuda suite was skipped - the backend found no usable GPU here (see its message above)"
  status=1
fi
if [ "$rc" != 0 ]; then
  status=1
  step "the suite failed: again with sync = 1 (every op waits; a fault names its op)"
  ini="$BUILD/nnt-cuda.ini"
  cp "$ini" "$ini.orig"
  printf 'sync = 1\n' >> "$ini"
  (cd "$BUILD/tests/cuda" && timeout 240 ./test_cuda) || true
  mv "$ini.orig" "$ini"
  if command -v compute-sanitizer >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/compute-sanitizer ]; then
    cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    step "the suite under compute-sanitizer memcheck (first errors only)"
    (cd "$BUILD/tests/cuda" && timeout 240 "$cs" --tool memcheck --print-limit 20 ./test_cuda 2>&1 | tail -80) || true
  fi
fi

step "benchmark: cpu against cuda"
timeout 300 "$BUILD/nnt_bench_backends" || echo "(the benchmark failed or ran out of time: status $?)"

step "done"
[ "$status" = 0 ] && echo "GPU CHECKS PASSED" || echo "GPU CHECKS FAILED"
exit "$status"
