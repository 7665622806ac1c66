"""_core.py - nnt's Python face: Model, Tokenizer, the edit operations and the result types.
Everything runs in libnnt through its C API; this file only turns Python arguments into C calls
and C tensors into numpy arrays (views of the trace's memory, kept alive by the arrays)."""

import ctypes
import functools
import os
import queue
import threading
from collections import namedtuple

import numpy as np

from . import _lib, _request
from ._request import (AblateExpert, Builder, EditContext, RequestError, SkipLayers, Steer,  # noqa: F401 (re-exported)
                       Steps, _number, _positions)


class Error(Exception):
    """A failure reported by nnt. str(error) is nnt's message; `code` is the nnt_status
    (nnt_types.h) and `status` its name (nnt_status_str, e.g. "unknown value path"); both are
    None for a check made on the Python side."""

    def __init__(self, message, status=None, code=None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


# ---- tensors between numpy and the C API ----

_NUMPY_OF = {
    "F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32,
    "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
}
_CODE_OF_NUMPY = {np.dtype(v): _lib.DTYPE_CODE[k] for k, v in _NUMPY_OF.items()}


class _Memory:
    """Exposes C-owned memory to numpy; holds `owner` (what keeps the memory alive) for as long
    as any array made from it exists."""

    def __init__(self, owner, address, shape, dtype):
        self._owner = owner
        self.__array_interface__ = {
            "version": 3, "shape": tuple(shape), "typestr": np.dtype(dtype).str,
            "data": (address, False),
        }


def _shape(t):
    return tuple(int(t.shape[i]) for i in range(t.ndim))


def _as_array(t, owner, must_view=False):
    """A numpy array over host tensor t: a view (kept alive through `owner`) for dtypes numpy has,
    one float32 copy for BF16 (an Error instead when must_view: an edit must write nnt's memory).
    Other dtypes (FP8, FP4) raise Error."""
    name = _lib.DTYPES[t.dtype] if 0 <= t.dtype < len(_lib.DTYPES) else str(t.dtype)
    shape = _shape(t)
    if t.device:
        raise Error("a tensor in device memory cannot be viewed from Python")
    if name == "BF16" and must_view:
        raise Error("a BF16 value has no writable numpy view (numpy has no bfloat16); edit it with "
                    "the data edits (zero, scale, set, add) instead")
    if name == "BF16":
        raw = np.asarray(_Memory(owner, t.data, shape, np.uint16)) if t.data else np.zeros(shape, np.uint16)
        return (raw.astype(np.uint32) << 16).view(np.float32)
    if name not in _NUMPY_OF:
        raise Error(f"values of dtype {name} have no numpy equivalent")
    if not t.data or int(np.prod(shape, dtype=np.int64)) == 0:
        return np.zeros(shape, _NUMPY_OF[name])
    return np.asarray(_Memory(owner, t.data, shape, _NUMPY_OF[name]))


def _int32_ids(ids, what):
    """ids as a C-contiguous int32 array: integers only (a float or bool array is refused, naming
    its dtype), each within int32 (a larger one is refused, not wrapped)."""
    a = np.asarray(ids)
    if a.dtype == object:  # Python ints past 64 bits, or mixed types
        for x in a.reshape(-1):
            if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
                raise Error(f"{what}: token ids must be integers, got {type(x).__name__} {x!r}")
            if not -2**31 <= int(x) <= 2**31 - 1:
                raise Error(f"{what}: token id {int(x)} is outside the 32-bit range of token ids")
        a = a.astype(np.int64)
    if a.size and a.dtype.kind not in "iu":
        raise Error(f"{what}: token ids must be integers, got an array of dtype {a.dtype}")
    if a.size and (a.min() < -2**31 or a.max() > 2**31 - 1):
        bad = a.min() if a.min() < -2**31 else a.max()
        raise Error(f"{what}: token id {int(bad)} is outside the 32-bit range of token ids")
    return np.ascontiguousarray(a.astype(np.int32) if a.size else a.reshape(-1).astype(np.int32))


def _tensor_of(array, what):
    """An nnt_tensor describing a C-contiguous numpy array (returned with the array, which must
    outlive the tensor's use)."""
    a = np.ascontiguousarray(array)
    if a.dtype not in _CODE_OF_NUMPY:
        a = a.astype(np.float32) if a.dtype.kind in "fiub" else a
    if a.dtype not in _CODE_OF_NUMPY:
        raise Error(f"{what}: numpy dtype {a.dtype} has no nnt equivalent")
    if a.ndim > _lib.NNT_MAX_DIMS:
        raise Error(f"{what}: {a.ndim} axes, nnt tensors have at most {_lib.NNT_MAX_DIMS}")
    t = _lib.Tensor()
    t.dtype = _CODE_OF_NUMPY[a.dtype]
    t.ndim = a.ndim
    for i, n in enumerate(a.shape):
        t.shape[i] = n
    t.data = a.ctypes.data
    return t, a


def to_torch(values):
    """torch tensors sharing memory with nnt's arrays (DLPack): one array, or a dict of them
    (None stays None). Needs torch."""
    import torch  # optional dependency

    if isinstance(values, dict):
        return {k: None if v is None else torch.from_dlpack(v) for k, v in values.items()}
    return torch.from_dlpack(values)


def _serialised(method):
    """Runs a method of an object with a `_h` (_ModelHandle) while holding the model's lock."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        h = self._h
        with h.lock:
            h.depth += 1
            try:
                return method(self, *args, **kwargs)
            finally:
                h.depth -= 1
                if h.depth == 0:
                    h.release_pending()
    return run


# ---- native handles (freed when the last Python object using them goes) ----

class _ModelHandle:
    def __init__(self, lib, config, directory):
        self.lib = lib
        # libnnt runs one call at a time per runtime and refuses a second (NNT_ERR_BUSY): threads
        # sharing this model take turns here; re-entrant, so that a callback calling back into
        # the model reaches libnnt and gets its refusal instead of a deadlock
        self.lock = threading.RLock()
        # handles made from this model that free something of it (traces, results, sessions):
        # the model is freed after the last of them, whatever order Python finalizes them in (a
        # garbage cycle's objects are finalized in no set order)
        self.children = 0
        self.released = False  # __del__ ran while children were alive
        # methods of this model in progress (on the thread holding the lock, the only one that can
        # change it), and the children's frees that came meanwhile: a garbage collection that runs
        # during an edit callback finalizes handles while libnnt is inside the model's call, and
        # libnnt ignores a free made from its own callback (it would free what the call uses), so
        # such a free waits for the call to end instead of being lost
        self.depth = 0
        self.pending = []
        self.rt = ctypes.c_void_p()
        self.m = ctypes.c_void_p()
        st = lib.nnt_runtime_open(config.encode() if config else None, ctypes.byref(self.rt))
        if st != _lib.NNT_OK:
            raise self.error(st, "cannot start nnt")
        st = lib.nnt_model_load(self.rt, os.fsencode(directory), ctypes.byref(self.m))
        if st != _lib.NNT_OK:
            raise self.error(st, "cannot load the model")

    def error(self, status, context=None):
        msg = self.lib.nnt_last_error(self.rt) if self.rt else None
        msg = msg.decode("utf-8", "replace") if msg else _lib.status_name(self.lib, status)
        return Error(f"{context}: {msg}" if context else msg, _lib.status_name(self.lib, status), status)

    def check(self, status, context=None):
        if status != _lib.NNT_OK:
            raise self.error(status, context)

    def adopt(self):
        """Counts a new child handle (see children)."""
        with self.lock:
            self.children += 1

    def release(self, free, ptr):
        """A child handle's end: free(ptr) (its native free; nothing when ptr is NULL) now, or once
        the model's call in progress on this thread returns; then orphan()."""
        with self.lock:
            if self.depth > 0:
                self.pending.append((free, ptr))
                return
            if ptr:
                free(ptr)
        self.orphan()

    def release_pending(self):
        """The frees release() deferred, run once no call of the model is in progress."""
        while True:
            with self.lock:
                if self.depth > 0 or not self.pending:
                    return
                free, ptr = self.pending.pop()
                if ptr:
                    free(ptr)
            self.orphan()

    def orphan(self):
        """A child handle freed what it held: frees the model if it was only waiting for that."""
        with self.lock:
            self.children -= 1
            last = self.released and self.children == 0
        if last:
            self._free()

    def _free(self):
        lib = getattr(self, "lib", None)
        if lib is None:
            return
        if self.m:
            lib.nnt_model_free(self.m)
            self.m = ctypes.c_void_p()
        if self.rt:
            lib.nnt_runtime_close(self.rt)
            self.rt = ctypes.c_void_p()

    def __del__(self):
        with getattr(self, "lock", threading.RLock()):
            self.released = True
            if getattr(self, "children", 0) > 0:
                return  # the last child's orphan() frees the model
        self._free()


class _TraceHandle:
    """One nnt_trace of a session call, with what its requests need kept alive (callbacks).
    Arrays viewing its results hold it."""

    def __init__(self, model):
        self.model = model  # _ModelHandle
        self.lib = model.lib
        self.t = ctypes.c_void_p()
        self.keep = []
        self.callback_error = None
        model.adopt()
        model.check(self.lib.nnt_trace_new(model.m, ctypes.byref(self.t)), "trace")

    def __del__(self):
        model = getattr(self, "model", None)
        if model is None:
            return
        t, self.t = self.t, ctypes.c_void_p()
        model.release(self.lib.nnt_trace_free, t)


class _OwnedTensor:
    """A tensor libnnt allocated for the caller, freed with nnt_tensor_free when the last array
    viewing it goes."""

    def __init__(self, lib):
        self.lib = lib
        self.t = _lib.Tensor()

    def __del__(self):
        if getattr(self, "t", None) is not None and self.t.data:
            self.lib.nnt_tensor_free(ctypes.byref(self.t))


# ---- edit operations (their request form: _request.py) ----

def _callback(fn, trace):
    """Wraps a Python callable as an nnt_edit_fn: it receives a numpy array holding the value (its
    own copy: what it holds stays valid after the call, and nnt writes it back into the value when
    the callback returns), and ``ctx=EditContext(path, block)`` by keyword when its signature names
    ``ctx`` (_request.callback_wants_ctx); a returned array is written into the value instead."""
    try:  # refused here, before the request runs, when it cannot be called so
        with_context = _request.callback_wants_ctx(fn)
    except RequestError as e:
        raise Error(f"request: {e}") from None

    def call(user, path, layer, value_p, err_p):
        try:
            view = _as_array(value_p.contents, None, must_view=True)  # nnt's memory: never handed out
            value = view.copy()
            ret = fn(value, ctx=_request.EditContext(path.decode(), layer)) if with_context else fn(value)
            view[...] = value if ret is None or ret is value else ret
            return _lib.NNT_OK
        except BaseException as exc:  # noqa: B902 - reported through nnt, re-raised after the run
            trace.callback_error = exc
            msg = f"{type(exc).__name__}: {exc}".encode("utf-8", "replace")[: _lib.NNT_ERROR_MSG_MAX - 1]
            err_p.contents.msg = msg
            err_p.contents.status = _lib.NNT_ERR_CALLBACK
            return _lib.NNT_ERR_CALLBACK

    return _lib.EDIT_FN(call)


class _ResultHandle:
    """One nnt_result of a request run (its trace, tokens, grids) with what the run needed kept
    alive: the callbacks. Arrays viewing its values hold it."""

    def __init__(self, model):
        self.model = model  # _ModelHandle
        self.lib = model.lib
        self.res = ctypes.c_void_p()
        self.t = None
        self.keep = []
        self.callback_error = None
        model.adopt()

    def __del__(self):
        model = getattr(self, "model", None)
        if model is None:
            return
        res, self.res = self.res, ctypes.c_void_p()
        model.release(self.lib.nnt_result_free, res)


def _parse_request(h, builder):
    """The request builder made, parsed by libnnt (a ctypes pointer the caller frees with
    nnt_request_free)."""
    try:
        doc, tensors = builder.encode()
    except ValueError as e:
        raise Error(f"request: {e}") from None
    buf = ctypes.create_string_buffer(tensors) if tensors else None
    src = _lib.RequestSource(ctypes.sizeof(_lib.RequestSource), doc, len(doc),
                             ctypes.cast(buf, ctypes.c_void_p) if buf else None, len(tensors) if tensors else 0,
                             None, b"request")
    req = ctypes.c_void_p()
    h.check(h.lib.nnt_request_parse(h.rt, ctypes.byref(src), ctypes.byref(req)))
    return req


def _callbacks(res, builder):
    """The callbacks array of builder's "callback" edits (kept alive by res)."""
    n = len(builder.callbacks)
    arr = (_lib.RequestCallback * max(1, n))()
    for i, fn in enumerate(builder.callbacks):
        arr[i].fn = fn
        arr[i].user = None
    res.keep.extend([arr, builder.callbacks])
    return arr, n


# ---- results ----

class Values(dict):
    """The values a trace saved, by canonical path ("layers.1.mlp.expert_weights"; a value a
    request saves again - at a later generation step, a per-token state - is "path@1", "path@2",
    ...; one saved by a second request, e.g. after an edit, "path#1", "path#2", ...). Any spelling nnt accepts also works as a key
    ("layers[1].mlp.expert_weights", "model.layers.-1.layer_output", "block_sparse_moe" names)."""

    def __init__(self, items, trace, pointers):
        super().__init__(items)
        self._trace = trace
        self._pointers = pointers  # canonical path -> nnt_tensor address

    def __missing__(self, key):
        tr = self._trace
        if isinstance(key, str) and tr is not None:
            addr = tr.lib.nnt_trace_get(tr.t, key.encode())
            for path, a in self._pointers.items():
                if addr and a == addr:
                    return self[path]
        raise KeyError(key)


class Generation(namedtuple("Generation", "tokens values text")):
    """What generate returns: tokens [batch, max_new_tokens] int32 (-1 after a row's stop token),
    values (Values, "path@k" the k-th step a request saved), text (each row's continuation
    decoded, without the stop token; None without a tokenizer)."""

    def steps(self, path):
        """The values saved under `path` at each step, in order: path, path@1, path@2, ..."""
        first = self.values[path]
        base = next(k for k, v in self.values.items() if v is first)
        out, k = [first], 1
        while f"{base}@{k}" in self.values:
            out.append(self.values[f"{base}@{k}"])
            k += 1
        return out


class PatchResult(namedtuple("PatchResult", "grid blocks positions clean_metric corrupt_metric forwards")):
    """What Model.patch returns: grid [blocks, positions] float64 (the metric with that block's value
    at that position patched in), the blocks and positions of its rows and columns, the unpatched
    clean and corrupted metrics, and the forwards run."""


class AttributionResult(namedtuple("AttributionResult",
                                   "grid blocks positions clean_metric corrupt_metric forwards backwards")):
    """What Model.attribute returns: grid [blocks, positions] float64, or [blocks, positions, units]
    for a value with a head or expert-slot axis (the estimated change of the metric from patching
    that cell's clean value in), the blocks and positions of its rows and columns, the unpatched
    clean and corrupted metrics, and the forwards and backwards run."""


SupportRow = namedtuple("SupportRow", "host block value served layout axes dtype writable reason")


class Tokenizer:
    """The tokenizer a checkpoint folder ships (nnt_tokenizer.h): tokenizer.json or tiktoken.model,
    with what the family plugin serving the folder's config.json adds to it (its tokenizer hints:
    nnt_runtime_tokenizer, through a runtime opened from `config`, an INI path; None: as the
    nnt command finds it). A Model's tokenizer is the one the model keeps (nnt_model_tokenizer)."""

    def __init__(self, directory, library=None, config=None, _lib_handle=None):
        self.lib = _lib_handle or _lib.load(library)
        self.tok = ctypes.c_void_p()
        self._lock = threading.Lock()
        self._model = None  # the _ModelHandle owning the tokenizer, or None: this object frees it
        rt = ctypes.c_void_p()
        st = self.lib.nnt_runtime_open(os.fsencode(config) if config else None, ctypes.byref(rt))
        if st != _lib.NNT_OK:
            msg = self.lib.nnt_last_error(rt) if rt else None
            msg = msg.decode("utf-8", "replace") if msg else _lib.status_name(self.lib, st)
            if rt:
                self.lib.nnt_runtime_close(rt)
            raise Error("cannot start nnt: " + msg, _lib.status_name(self.lib, st), st)
        try:  # the tokenizer keeps nothing of the runtime
            st = self.lib.nnt_runtime_tokenizer(rt, os.fsencode(directory), ctypes.byref(self.tok))
        finally:
            self.lib.nnt_runtime_close(rt)
        if st != _lib.NNT_OK:
            msg = self.lib.nnt_tokenizer_last_error(self.tok) if self.tok else None
            msg = msg.decode("utf-8", "replace") if msg else _lib.status_name(self.lib, st)
            if self.tok:
                self.lib.nnt_tokenizer_free(self.tok)
                self.tok = ctypes.c_void_p()
            raise Error(msg, _lib.status_name(self.lib, st), st)

    @classmethod
    def _of_model(cls, model):
        """The tokenizer model (a _ModelHandle) keeps; the model frees it, and stays alive while
        this object does."""
        self = cls.__new__(cls)
        self.lib = model.lib
        self.tok = ctypes.c_void_p()
        self._lock = threading.Lock()
        self._model = model
        model.check(self.lib.nnt_model_tokenizer(model.m, ctypes.byref(self.tok)))
        return self

    def __del__(self):
        if getattr(self, "tok", None) and getattr(self, "_model", None) is None:
            self.lib.nnt_tokenizer_free(self.tok)
        self.tok = ctypes.c_void_p()

    def _error(self, st):
        msg = self.lib.nnt_tokenizer_last_error(self.tok)
        return Error(msg.decode("utf-8", "replace") if msg else _lib.status_name(self.lib, st),
                     _lib.status_name(self.lib, st), st)

    @property
    def kind(self):
        return self.lib.nnt_tokenizer_kind(self.tok).decode()

    @property
    def vocab_size(self):
        return int(self.lib.nnt_tokenizer_vocab_size(self.tok))

    @property
    def bos_id(self):
        v = self.lib.nnt_tokenizer_bos_id(self.tok)
        return None if v < 0 else int(v)

    @property
    def eos_id(self):
        v = self.lib.nnt_tokenizer_eos_id(self.tok)
        return None if v < 0 else int(v)

    @property
    def pad_id(self):
        v = self.lib.nnt_tokenizer_pad_id(self.tok)
        return None if v < 0 else int(v)

    def encode(self, text, add_special=True):
        """Token ids of `text` (str or UTF-8 bytes), with the special tokens the tokenizer adds
        unless add_special is False."""
        data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else bytes(text)
        ids = ctypes.POINTER(ctypes.c_int32)()
        n = ctypes.c_int64()
        flags = _lib.NNT_TOKENIZE_ADD_SPECIAL if add_special else 0
        with self._lock:  # the call and its message together (libnnt serialises the calls themselves)
            st = self.lib.nnt_tokenizer_encode(self.tok, data, len(data), flags, ctypes.byref(ids), ctypes.byref(n))
            if st != _lib.NNT_OK:
                raise self._error(st)
        try:
            return [int(ids[i]) for i in range(n.value)]
        finally:
            _lib.LIBC.free(ctypes.cast(ids, ctypes.c_void_p))

    def decode(self, ids, skip_special=False):
        """The text of `ids` (invalid UTF-8 replaced by U+FFFD, as the reference decoders do)."""
        arr = _int32_ids(ids, "decode: ids").reshape(-1)
        text = ctypes.c_void_p()
        n = ctypes.c_size_t()
        flags = _lib.NNT_DECODE_REPLACE_INVALID | (_lib.NNT_DECODE_SKIP_SPECIAL if skip_special else 0)
        with self._lock:
            st = self.lib.nnt_tokenizer_decode(self.tok, arr.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
                                               arr.size, flags, ctypes.byref(text), ctypes.byref(n))
            if st != _lib.NNT_OK:
                raise self._error(st)
        try:
            return ctypes.string_at(text, n.value).decode("utf-8", "replace")
        finally:
            _lib.LIBC.free(text)

    def token_bytes(self, token_id):
        """The bytes token `token_id` stands for in decoded text (None when it has none)."""
        n = ctypes.c_size_t()
        p = self.lib.nnt_tokenizer_token_bytes(self.tok, int(token_id), ctypes.byref(n))
        return ctypes.string_at(p, n.value) if p else None

    def token_id(self, text):
        v = self.lib.nnt_tokenizer_token_id(self.tok, text.encode("utf-8", "surrogateescape"))
        return None if v < 0 else int(v)


ModelInfo = namedtuple("ModelInfo", [f for f, _ in _lib.ModelInfo._fields_])


class Model:
    """A checkpoint loaded by libnnt.

    model = nnt.Model("examples/tiny-minimax-m2")        # config: INI path, else as the CLI
    out = model.trace("The quick brown fox", save=["layers.1.mlp.expert_weights"])
    out["layers.1.mlp.expert_weights"]                    # numpy [batch, seq, top_k]

    Prompts: a str (one row of text, with the folder's tokenizer), a list of str (rows), a list
    of ints (one row of ids), a list of lists of ints or a 2-D int array (rows of ids). Rows of
    different lengths are left-padded (id 0, mask 0), as the nnt command pads them.
    """

    def __init__(self, path, config=None, library=None):
        lib = _lib.load(library)
        self._h = _ModelHandle(lib, os.fspath(config) if config else None, os.fspath(path))
        self.path = os.fspath(path)
        self.lib = lib
        raw = lib.nnt_model_get_info(self._h.m).contents
        vals = []
        for f, _ in _lib.ModelInfo._fields_:
            v = getattr(raw, f)
            vals.append(v.decode() if isinstance(v, bytes) else v)
        self.info = ModelInfo(*vals)
        self.family = lib.nnt_model_family(self._h.m).decode()
        self.backend = lib.nnt_model_backend(self._h.m).decode()
        self.config_path = lib.nnt_runtime_config_path(self._h.rt).decode()
        self.notes = []  # the family's notes on this model, as `nnt print` ends with them
        text = ctypes.c_char_p()
        while lib.nnt_model_note(self._h.m, len(self.notes), ctypes.byref(text)):
            self.notes.append(text.value.decode())
        try:
            self.tokenizer = Tokenizer._of_model(self._h)
            self._tokenizer_error = None
        except Error as e:
            self.tokenizer = None
            self._tokenizer_error = str(e)

    @property
    def num_layers(self):
        return self.info.num_layers

    @property
    def vocab_size(self):
        return self.info.vocab_size

    @property
    def hidden_size(self):
        return self.info.hidden_size

    def reencoding(self):
        """What the INI's `weights = fp8` changed at load, as a dict: tensors (weights re-encoded),
        values, stored_bytes, encoded_bytes, rel_rms (over all their values), max_abs (the largest
        |stored - re-encoded|), worst (the checkpoint name of the weight with the largest relative
        RMS error) and worst_rel_rms. tensors is 0 when the weights are as stored."""
        r = _lib.Reencoding(struct_size=ctypes.sizeof(_lib.Reencoding))
        self._h.check(self.lib.nnt_model_reencoding(self._h.m, ctypes.byref(r)), "reencoding")
        out = {f: getattr(r, f) for f, _ in _lib.Reencoding._fields_ if f != "struct_size"}
        out["worst"] = out["worst"].decode()
        return out

    # ---- listings ----

    def __str__(self):
        st, text = _lib.capture(lambda f: self.lib.nnt_model_print(self._h.m, f))
        self._h.check(st)
        return text

    def __repr__(self):
        return f"nnt.Model({self.path!r}, family={self.family!r}, backend={self.backend!r})"

    @_serialised
    def print(self, file=None):
        """Writes the module tree (native and standard names, every value's layout), as
        `nnt print` does, to `file` (default: stdout)."""
        import sys

        (file or sys.stdout).write(str(self))

    @_serialised
    def support(self, table=False):
        """Every standard value per host and block: a list of SupportRow (served as a bool, block
        -1 for the model host), or with table=True the text `nnt support` prints."""
        st, text = _lib.capture(lambda f: self.lib.nnt_model_support(self._h.m, f, 0 if table else 1))
        self._h.check(st)
        if table:
            return text
        rows = []
        for line in text.splitlines()[1:]:
            c = line.split("\t")
            c += [""] * (9 - len(c))
            rows.append(SupportRow(c[0], int(c[1]), c[2], c[3] == "yes", c[4], c[5], c[6], c[7] == "yes", c[8]))
        return rows

    @_serialised
    def value_info(self, path, batch=None, seq=None):
        """What nnt says of one value (one block): served, reason, dtype, shape (for the given
        batch and seq), writable, layout, axes."""
        info = _lib.ValueInfo()
        if (batch is None) != (seq is None):
            raise Error("value_info: give batch and seq together (or neither)")
        dims = None
        if batch is not None:
            try:
                b, t = _number(batch, "batch"), _number(seq, "seq")
            except RequestError as e:
                raise Error(f"value_info: {e}") from None
            for name, v in (("batch", b), ("seq", t)):
                if not isinstance(v, int) or not -2**31 <= v < 2**31:  # ctypes would truncate or wrap it
                    raise Error(f"value_info: {name} {v!r} is not a 32-bit integer")
            dims = _lib.CallDims(b, t, 0)
        self._h.check(self.lib.nnt_model_value_info(self._h.m, path.encode(), ctypes.byref(dims) if dims else None,
                                                    ctypes.byref(info)))
        return {
            "served": bool(info.served), "reason": info.reason.decode(),
            "dtype": _lib.DTYPES[info.dtype] if info.served else None,
            "shape": tuple(info.shape[i] for i in range(info.ndim)) if info.served and dims else None,
            "writable": bool(info.writable), "layout": (info.layout or b"").decode(),
            "axes": (info.axes or b"").decode(),
        }

    # ---- prompts ----

    def tokenize(self, text, add_special=True):
        return self._need_tokenizer().encode(text, add_special)

    def decode(self, ids, skip_special=False):
        return self._need_tokenizer().decode(ids, skip_special)

    def _need_tokenizer(self):
        if self.tokenizer is None:
            raise Error(f"a text prompt needs the model's tokenizer: {self._tokenizer_error}")
        return self.tokenizer

    # ---- runs: each is a request (docs/requests.md) libnnt parses, checks and runs ----

    def _builder(self, method, prompts, save=(), edits=(), add_special=True, sae=None):
        try:
            return _request.basic_request(method, prompts, save, edits, add_special, sae)
        except RequestError as e:
            raise Error(str(e)) from None

    @_serialised
    def _run(self, builder):
        """Runs builder's request: a _ResultHandle holding the nnt_result."""
        res = _ResultHandle(self._h)
        builder.callbacks = [_callback(fn, res) for fn in builder.raw_callbacks]
        req = _parse_request(self._h, builder)
        try:
            cbs, n = _callbacks(res, builder)
            opts = _lib.RunOpts(ctypes.sizeof(_lib.RunOpts), cbs, n, None, 0, None)
            st = self.lib.nnt_request_run(self._h.m, req, ctypes.byref(opts), ctypes.byref(res.res))
        finally:
            self.lib.nnt_request_free(req)
        self._check_callback(res, st, None)  # libnnt's message names the request's field at fault
        res.t = self.lib.nnt_result_trace(res.res)
        return res

    def _check_callback(self, tr, status, context):
        if status == _lib.NNT_OK:
            return
        exc = tr.callback_error
        if exc is not None and not isinstance(exc, Exception):
            raise exc  # KeyboardInterrupt, SystemExit: the run stopped at the callback; they go on as they are
        err = self._h.error(status, context)
        if exc is not None:
            raise err from exc
        raise err

    def _values(self, tr, positions=None, output="numpy"):
        lib = self.lib
        items, pointers = {}, {}
        for i in range(lib.nnt_trace_result_count(tr.t)):
            path = ctypes.c_char_p()
            value = ctypes.POINTER(_lib.Tensor)()
            self._h.check(lib.nnt_trace_result(tr.t, i, ctypes.byref(path), ctypes.byref(value)))
            key = path.value.decode()
            if key in items:  # the same value saved by a second request: "path#1", "path#2", ...
                k = 1
                while f"{key}#{k}" in items:
                    k += 1
                key = f"{key}#{k}"
            if not value:
                items[key] = None
                continue
            pointers[key] = ctypes.addressof(value.contents)
            arr = _as_array(value.contents, tr)
            if positions is not None:
                arr = self._select_positions(key, arr, positions)
            items[key] = arr
        if output == "torch":
            items = to_torch(items)
        elif output != "numpy":
            raise Error(f"output {output!r}: expected 'numpy' or 'torch'")
        return Values(items, tr, pointers)

    def _seq_axis(self, key):
        axes = self.value_info(key.split("@")[0])["axes"].strip("[]").split()
        for name in ("seq", "query"):
            if name in axes:
                return axes.index(name)
        return None

    def _select_positions(self, key, arr, positions):
        ax = self._seq_axis(key)
        if ax is None or ax >= arr.ndim:
            return arr
        if isinstance(positions, (int, np.integer, slice)):
            return arr[(slice(None),) * ax + (positions,)]
        return np.take(arr, list(positions), axis=ax)

    def trace(self, prompts, save=(), edits=(), positions=None, output="numpy", add_special=True, grad=(),
              metric=None, metric_positions=None, cotangents=None, sae=None):
        """Runs one forward pass with `edits` (applied in order before the forward uses each
        value), then returns the `save`d values (saved after the edits: they show them) as
        Values {path: numpy array}. Arrays view nnt's own buffers (no copy). positions (an int,
        a slice or a list of ints, negative from the end) keeps only those sequence positions of
        values that have a seq (or query) axis. output="torch" gives torch tensors over the same
        memory (DLPack). Errors raise nnt.Error with nnt's message.

        Gradients (docs/gradients.md): grad lists value paths (wildcards and slices as save) whose
        gradient of a scalar comes back under "grad:PATH" beside the metric's value "metric": the
        scalar is `metric` ("logit-diff:A,B", "prob:T", "logprob:T", summed over the rows at the
        last token or at metric_positions; or "loss", the mean next-token cross-entropy over the
        real tokens) plus sum(cotangent * V) for each {path: array} of `cotangents` (dL/dV computed
        however you like, e.g. from saved logits). float32, with respect to activations only.

        Sparse autoencoders (docs/requests.md, "SAEs"): sae={value path: SAELens folder} attaches
        each folder's SAE (cfg.json + sae_weights.safetensors; standard, jumprelu, topk) to that
        [batch seq d_in] value. save may then name "PATH.sae.feature_acts" [batch, seq, d_sae],
        "PATH.sae.reconstruction" and "PATH.sae.error" [batch, seq, d_in] (float32), and edits may
        change features: ("PATH.sae.feature_acts", "zero", [i, ...]), (..., "scale", [i, ...],
        factor), (..., "masked_fill", [i, ...], fill); with any, the value becomes the decoder's
        output for the edited features plus the error, as SAELens splices an SAE in."""
        try:
            b = _request.trace_request(prompts, save, edits, add_special, sae, grad, metric, metric_positions,
                                       cotangents)
        except RequestError as e:
            raise Error(str(e)) from None
        res = self._run(b)
        return self._values(res, positions, output)

    def cache(self, prompts, values="*", edits=(), positions=None, output="numpy", add_special=True):
        """Saves every value `values` matches in one forward, as nnsight's tracer.cache() does:
        "*" (the default) every value the model serves, "layers.1.*" every value of block 1,
        "layers.*.self_attn.*" one host module's in every block; a trailing slice applies to each
        match whose axes fit it ("*[:, -1]": the last position of every [batch seq ...] value).
        A list of patterns or paths is taken too. What the saves would hold is checked before the
        forward against the INI's [trace] save_mb (default 8192 MiB), and past it nnt.Error names
        the bytes. Returns Values as trace() does."""
        return self.trace(prompts, save=values, edits=edits, positions=positions, output=output,
                          add_special=add_special)

    def backward(self, prompts, cotangents, grad, save=(), edits=(), **kw):
        """The cotangent form of a gradient: trace() of prompts with `edits` (the same forward as
        the trace a metric was computed on), backpropagating cotangents {path: dL/dV} (arrays of
        each value's shape, e.g. dL/dlogits computed in numpy or torch) to the values `grad` names.
        Returns the Values of trace(): "grad:PATH" for each, and the saves."""
        return self.trace(prompts, save=save, edits=edits, grad=grad, cotangents=cotangents, **kw)

    def attribute(self, clean, corrupt, metric, value="layers.*.layer_output", ig_steps=0, add_special=True):
        """Attribution patching, run by libnnt as `nnt attribute` runs it: the estimate
        (a_clean - a_corrupt) . dmetric/da, the gradient taken in the corrupted forward (ig_steps
        N > 0: averaged over N points between the prompts' token embeddings, integrated gradients),
        of the change activation patching measures, for every block serving `value` and every
        position; per head or expert slot for values with that axis. metric: "logit-diff:A,B",
        "prob:T" or "logprob:T" at the last position. Returns an AttributionResult."""
        try:
            b = _request.attribute_request(clean, corrupt, metric, value, ig_steps, add_special)
        except RequestError as e:
            raise Error(str(e)) from None
        res = self._run(b)
        a = self.lib.nnt_result_attribute(res.res).contents
        NB, P, U = a.n_blocks, a.n_positions, a.n_units
        grid = np.ctypeslib.as_array(a.grid, shape=(NB * P * U,)).reshape((NB, P, U) if U > 1 else (NB, P)).copy()
        return AttributionResult(grid, np.ctypeslib.as_array(a.blocks, shape=(NB,)).copy(), np.arange(P),
                                 float(a.clean_metric), float(a.corrupt_metric), int(a.forwards), int(a.backwards))

    def steer(self, prompts, layers, vector, factor=1.0, positions=None, save=(), edits=(), **kw):
        """trace() with factor * vector added to layer_output of `layers` (int, (first, last) or a
        list) at `positions` (None: every position; negative from the end)."""
        return self.trace(prompts, save=save, edits=list(edits) + [Steer(layers, vector, factor, positions)], **kw)

    def skip_layers(self, prompts, start, end, save=(), edits=(), **kw):
        """trace() with blocks start..end skipped (block end's output is block start's input)."""
        return self.trace(prompts, save=save, edits=list(edits) + [SkipLayers(start, end)], **kw)

    def ablate_expert(self, prompts, layer, expert, save=(), edits=(), **kw):
        """trace() with expert `expert` of block `layer` given weight zero wherever it is routed."""
        return self.trace(prompts, save=save, edits=list(edits) + [AblateExpert(layer, expert)], **kw)

    @_serialised
    def project_on_vocab(self, x):
        """The logit lens on hidden states x [..., hidden_size] (or a multi-stream model's
        [batch, seq, streams, hidden_size]): the final norm and lm_head, as float32
        [..., vocab_size]."""
        t, keep = _tensor_of(np.asarray(x, dtype=np.float32), "project_on_vocab")
        out = _OwnedTensor(self.lib)
        self._h.check(self.lib.nnt_project_on_vocab(self._h.m, ctypes.byref(t), ctypes.byref(out.t)),
                      "project_on_vocab")
        return _as_array(out.t, out)

    def lens(self, prompts, edits=(), positions=None, probs=True, add_special=True, sae=None):
        """The logit lens (nnterp's project_on_vocab on every block's layer_output), run by libnnt
        as `nnt lens` runs it: float32 [layers, batch, columns, vocab_size] probabilities (softmax
        over the vocabulary). Column j of row r is the row's j-th chosen position counted from its
        first real token (left padding is never a column; a row with fewer columns than the
        longest has zeros past its own). positions: None (every token), an int, a list of ints
        (negative from a row's end) or a slice of the longest row's positions. probs=False gives the
        lens logits instead (libnnt's projection of the saved outputs, same columns). sae attaches
        sparse autoencoders as trace's does (their feature edits among `edits`)."""
        b = self._builder("lens", prompts, None, edits, add_special, sae)
        pos = self._lens_positions(b, positions)
        if not probs:
            return self._lens_logits(prompts, edits, pos, add_special, sae)
        b.section("lens", positions=pos, probs=True)
        res = self._run(b)
        lr = self.lib.nnt_result_lens(res.res).contents
        B, L, W, V = lr.batch, lr.layers, lr.width, lr.vocab
        grid = np.ctypeslib.as_array(lr.probs, shape=(B * L * W * V,)).reshape(B, L, W, V)
        return grid.transpose(1, 0, 2, 3).copy()  # a copy: the result's memory goes with `res`

    def _lens_positions(self, b, positions):
        """The lens' positions as the request lists them (None: every position)."""
        if positions is None:
            return None
        if isinstance(positions, slice):
            longest = max(len(r.get("tokens", ())) or len(self._need_tokenizer().encode(r["text"], b.doc["add_special"]))
                          for r in b.doc["rows"])
            return list(range(longest))[positions]
        try:
            return _positions(positions, "positions")
        except RequestError as e:
            raise Error(str(e)) from None

    def _lens_logits(self, prompts, edits, positions, add_special, sae=None):
        """probs=False: every block's output at the lens' columns through libnnt's projection."""
        vals = self.trace(prompts, save=["layers.*.layer_output", "attention_mask"], edits=edits, add_special=add_special,
                          sae=sae)
        mask = vals["attention_mask"]
        cols = []
        for r in range(mask.shape[0]):
            real = np.flatnonzero(mask[r])
            n = len(real)
            pick = range(n) if positions is None else [p if p >= 0 else n + p for p in positions if -n <= p < n]
            cols.append([int(real[p]) for p in pick])
        W = max(len(c) for c in cols)
        out = None
        for layer in range(self.num_layers):
            x = vals[f"layers.{layer}.layer_output"]
            sel = np.zeros((x.shape[0], W) + x.shape[2:], x.dtype)
            for r, c in enumerate(cols):
                sel[r, :len(c)] = x[r, c]
            lg = self.project_on_vocab(sel)
            if out is None:
                out = np.zeros((self.num_layers,) + lg.shape, np.float32)
            out[layer] = lg
            for r, c in enumerate(cols):
                out[layer, r, len(c):] = 0
        return out

    def patch(self, clean, corrupt, metric, value="layers.*.layer_output", positions=None, batch=16, add_special=True):
        """Activation patching, run by libnnt as `nnt patch` runs it: for every block serving
        `value` ("layers.*.VALUE", or "layers.N.VALUE") and every position (None: all; a list of
        ints, negative from the end), the clean prompt's value at that block and position written
        into the corrupted prompt's forward, `batch` patched rows per forward, and the metric
        ("logit-diff:A,B" or "prob:T") read at the last position. clean and corrupt: a str (text)
        or a list of token ids, of the same length. Returns a PatchResult: grid [blocks, positions]
        float64, blocks, positions, clean_metric, corrupt_metric, forwards."""
        try:
            b = _request.patch_request(clean, corrupt, metric, value, positions, batch, add_special)
        except RequestError as e:
            raise Error(str(e)) from None
        res = self._run(b)
        p = self.lib.nnt_result_patch(res.res).contents
        NB, P = p.n_blocks, p.n_positions
        return PatchResult(np.ctypeslib.as_array(p.grid, shape=(NB * P,)).reshape(NB, P).copy(),
                           np.ctypeslib.as_array(p.blocks, shape=(NB,)).copy(),
                           np.ctypeslib.as_array(p.positions, shape=(P,)).copy(),
                           float(p.clean_metric), float(p.corrupt_metric), int(p.forwards))

    def session(self, batch, capacity=2048):
        """A session of `batch` rows and up to `capacity` tokens per row (nnt_session_new; the caches
        are allocated for capacity tokens up front): its forward() calls continue one another
        through the key/value caches and recurrent states."""
        return Session(self, batch, capacity)

    def generate(self, prompts, max_new_tokens, save=(), edits=(), temperature=0.0, top_k=0, top_p=1.0, seed=0,
                 stop_ids=(), ignore_eos=False, output="numpy", add_special=True, sae=None):
        """Samples max_new_tokens tokens per row (greedy when temperature is 0) with `edits`
        applied at every step (Steps(first, last) limits the ones after it) and `save`d values
        kept at every step (a ("path", "save") among the edits follows the Steps before it). A row stops at the tokenizer's eos token unless ignore_eos, and at any of
        stop_ids. sae attaches sparse autoencoders as trace's does (they run at every step).
        Returns a Generation (tokens, values, text)."""
        try:
            b = _request.generate_request(prompts, max_new_tokens, save, edits, temperature, top_k, top_p, seed,
                                          stop_ids, ignore_eos, add_special, sae)
        except RequestError as e:
            raise Error(str(e)) from None
        return self._generation(self._run(b), output)

    def generate_stream(self, prompts, max_new_tokens, save=(), edits=(), temperature=0.0, top_k=0, top_p=1.0,
                        seed=0, stop_ids=(), ignore_eos=False, add_special=True, sae=None):
        """generate, with each step's tokens as they are picked: an iterator of (step, tokens
        [batch] int32; -1 for a row that stopped) whose .result is the Generation once the
        iteration ends, as nnt.Remote.generate_stream gives. The generation
        runs on a thread of its own; close() (or leaving the loop and dropping the stream) stops
        it at its next value site (libnnt's progress handler)."""
        try:
            b = _request.generate_request(prompts, max_new_tokens, save, edits, temperature, top_k, top_p, seed,
                                          stop_ids, ignore_eos, add_special, sae)
        except RequestError as e:
            raise Error(str(e)) from None
        return _LocalStream(self, b)

    @_serialised
    def _run_reporting(self, builder, on_progress):
        """_run with on_progress(nnt_progress) as the runtime's progress handler for the call."""
        fn = _lib.PROGRESS_FN(lambda user, p: on_progress(p.contents))
        self._h.check(self.lib.nnt_runtime_set_progress(self._h.rt, fn, None))
        try:
            return self._run(builder)
        finally:
            self.lib.nnt_runtime_set_progress(self._h.rt, _lib.PROGRESS_FN(), None)

    def _generation(self, res, output="numpy"):
        """The Generation of a generate request's result handle."""
        n, stop_p, n_stop = ctypes.c_int(), ctypes.POINTER(ctypes.c_int32)(), ctypes.c_int()
        tok = self.lib.nnt_result_tokens(res.res, ctypes.byref(n), ctypes.byref(stop_p), ctypes.byref(n_stop))
        rows = self.lib.nnt_result_batch(res.res).contents.batch
        out = np.ctypeslib.as_array(tok, shape=(rows * n.value,)).reshape(rows, n.value).copy() if n.value else \
            np.zeros((rows, 0), np.int32)
        stops = [int(stop_p[i]) for i in range(n_stop.value)]
        tr = res
        text = None
        if self.tokenizer is not None:
            text = []
            for row in out:
                n = int(np.argmax(row == _lib.NNT_TOKEN_STOPPED)) if (row == _lib.NNT_TOKEN_STOPPED).any() else len(row)
                if n and int(row[n - 1]) in stops:
                    n -= 1
                text.append(self.tokenizer.decode(row[:n]))
        return Generation(out, self._values(tr, None, output), text)


class _LocalStream:
    """Model.generate_stream's iterator: the generation runs on a thread; the runtime's progress
    handler hands each step's tokens over a queue and stops the call once the stream is closed."""

    def __init__(self, model, builder):
        self.result = None
        self._queue = queue.Queue()
        self._stop = threading.Event()
        self._done = False

        def on_progress(p):
            if p.kind == _lib.NNT_PROGRESS_TOKENS:
                self._queue.put(("tokens", p.step, np.ctypeslib.as_array(p.tokens, shape=(p.batch,)).copy()))
            return 1 if self._stop.is_set() else 0

        def run():
            try:
                self._queue.put(("result", model._generation(model._run_reporting(builder, on_progress))))
            except BaseException as e:  # handed to the iterating thread
                self._queue.put(("error", e))

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        kind, *rest = self._queue.get()
        if kind == "tokens":
            return rest[0], rest[1]
        self._done = True
        self._thread.join()
        if kind == "error":
            raise rest[0]
        self.result = rest[0]
        raise StopIteration

    def close(self):
        """Stops the generation (if it still runs) and waits for its thread."""
        if not self._done:
            self._stop.set()
            self._done = True
            self._thread.join()

    def __del__(self):
        self.close()


class Session:
    """A batch's caches carried from call to call (nnt_session_new / nnt_session_forward): the first
    forward is the prompt (rows may differ in length: left-padded), each later one continues every
    row with the same number of new tokens. Each call's saves and edits are a request of its own;
    forward returns that call's Values."""

    def __init__(self, model, batch, capacity):
        self.model = model
        self.lib = model.lib
        self._h = model._h
        self.s = ctypes.c_void_p()
        self._h.adopt()
        self._adopted = True
        with self._h.lock:
            self._h.check(self.lib.nnt_session_new(self._h.m, _number(batch, "batch"), _number(capacity, "capacity"),
                                                   ctypes.byref(self.s)), "session")

    def __del__(self):
        if not getattr(self, "_adopted", False):
            return
        sess, self.s = self.s, ctypes.c_void_p()
        self._adopted = False
        self._h.release(self.lib.nnt_session_free, sess)

    @property
    def length(self):
        """Tokens per row the session holds so far."""
        return int(self.lib.nnt_session_length(self.s))

    @_serialised
    def forward(self, prompts, save=(), edits=(), output="numpy", add_special=True, sae=None):
        """Runs the next tokens of every row: prompts as Model.trace takes them (the first call's
        text gets the tokenizer's special tokens unless add_special is False; a later call's rows
        are usually one token id each); sae as Model.trace's, for this call. Returns the call's
        Values."""
        m = self.model
        b = m._builder("trace", prompts, save, edits, add_special and self.length == 0, sae)
        tr = _TraceHandle(self._h)
        b.callbacks = [_callback(fn, tr) for fn in b.raw_callbacks]
        req = _parse_request(self._h, b)
        batch = _lib.Batch()
        try:
            cbs, n = _callbacks(tr, b)
            self._h.check(self.lib.nnt_request_batch(req, self._h.m, ctypes.byref(batch)))
            self._h.check(self.lib.nnt_request_apply(req, tr.t, cbs, n))
            mask = batch.mask if self.length == 0 else None
            st = self.lib.nnt_session_forward(self.s, tr.t, batch.ids, mask, batch.seq)
            m._check_callback(tr, st, "forward")
        finally:
            self.lib.nnt_batch_free(ctypes.byref(batch))
            self.lib.nnt_request_free(req)
        return m._values(tr, None, output)

