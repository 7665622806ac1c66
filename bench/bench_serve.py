"""bench_serve.py - `nnt serve` under load (issue 35's benchmark): N concurrent clients (1, 4, 16,
64 by default) each sending traces to one resident model over loopback, against the same kind of
request run one by one by the nnt command (a process per request, as without a server: the model
loaded each time); throughput and p50/p99 latency per N, how many requests shared a forward, the share of the
time the model's worker was running requests (below 100%: it waited for requests), and
whether every answer is right: each client's requests carry its own edit (a scale of
layers.0.layer_output by a factor of its own) and a prompt of its own, and every answer's last
logits must equal that request run alone through the server (within float32 rounding of another
batch size, 1e-4 relative) - a mixed-up answer would be another request's. Then the server's RSS
over --rss-requests small requests (flat is the target). With --generate-every K, every K-th
request of a client is a greedy generation of --new-tokens tokens instead of a trace (its tokens
must equal its solo run's; generations do not share forwards), in the server's runs and in the
command's. Prints a Markdown report with the CPU.

    python bench/bench_serve.py --model DIR [--config INI] [--clients 1,4,16,64] [--per-client 8]
                                [--tokens 32] [--cli-requests 8] [--rss-requests 10000]
                                [--generate-every 0] [--new-tokens 8]

The model is the mid-size MiniMax-M2 release-layout checkpoint of make_models.py (--layout
release) in the issue; any checkpoint folder works. Targets: throughput with sharing at 16
clients >= 3x the command run one by one; RSS flat over the small requests; no failure and no
mixed-up answer."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from cpuinfo import cpu_line  # noqa: E402  (the report's CPU line, shared by the benchmarks)
sys.path.insert(0, os.path.join(SOURCE, "python"))
CLI = os.path.join(SOURCE, "build", "nnt")


def prompt(client: int, k: int, n: int, vocab: int) -> list[int]:
    rng = np.random.default_rng(1000 * client + k)
    return [int(x) for x in rng.integers(3, min(vocab, 30000), n)]


def factor(client: int) -> float:
    return 0.5 + 0.1 * client


def server_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--config")
    ap.add_argument("--clients", default="1,4,16,64")
    ap.add_argument("--per-client", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--cli-requests", type=int, default=8)
    ap.add_argument("--rss-requests", type=int, default=10000)
    ap.add_argument("--generate-every", type=int, default=0)
    ap.add_argument("--new-tokens", type=int, default=8)
    a = ap.parse_args()
    import nnt

    cfg = ["--config", a.config] if a.config else []
    srv = subprocess.Popen([CLI, "serve", "--model", f"m={a.model}", "--listen", "127.0.0.1:0", "--share", "64",
                            "--queue", "4096", *cfg], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = srv.stdout.readline().split("listening on ")[1].split()[0]
    save = ["logits[:, -1]"]
    try:
        remote = nnt.Remote(url, model="m")
        vocab = remote.vocab_size
        clients = [int(x) for x in a.clients.split(",")]
        def is_gen(k):
            return a.generate_every > 0 and k % a.generate_every == a.generate_every - 1

        def send(r, c, k):
            """The answer to request k of client c: a trace's last logits, or a generation's tokens."""
            edits = [("layers.0.layer_output", "scale", factor(c))]
            if is_gen(k):
                return r.generate([prompt(c, k, a.tokens, vocab)], a.new_tokens, edits=edits, ignore_eos=True).tokens
            return r.trace([prompt(c, k, a.tokens, vocab)], save=save, edits=edits)["logits"]

        # the reference: every request of the largest run, each alone (one client, one at a time)
        ref = {}
        for c in range(max(clients)):
            for k in range(a.per_client):
                ref[c, k] = send(remote, c, k)
        rows = []
        for n in clients:
            lat, bad, failed = [], [], []
            stats = json.loads(urllib.request.urlopen(url + "/v1/stats").read())["models"][0]
            before, busy0 = stats["shared"], stats["busy_seconds"]

            def client(c):
                r = nnt.Remote(url, model="m")
                for k in range(a.per_client):
                    t0 = time.monotonic()
                    try:
                        got = send(r, c, k)
                    except Exception as e:  # noqa: BLE001 - every failure is counted and reported
                        failed.append(f"{type(e).__name__}: {e}")
                        continue
                    lat.append(time.monotonic() - t0)
                    want = ref[c, k]
                    if is_gen(k):  # greedy: the reference's tokens, unless a rounding moved a near tie
                        if not np.array_equal(got, want):
                            other = [key for key, v in ref.items() if key != (c, k) and v.shape == got.shape and
                                     np.array_equal(got, v)]
                            bad.append((c, k, float((got != want).mean()), None, other))
                        continue
                    if not np.allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max())):
                        # another request's answer (a mix-up), or this one's own moved by rounding?
                        other = [key for key, v in ref.items() if key != (c, k) and v.shape == got.shape and
                                 np.allclose(got, v, rtol=1e-4, atol=1e-4 * float(np.abs(v).max()))]
                        bad.append((c, k, float(np.abs(got - want).max() / np.abs(want).max()),
                                    int(got.argmax()) == int(want.argmax()), other))

            t0 = time.monotonic()
            threads = [threading.Thread(target=client, args=(c,)) for c in range(n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            took = time.monotonic() - t0
            stats = json.loads(urllib.request.urlopen(url + "/v1/stats").read())["models"][0]
            shared, busy = stats["shared"] - before, stats["busy_seconds"] - busy0
            done = n * a.per_client - len(failed)
            rows.append((n, done, took, done / took, np.percentile(lat, 50), np.percentile(lat, 99), shared, len(failed),
                         len(bad), bad, failed, busy / took))
        # the command, one process per request
        t0 = time.monotonic()
        for k in range(a.cli_requests):
            ids = " ".join(map(str, prompt(0, k, a.tokens, vocab)))
            how = (["generate", "--max-new-tokens", str(a.new_tokens), "--ignore-eos"] if is_gen(k)
                   else ["trace", "--save", "logits[:, -1]"])
            subprocess.run([CLI, how[0], *cfg, "--model", a.model, "--tokens", ids, *how[1:],
                            "--scale", f"layers.0.layer_output={factor(0)}"], check=True, capture_output=True)
        cli_rate = a.cli_requests / (time.monotonic() - t0)
        # RSS over many small requests
        rss = [server_rss(srv.pid)]
        step = max(a.rss_requests // 10, 1)
        for i in range(a.rss_requests):  # traces, with a generation, a streamed one and a refusal in every 10
            if i % 10 == 3:
                remote.generate([[5, 6, 7]], 2, ignore_eos=True)
            elif i % 10 == 6:
                list(remote.generate_stream([[5, 6, 7]], 2, ignore_eos=True))
            elif i % 10 == 9:
                try:
                    remote.trace([[5, 6, 7]], save=["layers.999.layer_output"])
                except nnt.Error:
                    pass
            else:
                remote.trace([[5, 6, 7]], save=["logits[:, -1]"])
            if (i + 1) % step == 0:
                rss.append(server_rss(srv.pid))
    finally:
        srv.terminate()
        srv.wait()
    print(f"# nnt serve under load ({time.strftime('%Y-%m-%d')})\n")
    print(f"CPU: {cpu_line()}\n")
    mix = (f"; one request in {a.generate_every} a greedy generation of {a.new_tokens} tokens (tokens compared "
           f"with its solo run)" if a.generate_every > 0 else "")
    print(f"model {a.model}; INI {a.config or 'the build'}; traces of {a.tokens} tokens saving logits[:, -1], each "
          f"client its own scale of layers.0.layer_output{mix}; {a.per_client} requests per client\n")
    print("| clients | requests | seconds | requests/s | p50 s | p99 s | in shared forwards | worker busy | failed | wrong |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]:.2f} | {r[3]:.2f} | {r[4]:.3f} | {r[5]:.3f} | {r[6]} | {r[11]:.0%} | {r[7]} | "
              f"{r[8]} |")
    print(f"\nThe command one request per process (model loaded each time): {cli_rate:.2f} requests/s. "
          + ", ".join(f"{r[0]} clients {r[3] / cli_rate:.1f}x" for r in rows) + ".")
    for r in rows:
        for e in r[10][:5]:
            print(f"\n{r[0]} clients: a request failed: {e}")
        for c, k, rel, same_top, other in r[9]:
            how = (f"in {rel:.0%} of its generated tokens" if same_top is None else
                   f"by {rel:.3g} of the largest logit (top token {'the same' if same_top else 'different'})")
            print(f"\n{r[0]} clients: client {c} request {k} differs from its solo run {how}; "
                  + (f"equal to the answers of {other}: A MIX-UP" if other else "equal to no other request's answer"))
    print(f"\nServer RSS over {a.rss_requests} requests of 3 tokens (of every 10: 7 traces, a generation of 2 "
          f"tokens, a streamed one, a refused trace), every {step}: "
          + ", ".join(f"{x / 1048576:.0f}" for x in rss) + " MiB.")


if __name__ == "__main__":
    main()
