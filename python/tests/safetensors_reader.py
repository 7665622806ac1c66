"""safetensors_reader.py - reads a safetensors file (8-byte little-endian header length, a JSON
header of dtype/shape/data_offsets per key, then the data) into numpy arrays, so the tests need
no package beyond numpy (BF16 tensors come back as float32 arrays holding the same numbers). Format: the safetensors specification (huggingface/safetensors README)."""

import json
import struct

import numpy as np

_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
           "I8": "i1", "U8": "u1", "BOOL": "?"}


def read(path):
    """{key: numpy array} for every tensor of the file (the __metadata__ entry is skipped)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for key, d in header.items():
        if key == "__metadata__":
            continue
        begin, end = d["data_offsets"]
        if d["dtype"] == "BF16":  # the high half of a float32: widened exactly
            raw = np.frombuffer(data, "<u2", (end - begin) // 2, 8 + n + begin)
            out[key] = (raw.astype(np.uint32) << 16).view(np.float32).reshape(d["shape"])
            continue
        dt = np.dtype(_DTYPES[d["dtype"]])
        out[key] = np.frombuffer(data, dt, (end - begin) // dt.itemsize, 8 + n + begin).reshape(d["shape"])
    return out
