"""test_serve.py - `nnt serve` on loopback (docs/server.md): every operation through nnt.Remote
equals the local nnt.Model's result bitwise on each family's fixture checkpoint; a table of
hostile requests each gets its status code and the server answers after every one; tokens are
re-read on SIGHUP; a client that leaves frees its place; SIGTERM lets a request in flight finish."""

import http.client
import json
import os
import signal
import socket
import subprocess
import threading
import time

import numpy as np
import pytest

import nnt
from conftest import CLI, CLI_ENV, EXAMPLE, fixture_dirs
from test_cli_equal import reference_rows

TOKEN = "alice-token-0123456789abcdef"
OTHER = "bob-token-0123456789abcdef01"


def fixture_name(ckpt):
    return os.path.basename(os.path.dirname(ckpt)) + "-" + os.path.basename(ckpt)


class Server:
    """A `nnt serve` process on a free loopback port."""

    def __init__(self, tmp, models, *extra, tokens=((("alice", TOKEN), ("bob", OTHER)))):
        self.tokens_file = os.path.join(tmp, "tokens.txt")
        self.write_tokens(tokens)
        args = [CLI, "serve", "--listen", "127.0.0.1:0", "--tokens", self.tokens_file, *extra]
        for name, d in models:
            args += ["--model", f"{name}={d}"]
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=CLI_ENV)
        line = self.p.stdout.readline()
        if "listening on" not in line:
            self.p.kill()
            raise AssertionError(f"nnt serve did not start: {line}{self.p.stderr.read()}")
        self.url = line.split("listening on ")[1].split()[0]
        self.port = int(self.url.rsplit(":", 1)[1])

    def write_tokens(self, tokens):
        with open(self.tokens_file, "w", encoding="utf-8") as f:
            f.write("# test users\n" + "".join(f"{n} {t}\n" for n, t in tokens))

    def request(self, method, path, body=None, headers=None, token=TOKEN):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        h = dict(headers or {})
        if token:
            h["Authorization"] = f"Bearer {token}"
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data, r

    def healthy(self):
        return self.request("GET", "/v1/health", token=None)[0] == 200

    def stop(self):
        """SIGTERM; the server must drain and exit 0 (under the sanitizers: without a leak report)."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        err = self.p.stderr.read()
        self.p.stdout.close()
        self.p.stderr.close()
        assert self.p.returncode == 0, err


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    models = [("example", EXAMPLE)] + [(fixture_name(d), d) for d in fixture_dirs()]
    s = Server(str(tmp_path_factory.mktemp("serve")), models, "--max-tokens", "4096", "--max-new-tokens", "64",
               "--max-body-mb", "1")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def example_local():
    return nnt.Model(EXAMPLE)


def assert_same(local, remote):
    local = {k: v for k, v in local.items()}
    assert sorted(local) == sorted(remote)
    for k, v in local.items():
        if v is None:
            assert remote[k] is None, k
            continue
        assert remote[k].dtype == v.dtype and remote[k].shape == v.shape, k
        assert np.array_equal(remote[k], v, equal_nan=True), k


@pytest.mark.parametrize("ckpt", fixture_dirs(), ids=fixture_name)
def test_trace_every_value_equals_local(server, ckpt):
    rows = reference_rows(ckpt)
    local = nnt.Model(ckpt).trace(rows, save="*")
    remote = nnt.Remote(server.url, token=TOKEN, model=fixture_name(ckpt)).trace(rows, save="*")
    assert len(remote) > 50
    assert_same(local, remote)


def test_methods_equal_local(server, example_local, example_prompt):
    r = nnt.Remote(server.url, token=TOKEN, model="example")
    m = example_local
    assert r.num_layers == m.num_layers and r.vocab_size == m.vocab_size
    edits = [("layers.1.mlp.expert_weights", "scale", 0.5), ("layers.0.layer_output", "zero")]
    save = ["layers.1.mlp.expert_indices", "logits"]
    assert_same(m.trace(example_prompt, save=save, edits=edits), r.trace(example_prompt, save=save, edits=edits))
    assert_same(m.trace(example_prompt, save=save, positions=-1), r.trace(example_prompt, save=save, positions=-1))
    vec = np.linspace(-1, 1, m.hidden_size).astype(np.float32)  # travels as a safetensors part
    assert_same(m.steer(example_prompt, 1, vec, 2.0, save=save), r.steer(example_prompt, 1, vec, 2.0, save=save))
    assert np.array_equal(m.lens(example_prompt, positions=[-1, 0]), r.lens(example_prompt, positions=[-1, 0]))
    clean, corrupt = [1, 5, 9, 13], [1, 5, 7, 13]
    pl, pr = m.patch(clean, corrupt, "prob:3"), r.patch(clean, corrupt, "prob:3")
    assert np.array_equal(pl.grid, pr.grid) and np.array_equal(pl.blocks, pr.blocks)
    assert (pl.clean_metric, pl.corrupt_metric) == (pr.clean_metric, pr.corrupt_metric)
    al, ar = m.attribute(clean, corrupt, "prob:3"), r.attribute(clean, corrupt, "prob:3")
    assert np.array_equal(al.grid, ar.grid) and np.array_equal(al.blocks, ar.blocks)
    gl = m.generate(example_prompt, 6, save=["layers.1.mlp.expert_indices"], ignore_eos=True)
    gr = r.generate(example_prompt, 6, save=["layers.1.mlp.expert_indices"], ignore_eos=True)
    assert np.array_equal(gl.tokens, gr.tokens)
    assert_same(gl.values, gr.values)
    gl = m.generate([[3, 4, 5]], 5, temperature=0.8, top_k=20, seed=7, ignore_eos=True)
    gr = r.generate([[3, 4, 5]], 5, temperature=0.8, top_k=20, seed=7, ignore_eos=True)
    assert np.array_equal(gl.tokens, gr.tokens)
    assert str(r) == str(m) and r.support() == m.support()
    stats = r.stats()
    assert stats["served"] >= 8 and stats["rss_bytes"] > 0


def test_remote_refuses_what_a_server_cannot_do(server):
    r = nnt.Remote(server.url, token=TOKEN, model="example")
    with pytest.raises(nnt.Error, match="callbacks"):
        r.trace([[1, 2, 3]], edits=[("layers.0.layer_output", lambda v: v)])
    with pytest.raises(nnt.Error, match="sae"):
        r.trace([[1, 2, 3]], sae={"layers.0.layer_output": "/tmp"})
    with pytest.raises(nnt.Error, match="401"):
        nnt.Remote(server.url, token="x" * 20, model="example")


def doc(**fields):
    d = {"nnt_request": 1, "method": "trace", "rows": [{"tokens": [1, 2, 3]}], "saves": ["logits"]}
    d.update(fields)
    return json.dumps(d).encode()


def multipart(parts):
    b = "xyzzy-boundary"
    body = b"".join(f"--{b}\r\nContent-Disposition: form-data; name=\"{n}\"\r\n\r\n".encode() + v + b"\r\n"
                    for n, v in parts) + f"--{b}--\r\n".encode()
    return body, {"Content-Type": f"multipart/form-data; boundary={b}"}


JSON = {"Content-Type": "application/json"}
RUN = "/v1/models/example/request"

HOSTILE = [
    # (name, method, path, body, headers, token, status, words in the message)
    ("no token", "GET", "/v1/models", None, {}, None, 401, "Bearer"),
    ("unknown token", "GET", "/v1/models", None, {}, "y" * 24, 401, "Bearer"),
    ("unknown endpoint", "GET", "/v2/anything", None, {}, TOKEN, 404, "endpoint"),
    ("unknown model", "POST", "/v1/models/nope/request", doc(), JSON, TOKEN, 404, "no model named 'nope'"),
    ("wrong method", "GET", RUN, None, {}, TOKEN, 405, "POST"),
    ("not JSON", "POST", RUN, b"{not json", JSON, TOKEN, 400, "request"),
    ("not an object", "POST", RUN, b"[1, 2]", JSON, TOKEN, 400, "request"),
    ("wrong type", "POST", RUN, doc(saves="logits"), JSON, TOKEN, 400, "saves"),
    ("unknown field", "POST", RUN, doc(surprise=1), JSON, TOKEN, 400, "surprise"),
    ("token id out of range", "POST", RUN, doc(rows=[{"tokens": [1, 10 ** 9]}]), JSON, TOKEN, 400, "rows[0]"),
    ("unknown value", "POST", RUN, doc(saves=["layers.0.nothing"]), JSON, TOKEN, 400, "saves[0]"),
    ("a row from a file", "POST", RUN, doc(rows=[{"file": "/etc/passwd"}]), JSON, TOKEN, 400, "rows[0].file"),
    ("tokens from a file", "POST", RUN, doc(rows=[{"tokens_file": "/etc/hostname"}]), JSON, TOKEN, 400,
     "rows[0].tokens_file"),
    ("a tensor from a file", "POST", RUN,
     doc(edits=[{"op": "set", "path": "layers.0.layer_output", "tensor": {"file": "/etc/passwd", "key": "x"}}]), JSON,
     TOKEN, 400, "edits[0].tensor.file"),
    ("an SAE folder", "POST", RUN, doc(saes=[{"path": "layers.0.layer_output", "dir": "/tmp"}]), JSON, TOKEN, 400,
     "saes[0].dir"),
    ("too many tokens", "POST", RUN, doc(rows=[{"tokens": [1] * 4097}]), JSON, TOKEN, 413, "4097 tokens"),
    ("too many new tokens", "POST", RUN,
     doc(method="generate", generate={"max_new_tokens": 65}, saves=[]), JSON, TOKEN, 413, "max_new_tokens"),
    ("huge Content-Length", "POST", RUN, b"", {"Content-Length": str(1 << 40)}, TOKEN, 413, "at most"),
    ("oversized body", "POST", RUN, b" " * (1 << 20) + doc(), {}, TOKEN, 413, "at most"),
    ("wrong content type", "POST", RUN, doc(), {"Content-Type": "text/plain"}, TOKEN, 415, "Content-Type"),
    ("unknown part", "POST", RUN, *multipart([("request", doc()), ("extra", b"1")]), TOKEN, 400, "extra"),
    ("no request part", "POST", RUN, *multipart([("tensors", b"12345678")]), TOKEN, 400, "request"),
    ("attachment not safetensors", "POST", RUN, *multipart([("request", doc()), ("tensors", b"12345678abc")]), TOKEN,
     400, "attachment"),
    ("empty body", "POST", RUN, b"", JSON, TOKEN, 400, "empty"),
]


def raw_post(port, path, token, body, length=None):
    """A POST written by hand: Content-Length may announce more than is sent, and the server may
    answer and close before the body is all sent (which is then not an error here)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body) if length is None else length}\r\n\r\n").encode()
    try:
        s.sendall(head + body)
    except OSError:
        pass
    got = b""
    while True:
        try:
            chunk = s.recv(65536)
        except OSError:
            break
        if not chunk:
            break
        got += chunk
    s.close()
    return got.decode("latin-1")


@pytest.mark.parametrize("case", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_request(server, case):
    name, method, path, body, headers, token, status, words = case
    if name in ("huge Content-Length", "oversized body"):  # announced or sent past --max-body-mb
        got = raw_post(server.port, path, token, body, headers.get("Content-Length"))
        assert got.startswith("HTTP/1.1 413"), got[:200]
        assert words in got
    else:
        got, data, _ = server.request(method, path, body, headers, token)
        assert got == status, data
        assert words in json.loads(data)["error"]["message"], data
    assert server.healthy()
    assert server.request("POST", RUN, doc(), JSON)[0] == 200


def test_slow_headers_are_cut_and_serving_goes_on(tmp_path):
    s = Server(str(tmp_path), [("example", EXAMPLE)], "--idle-timeout", "1")
    try:
        slow = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        slow.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")  # and never the end of the headers
        t0 = time.monotonic()
        assert s.healthy()  # others are answered meanwhile
        assert slow.recv(100) == b""  # closed by the server after the idle timeout
        assert time.monotonic() - t0 < 8
        slow.close()
    finally:
        s.stop()


def test_tokens_reread_on_sighup(tmp_path):
    s = Server(str(tmp_path), [("example", EXAMPLE)])
    try:
        assert s.request("GET", "/v1/models")[0] == 200
        s.write_tokens([("carol", "carol-token-0123456789abcdef")])
        s.p.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while s.request("GET", "/v1/models")[0] != 401 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.request("GET", "/v1/models")[0] == 401
        assert s.request("GET", "/v1/models", token="carol-token-0123456789abcdef")[0] == 200
        with open(s.tokens_file, "w", encoding="utf-8") as f:
            f.write("carol short\n")  # a file that does not parse: the tokens in force stay
        s.p.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        assert s.request("GET", "/v1/models", token="carol-token-0123456789abcdef")[0] == 200
    finally:
        s.stop()


# A generation that keeps the tiny model's worker busy for many seconds: 16 rows of 4000 new
# tokens (within the default --max-tokens and --max-new-tokens), 12.5 s on a 2-core AMD EPYC at
# 05ec9e2. The tests that need it busy stop it, or let --timeout stop it, long before its end, so
# it is sized well past their timeouts: 8 rows of 3000 tokens took 8.4 s before decoding read the
# key/value cache in place and 4 s after, too close to a 3-second --timeout.
LONG_ROWS, LONG_TOKENS = 16, 4000


def long_generation():
    """A request that keeps the tiny model's worker busy for seconds (LONG_ROWS x LONG_TOKENS)."""
    return doc(method="generate", rows=[{"tokens": [1, 2, 3]}] * LONG_ROWS, saves=[],
               generate={"max_new_tokens": LONG_TOKENS, "ignore_eos": True})


def wait_stat(s, key, value, seconds=10):
    """Waits until the server's only model reports `key` == value in /v1/stats."""
    deadline = time.monotonic() + seconds
    while json.loads(s.request("GET", "/v1/stats")[1])["models"][0][key] != value:
        assert time.monotonic() < deadline, f"{key} never reached {value}"
        time.sleep(0.02)


def send_open(s, token, body):
    """Sends a request on a connection of its own and leaves it open (the caller closes it)."""
    c = socket.create_connection(("127.0.0.1", s.port), timeout=60)
    c.sendall(f"POST {RUN} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: "
              f"application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    return c


def test_user_limit_queue_limit_and_a_client_that_leaves(tmp_path):
    s = Server(str(tmp_path), [("example", EXAMPLE)], "--user-requests", "1", "--queue", "1")
    try:
        first = send_open(s, TOKEN, long_generation())
        wait_stat(s, "running", 1)
        status, data, _ = s.request("POST", RUN, doc(), JSON)  # alice again, while hers runs
        assert status == 429 and b"alice" in data
        second = send_open(s, OTHER, long_generation())  # bob queues behind it: the queue is full
        wait_stat(s, "queued", 1)
        status, data, r = s.request("POST", RUN, doc(), JSON, token=OTHER)  # the queue (of 1) is full
        assert status == 503 and r.getheader("Retry-After") and b"retry later" in data
        status, data, r = s.request("POST", RUN, doc(), JSON, token=None)  # no token: refused before the queue
        assert status == 401
        second.close()  # bob leaves: his place in the queue is freed
        wait_stat(s, "queued", 0)
        first.close()  # alice leaves while hers runs: its generation is stopped, her count back to 0
        wait_stat(s, "stopped", 1)
        wait_stat(s, "running", 0)
        assert s.request("POST", RUN, doc(), JSON)[0] == 200
    finally:
        s.stop()


def test_co_tenancy_conflicting_edits_in_one_forward(tmp_path, example_local):
    """Six requests with conflicting edits of the same value queue behind a long generation, are
    taken together and run as one forward (the server's statistics say so); each answer equals
    its own request run alone locally (within float32 rounding of another batch size) and holds
    only its own rows."""
    s = Server(str(tmp_path), [("example", EXAMPLE)], "--user-requests", "8", "--share", "16")
    prompts = [[5 + i, 9, 13, 200 - i, 7, 3] for i in range(6)]  # one length: they can share
    edits = [[("layers.0.layer_output", "scale", 0.5 * (i + 2))] if i % 3 else
             [("layers.1.mlp.expert_weights", "zero")] if i % 2 else
             [nnt.Steer(1, np.full(example_local.hidden_size, float(i + 1), np.float32), 1.0)] for i in range(6)]
    save = ["layers.2.layer_output", "logits[:, -1]", "layers.1.mlp.expert_indices"]
    try:
        blocker = send_open(s, OTHER, long_generation())
        wait_stat(s, "running", 1)
        got = {}

        def one(i):
            r = nnt.Remote(s.url, token=TOKEN if i % 2 else OTHER, model="example")
            got[i] = r.trace([prompts[i]], save=save, edits=edits[i])

        threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        wait_stat(s, "queued", 6)
        blocker.close()  # the generation's client leaves; the six are taken together after it
        for t in threads:
            t.join(120)
        stats = json.loads(s.request("GET", "/v1/stats")[1])["models"][0]
        assert stats["shared"] == 6, stats
        for i in range(6):
            alone = example_local.trace([prompts[i]], save=save, edits=edits[i])
            assert sorted(alone) == sorted(got[i])
            for k, v in alone.items():
                assert got[i][k].shape == v.shape and got[i][k].dtype == v.dtype, k
                if v.dtype.kind == "f":
                    np.testing.assert_allclose(got[i][k], v, rtol=1e-5, atol=1e-6 * float(np.abs(v).max()), err_msg=k)
                else:
                    assert np.array_equal(got[i][k], v), k
        # the edits conflict: no two answers are alike
        outs = [got[i]["layers.2.layer_output"] for i in range(6)]
        assert all(not np.allclose(outs[a], outs[b]) for a in range(6) for b in range(a + 1, 6))
    finally:
        s.stop()


def test_co_tenancy_generations_in_one_run(tmp_path, example_local):
    """Four greedy generations with their own edits, two of them streamed, queue behind a long
    generation and run as one generation of their rows (the statistics say so): each answer's
    tokens equal its request's local run, and each stream carries only its own rows' tokens."""
    s = Server(str(tmp_path), [("example", EXAMPLE)], "--user-requests", "8", "--share", "16")
    prompts = [[[5 + i, 9, 13, 200 - i]] if i % 2 else [[5 + i, 9, 13, 200 - i], [7, 7, 8, 8 + i]] for i in range(4)]
    edits = [[("layers.0.layer_output", "scale", 0.4 * (i + 1))] for i in range(4)]
    save = ["logits[:, -1]"]
    try:
        blocker = send_open(s, OTHER, long_generation())
        wait_stat(s, "running", 1)
        got, steps = {}, {}

        def one(i):
            r = nnt.Remote(s.url, token=TOKEN if i % 2 else OTHER, model="example")
            if i < 2:
                stream = r.generate_stream(prompts[i], 5, save=save, edits=edits[i], ignore_eos=True)
                steps[i] = [t for _, t in stream]
                got[i] = stream.result
            else:
                got[i] = r.generate(prompts[i], 5, save=save, edits=edits[i], ignore_eos=True)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        wait_stat(s, "queued", 4)
        blocker.close()
        for t in threads:
            t.join(120)
        stats = json.loads(s.request("GET", "/v1/stats")[1])["models"][0]
        assert stats["shared"] == 4, stats
        for i in range(4):
            alone = example_local.generate(prompts[i], 5, save=save, edits=edits[i], ignore_eos=True)
            assert np.array_equal(got[i].tokens, alone.tokens), i
            assert sorted(got[i].values) == sorted(alone.values)
            for k, v in alone.values.items():
                np.testing.assert_allclose(got[i].values[k], v, rtol=1e-5, atol=1e-6 * float(np.abs(v).max()))
            if i < 2:
                assert np.array_equal(np.stack(steps[i], axis=1), alone.tokens)
    finally:
        s.stop()


def test_generate_stream_equals_local(server, example_local, example_prompt):
    """Each step's tokens arrive as an event before the result; together they are the tokens of
    the local generation, stopped rows as -1, and the result's values are the local ones."""
    r = nnt.Remote(server.url, token=TOKEN, model="example")
    rows = [example_prompt, [3, 4, 5, 6]]
    local = example_local.generate(rows, 6, save=["layers.1.mlp.expert_indices"], ignore_eos=True)
    stop = int(local.tokens[0, 2])  # row 0 stops at its third token
    local = example_local.generate(rows, 6, save=["layers.1.mlp.expert_indices"], stop_ids=[stop], ignore_eos=True)
    s = r.generate_stream(rows, 6, save=["layers.1.mlp.expert_indices"], stop_ids=[stop], ignore_eos=True)
    steps = list(s)
    assert [k for k, _ in steps] == list(range(len(steps))) and len(steps) >= 3
    streamed = np.stack([t for _, t in steps], axis=1)
    assert np.array_equal(streamed, local.tokens[:, :len(steps)]) and streamed[0, 3:].tolist() == [-1] * (len(steps) - 3)
    assert np.array_equal(s.result.tokens, local.tokens)
    assert_same(local.values, s.result.values)
    # a refusal comes before any event, as a status with its JSON error
    status, data, resp = server.request("POST", "/v1/models/example/request", doc(method="generate", rows=[{}], generate={"max_new_tokens": 2}),
                                        {"Content-Type": "application/json", "Accept": "text/event-stream"})
    assert status == 400 and resp.getheader("Content-Type") == "application/json" and b"rows[0]" in data
    with pytest.raises(nnt.Error, match="max_new_tokens"):
        list(r.generate_stream(rows, 100000))


def test_stream_left_or_timed_out_stops_the_generation(tmp_path):
    """A streamed generation whose client closes the connection is stopped at once (the statistics
    count it), and one that runs past --timeout ends with an error event and is stopped too; a
    plain request past --timeout gets 504 and its generation is stopped."""
    s = Server(str(tmp_path), [("example", EXAMPLE)], "--timeout", "3")
    try:
        r = nnt.Remote(s.url, token=TOKEN)
        stream = r.generate_stream([[1, 2, 3]] * LONG_ROWS, LONG_TOKENS, ignore_eos=True)
        for step, tokens in stream:
            if step == 2:
                break
        stream.close()
        wait_stat(s, "stopped", 1)
        t0 = time.monotonic()
        with pytest.raises(nnt.Error, match="time limit"):
            list(r.generate_stream([[1, 2, 3]] * LONG_ROWS, LONG_TOKENS, ignore_eos=True))
        wait_stat(s, "stopped", 2)
        status, data, _ = s.request("POST", RUN, long_generation(), JSON)
        assert status == 504 and b"time limit" in data
        wait_stat(s, "stopped", 3)
        assert time.monotonic() - t0 < 30
        assert s.request("POST", RUN, doc(), JSON)[0] == 200
    finally:
        s.stop()


def test_cli_remote_equals_local(server, tmp_path):
    """nnt trace|lens|generate --remote write the bytes the local command writes to --out, print the
    same saved values and top tokens, and a generation's steps as they come; refusals name why."""
    env = dict(CLI_ENV, NNT_TOKEN=TOKEN)

    def cli(*args, remote=True):
        where = ["--remote", server.url + "/v1/models/example", "--model", EXAMPLE] if remote else ["--model", EXAMPLE]
        return subprocess.run([CLI, *args, *where], capture_output=True, text=True, env=env, timeout=120)

    runs = {"trace": ["trace", "--prompt", "The cat sat", "--save", "layers.1.mlp.expert_indices", "--scale",
                      "layers.0.layer_output=0.5"],
            "lens": ["lens", "--tokens", "1 2 3 4", "--positions", "-1,0"],
            "generate": ["generate", "--prompt", "The cat", "--max-new-tokens", "5", "--ignore-eos", "--save",
                         "logits[:, -1]"]}
    for name, args in runs.items():
        out_r, out_l = str(tmp_path / f"{name}-r.safetensors"), str(tmp_path / f"{name}-l.safetensors")
        r, loc = cli(*args, "--out", out_r), cli(*args, "--out", out_l, remote=False)
        assert r.returncode == 0 and loc.returncode == 0, r.stderr + loc.stderr
        assert open(out_r, "rb").read() == open(out_l, "rb").read(), name
        if name == "trace":
            same = [l for l in loc.stdout.splitlines() if l.startswith(("layers.", "top 5"))]
            assert same and same == [l for l in r.stdout.splitlines() if l.startswith(("layers.", "top 5"))]
        if name == "generate":
            new = next(l for l in loc.stdout.splitlines() if l.startswith("new tokens, row 0:"))
            steps = [l.split(": ")[1] for l in r.stdout.splitlines() if l.startswith("step ")]
            assert new in r.stdout and " ".join(steps) == new.split(": ")[1]
    p = subprocess.run([CLI, "trace", "--remote", server.url, "--tokens", "1 2"], capture_output=True, text=True,
                       env=env, timeout=60)
    assert p.returncode == 1 and "holds" in p.stderr and "/v1/models/NAME" in p.stderr
    p = subprocess.run([CLI, "trace", "--remote", server.url + "/v1/models/example", "--tokens", "1 2"],
                       capture_output=True, text=True, env=dict(CLI_ENV, NNT_TOKEN="wrong-token-0123456789"),
                       timeout=60)
    assert p.returncode == 1 and "HTTP 401" in p.stderr
    p = subprocess.run([CLI, "patch", "--remote", server.url, "--clean", "a", "--corrupt", "b", "--metric", "prob:3"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2 and "--remote is an option of trace, lens and generate" in p.stderr


def test_sigterm_drains_a_request_in_flight(tmp_path):
    s = Server(str(tmp_path), [("example", EXAMPLE)])
    result = {}

    def run():
        body = doc(method="generate", rows=[{"tokens": [1, 2, 3]}] * 8, saves=[],
                   generate={"max_new_tokens": 1000, "ignore_eos": True})
        result["status"] = s.request("POST", RUN, body, JSON)[0]

    t = threading.Thread(target=run)
    t.start()
    wait_stat(s, "running", 1)
    s.p.send_signal(signal.SIGTERM)
    t.join(60)
    assert result.get("status") == 200
    assert s.p.wait(timeout=60) == 0
    s.stop()


def test_listen_and_model_arguments():
    p = subprocess.run([CLI, "serve", "--model", EXAMPLE, "--listen", "0.0.0.0:0"], capture_output=True, text=True,
                       env=CLI_ENV, timeout=60)
    assert p.returncode == 2 and "needs --tokens" in p.stderr
    for listen, words in (("127.0.0.1:70000", "the port is not a number"), ("localhost:80", "names are not looked up")):
        p = subprocess.run([CLI, "serve", "--model", EXAMPLE, "--listen", listen], capture_output=True, text=True,
                           env=CLI_ENV, timeout=60)
        assert p.returncode == 2 and words in p.stderr, p.stderr
    p = subprocess.run([CLI, "serve", "--model", EXAMPLE, "--model", EXAMPLE], capture_output=True, text=True,
                       env=CLI_ENV, timeout=60)
    assert p.returncode == 2 and "two models are named 'tiny-minimax-m2'" in p.stderr and "loaded" not in p.stderr
