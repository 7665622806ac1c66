#!/usr/bin/env bash
# install-deps.sh - installs what building and testing nnt needs, from Debian's packages:
# a C toolchain, CMake, pkg-config, inih, cJSON, PCRE2, utf8proc, OpenBLAS (its OpenMP build too), oneDNN
# (the cpu backend's many-row products), CUnit (and OpenMP with gcc), Cairo (the nnt command's --plot
# pictures; optional for a build, which then goes without them), libmicrohttpd (nnt serve's HTTP,
# with GnuTLS; optional likewise), libcurl (the nnt command's --remote; optional likewise), Python 3 with numpy and pytest
# (the Python package's tests, python/tests) and jsonschema (the request schema's test); and clang with its runtime libraries
# (libclang-rt-dev: the sanitizers and libFuzzer, which clang only recommends) and its OpenMP
# (libomp-dev), for the sanitizer build and the fuzzers of tests/fuzz; Open MPI (libopenmpi-dev,
# openmpi-bin: mpirun) for runs over several ranks and their tests.
#   --bench  also installs what the GEMM library benchmark (bench/gemm) compares: BLIS (its
#            OpenMP build, like OpenBLAS's).
set -euo pipefail
packages=(build-essential cmake pkg-config libinih-dev libcjson-dev libpcre2-dev libutf8proc-dev libopenblas-dev libopenblas-openmp-dev libdnnl-dev libcunit1-dev
  libcairo2-dev libmicrohttpd-dev libcurl4-gnutls-dev python3 python3-numpy python3-pytest python3-jsonschema python3-pip python3-setuptools clang libclang-rt-dev libomp-dev libopenmpi-dev openmpi-bin)
for arg in "$@"; do
  case "$arg" in
    --bench) packages+=(libblis-openmp-dev libblis-dev) ;;
    *) echo "install-deps: unknown option '$arg' (known: --bench)" >&2; exit 2 ;;
  esac
done
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: everything is already installed"
  exit 0
fi
as_root=()
[ "$(id -u)" -eq 0 ] || as_root=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq "${missing[@]}"
