"""bench_transformers.py - the baseline side of the CPU benchmark (bench/run.py drives it):
transformers' eager forward on the same checkpoint, dtype, prompts and thread count as
bench_nnt, and the matrix-product FLOPs of one prefill (counted by torch's FlopCounterMode on
this reference forward). Prints one JSON object on stdout.

    python bench_transformers.py --model DIR --dtype fp32|bf16 [--prefill 128,512] [--decode 16]
                                 [--decode-prompt T] [--flops 0|1] [--repeats 3] [--threads 2]

Decoding follows a prompt of --decode-prompt tokens (default: the first prefill length); --decode 0
skips it, --flops 0 skips counting the FLOPs. Times are wall-clock seconds, best of --repeats runs
after one warm-up, like bench_nnt. The JSON names the instruction set torch's own kernels use
(ATEN_CPU_CAPABILITY can lower it; ONEDNN_MAX_CPU_ISA and MKL_ENABLE_INSTRUCTIONS lower oneDNN's
and MKL's).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

import torch


def tokens(n: int, vocab: int, seed: int = 12345) -> list[int]:
    """The same pseudo-random ids as bench_nnt's make_tokens (a 32-bit LCG)."""
    out = []
    for _ in range(n):
        seed = (seed * 1664525 + 1013904223) & 0xFFFFFFFF
        out.append(1 + (seed >> 8) % (vocab - 1))
    return out


def best_of(repeats: int, fn) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--dtype", choices=("fp32", "bf16"), required=True)
    ap.add_argument("--prefill", default="128,512")
    ap.add_argument("--decode", type=int, default=16)
    ap.add_argument("--decode-prompt", type=int, default=0)
    ap.add_argument("--flops", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    from transformers import AutoModelForCausalLM  # after the thread settings

    dtype = torch.float32 if args.dtype == "fp32" else torch.bfloat16
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, attn_implementation="eager")
    model.eval()
    load_s = time.perf_counter() - t0
    vocab = model.config.vocab_size
    lengths = [int(x) for x in args.prefill.split(",")]
    prompt = args.decode_prompt or lengths[0]
    ids = torch.tensor([tokens(max(lengths + [prompt]), vocab)], dtype=torch.long)
    result: dict = {"tool": "transformers", "model_type": model.config.model_type, "threads": args.threads,
                    "torch": torch.__version__, "load_s": round(load_s, 3), "dtype": args.dtype}
    try:
        result["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except AttributeError:
        pass
    result["isa_env"] = {k: os.environ[k] for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")
                         if k in os.environ}
    import transformers

    result["transformers"] = transformers.__version__
    with torch.inference_mode():
        model(ids[:, : lengths[0]], use_cache=False)  # warm-up
        prefill = {}
        for T in lengths:
            dt = best_of(args.repeats, lambda: model(ids[:, :T], use_cache=False))
            prefill[str(T)] = {"seconds": round(dt, 4), "tokens_per_s": round(T / dt, 2)}
            print(f"transformers prefill {T}: {dt:.3f} s", file=sys.stderr, flush=True)
        result["prefill"] = prefill

        def generate(n: int):
            model.generate(ids[:, :prompt], max_new_tokens=n, min_new_tokens=n, do_sample=False,
                           pad_token_id=0, eos_token_id=None)

        if args.decode > 0:
            # generating 1 + n tokens minus generating 1, best of each; the two alternate, as in
            # bench_nnt, so that a slow spell of the machine falls on both
            g1 = gn = float("inf")
            for _ in range(args.repeats):
                g1 = min(g1, best_of(1, lambda: generate(1)))
                gn = min(gn, best_of(1, lambda: generate(1 + args.decode)))
            result["decode"] = {"prompt": prompt, "tokens": args.decode, "seconds": round(gn - g1, 4),
                                "tokens_per_s": round(args.decode / (gn - g1), 3)}
        result["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)

        # matrix-product FLOPs of each prefill, counted on this model with its experts computed one
        # by one (routed experts count only for the tokens routed to them): torch's flop counter
        # does not see the grouped product the default experts implementation uses on the CPU
        from torch.utils.flop_counter import FlopCounterMode

        result["experts_implementation"] = getattr(model.config, "_experts_implementation", None)
        try:
            model.set_experts_implementation("eager")
        except (AttributeError, ValueError):
            pass

        flops = {}
        for T in lengths if args.flops else []:
            counter = FlopCounterMode(display=False)
            with counter:
                model(ids[:, :T], use_cache=False)
            flops[str(T)] = counter.get_total_flops()
        result["prefill_matmul_flops"] = flops
    result["weights_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters()) + sum(
        b.numel() * b.element_size() for b in model.buffers())
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
