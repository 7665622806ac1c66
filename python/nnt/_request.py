"""_request.py - the request documents (docs/requests.md) the package hands libnnt: Python's prompts,
saves and edits made into one JSON document, numpy arrays into the safetensors bytes that travel
beside it, and callables into the callbacks its "callback" edits name. libnnt checks everything
(types, ranges, paths, shapes), so a Python call obeys the same rules as the nnt command."""

import inspect
import json
import os
import struct
from collections import namedtuple

import numpy as np

FORMAT = 1  # NNT_REQUEST_FORMAT

# numpy dtypes and their safetensors names
_ST_DTYPE = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.float64): "F64",
             np.dtype(np.int64): "I64", np.dtype(np.int32): "I32", np.dtype(np.int16): "I16",
             np.dtype(np.int8): "I8", np.dtype(np.uint8): "U8", np.dtype(np.bool_): "BOOL"}


class EditContext(namedtuple("EditContext", "path block")):
    """What an edit callback is told besides the value, when it asks for it by a keyword parameter
    named ``ctx``: the value's canonical path (``"layers.1.mlp.output"``) and its block (-1 for a
    value of the model module, such as ``logits``)."""

    __slots__ = ()


def callback_wants_ctx(fn):
    """Whether an edit callback takes the context: the one signature is ``fn(value)`` or
    ``fn(value, *, ctx)`` (``ctx`` may have a default, or come through ``**kwargs``). Parameters
    with defaults beyond these are never filled (``lambda v, k=0.5: v * k`` gets ``k = 0.5``); a
    callable that cannot be called so is refused before the request runs, naming what it takes."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False  # a callable without a signature (some builtins): called with the value alone
    params = sig.parameters
    ctx = params.get("ctx")
    wants = (ctx is not None and ctx.kind in (ctx.POSITIONAL_OR_KEYWORD, ctx.KEYWORD_ONLY)) or \
        (ctx is None and any(p.kind == p.VAR_KEYWORD for p in params.values()))
    first = next(iter(params.values()), None)
    try:
        if first is not None and first.name == "ctx":
            raise TypeError
        sig.bind(None, ctx=None) if wants else sig.bind(None)
    except TypeError:
        name = getattr(fn, "__qualname__", type(fn).__name__)
        raise RequestError(f"callback {name}{sig}: an edit callback is called as fn(value) or fn(value, *, ctx) "
                           "(ctx.path, ctx.block); every other parameter needs a default") from None
    return wants


class AblateExpert(namedtuple("AblateExpert", "layer expert")):
    """Zero expert `expert`'s weight wherever block `layer` routes to it."""


class SkipLayers(namedtuple("SkipLayers", "start end")):
    """Skip blocks start..end: block end's output is block start's input."""


class Steer(namedtuple("Steer", "layers vector factor positions")):
    """Add factor * vector ([hidden_size]: every stream; on DeepSeek-V4, [num_streams, hidden_size]:
    a row per stream) to layer_output of `layers` (an int, a (first, last) pair or a list of
    blocks) at `positions` (None: all; negative counts from the end)."""

    def __new__(cls, layers, vector, factor=1.0, positions=None):
        return super().__new__(cls, layers, vector, factor, positions)


class Steps(namedtuple("Steps", "first last")):
    """In generate: the requests after it apply only at steps first..last (last None: every
    later step; step 0 is the prompt)."""

    def __new__(cls, first, last=None):
        return super().__new__(cls, first, last)


EDIT_FORMS = ("(path, 'save'), (path, 'zero'), (path, 'scale', factor), (path, 'set', array), "
              "(path, 'add', array[, factor]), (path, 'masked_fill', where_path, equals, fill), "
              "on an SAE's 'VALUE.sae.feature_acts': (path, 'zero', features), (path, 'scale', features, factor), "
              "(path, 'masked_fill', features, fill), "
              "(path, callable), AblateExpert, SkipLayers, Steer, Steps, or a request edit as a dict "
              "({'op': 'set', 'path': ..., 'tensor': array, 'rows': [...], 'positions': [...]}, "
              "docs/requests.md)")


class RequestError(Exception):
    """An argument the package cannot put into a request (raised as nnt.Error by the caller)."""


def safetensors_bytes(arrays):
    """arrays {key: numpy array} as one safetensors buffer (8-byte little-endian header length,
    the JSON header, the data of each tensor in order, row-major)."""
    header, blobs, offset = {}, [], 0
    for key, a in arrays.items():
        a = np.ascontiguousarray(a)
        if a.dtype not in _ST_DTYPE:
            raise RequestError(f"tensor {key}: numpy dtype {a.dtype} has no safetensors equivalent")
        raw = a.tobytes()
        header[key] = {"dtype": _ST_DTYPE[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def _number(x, what):
    """A JSON number from x as given: ints stay ints (however large: libnnt checks the range) and
    floats stay floats (libnnt refuses a float where an integer belongs)."""
    if isinstance(x, (bool, np.bool_)):
        raise RequestError(f"{what}: {x!r} is a boolean, not a number")
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        if not np.isfinite(x):
            raise RequestError(f"{what}: {x!r} is not a finite number")
        return float(x)
    raise RequestError(f"{what}: {x!r} is not a number")


def _positions(p, what):
    if p is None:
        return None
    items = [p] if isinstance(p, (int, np.integer, str)) else list(p)
    return [x if isinstance(x, str) else _number(x, what) for x in items]


class Builder:
    """Collects one request: rows, saves, edits, the tensors they carry and the callbacks."""

    def __init__(self, method="trace"):
        self.doc = {"nnt_request": FORMAT, "method": method}
        self.tensors = {}
        self.raw_callbacks = []  # the Python callables "callback" edits name, by index
        self.callbacks = []      # their C wrappers, made by the caller for a run

    def tensor(self, array, what):
        a = np.asarray(array)
        if a.dtype.kind in "fiub" and a.dtype not in _ST_DTYPE:
            a = a.astype(np.float32)
        key = f"t{len(self.tensors)}"
        if a.dtype not in _ST_DTYPE:
            raise RequestError(f"{what}: numpy dtype {a.dtype} has no nnt equivalent")
        self.tensors[key] = a
        return {"key": key}

    def rows(self, prompts, add_special=True):
        """prompts: a str (one row of text), a list of str, a list of ints (one row of ids), a list
        of lists of ints or a 2-D int array (rows of ids)."""
        if isinstance(prompts, np.ndarray):
            if prompts.dtype.kind not in "iuUS" and prompts.size:
                raise RequestError(f"prompts: token ids must be an integer array, got dtype {prompts.dtype}")
            prompts = prompts.reshape(1, -1).tolist() if prompts.ndim == 1 else prompts.tolist()
        if isinstance(prompts, (str, bytes)):
            prompts = [prompts]
        elif isinstance(prompts, (list, tuple)) and prompts and all(
                isinstance(p, (int, float, np.integer, np.floating)) and not isinstance(p, bool) for p in prompts):
            prompts = [prompts]
        if not isinstance(prompts, (list, tuple)) or not prompts:
            raise RequestError("prompts: expected a str, a list of str, a list of token ids or a list of such lists")
        rows = []
        for i, p in enumerate(prompts):
            if isinstance(p, bytes):
                p = p.decode("utf-8", "surrogateescape")
            if isinstance(p, str):
                rows.append({"text": p})
            elif isinstance(p, (list, tuple, np.ndarray)):
                if isinstance(p, np.ndarray) and p.dtype.kind not in "iu" and p.size:
                    raise RequestError(f"prompts[{i}]: token ids must be an integer array, got dtype {p.dtype}")
                items = p.tolist() if isinstance(p, np.ndarray) else p
                for j, x in enumerate(items):
                    if isinstance(x, (float, np.floating)):
                        raise RequestError(f"prompts[{i}][{j}]: token ids must be integers, got float {x!r}")
                rows.append({"tokens": [_number(x, f"prompts[{i}]") for x in items]})
            else:
                raise RequestError(f"prompts[{i}]: expected a str or a list of token ids, got {type(p).__name__}")
        self.doc["rows"] = rows
        self.doc["add_special"] = bool(add_special)
        return rows

    def saves(self, save):
        saves = [save] if isinstance(save, str) else [str(s) for s in save]
        if saves:
            self.doc["saves"] = saves

    def edits(self, edits):
        out = []
        for e in edits:
            out.extend(self._edit(e))
        if out:
            self.doc.setdefault("edits", []).extend(out)

    def _edit(self, e):
        if isinstance(e, str):
            return [{"op": "save", "path": e}]
        if isinstance(e, dict):
            d = dict(e)
            if "tensor" in d and not isinstance(d["tensor"], dict):
                d["tensor"] = self.tensor(d["tensor"], f"edit {d.get('op')} {d.get('path')}")
            if callable(d.get("callback")):
                d["callback"] = self._callback(d["callback"])
            return [d]
        if isinstance(e, AblateExpert):
            return [{"op": "ablate_expert", "layer": _number(e.layer, "AblateExpert.layer"),
                     "expert": _number(e.expert, "AblateExpert.expert")}]
        if isinstance(e, SkipLayers):
            return [{"op": "skip_layers", "start": _number(e.start, "SkipLayers.start"),
                     "end": _number(e.end, "SkipLayers.end")}]
        if isinstance(e, Steps):
            d = {"op": "steps", "from": _number(e.first, "Steps.first")}
            if e.last is not None:
                d["to"] = _number(e.last, "Steps.last")
            return [d]
        if isinstance(e, Steer):
            return self._steer(e)
        return [self._tuple_edit(e)]

    def _callback(self, fn):
        self.raw_callbacks.append(fn)
        return len(self.raw_callbacks) - 1

    def _steer(self, s):
        layers = s.layers
        if isinstance(layers, (int, np.integer)):
            spans = [(layers, layers)]
        elif isinstance(layers, tuple) and len(layers) == 2:
            spans = [layers]
        else:
            spans = [(x, x) for x in layers]
        t = self.tensor(np.asarray(s.vector, dtype=np.float32), "steer vector")
        out = []
        for first, last in spans:
            d = {"op": "steer", "first": _number(first, "Steer.layers"), "last": _number(last, "Steer.layers"),
                 "tensor": t, "factor": _number(s.factor, "Steer.factor")}
            pos = _positions(s.positions, "Steer.positions")
            if pos is not None:
                d["positions"] = pos
            out.append(d)
        return out

    def _tuple_edit(self, e):
        if not isinstance(e, (tuple, list)) or len(e) < 2 or not isinstance(e[0], str):
            raise RequestError(f"edit {e!r}: expected one of {EDIT_FORMS}")
        path, op, args = e[0], e[1], tuple(e[2:])
        if path.endswith(".sae.feature_acts") and op in ("zero", "scale", "masked_fill"):
            return self._feature_edit(e, path, op, args)
        if callable(op):
            if args:
                raise RequestError(f"edit {e!r}: a callable edit is (path, callable)")
            return {"op": "callback", "path": path, "callback": self._callback(op)}
        forms = {"save": (0,), "zero": (0,), "scale": (1,), "set": (1,), "add": (1, 2), "masked_fill": (3,)}
        if op not in forms or len(args) not in forms[op]:
            raise RequestError(f"edit {e!r}: expected one of {EDIT_FORMS}")
        d = {"op": op, "path": path}
        if op == "scale":
            d["factor"] = _number(args[0], f"edit {path} scale")
        elif op == "masked_fill":
            d.update(where=str(args[0]), equals=_number(args[1], f"edit {path} equals"),
                     fill=_number(args[2], f"edit {path} fill"))
        elif op in ("set", "add"):
            d["tensor"] = self.tensor(args[0], f"{op} {path}")
            if len(args) > 1:
                d["factor"] = _number(args[1], f"edit {path} factor")
        return d

    def _feature_edit(self, e, path, op, args):
        """An edit of the features of the SAE attached to a value: the features by index (an int
        or a list), then the factor (scale) or the fill (masked_fill)."""
        want = {"zero": 1, "scale": 2, "masked_fill": 2}[op]
        if len(args) != want:
            raise RequestError(f"edit {e!r}: expected one of {EDIT_FORMS}")
        feats = args[0]
        feats = [feats] if isinstance(feats, (int, np.integer)) else list(np.asarray(feats).reshape(-1).tolist())
        d = {"op": op, "path": path, "features": [_number(f, f"edit {path} features") for f in feats]}
        if op == "scale":
            d["factor"] = _number(args[1], f"edit {path} factor")
        elif op == "masked_fill":
            d["fill"] = _number(args[1], f"edit {path} fill")
        return d

    def saes(self, sae):
        """The "saes" section: {value path: SAELens folder} (or (path, folder) pairs), the folders
        made absolute here so that they name the same place wherever libnnt reads the request."""
        items = sae.items() if isinstance(sae, dict) else sae
        out = []
        for item in items:
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise RequestError(f"sae {item!r}: expected {{value path: SAELens folder}} or (path, folder) pairs")
            path, folder = item
            if not isinstance(path, str) or not isinstance(folder, (str, os.PathLike)):
                raise RequestError(f"sae {item!r}: the value path and the folder are strings (or a path-like folder)")
            out.append({"path": path, "dir": os.path.abspath(os.fspath(folder))})
        if out:
            self.doc["saes"] = out

    def grad(self, grad, metric=None, metric_positions=None, cotangents=None):
        """The "grad" section: gradient paths, the metric and its positions, and cotangents
        {path: array} (dL/dV handed in for value V)."""
        paths = [grad] if isinstance(grad, str) else [str(p) for p in grad]
        if not paths and not metric and not cotangents:
            return
        g = {"paths": paths}
        if metric is not None:
            g["metric"] = str(metric)
        pos = _positions(metric_positions, "metric_positions")
        if pos is not None:
            g["positions"] = pos
        if cotangents:
            g["cotangents"] = [{"path": str(p), "tensor": self.tensor(np.asarray(a, dtype=np.float32), f"cotangent {p}")}
                               for p, a in dict(cotangents).items()]
        self.doc["grad"] = g

    def section(self, name, **fields):
        self.doc[name] = {k: v for k, v in fields.items() if v is not None}

    def encode(self):
        """(json bytes, safetensors bytes or None)."""
        return (json.dumps(self.doc, separators=(",", ":")).encode(),
                safetensors_bytes(self.tensors) if self.tensors else None)


# ---- each method's request, as nnt.Model and nnt.Remote make it (RequestError on a bad argument) ----

def basic_request(method, prompts, save=(), edits=(), add_special=True, sae=None):
    """Rows, SAEs, edits and saves of a trace-shaped request (trace, lens, generate)."""
    b = Builder(method)
    if prompts is not None:
        b.rows(prompts, add_special)
    if sae:
        b.saes(sae)
    b.edits(list(edits))
    b.saves([] if save is None else save)
    return b


def trace_request(prompts, save=(), edits=(), add_special=True, sae=None, grad=(), metric=None,
                  metric_positions=None, cotangents=None):
    b = basic_request("trace", prompts, save, edits, add_special, sae)
    b.grad(grad, metric, metric_positions, cotangents)
    return b


def pair_request(method, clean, corrupt, add_special, **fields):
    """patch and attribute: the clean and corrupted rows in the method's section, with its fields."""
    b = Builder(method)
    rows = b.rows([clean, corrupt], add_special)
    del b.doc["rows"]
    b.section(method, clean=rows[0], corrupt=rows[1], **fields)
    return b


def attribute_request(clean, corrupt, metric, value, ig_steps, add_special):
    return pair_request("attribute", clean, corrupt, add_special, metric=str(metric), value=str(value),
                        ig_steps=_number(ig_steps, "ig_steps"))


def patch_request(clean, corrupt, metric, value, positions, batch, add_special):
    return pair_request("patch", clean, corrupt, add_special, metric=str(metric), value=str(value),
                        positions=_positions(positions, "positions"), batch=_number(batch, "batch"))


def generate_request(prompts, max_new_tokens, save, edits, temperature, top_k, top_p, seed, stop_ids, ignore_eos,
                     add_special, sae):
    save = [save] if isinstance(save, str) else list(save)
    edits = list(edits)
    if save and any(isinstance(e, Steps) for e in edits):
        edits.append(Steps(0, None))  # `save` is kept at every step; ("path", "save") in edits follows Steps
    b = basic_request("generate", prompts, (), edits + save, add_special, sae)
    b.section("generate", max_new_tokens=_number(max_new_tokens, "max_new_tokens"),
              temperature=_number(temperature, "temperature"), top_k=_number(top_k, "top_k"),
              top_p=_number(top_p, "top_p"), seed=str(int(seed)) if isinstance(seed, (int, np.integer)) else seed,
              stop_ids=[_number(x, "stop_ids") for x in stop_ids], ignore_eos=bool(ignore_eos))
    return b
