"""test_install.py - the package installed with pip (to a folder of its own, imported from
elsewhere, no `nnt` on PATH, no NNT_LIBRARY) finds the libnnt of the source tree it was built from,
and its message, when it finds none, says where it looked."""

import os
import subprocess
import sys

from conftest import SOURCE


def _install(tmp_path):
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps",
                        "--target", str(target), os.path.join(SOURCE, "python")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"pip install ./python (Debian: python3-pip, python3-setuptools): {r.stderr[-800:]}"
    return target


def _run(target, code, cwd):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(target), "NNT_CONFIG": ""}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


def test_installed_package_finds_its_trees_library(tmp_path):
    target = _install(tmp_path)
    r = _run(target, "import nnt; print(nnt.find_library()); m = nnt.Model(%r); "
                     "print(m.trace([[1, 2, 3]], save=['logits'])['logits'].shape)"
             % os.path.join(SOURCE, "examples", "tiny-minimax-m2"), cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-800:]
    lines = r.stdout.splitlines()
    assert os.path.realpath(lines[0]) == os.path.realpath(os.path.join(SOURCE, "build", "libnnt.so"))
    assert lines[1] == "(1, 3, 256)"


def test_the_message_says_where_it_looked(tmp_path):
    target = _install(tmp_path)
    built = target / "nnt" / "_built_from.py"
    built.write_text("SOURCE_TREE = %r\nINSTALL_PREFIX = %r\n" % (str(tmp_path / "tree"), str(tmp_path / "prefix")))
    r = _run(target, "import nnt; nnt.find_library()", cwd=str(tmp_path))
    assert r.returncode != 0
    assert "libnnt was not found" in r.stderr
    assert os.path.join(str(tmp_path / "tree"), "build", "libnnt.so") in r.stderr
    assert os.path.join(str(tmp_path / "prefix"), "lib", "libnnt.so") in r.stderr
