"""test_versions.py - the package's version is the project's (CMakeLists.txt), the library it loads
reports the same, every ctypes mirror has the size libnnt gives for its struct, and a library
whose sizes or version differ is refused with an error naming the struct, both sizes and both
versions."""

import ctypes
import os
import re

import pytest

import nnt
from nnt import _lib
from conftest import SOURCE

LIBRARY = os.environ.get("NNT_LIBRARY") or os.path.join(SOURCE, "build", "libnnt.so")


def cmake_version():
    with open(os.path.join(SOURCE, "CMakeLists.txt"), encoding="utf-8") as f:
        return re.search(r"^project\(nnt VERSION (\S+)", f.read(), re.M).group(1)


def test_package_version_is_the_projects():
    assert nnt.__version__ == cmake_version()


def test_library_reports_the_same_version():
    lib = _lib.load(LIBRARY)
    assert lib.nnt_version().decode() == cmake_version()
    abi = lib.nnt_abi_version()
    with open(os.path.join(SOURCE, "sdk", "nnt", "nnt_types.h"), encoding="utf-8") as f:
        text = f.read()
    major = int(re.search(r"#define NNT_ABI_MAJOR (\d+)", text).group(1))
    minor = int(re.search(r"#define NNT_ABI_MINOR (\d+)", text).group(1))
    assert (abi >> 16, abi & 0xFFFF) == (major, minor)


def test_every_mirror_has_the_librarys_size():
    lib = _lib.load(LIBRARY)
    assert len(_lib.STRUCT_MIRRORS) >= 6
    for name, mirror in _lib.STRUCT_MIRRORS.items():
        assert lib.nnt_struct_size(name.encode()) == ctypes.sizeof(mirror), name
    assert lib.nnt_struct_size(b"no_such_struct") == 0
    assert lib.nnt_struct_size(None) == 0


class ShortTensor(ctypes.Structure):
    """nnt_tensor's mirror without its last field, as a package of older headers would have it."""
    _fields_ = [f for f in _lib.Tensor._fields_ if f[0] != "flags"]


def test_a_wrong_mirror_is_refused():
    lib = _lib.load(LIBRARY)
    real = lib.nnt_struct_size(b"nnt_tensor")
    wrong = ctypes.sizeof(ShortTensor)
    assert wrong != real
    version = lib.nnt_version().decode()
    with pytest.raises(nnt.Error) as e:
        _lib.check_library("/x/libnnt.so", version, nnt.__version__, {"nnt_tensor": (real, wrong)})
    msg = str(e.value)
    for part in ("nnt_tensor", f"has {real} bytes", f"has {wrong} bytes", f"version {version}",
                 f"version {nnt.__version__}", "/x/libnnt.so"):
        assert part in msg, (part, msg)
    # a struct the library does not know
    with pytest.raises(nnt.Error, match="does not know the struct nnt_future_thing"):
        _lib.check_library("/x/libnnt.so", version, nnt.__version__, {"nnt_future_thing": (0, 16)})
    # the right sizes pass
    _lib.check_library("/x/libnnt.so", version, nnt.__version__, {"nnt_tensor": (real, real)})


def test_an_incompatible_version_is_refused():
    with pytest.raises(nnt.Error, match=r"libnnt /x/libnnt.so is version 0\.1\.0, this nnt package is 0\.2\.0"):
        _lib.check_library("/x/libnnt.so", "0.1.0", "0.2.0", {})
    _lib.check_library("/x/libnnt.so", "0.2.7", "0.2.0", {})  # a patch release
    _lib.check_library("/x/libnnt.so", "1.4.0", "1.2.0", {})  # from 1.0 on, the major
    with pytest.raises(nnt.Error):
        _lib.check_library("/x/libnnt.so", "2.0.0", "1.2.0", {})
    assert _lib.soversion("0.2.0") == "0.2" and _lib.soversion("1.3.1") == "1"


def test_a_library_without_versions_is_refused():
    # a shared object of the build that is no libnnt (a test plugin exporting no descriptor)
    other = os.path.join(os.path.dirname(os.path.realpath(LIBRARY)), "tests", "plugins", "not_a_plugin.so")
    assert os.path.isfile(other), other
    with pytest.raises(nnt.Error, match="has no nnt_version"):
        _lib.load(other)
