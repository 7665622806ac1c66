"""remote.py - nnt.Remote: a model that `nnt serve` holds (docs/server.md), with nnt.Model's methods.
Each call makes the same request document nnt.Model makes, sends it over HTTP (the document, and
its tensors as a safetensors part), and reads the answer's safetensors into numpy arrays, so a
remote result holds the bytes of the local one. Only the standard library and numpy are used.

    remote = nnt.Remote("http://127.0.0.1:8765", token="...")
    out = remote.trace("The cat sat", save=["layers.1.mlp.expert_indices"])

What a local Model does in this process and a server cannot do is refused with nnt.Error: edit
callbacks (Python functions), SAE folders (the server reads no path a request names), torch
output views over nnt's memory (arrays are copies here; pass them to torch.from_numpy)."""

import base64
import json
import os
import struct
import urllib.error
import urllib.parse
import urllib.request

import numpy as np

from . import _request
from ._core import AttributionResult, Error, Generation, PatchResult, SupportRow
from ._request import RequestError, Steer

_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
           "U8": "u1", "BOOL": "?"}


def read_safetensors(data):
    """({key: numpy array}, metadata dict) of safetensors bytes; BF16 widened exactly to float32."""
    if len(data) < 8:
        raise Error(f"the server's answer is {len(data)} bytes, not safetensors")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise Error("the server's answer is cut short (its safetensors header runs past the end)")
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    for key, d in header.items():
        begin, end = d["data_offsets"]
        if d["dtype"] == "BF16":
            raw = np.frombuffer(data, "<u2", (end - begin) // 2, 8 + n + begin)
            out[key] = (raw.astype(np.uint32) << 16).view(np.float32).reshape(d["shape"])
            continue
        dt = np.dtype(_DTYPES[d["dtype"]])
        out[key] = np.frombuffer(data, dt, (end - begin) // dt.itemsize, 8 + n + begin).reshape(d["shape"]).copy()
    return out, meta


def _multipart(doc, tensors):
    """A multipart/form-data body of the parts "request" (JSON) and "tensors" (safetensors)."""
    boundary = "nnt-" + os.urandom(16).hex()
    parts = []
    for name, data, kind in (("request", doc, "application/json"), ("tensors", tensors, "application/octet-stream")):
        parts.append(f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{name}\"\r\n"
                     f"Content-Type: {kind}\r\n\r\n".encode() + data + b"\r\n")
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


class Remote:
    """A model held by `nnt serve` at url ("http://HOST:PORT"). token: the bearer token the server's
    tokens file gives you (None for a server without one). model: the model's name on the server
    (None: the server's only model). timeout: seconds to wait for an answer."""

    def __init__(self, url, token=None, model=None, timeout=600.0):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        names = [m["name"] for m in self.models()]
        if model is None:
            if len(names) != 1:
                raise Error(f"{self.url} holds the models {names}; name one with model=")
            model = names[0]
        if model not in names:
            raise Error(f"{self.url} holds no model named {model!r}; it holds {names}")
        self.name = model
        self._info = next(m for m in self.models() if m["name"] == model)
        self._axes = None

    # ---- HTTP ----

    def _open(self, method, path, body=None, content_type=None, accept=None):
        """The server's response (open; the caller reads and closes it), or nnt.Error."""
        req = urllib.request.Request(self.url + path, data=body, method=method)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        if content_type:
            req.add_header("Content-Type", content_type)
        if accept:
            req.add_header("Accept", accept)
        try:
            return urllib.request.urlopen(req, timeout=self.timeout)
        except urllib.error.HTTPError as e:
            raw, status = e.read(), None
            try:
                err = json.loads(raw)["error"]
                msg, status = err["message"], err.get("status")
            except (ValueError, KeyError, TypeError):
                msg = raw.decode("utf-8", "replace")[:500]
            exc = Error(f"{self.url}: HTTP {e.code}: {msg}", status=status)
            exc.http_status = e.code  # the answer's HTTP status (docs/server.md, "A request")
            raise exc from None
        except urllib.error.URLError as e:
            raise Error(f"{self.url}: cannot reach the server: {e.reason}") from None

    def _call(self, method, path, body=None, content_type=None):
        with self._open(method, path, body, content_type) as r:
            return r.read()

    def _json(self, path):
        return json.loads(self._call("GET", path))

    def _post(self, builder, accept=None):
        """Sends builder's request to the model; the open response."""
        if builder.raw_callbacks:
            raise Error("edit callbacks run Python code in this process; a server cannot call them (use a request "
                        "edit: zero, scale, set, add, steer, ...)")
        if "saes" in builder.doc:
            raise Error("sae: a server reads no folder a request names, so SAEs cannot be attached remotely")
        doc, tensors = builder.encode()
        path = f"/v1/models/{urllib.parse.quote(self.name, safe='')}/request"
        if tensors:
            body, kind = _multipart(doc, tensors)
            return self._open("POST", path, body, kind, accept)
        return self._open("POST", path, doc, "application/json", accept)

    def _run(self, builder):
        """Sends builder's request to the model; (arrays, metadata) of the answer."""
        with self._post(builder) as r:
            return read_safetensors(r.read())

    # ---- what the server says ----

    def models(self):
        """The server's models: [{"name", "family", "architecture", "num_layers", ...}]."""
        return self._json("/v1/models")["models"]

    def stats(self):
        """The server's statistics (docs/server.md)."""
        return self._json("/v1/stats")

    def __str__(self):
        """The module tree, as `nnt print` writes it."""
        return self._call("GET", f"/v1/models/{urllib.parse.quote(self.name, safe='')}/print").decode()

    def __repr__(self):
        return f"nnt.Remote({self.url!r}, model={self.name!r}, family={self._info['family']!r})"

    def print(self, file=None):
        """Writes the module tree to `file` (default: stdout), as nnt.Model.print does."""
        import sys

        (file or sys.stdout).write(str(self))

    def _support_tsv(self):
        return self._call("GET", f"/v1/models/{urllib.parse.quote(self.name, safe='')}/support").decode()

    def support(self):
        """Every standard value per host and block, a list of SupportRow, as nnt.Model.support()."""
        rows = []
        for line in self._support_tsv().splitlines()[1:]:
            c = line.split("\t")
            c += [""] * (9 - len(c))
            rows.append(SupportRow(c[0], int(c[1]), c[2], c[3] == "yes", c[4], c[5], c[6], c[7] == "yes", c[8]))
        return rows

    @property
    def num_layers(self):
        return int(self._info["num_layers"])

    @property
    def vocab_size(self):
        return int(self._info["vocab_size"])

    @property
    def hidden_size(self):
        return int(self._info["hidden_size"])

    # ---- runs ----

    def _seq_axis(self, key, ndim):
        """The seq (or query) axis of a saved value, from the server's support table."""
        if self._axes is None:
            self._axes = {}
            for line in self._support_tsv().splitlines()[1:]:
                f = line.split("\t")
                if len(f) >= 6 and f[3] == "yes":
                    self._axes.setdefault(f[2], f[5].strip("[]").split())
        name = key.split("#")[0].split("@")[0].split(":")[-1].split("[")[0].split(".")[-1]
        axes = self._axes.get(name)
        if axes is None:
            return 1 if ndim >= 2 else None
        for a in ("seq", "query"):
            if a in axes:
                return axes.index(a)
        return None

    def _values(self, arrays, meta, positions):
        out = dict(arrays)
        for key in filter(None, meta.get("none_values", "").split(",")):
            out[key] = None
        if positions is None:
            return out
        for key, arr in out.items():
            ax = None if arr is None else self._seq_axis(key, arr.ndim)
            if ax is None or ax >= arr.ndim:
                continue
            if isinstance(positions, (int, np.integer, slice)):
                out[key] = arr[(slice(None),) * ax + (positions,)]
            else:
                out[key] = np.take(arr, list(positions), axis=ax)
        return out

    def trace(self, prompts, save=(), edits=(), positions=None, output="numpy", add_special=True, grad=(),
              metric=None, metric_positions=None, cotangents=None, sae=None):
        """nnt.Model.trace on the server: {path: numpy array} (None for a value the model leaves
        absent), "grad:PATH" and "metric" when gradients are asked."""
        if output != "numpy":
            raise Error("output: a Remote returns numpy arrays (torch.from_numpy makes tensors of them)")
        try:
            b = _request.trace_request(prompts, save, edits, add_special, sae, grad, metric, metric_positions,
                                       cotangents)
        except RequestError as e:
            raise Error(str(e)) from None
        return self._values(*self._run(b), positions)

    def cache(self, prompts, values="*", edits=(), positions=None, add_special=True):
        """nnt.Model.cache on the server."""
        return self.trace(prompts, save=values, edits=edits, positions=positions, add_special=add_special)

    def steer(self, prompts, layers, vector, factor=1.0, positions=None, save=(), edits=(), **kw):
        """nnt.Model.steer on the server."""
        return self.trace(prompts, save=save, edits=list(edits) + [Steer(layers, vector, factor, positions)], **kw)

    def lens(self, prompts, edits=(), positions=None, add_special=True):
        """nnt.Model.lens on the server: float32 [layers, batch, columns, vocab_size] probabilities."""
        if isinstance(positions, slice):
            raise Error("positions: a Remote takes an int or a list of ints (a slice needs the prompt's length)")
        try:
            b = _request.basic_request("lens", prompts, None, edits, add_special)
            b.section("lens", positions=_request._positions(positions, "positions"), probs=True)
        except RequestError as e:
            raise Error(str(e)) from None
        arrays, _ = self._run(b)
        return arrays["lens_probs"].transpose(1, 0, 2, 3).copy()

    def patch(self, clean, corrupt, metric, value="layers.*.layer_output", positions=None, batch=16, add_special=True):
        """nnt.Model.patch on the server: a PatchResult (forwards is not reported: -1)."""
        try:
            b = _request.patch_request(clean, corrupt, metric, value, positions, batch, add_special)
        except RequestError as e:
            raise Error(str(e)) from None
        a, _ = self._run(b)
        return PatchResult(a["patch_metric"], a["patch_blocks"], a["patch_positions"], float(a["clean_metric"][0]),
                           float(a["corrupt_metric"][0]), -1)

    def attribute(self, clean, corrupt, metric, value="layers.*.layer_output", ig_steps=0, add_special=True):
        """nnt.Model.attribute on the server: an AttributionResult (forwards and backwards: -1)."""
        try:
            b = _request.attribute_request(clean, corrupt, metric, value, ig_steps, add_special)
        except RequestError as e:
            raise Error(str(e)) from None
        a, _ = self._run(b)
        return AttributionResult(a["attr_metric"], a["attr_blocks"], a["attr_positions"], float(a["clean_metric"][0]),
                                 float(a["corrupt_metric"][0]), -1, -1)

    def generate(self, prompts, max_new_tokens, save=(), edits=(), temperature=0.0, top_k=0, top_p=1.0, seed=0,
                 stop_ids=(), ignore_eos=False, add_special=True):
        """nnt.Model.generate on the server: a Generation (tokens, values; text None: decode the
        tokens with nnt.Tokenizer of the same folder where you have it)."""
        try:
            b = _request.generate_request(prompts, max_new_tokens, save, edits, temperature, top_k, top_p, seed,
                                          stop_ids, ignore_eos, add_special, None)
        except RequestError as e:
            raise Error(str(e)) from None
        arrays, meta = self._run(b)
        tokens = arrays.pop("generated_tokens")
        return Generation(tokens, self._values(arrays, meta, None), None)

    def generate_stream(self, prompts, max_new_tokens, save=(), edits=(), temperature=0.0, top_k=0, top_p=1.0,
                        seed=0, stop_ids=(), ignore_eos=False, add_special=True):
        """generate, with each step's tokens as the server picks them (server-sent events): a
        GenerationStream, an iterator of (step, tokens [batch] int32; -1 for a row that stopped)
        whose .result is the Generation once the iteration ends."""
        try:
            b = _request.generate_request(prompts, max_new_tokens, save, edits, temperature, top_k, top_p, seed,
                                          stop_ids, ignore_eos, add_special, None)
        except RequestError as e:
            raise Error(str(e)) from None
        return GenerationStream(self, self._post(b, accept="text/event-stream"))


class GenerationStream:
    """The events of a streamed generation (Remote.generate_stream): iterate for (step, tokens);
    .result holds the Generation after the last step. Leaving early (close(), or dropping the
    stream) closes the connection, and the server stops the generation."""

    def __init__(self, remote, response):
        self._remote, self._r = remote, response
        self.result = None

    def __iter__(self):
        return self

    def _event(self):
        """(name, data) of the next event, or None at the end of the stream."""
        name, data = None, []
        for raw in self._r:
            line = raw.decode("utf-8").rstrip("\r\n")
            if not line:
                if name or data:
                    return name, "\n".join(data)
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
        return None

    def __next__(self):
        if self._r is None:
            raise StopIteration
        ev = self._event()
        if ev is None:
            self.close()
            raise Error(f"{self._remote.url}: the event stream ended without a result")
        name, data = ev
        if name == "tokens":
            d = json.loads(data)
            return d["step"], np.asarray(d["tokens"], dtype=np.int32)
        self.close()
        if name == "result":
            arrays, meta = read_safetensors(base64.b64decode(data))
            tokens = arrays.pop("generated_tokens")
            self.result = Generation(tokens, self._remote._values(arrays, meta, None), None)
            raise StopIteration
        if name == "error":
            err = json.loads(data)["error"]
            raise Error(f"{self._remote.url}: {err['message']}", status=err.get("status"))
        raise Error(f"{self._remote.url}: an event {name!r} this client does not know")

    def close(self):
        if self._r is not None:
            self._r.close()
            self._r = None

    def __del__(self):
        self.close()
