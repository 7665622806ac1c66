"""_lib.py - finds libnnt and declares the parts of its C API (sdk/nnt/nnt.h, nnt_types.h,
nnt_tokenizer.h) the package calls through ctypes.

Where libnnt comes from, first match wins:
  1. the `library` argument (nnt.Model(..., library=PATH) or nnt.load_library(PATH));
  2. the NNT_LIBRARY environment variable;
  3. a source checkout: this package imported from <repo>/python finds <repo>/build/libnnt.so;
  4. an installed package (pip install ./python): the source tree it was built from, recorded in
     nnt/_built_from.py by python/setup.py - <tree>/build/libnnt.so, then <prefix>/lib* of the
     CMAKE_INSTALL_PREFIX that tree's build was configured with;
  5. the `nnt` command on PATH, as its own RPATH finds the library: next to it in a build tree
     (build/nnt, build/libnnt.so), <prefix>/lib* beside <prefix>/bin/nnt when installed;
  6. the system's library search (ctypes.util.find_library("nnt"), e.g. /usr/local/lib).
libnnt itself then picks its INI as the CLI's does: the config argument, else $NNT_CONFIG, else
the nnt.ini that belongs to that library (the build tree's, or <prefix>/share/nnt/nnt.ini).

Versions. The package has no version number of its own: PACKAGE_VERSION is the project's one
number, CMakeLists.txt's project(nnt VERSION ...) of the source tree the package lies in (python/
of a checkout; pyproject.toml reads it from here when a wheel is built), else the version pip
recorded when the package was installed. At load, the library must be a compatible version (the
same major and minor while the major is 0, the same major from 1.0 on: the rule of libnnt's
soname, CHANGELOG.md) and every ctypes mirror of a C struct below must have the size
nnt_struct_size gives for it; otherwise the library is refused with an nnt.Error naming the
struct, both sizes and both versions.
"""

import ctypes
import ctypes.util
import os
import re
import shutil
import sysconfig


def _source_version():
    """CMakeLists.txt's project(nnt VERSION X.Y.Z) of the nnt source tree this file lies in
    (<repo>/python/nnt/_lib.py), or None outside one."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(os.path.dirname(os.path.dirname(here)), "CMakeLists.txt")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    m = re.search(r"^\s*project\(\s*nnt\s+VERSION\s+([0-9]+\.[0-9]+\.[0-9]+)", text, re.M)
    return m.group(1) if m else None


def _installed_version():
    """The version pip recorded for an installed nnt package, or None."""
    try:
        from importlib import metadata
        return metadata.version("nnt")
    except Exception:  # not installed, or Python < 3.8
        return None


PACKAGE_VERSION = _source_version() or _installed_version()


def _major_minor(version):
    parts = str(version).split(".")
    return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0


def compatible_versions(package, library):
    """True when a package of version `package` may drive a libnnt of version `library`: the
    same major and minor while the major is 0 (a 0.x minor may change the API), the same major
    from 1.0 on."""
    (pa, pi), (la, li) = _major_minor(package), _major_minor(library)
    return pa == la and (pa > 0 or pi == li)


def soversion(version):
    """The soname suffix of libnnt for a release: 0.MINOR while the major is 0, else MAJOR."""
    major, minor = _major_minor(version)
    return f"0.{minor}" if major == 0 else str(major)

# ---- plain types (nnt_types.h) ----

NNT_MAX_DIMS = 6
NNT_ERROR_MSG_MAX = 1024
NNT_REASON_MAX = 320
NNT_TOKEN_STOPPED = -1
NNT_TOKENIZE_ADD_SPECIAL = 1
NNT_DECODE_SKIP_SPECIAL = 1
NNT_DECODE_REPLACE_INVALID = 2

NNT_OK = 0
NNT_ERR_INVALID_ARGUMENT = 1
NNT_ERR_NOT_FOUND = 9
NNT_ERR_CALLBACK = 17

# nnt_dtype values, in the enum's order
DTYPES = ["INVALID", "F32", "F16", "BF16", "F64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "I64", "I32",
          "I16", "I8", "U8", "BOOL", "F4_E2M1"]
DTYPE_CODE = {name: i for i, name in enumerate(DTYPES)}


class Tensor(ctypes.Structure):
    """struct nnt_tensor: dense, row-major; `data` host memory unless `device`."""
    _fields_ = [
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.c_int64 * NNT_MAX_DIMS),
        ("data", ctypes.c_void_p),
        ("device", ctypes.c_int),
        ("scale", ctypes.c_void_p),
        ("scale_dtype", ctypes.c_int),
        ("block_rows", ctypes.c_int32),
        ("block_cols", ctypes.c_int32),
        ("block_row0", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
    ]


class ErrorRecord(ctypes.Structure):
    """struct nnt_error: a status and a message, filled by an edit callback that fails."""
    _fields_ = [("status", ctypes.c_int), ("msg", ctypes.c_char * NNT_ERROR_MSG_MAX)]


class CallDims(ctypes.Structure):
    _fields_ = [("batch", ctypes.c_int), ("seq", ctypes.c_int), ("past", ctypes.c_int)]


class ValueInfo(ctypes.Structure):
    _fields_ = [
        ("served", ctypes.c_int),
        ("reason", ctypes.c_char * NNT_REASON_MAX),
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.c_int64 * NNT_MAX_DIMS),
        ("writable", ctypes.c_int),
        ("may_be_none", ctypes.c_int),
        ("off_page", ctypes.c_int),
        ("layout", ctypes.c_char_p),
        ("axes", ctypes.c_char_p),
    ]


class ModelInfo(ctypes.Structure):
    _fields_ = [
        ("architecture", ctypes.c_char_p),
        ("model_type", ctypes.c_char_p),
        ("root_class", ctypes.c_char_p),
        ("num_layers", ctypes.c_int),
        ("hidden_size", ctypes.c_int),
        ("vocab_size", ctypes.c_int),
        ("num_heads", ctypes.c_int),
        ("num_kv_heads", ctypes.c_int),
        ("head_dim", ctypes.c_int),
        ("qk_head_dim", ctypes.c_int),
        ("intermediate_size", ctypes.c_int),
        ("num_experts", ctypes.c_int),
        ("top_k", ctypes.c_int),
        ("num_streams", ctypes.c_int),
    ]


class GenerateOpts(ctypes.Structure):
    _fields_ = [
        ("max_new_tokens", ctypes.c_int),
        ("temperature", ctypes.c_float),
        ("top_k", ctypes.c_int),
        ("top_p", ctypes.c_float),
        ("seed", ctypes.c_uint64),
        ("stop_ids", ctypes.POINTER(ctypes.c_int32)),
        ("n_stop_ids", ctypes.c_int),
    ]


class RequestSource(ctypes.Structure):
    """struct nnt_request_source: a request document and the safetensors bytes beside it."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("json", ctypes.c_char_p),
        ("json_len", ctypes.c_size_t),
        ("tensors", ctypes.c_void_p),
        ("tensors_len", ctypes.c_size_t),
        ("base_dir", ctypes.c_char_p),
        ("name", ctypes.c_char_p),
        ("flags", ctypes.c_uint32),
    ]


class Batch(ctypes.Structure):
    """struct nnt_batch: left-padded rows."""
    _fields_ = [
        ("batch", ctypes.c_int),
        ("seq", ctypes.c_int),
        ("ids", ctypes.POINTER(ctypes.c_int32)),
        ("mask", ctypes.POINTER(ctypes.c_int32)),
        ("lens", ctypes.POINTER(ctypes.c_int)),
    ]


class LensResult(ctypes.Structure):
    """struct nnt_lens_result."""
    _fields_ = [
        ("batch", ctypes.c_int),
        ("layers", ctypes.c_int),
        ("width", ctypes.c_int),
        ("vocab", ctypes.c_int64),
        ("positions", ctypes.POINTER(ctypes.c_int32)),
        ("top", ctypes.POINTER(ctypes.c_int32)),
        ("top_prob", ctypes.POINTER(ctypes.c_float)),
        ("probs", ctypes.POINTER(ctypes.c_float)),
    ]


class PatchResult(ctypes.Structure):
    """struct nnt_patch_result."""
    _fields_ = [
        ("n_blocks", ctypes.c_int),
        ("n_positions", ctypes.c_int),
        ("blocks", ctypes.POINTER(ctypes.c_int)),
        ("positions", ctypes.POINTER(ctypes.c_int)),
        ("grid", ctypes.POINTER(ctypes.c_double)),
        ("clean_metric", ctypes.c_double),
        ("corrupt_metric", ctypes.c_double),
        ("forwards", ctypes.c_int),
    ]


class AttributeResult(ctypes.Structure):
    """struct nnt_attribute_result."""
    _fields_ = [
        ("n_blocks", ctypes.c_int),
        ("n_positions", ctypes.c_int),
        ("n_units", ctypes.c_int),
        ("blocks", ctypes.POINTER(ctypes.c_int)),
        ("grid", ctypes.POINTER(ctypes.c_double)),
        ("clean_metric", ctypes.c_double),
        ("corrupt_metric", ctypes.c_double),
        ("forwards", ctypes.c_int),
        ("backwards", ctypes.c_int),
    ]


# nnt_edit_fn: status (void *user, const char *path, int layer, nnt_tensor *value, nnt_error *err)
EDIT_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                           ctypes.POINTER(Tensor), ctypes.POINTER(ErrorRecord))

_P = ctypes.c_void_p
_I32P = ctypes.POINTER(ctypes.c_int32)


class Progress(ctypes.Structure):
    """struct nnt_progress: what a running call tells the runtime's progress handler."""
    _fields_ = [("struct_size", ctypes.c_uint32), ("kind", ctypes.c_int), ("layer", ctypes.c_int),
                ("step", ctypes.c_int), ("batch", ctypes.c_int), ("tokens", ctypes.POINTER(ctypes.c_int32))]


NNT_PROGRESS_VALUE = 1
NNT_PROGRESS_TOKENS = 2
# nnt_progress_fn: int (void *user, const nnt_progress *p)
PROGRESS_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(Progress))


class RequestCallback(ctypes.Structure):
    """struct nnt_request_callback: what a {"op": "callback"} edit calls."""
    _fields_ = [("fn", EDIT_FN), ("user", ctypes.c_void_p)]


class RunOpts(ctypes.Structure):
    """struct nnt_run_opts."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("callbacks", ctypes.POINTER(RequestCallback)),
        ("n_callbacks", ctypes.c_int),
        ("extra_saves", ctypes.POINTER(ctypes.c_char_p)),
        ("n_extra_saves", ctypes.c_int),
        ("pipeline", ctypes.c_void_p),
    ]


class Reencoding(ctypes.Structure):
    """struct nnt_reencoding: what `weights = fp8` changed at load."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("tensors", ctypes.c_int64),
        ("values", ctypes.c_uint64),
        ("stored_bytes", ctypes.c_uint64),
        ("encoded_bytes", ctypes.c_uint64),
        ("rel_rms", ctypes.c_double),
        ("max_abs", ctypes.c_double),
        ("worst_rel_rms", ctypes.c_double),
        ("worst", ctypes.c_char * 256),
    ]


# Every ctypes mirror of a C struct, by the struct's typedef name; each is checked against
# nnt_struct_size when a library is loaded (a new mirror joins this table).
STRUCT_MIRRORS = {
    "nnt_tensor": Tensor,
    "nnt_error": ErrorRecord,
    "nnt_call_dims": CallDims,
    "nnt_value_info": ValueInfo,
    "nnt_model_info": ModelInfo,
    "nnt_generate_opts": GenerateOpts,
    "nnt_request_source": RequestSource,
    "nnt_batch": Batch,
    "nnt_lens_result": LensResult,
    "nnt_patch_result": PatchResult,
    "nnt_attribute_result": AttributeResult,
    "nnt_request_callback": RequestCallback,
    "nnt_run_opts": RunOpts,
    "nnt_reencoding": Reencoding,
}


# name: (restype, argtypes)
_SIGNATURES = {
    "nnt_status_str": (ctypes.c_char_p, [ctypes.c_int]),
    "nnt_version": (ctypes.c_char_p, []),
    "nnt_abi_version": (ctypes.c_uint32, []),
    "nnt_struct_size": (ctypes.c_size_t, [ctypes.c_char_p]),
    "nnt_runtime_open": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_P)]),
    "nnt_runtime_close": (None, [_P]),
    "nnt_last_error": (ctypes.c_char_p, [_P]),
    "nnt_runtime_config_path": (ctypes.c_char_p, [_P]),
    "nnt_model_load": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.POINTER(_P)]),
    "nnt_model_free": (None, [_P]),
    "nnt_model_get_info": (ctypes.POINTER(ModelInfo), [_P]),
    "nnt_model_family": (ctypes.c_char_p, [_P]),
    "nnt_model_backend": (ctypes.c_char_p, [_P]),
    "nnt_model_print": (ctypes.c_int, [_P, _P]),
    "nnt_model_note": (ctypes.c_int, [_P, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]),
    "nnt_model_reencoding": (ctypes.c_int, [_P, ctypes.POINTER(Reencoding)]),
    "nnt_model_support": (ctypes.c_int, [_P, _P, ctypes.c_int]),
    "nnt_model_value_info": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.POINTER(CallDims),
                                            ctypes.POINTER(ValueInfo)]),
    "nnt_trace_new": (ctypes.c_int, [_P, ctypes.POINTER(_P)]),
    "nnt_trace_free": (None, [_P]),
    "nnt_trace_save": (ctypes.c_int, [_P, ctypes.c_char_p]),
    "nnt_trace_edit": (ctypes.c_int, [_P, ctypes.c_char_p, EDIT_FN, _P]),
    "nnt_trace_set": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.POINTER(Tensor)]),
    "nnt_trace_add": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.POINTER(Tensor), ctypes.c_float]),
    "nnt_trace_scale": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_float]),
    "nnt_trace_zero": (ctypes.c_int, [_P, ctypes.c_char_p]),
    "nnt_trace_masked_fill": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int64,
                                             ctypes.c_float]),
    "nnt_trace_ablate_expert": (ctypes.c_int, [_P, ctypes.c_int, ctypes.c_int]),
    "nnt_trace_skip_layers": (ctypes.c_int, [_P, ctypes.c_int, ctypes.c_int]),
    "nnt_trace_steer": (ctypes.c_int, [_P, ctypes.c_int, ctypes.c_int, _I32P, ctypes.c_int,
                                       ctypes.POINTER(Tensor), ctypes.c_float]),
    "nnt_trace_steps": (ctypes.c_int, [_P, ctypes.c_int, ctypes.c_int]),
    "nnt_trace_run": (ctypes.c_int, [_P, _I32P, _I32P, ctypes.c_int, ctypes.c_int]),
    "nnt_trace_result_count": (ctypes.c_int, [_P]),
    "nnt_trace_result": (ctypes.c_int, [_P, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p),
                                        ctypes.POINTER(ctypes.POINTER(Tensor))]),
    "nnt_trace_get": (ctypes.c_void_p, [_P, ctypes.c_char_p]),
    "nnt_trace_write_safetensors": (ctypes.c_int, [_P, ctypes.c_char_p]),
    "nnt_generate": (ctypes.c_int, [_P, _P, _I32P, _I32P, ctypes.c_int, ctypes.c_int,
                                    ctypes.POINTER(GenerateOpts), _I32P]),
    "nnt_project_on_vocab": (ctypes.c_int, [_P, ctypes.POINTER(Tensor), ctypes.POINTER(Tensor)]),
    "nnt_tensor_free": (None, [ctypes.POINTER(Tensor)]),
    "nnt_request_parse": (ctypes.c_int, [_P, ctypes.POINTER(RequestSource), ctypes.POINTER(_P)]),
    "nnt_request_free": (None, [_P]),
    "nnt_request_apply": (ctypes.c_int, [_P, _P, ctypes.POINTER(RequestCallback), ctypes.c_int]),
    "nnt_request_batch": (ctypes.c_int, [_P, _P, ctypes.POINTER(Batch)]),
    "nnt_batch_free": (None, [ctypes.POINTER(Batch)]),
    "nnt_request_run": (ctypes.c_int, [_P, _P, ctypes.POINTER(RunOpts), ctypes.POINTER(_P)]),
    "nnt_runtime_set_progress": (ctypes.c_int, [_P, PROGRESS_FN, _P]),
    "nnt_result_free": (None, [_P]),
    "nnt_result_trace": (_P, [_P]),
    "nnt_result_batch": (ctypes.POINTER(Batch), [_P]),
    "nnt_result_tokens": (_I32P, [_P, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(_I32P),
                                  ctypes.POINTER(ctypes.c_int)]),
    "nnt_result_lens": (ctypes.POINTER(LensResult), [_P]),
    "nnt_result_patch": (ctypes.POINTER(PatchResult), [_P]),
    "nnt_result_attribute": (ctypes.POINTER(AttributeResult), [_P]),
    "nnt_session_new": (ctypes.c_int, [_P, ctypes.c_int, ctypes.c_int, ctypes.POINTER(_P)]),
    "nnt_session_free": (None, [_P]),
    "nnt_session_length": (ctypes.c_int, [_P]),
    "nnt_session_forward": (ctypes.c_int, [_P, _P, _I32P, _I32P, ctypes.c_int]),
    "nnt_tokenizer_load": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_P)]),
    "nnt_runtime_tokenizer": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.POINTER(_P)]),
    "nnt_model_tokenizer": (ctypes.c_int, [_P, ctypes.POINTER(_P)]),
    "nnt_tokenizer_free": (None, [_P]),
    "nnt_tokenizer_last_error": (ctypes.c_char_p, [_P]),
    "nnt_tokenizer_kind": (ctypes.c_char_p, [_P]),
    "nnt_tokenizer_vocab_size": (ctypes.c_int32, [_P]),
    "nnt_tokenizer_bos_id": (ctypes.c_int32, [_P]),
    "nnt_tokenizer_eos_id": (ctypes.c_int32, [_P]),
    "nnt_tokenizer_pad_id": (ctypes.c_int32, [_P]),
    "nnt_tokenizer_token_id": (ctypes.c_int32, [_P, ctypes.c_char_p]),
    "nnt_tokenizer_token_bytes": (ctypes.c_void_p, [_P, ctypes.c_int32, ctypes.POINTER(ctypes.c_size_t)]),
    "nnt_tokenizer_is_special": (ctypes.c_int, [_P, ctypes.c_int32]),
    "nnt_tokenizer_encode": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int,
                                            ctypes.POINTER(_I32P), ctypes.POINTER(ctypes.c_int64)]),
    "nnt_tokenizer_decode": (ctypes.c_int, [_P, _I32P, ctypes.c_int64, ctypes.c_int,
                                            ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]),
}

_LIBS = {}  # real path -> ctypes.CDLL, so each libnnt is opened and declared once


def _libc():
    libc = ctypes.CDLL(None)
    libc.open_memstream.restype = ctypes.c_void_p
    libc.open_memstream.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t)]
    libc.fclose.argtypes = [ctypes.c_void_p]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.free.restype = None
    return libc


LIBC = _libc()


def _package_checkout_candidates():
    """<repo>/build/libnnt.so when this package is the one in <repo>/python."""
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    if os.path.isfile(os.path.join(repo, "sdk", "nnt", "nnt.h")):
        return [os.path.join(repo, "build", "libnnt.so")]
    return []


def _recorded_candidates():
    """The libnnt of the source tree this installed package was built from (nnt/_built_from.py,
    written by python/setup.py): <tree>/build/libnnt.so, then <prefix>/lib*/ of the installation
    prefix that tree's build was configured with."""
    try:
        from . import _built_from
    except ImportError:
        return []
    out = []
    if _built_from.SOURCE_TREE:
        out.append(os.path.join(_built_from.SOURCE_TREE, "build", "libnnt.so"))
    if _built_from.INSTALL_PREFIX:
        out += _prefix_candidates(_built_from.INSTALL_PREFIX)
    return out


def _prefix_candidates(prefix):
    """<prefix>/lib, lib64 and lib/<multiarch>: libnnt.so.<soversion>, then libnnt.so."""
    out = []
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    for libdir in ("lib", "lib64", os.path.join("lib", multiarch) if multiarch else None):
        if libdir:
            if PACKAGE_VERSION:
                out.append(os.path.join(prefix, libdir, "libnnt.so." + soversion(PACKAGE_VERSION)))
            out.append(os.path.join(prefix, libdir, "libnnt.so"))
    return out


def _command_candidates():
    """Where the `nnt` command on PATH finds its libnnt: beside it in a build tree, <prefix>/lib*
    in an installation."""
    exe = shutil.which("nnt")
    if not exe:
        return []
    bindir = os.path.dirname(os.path.realpath(exe))
    return [os.path.join(bindir, "libnnt.so")] + _prefix_candidates(os.path.dirname(bindir))


def find_library(library=None):
    """The path of the libnnt to load (see the module comment for the order). Raises OSError
    listing the places looked at when none holds it."""
    if library:
        if not os.path.isfile(library):
            raise OSError(f"libnnt: the library argument {library!r} is not a file")
        return library
    env = os.environ.get("NNT_LIBRARY")
    if env:
        if not os.path.isfile(env):
            raise OSError(f"libnnt: NNT_LIBRARY={env!r} is not a file")
        return env
    tried = []
    for path in _package_checkout_candidates() + _recorded_candidates() + _command_candidates():
        tried.append(path)
        if os.path.isfile(path):
            return path
    found = ctypes.util.find_library("nnt")
    if found:
        return found
    tried.append("the system library path (ctypes.util.find_library('nnt'))")
    raise OSError("libnnt was not found: pass library=PATH, set NNT_LIBRARY, put the `nnt` command of a build "
                  "tree or installation on PATH, or build libnnt in the source tree this package was installed "
                  "from; looked at " + ", ".join(tried))


def check_library(path, library_version, package_version, sizes):
    """Raises nnt.Error unless the libnnt at `path`, of version `library_version`, fits this
    package: versions compatible (compatible_versions; not checked when package_version is None,
    a package outside a source tree and never installed) and every mirror the same size.
    sizes: {struct name: (bytes in libnnt, bytes of the package's mirror)}."""
    from ._core import Error

    package = package_version or "unknown"
    if package_version and not compatible_versions(package_version, library_version):
        raise Error(f"libnnt {path} is version {library_version}, this nnt package is {package}: "
                    f"they are not compatible (the same major and minor are needed while the major is 0); "
                    f"use the libnnt of this package's build or installation")
    for name, (in_library, in_package) in sizes.items():
        if in_library != in_package:
            what = "does not know the struct" if in_library == 0 else f"has {in_library} bytes"
            raise Error(f"libnnt {path} (version {library_version}) {what} {name}, whose mirror in this nnt "
                        f"package (version {package}) has {in_package} bytes: the library and the package "
                        f"come from different versions of nnt's headers")


def _check_versions(lib, path):
    """check_library on an opened library, which must have nnt_version and nnt_struct_size."""
    from ._core import Error

    try:
        version, struct_size = lib.nnt_version, lib.nnt_struct_size
    except AttributeError:
        raise Error(f"libnnt {path} has no nnt_version(): it predates nnt 0.2.0, and this nnt package is "
                    f"version {PACKAGE_VERSION or 'unknown'}") from None
    version.restype, version.argtypes = ctypes.c_char_p, []
    struct_size.restype, struct_size.argtypes = ctypes.c_size_t, [ctypes.c_char_p]
    sizes = {name: (struct_size(name.encode()), ctypes.sizeof(mirror)) for name, mirror in STRUCT_MIRRORS.items()}
    check_library(path, version().decode(), PACKAGE_VERSION, sizes)


def load(library=None):
    """Opens libnnt (once per file), checks its version and struct sizes against this package
    (check_library) and declares its functions; returns the ctypes.CDLL."""
    path = find_library(library)
    key = os.path.realpath(path) if os.path.sep in path else path
    lib = _LIBS.get(key)
    if lib is not None:
        return lib
    lib = ctypes.CDLL(path)
    _check_versions(lib, path)
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    lib.nnt_path = path
    # a checkpoint file truncated while mapped would end the interpreter with SIGBUS on the next
    # read: libnnt's handler turns that into an error naming the file (nnt_protect_mapped_files,
    # as the nnt command installs it; Python itself handles no SIGBUS)
    lib.nnt_protect_mapped_files.restype = ctypes.c_int
    lib.nnt_protect_mapped_files.argtypes = []
    lib.nnt_protect_mapped_files()
    _LIBS[key] = lib
    return lib


def status_name(lib, status):
    s = lib.nnt_status_str(status)
    return s.decode() if s else str(status)


def capture(write):
    """Runs write(FILE *) on an in-memory stream (POSIX open_memstream) and returns the text."""
    buf = ctypes.c_void_p()
    size = ctypes.c_size_t()
    f = LIBC.open_memstream(ctypes.byref(buf), ctypes.byref(size))
    if not f:
        raise OSError("open_memstream failed")
    try:
        status = write(f)
    finally:
        LIBC.fclose(f)
        text = ctypes.string_at(buf, size.value).decode("utf-8", "replace") if buf.value else ""
        LIBC.free(buf)
    return status, text
