"""_core.py - nnt's Python face: Model, Tokenizer, the edit operations and the result types.
Everything runs in libnnt through its C API; this file only turns Python arguments into C calls
and C tensors into numpy arrays (views of the trace's memory, kept alive by the arrays)."""

import ctypes
import inspect
import os
from collections import namedtuple

import numpy as np

from . import _lib


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


# ---- native handles (freed when the last Python object using them goes) ----

class _ModelHandle:
    def __init__(self, lib, config, directory):
        self.lib = lib
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

    def __del__(self):
        lib = getattr(self, "lib", None)
        if lib is None:
            return
        if self.m:
            lib.nnt_model_free(self.m)
            self.m = ctypes.c_void_p()
        if self.rt:
            lib.nnt_runtime_close(self.rt)
            self.rt = ctypes.c_void_p()


class _TraceHandle:
    """One nnt_trace with what its requests need kept alive: callbacks and tensors. Arrays viewing
    its results hold it."""

    def __init__(self, model):
        self.model = model  # _ModelHandle
        self.lib = model.lib
        self.t = ctypes.c_void_p()
        self.keep = []
        self.callback_error = None
        model.check(self.lib.nnt_trace_new(model.m, ctypes.byref(self.t)), "trace")

    def __del__(self):
        if getattr(self, "t", None):
            self.lib.nnt_trace_free(self.t)
            self.t = ctypes.c_void_p()


class _OwnedTensor:
    """A tensor libnnt allocated for the caller, freed with nnt_tensor_free when the last array
    viewing it goes."""

    def __init__(self, lib):
        self.lib = lib
        self.t = _lib.Tensor()

    def __del__(self):
        if getattr(self, "t", None) is not None and self.t.data:
            self.lib.nnt_tensor_free(ctypes.byref(self.t))


# ---- edit operations as data ----

class AblateExpert(namedtuple("AblateExpert", "layer expert")):
    """Zero expert `expert`'s weight wherever block `layer` routes to it."""


class SkipLayers(namedtuple("SkipLayers", "start end")):
    """Skip blocks start..end: block end's output is block start's input."""


class Steer(namedtuple("Steer", "layers vector factor positions")):
    """Add factor * vector ([hidden_size]) to layer_output of `layers` (an int, a (first, last)
    pair or a list of blocks) at `positions` (None: all; negative counts from the end)."""

    def __new__(cls, layers, vector, factor=1.0, positions=None):
        return super().__new__(cls, layers, vector, factor, positions)


class Steps(namedtuple("Steps", "first last")):
    """In generate: the requests after it apply only at steps first..last (last None: every
    later step; step 0 is the prompt)."""

    def __new__(cls, first, last=None):
        return super().__new__(cls, first, last)


_EDIT_FORMS = ("(path, 'save'), (path, 'zero'), (path, 'scale', factor), (path, 'set', array), "
               "(path, 'add', array[, factor]), (path, 'masked_fill', where_path, equals, fill), "
               "(path, callable), AblateExpert, SkipLayers, Steer, Steps")


def _callback(fn, trace):
    """Wraps a Python callable as an nnt_edit_fn: it receives a writable numpy view of the value
    (valid only during the call) - and the path and block when it takes three arguments; a
    returned array is written into the value."""
    try:
        inspect.signature(fn).bind(None, None, None)
        with_context = True
    except (TypeError, ValueError):
        with_context = False

    def call(user, path, layer, value_p, err_p):
        try:
            value = _as_array(value_p.contents, None, must_view=True)
            ret = fn(value, path.decode(), layer) if with_context else fn(value)
            if ret is not None and ret is not value:
                value[...] = ret
            return _lib.NNT_OK
        except BaseException as exc:  # noqa: B902 - reported through nnt, re-raised after the run
            trace.callback_error = exc
            msg = f"{type(exc).__name__}: {exc}".encode("utf-8", "replace")[: _lib.NNT_ERROR_MSG_MAX - 1]
            err_p.contents.msg = msg
            err_p.contents.status = _lib.NNT_ERR_CALLBACK
            return _lib.NNT_ERR_CALLBACK

    return _lib.EDIT_FN(call)


def _add_request(tr, edit):
    """Adds one save or edit (any form of _EDIT_FORMS) to trace handle tr."""
    lib, t, check = tr.lib, tr.t, tr.model.check
    if isinstance(edit, str):
        check(lib.nnt_trace_save(t, edit.encode()))
        return
    if isinstance(edit, AblateExpert):
        check(lib.nnt_trace_ablate_expert(t, int(edit.layer), int(edit.expert)))
        return
    if isinstance(edit, SkipLayers):
        check(lib.nnt_trace_skip_layers(t, int(edit.start), int(edit.end)))
        return
    if isinstance(edit, Steps):
        check(lib.nnt_trace_steps(t, int(edit.first), -1 if edit.last is None else int(edit.last)))
        return
    if isinstance(edit, Steer):
        _add_steer(tr, edit)
        return
    if not isinstance(edit, (tuple, list)) or len(edit) < 2 or not isinstance(edit[0], str):
        raise Error(f"edit {edit!r}: expected one of {_EDIT_FORMS}")
    path, op, args = edit[0], edit[1], tuple(edit[2:])
    p = path.encode()
    if callable(op):
        if args:
            raise Error(f"edit {edit!r}: a callable edit is (path, callable)")
        fn = _callback(op, tr)
        tr.keep.append(fn)
        check(lib.nnt_trace_edit(t, p, fn, None))
        return
    forms = {"save": 0, "zero": 0, "scale": 1, "set": 1, "add": (1, 2), "masked_fill": 3}
    want = forms.get(op)
    if want is None or len(args) not in (want if isinstance(want, tuple) else (want,)):
        raise Error(f"edit {edit!r}: expected one of {_EDIT_FORMS}")
    if op == "save":
        check(lib.nnt_trace_save(t, p))
    elif op == "zero":
        check(lib.nnt_trace_zero(t, p))
    elif op == "scale":
        check(lib.nnt_trace_scale(t, p, float(args[0])))
    elif op == "masked_fill":
        check(lib.nnt_trace_masked_fill(t, p, str(args[0]).encode(), int(args[1]), float(args[2])))
    else:
        tensor, array = _tensor_of(args[0], f"{op} {path}")
        tr.keep.append(array)
        if op == "set":
            check(lib.nnt_trace_set(t, p, ctypes.byref(tensor)))
        else:
            factor = float(args[1]) if len(args) > 1 else 1.0
            check(lib.nnt_trace_add(t, p, ctypes.byref(tensor), factor))


def _add_steer(tr, s):
    layers = s.layers
    if isinstance(layers, (int, np.integer)):
        spans = [(int(layers), int(layers))]
    elif isinstance(layers, tuple) and len(layers) == 2:
        spans = [(int(layers[0]), int(layers[1]))]
    else:
        spans = [(int(x), int(x)) for x in layers]
    tensor, array = _tensor_of(np.asarray(s.vector, dtype=np.float32), "steer vector")
    tr.keep.append(array)
    pos = None
    n = 0
    if s.positions is not None:
        plist = [int(s.positions)] if np.isscalar(s.positions) else [int(p) for p in s.positions]
        pos = (ctypes.c_int32 * len(plist))(*plist)
        n = len(plist)
        tr.keep.append(pos)
    for first, last in spans:
        tr.model.check(tr.lib.nnt_trace_steer(tr.t, first, last, pos, n, ctypes.byref(tensor), float(s.factor)))


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


SupportRow = namedtuple("SupportRow", "host block value served layout axes dtype writable reason")


class Tokenizer:
    """The tokenizer a checkpoint folder ships (nnt_tokenizer.h): tokenizer.json or tiktoken.model,
    with what the family plugin serving the folder's config.json adds to it (its tokenizer hints:
    nnt_runtime_tokenizer, through a runtime opened from `config`, an INI path; None: as the
    nnt command finds it). A Model's tokenizer is the one the model keeps (nnt_model_tokenizer)."""

    def __init__(self, directory, library=None, config=None, _lib_handle=None):
        self.lib = _lib_handle or _lib.load(library)
        self.tok = ctypes.c_void_p()
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
        st = self.lib.nnt_tokenizer_encode(self.tok, data, len(data), flags, ctypes.byref(ids), ctypes.byref(n))
        if st != _lib.NNT_OK:
            raise self._error(st)
        try:
            return [int(ids[i]) for i in range(n.value)]
        finally:
            _lib.LIBC.free(ctypes.cast(ids, ctypes.c_void_p))

    def decode(self, ids, skip_special=False):
        """The text of `ids` (invalid UTF-8 replaced by U+FFFD, as the reference decoders do)."""
        arr = np.ascontiguousarray(np.asarray(ids, dtype=np.int32).reshape(-1))
        text = ctypes.c_void_p()
        n = ctypes.c_size_t()
        flags = _lib.NNT_DECODE_REPLACE_INVALID | (_lib.NNT_DECODE_SKIP_SPECIAL if skip_special else 0)
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
        v = self.lib.nnt_tokenizer_token_id(self.tok, text.encode())
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

    # ---- listings ----

    def __str__(self):
        st, text = _lib.capture(lambda f: self.lib.nnt_model_print(self._h.m, f))
        self._h.check(st)
        return text

    def __repr__(self):
        return f"nnt.Model({self.path!r}, family={self.family!r}, backend={self.backend!r})"

    def print(self, file=None):
        """Writes the module tree (native and standard names, every value's layout), as
        `nnt print` does, to `file` (default: stdout)."""
        import sys

        (file or sys.stdout).write(str(self))

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

    def value_info(self, path, batch=None, seq=None):
        """What nnt says of one value (one block): served, reason, dtype, shape (for the given
        batch and seq), writable, layout, axes."""
        info = _lib.ValueInfo()
        dims = _lib.CallDims(batch, seq, 0) if batch and seq else None
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

    def _batch(self, prompts, add_special=True):
        """ids and mask [batch, seq] int32, rows left-padded with id 0 and mask 0."""
        if isinstance(prompts, np.ndarray) and prompts.dtype.kind in "iu":
            rows = [list(map(int, r)) for r in (prompts.reshape(1, -1) if prompts.ndim == 1 else prompts)]
        elif isinstance(prompts, (str, bytes)):
            rows = [self._need_tokenizer().encode(prompts, add_special)]
        elif isinstance(prompts, (list, tuple)) and prompts and all(isinstance(p, (int, np.integer)) for p in prompts):
            rows = [[int(p) for p in prompts]]
        elif isinstance(prompts, (list, tuple)) and prompts:
            rows = []
            for p in prompts:
                if isinstance(p, (str, bytes)):
                    rows.append(self._need_tokenizer().encode(p, add_special))
                else:
                    rows.append([int(x) for x in p])
        else:
            raise Error("prompts: expected a str, a list of str, a list of token ids or a list of such lists")
        for i, r in enumerate(rows):
            if not r:
                raise Error(f"prompts: row {i} has no tokens")
        seq = max(len(r) for r in rows)
        ids = np.zeros((len(rows), seq), np.int32)
        mask = np.zeros((len(rows), seq), np.int32)
        for i, r in enumerate(rows):
            ids[i, seq - len(r):] = r
            mask[i, seq - len(r):] = 1
        return ids, mask

    # ---- runs ----

    def _new_trace(self, requests):
        tr = _TraceHandle(self._h)
        for r in requests:
            _add_request(tr, r)
        return tr

    def _check_callback(self, tr, status, context):
        if status == _lib.NNT_OK:
            return
        err = self._h.error(status, context)
        if tr.callback_error is not None:
            raise err from tr.callback_error
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

    def trace(self, prompts, save=(), edits=(), positions=None, output="numpy", add_special=True):
        """Runs one forward pass with `edits` (applied in order before the forward uses each
        value), then returns the `save`d values (saved after the edits: they show them) as
        Values {path: numpy array}. Arrays view nnt's own buffers (no copy). positions (an int,
        a slice or a list of ints, negative from the end) keeps only those sequence positions of
        values that have a seq (or query) axis. output="torch" gives torch tensors over the same
        memory (DLPack). Errors raise nnt.Error with nnt's message."""
        ids, mask = self._batch(prompts, add_special)
        save = [save] if isinstance(save, str) else list(save)
        tr = self._new_trace(list(edits) + save)
        st = self.lib.nnt_trace_run(tr.t, ids.ctypes.data_as(_lib._I32P), mask.ctypes.data_as(_lib._I32P),
                                    ids.shape[0], ids.shape[1])
        self._check_callback(tr, st, "forward")
        return self._values(tr, positions, output)

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

    def project_on_vocab(self, x):
        """The logit lens on hidden states x [..., hidden_size] (or a multi-stream model's
        [batch, seq, streams, hidden_size]): the final norm and lm_head, as float32
        [..., vocab_size]."""
        t, keep = _tensor_of(np.asarray(x, dtype=np.float32), "project_on_vocab")
        out = _OwnedTensor(self.lib)
        self._h.check(self.lib.nnt_project_on_vocab(self._h.m, ctypes.byref(t), ctypes.byref(out.t)),
                      "project_on_vocab")
        return _as_array(out.t, out)

    def lens(self, prompts, edits=(), positions=None, probs=True, add_special=True):
        """The logit lens (nnterp's project_on_vocab on every block's layer_output), as `nnt lens`
        computes it: float32 [layers, batch, seq, vocab_size] probabilities (softmax over the
        vocabulary), or the lens logits with probs=False. positions keeps those positions."""
        vals = self.trace(prompts, save=["layers.*.layer_output"], edits=edits, add_special=add_special)
        out = None
        for layer in range(self.num_layers):
            x = vals[f"layers.{layer}.layer_output"]
            if positions is not None:
                x = x[:, positions] if isinstance(positions, (int, np.integer, slice)) else np.take(x, list(positions), 1)
            lg = self.project_on_vocab(x)
            if probs:
                e = np.exp(lg - lg.max(axis=-1, keepdims=True))
                lg = (e / e.sum(axis=-1, dtype=np.float64, keepdims=True)).astype(np.float32)
            if out is None:
                out = np.empty((self.num_layers,) + lg.shape, np.float32)
            out[layer] = lg
        return out

    def generate(self, prompts, max_new_tokens, save=(), edits=(), temperature=0.0, top_k=0, top_p=1.0, seed=0,
                 stop_ids=(), ignore_eos=False, output="numpy", add_special=True):
        """Samples max_new_tokens tokens per row (greedy when temperature is 0) with `edits`
        applied at every step (Steps(first, last) limits the ones after it) and `save`d values
        kept at every step (a ("path", "save") among the edits follows the Steps before it). A row stops at the tokenizer's eos token unless ignore_eos, and at any of
        stop_ids. Returns a Generation (tokens, values, text)."""
        ids, mask = self._batch(prompts, add_special)
        save = [save] if isinstance(save, str) else list(save)
        edits = list(edits)
        if save and any(isinstance(e, Steps) for e in edits):
            edits.append(Steps(0, None))  # `save` is kept at every step; ("path", "save") in edits follows Steps
        tr = self._new_trace(edits + save)
        stops = []
        if self.tokenizer is not None and not ignore_eos and self.tokenizer.eos_id is not None:
            stops.append(self.tokenizer.eos_id)
        stops += [int(s) for s in stop_ids]
        stop_arr = (ctypes.c_int32 * max(1, len(stops)))(*stops)
        opts = _lib.GenerateOpts(int(max_new_tokens), float(temperature), int(top_k), float(top_p), int(seed),
                                 stop_arr if stops else None, len(stops))
        out = np.zeros((ids.shape[0], max(0, int(max_new_tokens))), np.int32)
        st = self.lib.nnt_generate(self._h.m, tr.t, ids.ctypes.data_as(_lib._I32P), mask.ctypes.data_as(_lib._I32P),
                                   ids.shape[0], ids.shape[1], ctypes.byref(opts), out.ctypes.data_as(_lib._I32P))
        self._check_callback(tr, st, "generate")
        text = None
        if self.tokenizer is not None:
            text = []
            for row in out:
                n = int(np.argmax(row == _lib.NNT_TOKEN_STOPPED)) if (row == _lib.NNT_TOKEN_STOPPED).any() else len(row)
                if n and int(row[n - 1]) in stops:
                    n -= 1
                text.append(self.tokenizer.decode(row[:n]))
        return Generation(out, self._values(tr, None, output), text)
