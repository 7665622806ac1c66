#!/usr/bin/env bash
# install_test.sh - an installation works from a prefix the configure step never saw, on its own.
#
#   install_test.sh CMAKE BUILD_DIR SOURCE_DIR [C_COMPILER] [SANITIZE]
#
# Installs BUILD_DIR with `cmake --install --prefix WORK/prefix`, WORK a new directory under
# $TMPDIR (default /tmp; outside the build tree, so no path of one can pass for the other),
# touching nothing in the build tree but CMake's install_manifest.txt. Then, with NNT_CONFIG and
# LD_LIBRARY_PATH unset and WORK as the working directory, it checks that
#   (a) the installed nnt reads the installed INI and loads the installed plugins: `nnt plugins`
#       prints <prefix>/share/nnt/nnt.ini and no path of the build tree, and traces the example (also
#       over 2 ranks with mpirun, through the installed transport, when MPI was built);
#   (b) bin/nnt finds lib/libnnt.so.<soversion> by its RPATH ($ORIGIN), ldd reports nothing
#       missing, the soname is the one the project version gives (0.MINOR while the major is 0,
#       CHANGELOG.md) and the library's nnt_version() is that version, and
#       the installed text files (INI, nnt.pc, CMake package) name neither the build tree nor a
#       fixed prefix;
#   (c) pkg-config --cflags --libs nnt builds a program, and a consumer CMake project
#       (tests/install/consumer: find_package(nnt CONFIG REQUIRED), nnt::nnt, nnt_add_plugin)
#       configures with CMAKE_PREFIX_PATH=<prefix>, builds, and runs;
#   (d) the installation still works after its directory is moved (nothing in it names the
#       prefix it was installed to);
#   (e) the family kit is installed (include/nnt/nnt_family_kit.h, lib/libnnt_family.a) and an
#       out-of-tree family builds on it: examples/third_party_family (Qwen3-MoE; find_package,
#       nnt_add_plugin, nnt::family_kit) configures against <prefix> alone, and the same source
#       links with pkg-config's kitlibs; loaded by an INI next to the installed families on the
#       cpu backend, the installed nnt traces tests/fixtures/qwen3_moe and its logits and block
#       values match transformers' (reference.safetensors) within 1e-5 relative, checked by
#       tests/install/compare_values.c; `nnt plan` of the fixture's folder (and of its config.json
#       alone) gives the bytes its config.json gives by hand, from the family's own cost model
#       (its descriptor's `costs`); and, when MPI was built, `mpirun -np 2` traces the fixture over
#       2 ranks split by that model, with the values of one process (1e-6 relative). It runs
#       before (d), on the prefix as installed;
#   (f) an out-of-tree backend builds and loads: examples/third_party_backend (plain_c: plain C
#       loops for the required and decoder ops only) configures against <prefix> alone; an INI
#       puts the Qwen3-MoE family of (e) on it and minimax_m2 on cpu, `nnt plugins` shows that
#       wiring, the Qwen3-MoE values on plain_c match transformers' within 1e-5 relative, and an
#       INI that also puts kimi_linear on plain_c fails to open, naming kimi_linear, plain_c and
#       the recurrent ops plain_c lacks (the capability check).
# SANITIZE=ON builds the consumer with the sanitizers libnnt was built with. WORK is removed
# when every check passes and kept (its path printed) when one fails.
set -euo pipefail
cmake_cmd=$1 build=$(cd "$2" && pwd -P) src=$(cd "$3" && pwd -P)
cc=${4:-cc} sanitize=${5:-OFF}

work=$(mktemp -d "${TMPDIR:-/tmp}/nnt-install-test.XXXXXX")
work=$(cd "$work" && pwd -P)
fail() { echo "install_test: FAIL: $* (files kept in $work)" >&2; exit 1; }
step() { echo "install_test: $*"; }
case "$work/" in "$build/"*) fail "the scratch directory $work lies in the build tree" ;; esac
prefix=$work/prefix
unset NNT_CONFIG LD_LIBRARY_PATH
cd "$work"

step "installing $build to $prefix"
"$cmake_cmd" --install "$build" --prefix "$prefix" > "$work/install.log" || { cat "$work/install.log"; fail "cmake --install"; }
ini=$prefix/share/nnt/nnt.ini
[ -f "$ini" ] || fail "no $ini"

# (a) the installed configuration and plugins, never the build tree's
step "(a) nnt plugins"
"$prefix/bin/nnt" plugins > plugins.txt 2>&1 || { cat plugins.txt; fail "the installed nnt plugins failed"; }
cat plugins.txt
grep -qxF "configuration: $ini" plugins.txt || fail "nnt plugins does not report $ini"
if grep -qF "$build" plugins.txt; then fail "the installed nnt uses files of the build tree $build"; fi
grep -qE "family +minimax_m2 +cpu +$prefix/lib/nnt/families/minimax_m2.so" plugins.txt ||
  fail "minimax_m2 is not loaded from $prefix/lib/nnt/families on cpu"
step "(a) nnt trace on the example model"
"$prefix/bin/nnt" trace --model "$src/examples/tiny-minimax-m2" --tokens "$(cat "$src/examples/tiny-minimax-m2/prompt.txt")" \
  > trace.txt 2>&1 || { cat trace.txt; fail "the installed nnt cannot trace the example"; }
# the same over 2 ranks, through the installed INI's [distributed] transport (when it was built)
if [ -f "$prefix/lib/nnt/transports/mpi.so" ] && command -v mpirun > /dev/null; then
  step "(a) mpirun -np 2 of the installed nnt"
  # (in a sanitizer build, whole stacks for LeakSanitizer's suppressions of Open MPI: see dist_test.py)
  ASAN_OPTIONS="${ASAN_OPTIONS:-}:fast_unwind_on_malloc=0" \
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 mpirun --oversubscribe -np 2 \
    "$prefix/bin/nnt" trace --model "$src/examples/tiny-minimax-m2" --tokens "$(cat "$src/examples/tiny-minimax-m2/prompt.txt")" \
    > trace2.txt 2>&1 || { cat trace2.txt; fail "the installed nnt cannot trace the example over 2 ranks"; }
  grep "^top 5" trace.txt > top1.txt
  grep "^top 5" trace2.txt > top2.txt
  cmp -s top1.txt top2.txt || { cat trace.txt trace2.txt; fail "2 ranks print other next tokens than one process"; }
fi

# (b) RPATH and no build-tree or fixed-prefix paths in the installed text files
step "(b) ldd bin/nnt"
ldd "$prefix/bin/nnt" > ldd.txt
cat ldd.txt
if grep -q "not found" ldd.txt; then fail "bin/nnt misses a library"; fi
# the soname from the project version in the build's CMakeCache.txt (CMAKE_PROJECT_VERSION)
version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
major=${version%%.*} rest=${version#*.}
minor=${rest%%.*}
if [ "$major" = 0 ]; then soname=libnnt.so.0.$minor; else soname=libnnt.so.$major; fi
readelf -d "$prefix/lib/libnnt.so" | grep -qF "Library soname: [$soname]" ||
  fail "the installed libnnt's soname is not $soname (project version $version): $(readelf -d "$prefix/lib/libnnt.so" | grep SONAME)"
lib=$(awk -v so="$soname" '$1 == so { print $3 }' ldd.txt)
# shellcheck disable=SC2015
[ -n "$lib" ] && [ "$(realpath "$lib")" = "$(realpath "$prefix/lib/$soname")" ] ||
  fail "bin/nnt resolves $soname to '$lib', not $prefix/lib/$soname"
# shellcheck disable=SC2016
readelf -d "$prefix/bin/nnt" | grep -E 'R(UN)?PATH' | grep -qF '$ORIGIN' || fail "bin/nnt has no \$ORIGIN RPATH"
configured_prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt")
for f in "$ini" "$prefix/lib/pkgconfig/nnt.pc" "$prefix"/lib/cmake/nnt/*.cmake; do
  if grep -qF "$build" "$f"; then fail "$f names the build tree $build"; fi
  if [ -n "$configured_prefix" ] && [ "$configured_prefix" != "$prefix" ] && grep -v '^[#;]' "$f" | grep -qF "$configured_prefix/"; then
    fail "$f names the configured prefix $configured_prefix"
  fi
done

# (c) building against the installation: pkg-config, then CMake
san_flags=()
[ "$sanitize" = "ON" ] && san_flags=("-fsanitize=address,undefined")
step "(c) pkg-config"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
[ "$(realpath "$(pkg-config --variable=configfile nnt)")" = "$ini" ] || fail "pkg-config's configfile is not $ini"
[ "$(realpath "$(pkg-config --variable=familydir nnt)")" = "$prefix/lib/nnt/families" ] || fail "pkg-config's familydir"
cat > pc_main.c <<'C'
#include <stdio.h>
#include <nnt/nnt.h>
int main(void)
{
    nnt_runtime *rt = NULL;
    nnt_status st = nnt_runtime_open(NULL, &rt);
    printf("%s\n", st == NNT_OK ? nnt_runtime_config_path(rt) : nnt_last_error(rt));
    nnt_runtime_close(rt);
    return st == NNT_OK ? 0 : 1;
}
C
# shellcheck disable=SC2046
"$cc" "${san_flags[@]}" pc_main.c -o pc_main $(pkg-config --cflags --libs nnt) -Wl,-rpath,"$(pkg-config --variable=libdir nnt)"
./pc_main > pc_main.txt || { cat pc_main.txt; fail "the pkg-config program failed"; }
[ "$(realpath "$(cat pc_main.txt)")" = "$ini" ] || fail "the pkg-config program read $(cat pc_main.txt), not $ini"
step "(c) the installed nnt_version.h and the library's nnt_version() and struct sizes"
cat > ver_main.c <<'C'
#include <stdio.h>
#include <nnt/nnt.h>
int main(void)
{
    int same = nnt_struct_size("nnt_plan_opts") == sizeof(nnt_plan_opts) &&
               nnt_struct_size("nnt_tensor") == sizeof(nnt_tensor) && nnt_struct_size("no_such_struct") == 0 &&
               nnt_abi_version() == (((uint32_t)NNT_ABI_MAJOR << 16) | NNT_ABI_MINOR);
    printf("%s %s %d.%d.%d %s\n", NNT_VERSION_STRING, nnt_version(), NNT_VERSION_MAJOR, NNT_VERSION_MINOR,
           NNT_VERSION_PATCH, same ? "sizes-agree" : "sizes-differ");
    return 0;
}
C
# shellcheck disable=SC2046
"$cc" "${san_flags[@]}" ver_main.c -o ver_main $(pkg-config --cflags --libs nnt) -Wl,-rpath,"$(pkg-config --variable=libdir nnt)"
./ver_main > ver_main.txt || { cat ver_main.txt; fail "the version program failed"; }
[ "$(cat ver_main.txt)" = "$version $version $version sizes-agree" ] ||
  fail "headers, library and project disagree on the version or the struct sizes: $(cat ver_main.txt) (project $version)"
[ "$(pkg-config --modversion nnt)" = "$version" ] || fail "nnt.pc's version $(pkg-config --modversion nnt) is not $version"

step "(c) find_package(nnt CONFIG) consumer"
cflags=()
[ "$sanitize" = "ON" ] && cflags=("-DCMAKE_C_FLAGS=-fsanitize=address,undefined"
                                  "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined"
                                  "-DCMAKE_MODULE_LINKER_FLAGS=-fsanitize=address,undefined")
# another minor is refused while the major is 0 (the package's SameMinorVersion, CHANGELOG.md)
if [ "$major" = 0 ] && [ "$minor" -gt 0 ] && "$cmake_cmd" -S "$src/tests/install/consumer" -B "$work/consumer-old" -DCMAKE_PREFIX_PATH="$prefix" \
  -DNNT_WANT_VERSION="0.$((minor - 1))" -DCMAKE_C_COMPILER="$cc" "${cflags[@]}" > consumer-old.log 2>&1; then
  fail "find_package(nnt 0.$((minor - 1))) accepted the installed $version"
fi
"$cmake_cmd" -S "$src/tests/install/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
  -DNNT_WANT_VERSION="$major.$minor" -DCMAKE_C_COMPILER="$cc" "${cflags[@]}" > consumer-configure.log 2>&1 ||
  { cat consumer-configure.log; fail "the consumer project does not configure"; }
grep -F "nnt_DIR:PATH=" "$work/consumer/CMakeCache.txt" | grep -qF "$prefix/lib/cmake/nnt" ||
  fail "the consumer found nnt elsewhere than $prefix: $(grep -F nnt_DIR "$work/consumer/CMakeCache.txt")"
"$cmake_cmd" --build "$work/consumer" > consumer-build.log 2>&1 || { cat consumer-build.log; fail "the consumer does not build"; }
"$work/consumer/nnt_consumer" "$prefix" "$src/examples/tiny-minimax-m2" "$work" > consumer.txt 2>&1 ||
  { cat consumer.txt; fail "the consumer failed"; }
cat consumer.txt

# (e) the family kit and an out-of-tree family (Qwen3-MoE) built on it
step "(e) the family kit"
[ -f "$prefix/include/nnt/nnt_family_kit.h" ] || fail "no $prefix/include/nnt/nnt_family_kit.h"
[ -f "$prefix/lib/libnnt_family.a" ] || fail "no $prefix/lib/libnnt_family.a"
step "(e) examples/third_party_family with find_package(nnt CONFIG) and nnt::family_kit"
"$cmake_cmd" -S "$src/examples/third_party_family" -B "$work/q3" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_COMPILER="$cc" "${cflags[@]}" > q3-configure.log 2>&1 ||
  { cat q3-configure.log; fail "examples/third_party_family does not configure against $prefix"; }
grep -F "nnt_DIR:PATH=" "$work/q3/CMakeCache.txt" | grep -qF "$prefix/lib/cmake/nnt" ||
  fail "examples/third_party_family found nnt elsewhere than $prefix"
"$cmake_cmd" --build "$work/q3" > q3-build.log 2>&1 || { cat q3-build.log; fail "examples/third_party_family does not build"; }
q3so=$work/q3/qwen3_moe.so
[ -f "$q3so" ] || fail "no $q3so"
# the kit is linked in with hidden symbols: the plugin exports its descriptor and nothing of the kit
if nm -D --defined-only "$q3so" | grep -q ' fam_'; then fail "qwen3_moe.so exports the kit's symbols"; fi
step "(e) the same family with pkg-config (kitlibs)"
# shellcheck disable=SC2046
"$cc" "${san_flags[@]}" -shared -fPIC -fvisibility=hidden $(pkg-config --cflags nnt) "$src/examples/third_party_family/qwen3_moe.c" \
  $(pkg-config --variable=kitlibs nnt) -o "$work/qwen3_moe_pc.so" > q3-pc.log 2>&1 || { cat q3-pc.log; fail "the pkg-config recipe does not build the family"; }
cat > q3.ini <<INI
[plugins]
dir = $prefix/lib/nnt/families
dir = $prefix/lib/nnt/kernels
file = $q3so

[family.qwen3_moe]
backend = cpu

[family.minimax_m2]
backend = cpu

[backend.cpu]
threads = 2
INI
"$prefix/bin/nnt" plugins --config "$work/q3.ini" > q3-plugins.txt 2>&1 || { cat q3-plugins.txt; fail "nnt plugins with the Qwen3-MoE INI failed"; }
cat q3-plugins.txt
grep -qE "family +qwen3_moe +cpu +$q3so" q3-plugins.txt || fail "qwen3_moe is not loaded from $q3so on cpu"
grep -qE "family +minimax_m2 +cpu +$prefix/lib/nnt/families/minimax_m2.so" q3-plugins.txt ||
  fail "the installed families are not loaded beside qwen3_moe"
step "(e) nnt trace on tests/fixtures/qwen3_moe, compared with transformers"
q3fix=$src/tests/fixtures/qwen3_moe
q3keys=(logits)
for l in 0 1; do
  q3keys+=("layers.$l.layer_output" "layers.$l.self_attn.attention_probabilities" "layers.$l.mlp.router_logits"
           "layers.$l.mlp.expert_indices" "layers.$l.mlp.expert_weights" "layers.$l.mlp.mlp_output")
done
q3save=()
for k in "${q3keys[@]}"; do q3save+=(--save "$k"); done
"$prefix/bin/nnt" trace --config "$work/q3.ini" --model "$q3fix" --tokens "$(cat "$q3fix/tokens.txt")" "${q3save[@]}" \
  --out "$work/q3-values.safetensors" > q3-trace.txt 2>&1 || { cat q3-trace.txt; fail "the installed nnt cannot trace the Qwen3-MoE fixture"; }
"$cc" "${san_flags[@]}" -O2 "$src/tests/install/compare_values.c" -o compare_values -lm
./compare_values "$work/q3-values.safetensors" "$q3fix/reference.safetensors" 1e-5 "${q3keys[@]}" > q3-compare.txt 2>&1 ||
  { cat q3-compare.txt; fail "the Qwen3-MoE values differ from transformers'"; }
cat q3-compare.txt
step "(e) nnt plan of the Qwen3-MoE folder from the family's own cost model"
"$prefix/bin/nnt" plan --config "$work/q3.ini" --model "$q3fix" --ranks 2 --context 10 --batch 3 > q3-plan.txt 2>&1 ||
  { cat q3-plan.txt; fail "nnt plan of the Qwen3-MoE fixture failed"; }
cat q3-plan.txt
# by hand from its config.json (test_plan.c spells it out): 112640 bytes a block, embedding 24576,
# final norm and lm_head 24768; caches 3 rows x 2 heads x (16 + 16) x 10 tokens x 4 bytes a block
grep -qF "weights: exact, from the safetensors headers (1 file): 274.62 kB" q3-plan.txt &&
  grep -qF "caches: 10 tokens x 3 rows, float32: 15.36 kB in all (the qwen3_moe family's cost model)" q3-plan.txt &&
  grep -qE "^0 +0-0 +137.22 kB +7.68 kB " q3-plan.txt && grep -qE "^1 +1-1 +137.41 kB +7.68 kB " q3-plan.txt ||
  fail "nnt plan of the Qwen3-MoE fixture does not give its hand-computed bytes"
mkdir -p "$work/q3-config-only"
cp "$q3fix/config.json" "$work/q3-config-only/"
"$prefix/bin/nnt" plan --config "$work/q3.ini" --model "$work/q3-config-only" --ranks 2 > q3-plan-config.txt 2>&1 ||
  { cat q3-plan-config.txt; fail "nnt plan of the Qwen3-MoE config.json alone failed"; }
grep -qF "weights: computed from config.json's dimensions and quantization by the qwen3_moe family's cost model (no safetensors present): 274.62 kB" \
  q3-plan-config.txt || { cat q3-plan-config.txt; fail "the Qwen3-MoE cost model's weights differ from its headers'"; }
if [ -f "$prefix/lib/nnt/transports/mpi.so" ] && command -v mpirun > /dev/null; then
  step "(e) mpirun -np 2: the Qwen3-MoE fixture over 2 ranks, split by its cost model, equals one process"
  cp q3.ini q3-dist.ini
  printf '\n[distributed]\ntransport = %s\ntimeout = 600\n' "$prefix/lib/nnt/transports/mpi.so" >> q3-dist.ini
  ASAN_OPTIONS="${ASAN_OPTIONS:-}:fast_unwind_on_malloc=0" \
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 mpirun --oversubscribe -np 2 \
    "$prefix/bin/nnt" trace --config "$work/q3-dist.ini" --model "$q3fix" --tokens "$(cat "$q3fix/tokens.txt")" "${q3save[@]}" \
    --out "$work/q3-values2.safetensors" > q3-trace2.txt 2>&1 ||
    { cat q3-trace2.txt; fail "the installed nnt cannot trace the Qwen3-MoE fixture over 2 ranks"; }
  ./compare_values "$work/q3-values2.safetensors" "$work/q3-values.safetensors" 1e-6 "${q3keys[@]}" > q3-compare2.txt 2>&1 ||
    { cat q3-compare2.txt; fail "the Qwen3-MoE values over 2 ranks differ from one process's"; }
  cat q3-compare2.txt
fi

# (f) an out-of-tree backend (examples/third_party_backend: plain_c, the decoder ops only)
step "(f) examples/third_party_backend with find_package(nnt CONFIG)"
"$cmake_cmd" -S "$src/examples/third_party_backend" -B "$work/plain" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_COMPILER="$cc" "${cflags[@]}" > plain-configure.log 2>&1 ||
  { cat plain-configure.log; fail "examples/third_party_backend does not configure against $prefix"; }
grep -F "nnt_DIR:PATH=" "$work/plain/CMakeCache.txt" | grep -qF "$prefix/lib/cmake/nnt" ||
  fail "examples/third_party_backend found nnt elsewhere than $prefix"
"$cmake_cmd" --build "$work/plain" > plain-build.log 2>&1 || { cat plain-build.log; fail "examples/third_party_backend does not build"; }
plainso=$work/plain/plain_c.so
[ -f "$plainso" ] || fail "no $plainso"
cat > plain.ini <<INI
[plugins]
dir = $prefix/lib/nnt/families
dir = $prefix/lib/nnt/kernels
file = $q3so
file = $plainso

[family.qwen3_moe]
backend = plain_c

[family.minimax_m2]
backend = cpu
INI
"$prefix/bin/nnt" plugins --config "$work/plain.ini" > plain-plugins.txt 2>&1 ||
  { cat plain-plugins.txt; fail "nnt plugins with the plain_c INI failed"; }
cat plain-plugins.txt
grep -qE "backend +plain_c .*$plainso" plain-plugins.txt || fail "plain_c is not loaded from $plainso"
grep -qE "family +qwen3_moe +plain_c +$q3so" plain-plugins.txt || fail "qwen3_moe is not on plain_c"
grep -qE "family +minimax_m2 +cpu +$prefix/lib/nnt/families/minimax_m2.so" plain-plugins.txt ||
  fail "minimax_m2 is not on cpu beside plain_c"
step "(f) qwen3_moe on plain_c, compared with transformers; minimax_m2 on cpu in the same runtime"
"$prefix/bin/nnt" trace --config "$work/plain.ini" --model "$q3fix" --tokens "$(cat "$q3fix/tokens.txt")" "${q3save[@]}" \
  --out "$work/plain-values.safetensors" > plain-trace.txt 2>&1 ||
  { cat plain-trace.txt; fail "qwen3_moe does not trace on plain_c"; }
./compare_values "$work/plain-values.safetensors" "$q3fix/reference.safetensors" 1e-5 "${q3keys[@]}" > plain-compare.txt 2>&1 ||
  { cat plain-compare.txt; fail "the Qwen3-MoE values on plain_c differ from transformers'"; }
cat plain-compare.txt
"$prefix/bin/nnt" trace --config "$work/plain.ini" --model "$src/examples/tiny-minimax-m2" \
  --tokens "$(cat "$src/examples/tiny-minimax-m2/prompt.txt")" > plain-minimax.txt 2>&1 ||
  { cat plain-minimax.txt; fail "minimax_m2 on cpu does not trace beside plain_c"; }
step "(f) a family that needs ops plain_c lacks is refused, naming the family, the backend and the ops"
printf '[family.kimi_linear]\nbackend = plain_c\n' >> plain.ini
if "$prefix/bin/nnt" plugins --config "$work/plain.ini" > plain-kimi.txt 2>&1; then
  cat plain-kimi.txt; fail "kimi_linear on plain_c was accepted"
fi
cat plain-kimi.txt
grep -qF "family 'kimi_linear'" plain-kimi.txt && grep -qF "which backend 'plain_c'" plain-kimi.txt &&
  grep -qF "'conv1d_causal', 'kda_gate', 'sigmoid', 'delta_rule', 'rms_norm_gated', 'zero_rows'" plain-kimi.txt ||
  fail "the refusal of kimi_linear on plain_c does not name the family, the backend and the missing ops"

# (d) moved after installation
step "(d) the installation moved to $work/moved"
mv "$prefix" "$work/moved"
"$work/moved/bin/nnt" plugins > moved.txt 2>&1 || { cat moved.txt; fail "the moved installation's nnt plugins failed"; }
grep -qxF "configuration: $work/moved/share/nnt/nnt.ini" moved.txt || { cat moved.txt; fail "the moved nnt does not read its own INI"; }
grep -qE "family +minimax_m2 +cpu +$work/moved/lib/nnt/families/minimax_m2.so" moved.txt ||
  { cat moved.txt; fail "the moved nnt does not load its own plugins"; }
[ "$(realpath "$(PKG_CONFIG_PATH=$work/moved/lib/pkgconfig pkg-config --variable=configfile nnt)")" = "$work/moved/share/nnt/nnt.ini" ] ||
  fail "the moved nnt.pc does not follow the move"
rm -rf "$work"
step "passed"
