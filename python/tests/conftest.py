"""conftest.py - where the tests find the source tree, the nnt command and libnnt.

NNT_SOURCE_DIR (default: the repository this file is in), NNT_CLI (default: <source>/build/nnt)
and NNT_LIBRARY (read by the package itself; ctest sets it to the build tree's libnnt) can be
set from outside. The tests run the nnt command and the package on the same libnnt and INI."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("NNT_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
CLI = os.environ.get("NNT_CLI") or os.path.join(SOURCE, "build", "nnt")
FIXTURES = os.path.join(SOURCE, "tests", "fixtures")
EXAMPLE = os.path.join(SOURCE, "examples", "tiny-minimax-m2")

sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(SOURCE, "python"))


def fixture_dirs():
    """Every checkpoint of the four built-in families under tests/fixtures/<family>/<variant>."""
    out = []
    for family in ("minimax_m2", "mimo_v2_flash", "kimi_linear", "deepseek_v4"):
        root = os.path.join(FIXTURES, family)
        for variant in sorted(os.listdir(root)):
            if os.path.isfile(os.path.join(root, variant, "config.json")):
                out.append(os.path.join(root, variant))
    return out


# In a sanitizer build the sanitizer runtime is preloaded into this interpreter for libnnt
# (CMakeLists.txt); the nnt command carries its own copy and must not get the preloaded one too.
CLI_ENV = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}


def run_cli(*args, check=True):
    """Runs the nnt command; returns the CompletedProcess (text)."""
    p = subprocess.run([CLI, *args], capture_output=True, text=True, env=CLI_ENV)
    if check and p.returncode != 0:
        raise AssertionError(f"nnt {' '.join(args)} failed ({p.returncode}):\n{p.stderr}")
    return p


@pytest.fixture(scope="session")
def example_model():
    import nnt

    return nnt.Model(EXAMPLE)


@pytest.fixture(scope="session")
def example_prompt():
    with open(os.path.join(EXAMPLE, "prompt_text.txt"), encoding="utf-8") as f:
        return f.read().rstrip("\n")  # as --prompt "$(cat prompt_text.txt)" passes it
