"""setup.py - records, in the package it builds, the nnt source tree it was built from, so that an
installed `nnt` finds that tree's libnnt (build/libnnt.so, or the installation prefix its CMake
build was configured with) wherever Python imports it from. Everything else is in pyproject.toml."""

import os
import re

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def _origin():
    """(source tree, install prefix): the tree when this package sits in one (its sdk/nnt/nnt.h),
    and CMAKE_INSTALL_PREFIX from the tree's build/CMakeCache.txt when it was configured."""
    tree = os.path.dirname(HERE)
    if not os.path.isfile(os.path.join(tree, "sdk", "nnt", "nnt.h")):
        return None, None
    prefix = None
    try:
        with open(os.path.join(tree, "build", "CMakeCache.txt"), encoding="utf-8", errors="replace") as f:
            for line in f:
                m = re.match(r"CMAKE_INSTALL_PREFIX:\w+=(.*)$", line.rstrip("\n"))
                if m:
                    prefix = m.group(1)
    except OSError:
        pass
    return tree, prefix


class BuildWithOrigin(build_py):
    def run(self):
        super().run()
        tree, prefix = _origin()
        path = os.path.join(self.build_lib, "nnt", "_built_from.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write('"""Written by setup.py when this package was built: where nnt._lib looks for libnnt after '
                    'the places a source checkout and the environment give."""\n')
            f.write(f"SOURCE_TREE = {tree!r}\nINSTALL_PREFIX = {prefix!r}\n")


setup(cmdclass={"build_py": BuildWithOrigin})
