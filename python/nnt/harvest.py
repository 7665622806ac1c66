"""nnt.harvest - reads the folder `nnt harvest` writes (libnnt's nnt_harvest): its manifest.json and
safetensors shards, every value as one array over the corpus's kept tokens, backed by numpy memmaps
of the shards (nothing is read until it is indexed), beside each token's id, row, position and
document; and, for SAELens, the values as a Hugging Face `datasets` folder (`to_dataset`).

    h = nnt.harvest.open("out")
    h.keys()                         # the saved values' keys
    x = h["layers.1.layer_output"]   # [tokens, hidden_size]: x[0], x[100:200], x[idx], len(x), x.shape
    h.input_ids[:10], h.rows[:10], h.positions[:10], h.documents[:10]
    h.stats()                        # stats.safetensors (reductions), as numpy arrays

The layout is docs in nnt_methods.h (nnt_harvest): a value saved [batch seq F...] is [N, F...] in
each shard, N the shard's kept tokens in row order; BF16 values come back as float32 arrays
holding the same numbers (numpy has no bfloat16), their memmaps (`.parts`) as uint16."""

import builtins
import json
import os
import struct

import numpy as np

__all__ = ["open", "Harvest", "ShardedArray"]

_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
           "I8": "i1", "U8": "u1", "BOOL": "?"}
_META = {"input_ids": "harvest.input_ids", "rows": "harvest.rows", "positions": "harvest.positions",
         "documents": "harvest.documents"}


def _memmaps(path):
    """{key: (memmap, dtype name)} of a safetensors file's tensors."""
    with builtins.open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    out = {}
    for key, d in header.items():
        if key == "__metadata__":
            continue
        begin, end = d["data_offsets"]
        dt = np.dtype(_DTYPES[d["dtype"]])
        shape = tuple(d["shape"])
        if end == begin:
            arr = np.zeros(shape, dt)
        else:
            arr = np.memmap(path, dt, "r", offset=8 + n + begin, shape=shape)
        out[key] = (arr, d["dtype"])
    return out


def _widen(a, dtype):
    """An array read from a shard as the numbers it holds (BF16: float32)."""
    a = np.asarray(a)
    if dtype == "BF16":
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a


class ShardedArray:
    """One value over every shard: indexed along its first axis (the tokens) like a numpy array;
    each index reads only the shards it falls in. `.parts` are the shards' memmaps."""

    def __init__(self, parts, dtype):
        self.parts = parts
        self.dtype_name = dtype
        self.offsets = np.cumsum([0] + [len(p) for p in parts])
        tail = parts[0].shape[1:] if parts else ()
        self.shape = (int(self.offsets[-1]),) + tuple(tail)

    def __len__(self):
        return self.shape[0]

    @property
    def dtype(self):
        return np.dtype(np.float32) if self.dtype_name == "BF16" else self.parts[0].dtype

    def __array__(self, dtype=None, copy=None):
        a = self[:]
        return a.astype(dtype) if dtype is not None else a

    def __getitem__(self, idx):
        rest = ()
        if isinstance(idx, tuple):
            idx, rest = idx[0], idx[1:]
        n = len(self)
        if isinstance(idx, (int, np.integer)):
            i = int(idx) + (n if idx < 0 else 0)
            if not 0 <= i < n:
                raise IndexError(f"token {idx} is outside 0..{n - 1}")
            p = int(np.searchsorted(self.offsets, i, side="right")) - 1
            return _widen(self.parts[p][(i - self.offsets[p],) + rest], self.dtype_name)
        if isinstance(idx, slice):
            start, stop, step = idx.indices(n)
            if step == 1:
                pieces = []
                for p, part in enumerate(self.parts):
                    a, b = max(start, self.offsets[p]), min(stop, self.offsets[p + 1])
                    if a < b:
                        pieces.append(part[a - self.offsets[p]:b - self.offsets[p]])
                out = np.concatenate(pieces) if pieces else np.zeros((0,) + self.shape[1:], self.parts[0].dtype)
                return _widen(out, self.dtype_name)[(slice(None),) + rest]
            idx = np.arange(start, stop, step)
        idx = np.asarray(idx)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        idx = np.where(idx < 0, idx + n, idx)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise IndexError(f"a token index is outside 0..{n - 1}")
        which = np.searchsorted(self.offsets, idx, side="right") - 1
        out = np.empty(idx.shape + self.shape[1:], self.parts[0].dtype)
        for p in np.unique(which):
            sel = which == p
            out[sel] = self.parts[p][idx[sel] - self.offsets[p]]
        return _widen(out, self.dtype_name)[(slice(None),) + rest]


class Harvest:
    """A harvest folder: its manifest, values, token metadata and statistics."""

    def __init__(self, folder):
        self.folder = folder
        path = os.path.join(folder, "manifest.json")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{folder}: no manifest.json (not a folder nnt harvest wrote)")
        with builtins.open(path, encoding="utf-8") as f:
            self.manifest = json.load(f)
        shards = [_memmaps(os.path.join(folder, s["file"])) for s in self.manifest["shards"]]
        self._arrays = {}
        for key in (shards[0] if shards else {}):
            self._arrays[key] = ShardedArray([s[key][0] for s in shards], shards[0][key][1])

    @property
    def complete(self):
        return bool(self.manifest.get("complete"))

    def keys(self):
        """The saved values' keys (the token metadata left out)."""
        return [k for k in self._arrays if not k.startswith("harvest.")]

    def __getitem__(self, key):
        if key not in self._arrays:
            raise KeyError(f"{key!r} is not a value of this harvest (it holds {', '.join(self.keys())})")
        return self._arrays[key]

    def __contains__(self, key):
        return key in self._arrays

    def __getattr__(self, name):
        if name in _META and _META[name] in self.__dict__.get("_arrays", {}):
            return self._arrays[_META[name]]
        raise AttributeError(name)

    def __len__(self):
        """Kept tokens."""
        return len(self._arrays[_META["input_ids"]]) if self._arrays else 0

    def stats(self):
        """The reductions (stats.safetensors) as {key: numpy array}; KeyError when there are none."""
        if not self.manifest.get("stats"):
            raise KeyError(f"{self.folder}: the harvest asked for no reduction (--reduce, --routing-stats)")
        return {k: np.array(v[0]) for k, v in _memmaps(os.path.join(self.folder, self.manifest["stats"])).items()}

    def to_dataset(self, path, value=None, hook_name=None):
        """Writes `value` (default: the one saved value) as a Hugging Face `datasets` folder in the
        layout of SAELens's activation cache: one row per corpus row, column `hook_name` (default:
        the value's key) an Array2D [context, d] of float32 and `token_ids` [context] of int32, so that
        SAELens trains on it with cached_activations_path=path. Needs every row whole: rows packed
        (the default) and every position kept. Needs the `datasets` package (pip install datasets)."""
        import datasets  # not a dependency of nnt: only this function needs it

        keys = self.keys()
        value = value or (keys[0] if len(keys) == 1 else None)
        if value is None:
            raise ValueError(f"the harvest holds {len(keys)} values ({', '.join(keys)}): name one")
        s = self.manifest["settings"]
        if s["rows"] != "pack" or (s["positions"] and s["positions"] != ["all"]):
            raise ValueError("to_dataset needs whole rows of equal length: harvest with rows packed (the default) "
                             "and without --positions")
        x = self[value]
        if len(x.shape) != 2:
            raise ValueError(f"{value} is {list(x.shape[1:])} per token; SAELens's cache holds [d] vectors")
        T, d = s["context"], x.shape[1]
        hook = hook_name or value
        features = datasets.Features({hook: datasets.Array2D(shape=(T, d), dtype="float32"),
                                      "token_ids": datasets.Sequence(datasets.Value("int32"), length=T)})
        ids = self.input_ids

        def rows():
            for p in range(len(x.parts)):
                a, b = int(x.offsets[p]), int(x.offsets[p + 1])
                acts = x[a:b].astype(np.float32).reshape(-1, T, d)
                toks = np.asarray(ids[a:b], np.int32).reshape(-1, T)
                for r in range(len(acts)):
                    yield {hook: acts[r], "token_ids": toks[r]}

        ds = datasets.Dataset.from_generator(rows, features=features)
        ds.save_to_disk(path)
        return ds


def open(folder):  # noqa: A001 - nnt.harvest.open, as the issue names it
    """The harvest in `folder` (a Harvest)."""
    return Harvest(folder)
