"""run_release.py - `bench/run.py --layout release`: nnt on the checkpoints as the releases ship them,
against transformers on the same weights, with the targets of that benchmark checked.

For each family, make_models.py --layout release writes one random mid-size model three times:
release/ in the release's own layout and encoding (MiniMax-M2 FP8 block-scaled, MiMo-V2-Flash FP8
with per-head key/value scales, DeepSeek-V4 FP8 with FP4 routed experts, Kimi-Linear BF16), and
fp32/ and bf16/ holding what release/ decodes to in transformers' layout. check_release.py first
confirms that nnt on release/ and transformers on fp32/ give the same logits (--no-check skips it).
Then, each in its own process with the same threads and token ids:
  - transformers (bench_transformers.py) on bf16/ in bfloat16 - the way it runs these checkpoints
    on a CPU - prefill and decode, and on fp32/ in float32, prefill (and decode unless
    --no-hf-fp32-decode); on an AVX-512 CPU, again with torch, oneDNN and MKL held to AVX2
    (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA, MKL_ENABLE_INSTRUCTIONS) as the baseline of the AVX2
    rows, unless --no-avx2-baseline;
  - nnt (build/bench_nnt) on release/ with `precision = f32` and `precision = bf16` in the
    family's INI section, on the kernels `isa = auto` picks and, when that is AVX-512, again with
    `isa = avx2` in [backend.cpu].
It reports, per family and row, prefill tok/s at --prefill tokens, decode tok/s, peak RSS against
the checkpoint's bytes on disk plus the caches, and the decode ceiling: the measured read rate over
the bytes one decode step reads from the release files as stored (FP8/FP4 codes with their scale
tensors; the embedding's one row, and tid2eid's; top_k / n_experts of the routed experts; every
other tensor once). The report, bench/results/<date>-<commit>-release.md, states every target with
the measured value and PASS/FAIL, the CPU and its flags, the commands, per-step times and peak
memory, bench_gemm's tables when build/bench/gemm/bench_gemm exists, and the raw JSON.

    python bench/run.py --layout release [--families a,b] [--scale mid|small] [--keep]
        [--prefill 512] [--decode 16] [--decode-prompt 128] [--repeats 3] [--threads 2]
        [--no-avx2-baseline] [--no-hf-fp32-decode] [--no-gemm] [--no-check] [--build DIR] [--models DIR]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import cpuinfo  # bench/cpuinfo.py: the CPU line
import run as common  # bench/run.py: checkpoint_bytes, machine, commit

ROOT = common.ROOT
FAMILIES = common.FAMILIES
NAMES = {"minimax_m2": "MiniMax-M2", "mimo_v2_flash": "MiMo-V2-Flash", "kimi_linear": "Kimi-Linear",
         "deepseek_v4": "DeepSeek-V4"}
ENCODING = {"minimax_m2": "FP8 e4m3, 128x128 F32 scales", "mimo_v2_flash": "FP8 e4m3, 128x128 F32 scales, "
            "per-head k/v on full blocks", "deepseek_v4": "FP8 e4m3 (E8M0 128x128) + FP4 e2m1 experts (E8M0 per 32)",
            "kimi_linear": "BF16"}
# torch, oneDNN and MKL held to AVX2: the transformers baseline of an AVX2-only CPU
AVX2_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
RSS_FACTOR, DECODE_VS_HF, DECODE_VS_CEILING, PREFILL_F32, PREFILL_BF16 = 1.15, 2.0, 0.6, 1.5, 1.0


def cpu_flags() -> tuple[str, set[str]]:
    """The processor's name (with family and model numbers) and every flag it has (bench/cpuinfo.py)."""
    return cpuinfo.read()


def has_avx512(flags: set[str]) -> bool:
    """nnt's cpu backend takes its AVX-512 kernels with F, BW, VL and DQ."""
    return {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags


class Step:
    """One child process: its command, wall time, peak resident memory and exit status."""

    def __init__(self, label: str, cmd: list, env: dict, timeout: float):
        self.label, self.cmd = label, [str(c) for c in cmd]
        print(f"$ {' '.join(self.cmd)}", file=sys.stderr, flush=True)
        self.load = [os.getloadavg()[0]]  # the machine's load around the step: others' work shows here
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            t0 = time.monotonic()
            proc = subprocess.Popen(self.cmd, stdout=out, stderr=err, env=env)
            timer = threading.Timer(timeout, proc.kill)
            timer.start()
            try:
                _, status, usage = os.wait4(proc.pid, 0)  # the child's own rusage: its peak RSS
            finally:
                timer.cancel()
            proc.returncode = os.waitstatus_to_exitcode(status)
            self.seconds = time.monotonic() - t0
            self.peak_rss_mib = usage.ru_maxrss / 1024.0
            self.status = proc.returncode
            out.seek(0)
            err.seek(0)
            self.stdout, self.stderr = out.read(), err.read()
        self.timed_out = self.seconds >= timeout
        self.load.append(os.getloadavg()[0])
        print(f"  {label}: {self.seconds:.0f} s, peak RSS {self.peak_rss_mib:.0f} MiB, status {self.status}",
              file=sys.stderr, flush=True)

    def ok(self) -> bool:
        return self.status == 0 and not self.timed_out

    def json(self) -> dict:
        if not self.ok():
            tail = self.stderr.strip().splitlines()[-6:]
            why = "timed out" if self.timed_out else f"exit status {self.status}"
            raise RuntimeError(f"{self.label}: {why}: " + " | ".join(tail))
        return json.loads(self.stdout)

    def record(self) -> dict:
        return {"step": self.label, "command": " ".join(self.cmd), "seconds": round(self.seconds, 1),
                "peak_rss_mib": round(self.peak_rss_mib, 1), "status": self.status,
                "load_before_after": [round(x, 2) for x in self.load]}


def step_bytes(d: Path) -> tuple[float, dict]:
    """Bytes one decode step reads from the release files, as stored: the embedding's (and the hash
    table's) one row, top_k / n_experts of every routed expert tensor (codes and scales alike), every
    other tensor once. Also the bytes by kind."""
    cfg = json.loads((d / "config.json").read_text())
    n_exp = next(cfg[k] for k in ("n_routed_experts", "num_local_experts", "num_experts") if cfg.get(k))
    top_k = next(cfg[k] for k in ("num_experts_per_tok", "num_experts_per_token") if cfg.get(k))
    total, kinds = 0.0, {}
    for f in sorted(d.glob("*.safetensors")):
        with open(f, "rb") as fh:
            header = json.loads(fh.read(int.from_bytes(fh.read(8), "little")))
        for name, e in header.items():
            if name == "__metadata__":
                continue
            size = e["data_offsets"][1] - e["data_offsets"][0]
            if name.endswith(("embed_tokens.weight", "tid2eid")) or name == "embed.weight":
                size /= e["shape"][0]  # one row a token
                kind = "embedding / hash row"
            elif ".experts." in name and "shared" not in name:
                size *= top_k / n_exp
                kind = "routed experts"
            else:
                kind = "rest"
            kind += f" {e['dtype']}"
            kinds[kind] = kinds.get(kind, 0) + size
            total += size
    return total, kinds


def write_ini(args, precision: str, isa: str) -> Path:
    """build/bench-release-<isa>-<precision>.ini: nnt's INI with the thread count, `precision` in
    every family section and `isa` in [backend.cpu]."""
    lines, out = (args.build / "nnt.ini").read_text().splitlines(), []
    section = None
    for line in lines:
        stripped = line.strip()
        if section == "backend.cpu" and stripped.split("=")[0].strip() in ("threads", "isa"):
            continue
        if section and section.startswith("family.") and stripped.split("=")[0].strip() == "precision":
            continue
        out.append(line)
        if stripped.startswith("[") and stripped.endswith("]"):
            section = stripped[1:-1].strip()
            if section.startswith("family."):
                out.append(f"precision = {precision}")
            elif section == "backend.cpu":
                out += [f"threads = {args.threads}", f"isa = {isa}"]
    if "[backend.cpu]" not in (line.strip() for line in lines):
        out += ["", "[backend.cpu]", f"threads = {args.threads}", f"isa = {isa}"]
    ini = args.build / f"bench-release-{isa}-{precision}.ini"
    ini.write_text("\n".join(out) + "\n")
    return ini


def measure_family(fam: str, args, env: dict, avx512: bool, log: list) -> dict:
    """Every measurement of one family; the steps' records are appended to log."""
    d = args.models / f"{fam}-{args.scale}-release"
    res: dict = {"family": fam, "dir": str(d)}
    if not (d / "bf16" / "config.json").exists() or not (d / "release" / "model.safetensors.index.json").exists():
        shutil.rmtree(d, ignore_errors=True)
        st = Step(f"{fam}: make_models", [sys.executable, ROOT / "bench" / "make_models.py", fam, d, "--scale",
                                          args.scale, "--layout", "release"], env, args.timeout)
        log.append(st.record())
        if not st.ok():
            raise RuntimeError(f"make_models: status {st.status}: " + " | ".join(st.stderr.strip().splitlines()[-6:]))
    res["checkpoint_bytes"] = common.checkpoint_bytes(d / "release")
    res["hf_fp32_bytes"] = common.checkpoint_bytes(d / "fp32")
    res["hf_bf16_bytes"] = common.checkpoint_bytes(d / "bf16")
    res["step_bytes"], res["step_bytes_by_kind"] = step_bytes(d / "release")
    if args.check:  # nnt on release/ and transformers on fp32/ give the same logits
        st = Step(f"{fam}: check_release", [sys.executable, ROOT / "bench" / "check_release.py", d, "--nnt",
                                            args.build / "nnt", "--config", write_ini(args, "f32", "auto")], env,
                  args.timeout)
        log.append(st.record())
        lines = st.stdout.strip().splitlines()
        res["check"] = json.loads(lines[-1]) if st.status in (0, 1) and lines else {"error": st.stderr.strip()[-500:]}
        res["check"]["passed"] = st.status == 0

    T = args.prefill
    hf_common = ["--prefill", T, "--decode-prompt", args.decode_prompt, "--repeats", args.repeats, "--threads",
                 args.threads, "--flops", 0]
    baselines = [("", env)]
    if avx512 and args.avx2_baseline:
        baselines.append(("avx2", dict(env, **AVX2_ENV)))
    res["transformers"] = {}
    for tag, benv in baselines:
        for dt in ("bf16", "fp32"):
            decode = args.decode if dt == "bf16" or args.hf_fp32_decode else 0
            key = dt + (f"-{tag}" if tag else "")
            st = Step(f"{fam}: transformers {key}", [sys.executable, ROOT / "bench" / "bench_transformers.py", "--model",
                                                      d / dt, "--dtype", dt, "--decode", decode] + hf_common, benv,
                      args.timeout)
            log.append(st.record())
            res["transformers"][key] = st.json()

    isas = ["auto"] + (["avx2"] if avx512 else [])
    res["nnt"] = {}
    for isa in isas:
        for prec in ("f32", "bf16"):
            ini = write_ini(args, prec, isa)
            st = Step(f"{fam}: nnt isa={isa} precision={prec}",
                      [args.build / "bench_nnt", "--config", ini, "--model", d / "release", "--prefill", T, "--decode",
                       args.decode, "--decode-prompt", args.decode_prompt, "--repeats", args.repeats, "--threads",
                       args.threads, "--tracing", 0], env, args.timeout)
            log.append(st.record())
            res["nnt"][f"{isa}/{prec}"] = st.json()
    return res


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else "PASS" if ok else "FAIL"


def targets(res: dict, args, avx512: bool, bf16_hw: bool) -> list[dict]:
    """The issue's targets for one family, each with its measured value and verdict."""
    fam, T = res["family"], str(args.prefill)
    rows = []
    if "check" in res:
        c = res["check"]
        rows.append({"family": fam, "row": "nnt precision = f32 on release/, transformers fp32 on fp32/",
                     "target": "same weights: the logits agree (check_release.py, |diff| <= 1e-3)",
                     "measured": (f"max |diff| {c['max_abs_diff']:.2g} (logits up to {c['max_abs_logit']:.2g}), "
                                  f"argmax agreement {c['argmax_agreement']:.0%}") if "max_abs_diff" in c else
                                 f"check failed: {c.get('error', '?')}",
                     "verdict": verdict(c["passed"])})
    hf = res["transformers"]
    read = max(r["read_gbs"] for r in res["nnt"].values())
    ceiling = read * 1e9 / res["step_bytes"]
    res["decode_ceiling"], res["read_gbs"] = ceiling, read
    ckpt = res["checkpoint_bytes"] / 2**20
    for key, r in res["nnt"].items():
        isa, prec = key.split("/")
        kernels = r.get("isa_kernels", isa)
        base = "-avx2" if kernels == "avx2" and avx512 and f"bf16-avx2" in hf else ""
        label = f"{kernels} ({'isa = ' + isa if isa != 'auto' else 'auto'}), precision = {prec}"
        hb, hf32 = hf["bf16" + base], hf["fp32" + base]
        against = "transformers" + (" held to AVX2" if base else "")
        cache = r["session_cache"]["cache_mib"]
        allowed = RSS_FACTOR * ckpt + cache
        rows.append({"family": fam, "row": label, "target": f"peak RSS <= {RSS_FACTOR} x checkpoint + caches",
                     "measured": f"{r['peak_rss_mib']:.0f} MiB = {(r['peak_rss_mib'] - cache) / ckpt:.2f} x "
                                 f"{ckpt:.0f} MiB + {cache:.0f} MiB caches (allowed {allowed:.0f} MiB)",
                     "verdict": verdict(r["peak_rss_mib"] <= allowed)})
        dec, dec_hf = r["decode"]["tokens_per_s"], hb["decode"]["tokens_per_s"]
        note = " (BF16 checkpoint: the issue sets this for FP8)" if fam == "kimi_linear" else ""
        # decode time is generating 1 + n tokens minus generating 1; on a busy machine the
        # difference can come out negative, and then there is no measurement to judge
        bad = [who for who, v in (("nnt", dec), ("transformers", dec_hf)) if v <= 0]
        invalid = f"not measured: {' and '.join(bad)} decode time <= 0 (the machine was busy; run again)"
        rows.append({"family": fam, "row": label, "target": f"decode >= {DECODE_VS_HF:g}x {against} bf16{note}",
                     "measured": invalid if bad else f"{dec / dec_hf:.2f}x ({dec:.2f} vs {dec_hf:.2f} tok/s)",
                     "verdict": verdict(None if bad else dec >= DECODE_VS_HF * dec_hf)})
        rows.append({"family": fam, "row": label, "target": f"decode >= {DECODE_VS_CEILING:.0%} of the encoded-bytes "
                                                            f"ceiling{note}",
                     "measured": invalid if dec <= 0 else f"{dec / ceiling:.0%} ({dec:.2f} of {ceiling:.2f} tok/s)",
                     "verdict": verdict(None if dec <= 0 else dec >= DECODE_VS_CEILING * ceiling)})
        pre = r["prefill"][T]["tokens_per_s"]
        if prec == "f32":
            ref = hf32["prefill"][T]["tokens_per_s"]
            rows.append({"family": fam, "row": label, "target": f"prefill {T} >= {PREFILL_F32:g}x {against} fp32",
                         "measured": f"{pre / ref:.2f}x ({pre:.1f} vs {ref:.1f} tok/s)",
                         "verdict": verdict(pre >= PREFILL_F32 * ref)})
        else:
            ref = hb["prefill"][T]["tokens_per_s"]
            applies = bf16_hw and kernels == "avx512"
            why = "" if applies else (" (set for AVX512-BF16 hardware: these kernels do not use it)" if bf16_hw else
                                      " (set for AVX512-BF16 hardware: this CPU lacks it)")
            rows.append({"family": fam, "row": label, "target": f"prefill {T} >= {PREFILL_BF16:g}x {against} bf16{why}",
                         "measured": f"{pre / ref:.2f}x ({pre:.1f} vs {ref:.1f} tok/s)",
                         "verdict": verdict(pre >= PREFILL_BF16 * ref) if applies else "n/a"})
    return rows


def tables(results: list[dict], args) -> str:
    T = str(args.prefill)
    out = [f"| family | encoding | run | prefill {T} tok/s | decode tok/s | peak RSS MiB | held (mapped + allocated) MiB "
           f"| caches MiB |", "|---|---|---|---|---|---|---|---|"]
    for res in results:
        fam = res["family"]
        for key, r in res["transformers"].items():
            dec = r.get("decode", {}).get("tokens_per_s")
            dec = "-" if dec is None else f"{dec:.2f}" if dec > 0 else f"invalid ({dec:.2f})"
            out.append(f"| {NAMES[fam]} | {ENCODING[fam]} | transformers {key} ({r.get('cpu_capability', '?')}) "
                       f"| {r['prefill'][T]['tokens_per_s']:.1f} | {dec} "
                       f"| {r['peak_rss_mib']:.0f} | - | - |")
        for key, r in res["nnt"].items():
            isa, prec = key.split("/")
            m = r["memory"]
            out.append(f"| {NAMES[fam]} | {ENCODING[fam]} | nnt {r.get('isa_kernels', isa)}"
                       f"{' (auto)' if isa == 'auto' else ''} {prec} | {r['prefill'][T]['tokens_per_s']:.1f} "
                       f"| {r['decode']['tokens_per_s']:.2f} | {r['peak_rss_mib']:.0f} "
                       f"| {m['mapped_bytes'] / 2**20:.0f} + {m['allocated_bytes'] / 2**20:.1f} "
                       f"| {r['session_cache']['cache_mib']:.1f} |")
    out += ["", "| family | release files MiB | transformers fp32 / bf16 files MiB | bytes a decode step reads MiB "
            "| read rate GB/s | decode ceiling tok/s |", "|---|---|---|---|---|---|"]
    for res in results:
        out.append(f"| {NAMES[res['family']]} | {res['checkpoint_bytes'] / 2**20:.0f} | {res['hf_fp32_bytes'] / 2**20:.0f} / "
                   f"{res['hf_bf16_bytes'] / 2**20:.0f} | {res['step_bytes'] / 2**20:.1f} "
                   f"({', '.join(f'{k} {v / 2**20:.1f}' for k, v in sorted(res['step_bytes_by_kind'].items()))}) "
                   f"| {res['read_gbs']:.1f} | {res['decode_ceiling']:.2f} |")
    return "\n".join(out)


def run_gemm(args, env: dict, log: list) -> str:
    exe = next((p for p in (args.build / "bench" / "gemm" / "bench_gemm", args.build / "bench_gemm") if p.exists()), None)
    if exe is None:
        return (f"bench_gemm was not built ({args.build}/bench/gemm/bench_gemm is missing: bench/gemm builds it when "
                f"oneDNN and BLIS are installed, scripts/install-deps.sh --bench).")
    if args.no_gemm:
        return f"bench_gemm exists ({exe}) but was not run (--no-gemm)."
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "gemm.md"
        st = Step("bench_gemm", [exe, "--threads", args.threads, "--out", out], env, args.timeout)
        log.append(st.record())
        if not st.ok():
            return f"`{' '.join(st.cmd)}` failed (status {st.status}): " + " | ".join(st.stderr.strip().splitlines()[-6:])
        text = out.read_text() if out.exists() else st.stdout
    return f"`{' '.join(st.cmd)}` ({st.seconds:.0f} s):\n\n{text.strip()}"


def main() -> int:
    ap = argparse.ArgumentParser(description="nnt against transformers on the release layouts")
    ap.add_argument("--layout", choices=("release",), default="release")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--scale", choices=("mid", "small"), default="mid")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prefill", type=int, default=512, help="prompt length of the prefill measurement")
    ap.add_argument("--decode", type=int, default=16, help="tokens decoded")
    ap.add_argument("--decode-prompt", type=int, default=128, help="prompt the decoded tokens follow")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--build", type=Path, default=ROOT / "build")
    ap.add_argument("--models", type=Path, default=ROOT / "bench" / "models")
    ap.add_argument("--keep", action="store_true", help="keep the checkpoints")
    ap.add_argument("--no-avx2-baseline", dest="avx2_baseline", action="store_false",
                    help="AVX2 rows against transformers as it runs here, not held to AVX2")
    ap.add_argument("--no-hf-fp32-decode", dest="hf_fp32_decode", action="store_false",
                    help="skip transformers' fp32 decode")
    ap.add_argument("--no-gemm", action="store_true", help="do not run bench_gemm even when it is built")
    ap.add_argument("--no-check", dest="check", action="store_false",
                    help="skip comparing nnt's logits on release/ with transformers' on fp32/ (check_release.py)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds any one step may take")
    args = ap.parse_args()
    args.build = args.build.resolve()
    args.models = args.models.resolve()

    if not (args.build / "bench_nnt").exists():
        sys.exit(f"run.py: {args.build / 'bench_nnt'} is missing: build the project first (cmake --build {args.build})")
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS=str(args.threads))
    model_name, flags = cpu_flags()
    avx512, bf16_hw = has_avx512(flags), "avx512_bf16" in flags
    shown = ", ".join(f"{f} {'yes' if f in flags else 'no'}" for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512vl",
                                                                        "avx512dq", "avx512_bf16", "amx_bf16"))
    started = time.monotonic()
    results, checks, failures, log, fam_times = [], [], [], [], {}
    for fam in args.families.split(","):
        t0, n0 = time.monotonic(), len(log)
        try:
            res = measure_family(fam, args, env, avx512, log)
            checks += targets(res, args, avx512, bf16_hw)
            results.append(res)
        except (RuntimeError, OSError, json.JSONDecodeError, KeyError) as e:
            failures.append(f"{fam}: {e}")
            print(f"run.py: {fam} failed: {e}", file=sys.stderr, flush=True)
        if not args.keep:
            shutil.rmtree(args.models / f"{fam}-{args.scale}-release", ignore_errors=True)
        steps = log[n0:]
        fam_times[fam] = {"seconds": round(time.monotonic() - t0, 1),
                          "largest_step_rss_mib": max((s["peak_rss_mib"] for s in steps), default=0)}
    gemm = run_gemm(args, env, log)

    lines = ["| family | nnt run | target | measured | verdict |", "|---|---|---|---|---|"]
    lines += [f"| {NAMES[c['family']]} | {c['row']} | {c['target']} | {c['measured']} | **{c['verdict']}** |"
              for c in checks]
    verdicts = [c["verdict"] for c in checks]
    summary = (f"{verdicts.count('PASS')} PASS, {verdicts.count('FAIL')} FAIL, {verdicts.count('n/a')} not applicable "
               f"of {len(verdicts)} checks")
    if not avx512:
        missing = ", ".join(f for f in ("avx512f", "avx512bw", "avx512vl", "avx512dq") if f not in flags)
        isa_note = (f"AVX-512 rows NOT measured: this CPU lacks {missing}, so nnt's cpu backend has no AVX-512 kernels "
                    f"to run here (isa = auto picks AVX2 - the AVX2 rows are the auto rows); measure them on an AVX-512 "
                    f"machine.")
    else:
        isa_note = ("both instruction sets measured: isa = auto (AVX-512 kernels) and isa = avx2 in [backend.cpu] "
                    "(the AVX2 kernels on this AVX-512 CPU)" + (", the AVX2 rows against transformers held to AVX2 "
                    f"({', '.join(f'{k}={v}' for k, v in AVX2_ENV.items())})" if args.avx2_baseline else
                    ", the AVX2 rows against transformers as it runs here (AVX-512), --no-avx2-baseline"))
    times = "\n".join(f"| {NAMES.get(f, f)} | {t['seconds'] / 60:.1f} min | {t['largest_step_rss_mib'] / 1024:.1f} GiB |"
                      for f, t in fam_times.items())
    steps = "\n".join(f"| {s['step']} | {s['seconds']:.0f} s | {s['peak_rss_mib']:.0f} MiB | {s['status']} "
                      f"| {s['load_before_after'][0]:.1f} / {s['load_before_after'][1]:.1f} |" for s in log)
    commands = "\n".join(s["command"] for s in log)
    hf0 = next((r["transformers"][k] for r in results for k in r["transformers"]), {})
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    not_measured = ("\n\n**Not measured:** " + "; ".join(failures)) if failures else ""
    small_note = ("" if args.scale == "mid" else f"\n- scale {args.scale}: a check of the benchmark itself; at these "
                  "widths fixed costs (the process, thread start-up) dominate and the targets say little")
    report = f"""# nnt vs transformers on the release layouts, CPU

- commit: {common.commit()}
- date: {stamp}
- machine: {model_name}, {os.cpu_count()} cores, {platform.system()} {platform.release()}
- CPU flags: {shown}
- instruction sets: {isa_note}
- threads: {args.threads} (torch.set_num_threads, OMP/OpenBLAS and nnt's INI)
- transformers {hf0.get('transformers', '?')}, torch {hf0.get('torch', '?')}, eager attention; transformers runs
  bf16/ in bfloat16 and fp32/ in float32: the release's weights dequantised in float32 (per key/value head on
  MiMo's full blocks), rounded to bfloat16 for bf16/ - the same weights nnt reads encoded from release/
- checkpoints: `bench/make_models.py FAMILY DIR --scale {args.scale} --layout release` (4 blocks, 32 experts - 16 on
  DeepSeek-V4 -, vocabulary 32768, the released widths; the release's names, config spelling and encodings)
- prefill: {args.prefill} tokens; decode: {args.decode} tokens after a {args.decode_prompt}-token prompt (generating
  1 + {args.decode} tokens minus generating 1); best of {args.repeats} after a warm-up
- nnt: `precision = f32|bf16` in each [family.NAME] section, `isa = auto|avx2` in [backend.cpu]
  (build/bench-release-ISA-PRECISION.ini)
- peak RSS: the nnt process's maximum resident set over loading, the prefills and the decodes (file pages of
  the mapped weights included); checkpoint = the release's safetensors bytes on disk; caches = resident
  memory with a live session of the longest prompt plus the decoded tokens, after its prompt, over resident
  memory just before that session was made (freed heap handed back both times), as bench_nnt measures it
- decode ceiling: the read rate bench_nnt measures (a 1 GiB sum with the same threads; the highest of the
  family's runs) over the bytes one decode step reads from the release files as stored - FP8/FP4 codes and
  their scale tensors, the embedding's one row (and DeepSeek-V4's tid2eid row), top_k / n_experts of the
  routed experts, every other tensor once
- {summary}{small_note}

## Targets

{chr(10).join(lines)}{not_measured}

## Measurements

{tables(results, args) if results else 'none'}

## Time and memory per family

| family | wall time (checkpoints, transformers, nnt) | largest peak RSS of its steps |
|---|---|---|
{times}

Peak RSS of a step is its process's whole life: for nnt that includes the 1 GiB array bench_nnt sums to
measure the read rate after the timed runs (the peak RSS of the targets is taken before it).

The load is the machine's one-minute load average when the step started and ended: with {os.cpu_count()}
cores, values well above {os.cpu_count()} mean other work shared the CPUs and the step's times are not clean.

| step | wall time | peak RSS | status | load before / after |
|---|---|---|---|---|
{steps}

## bench_gemm

{gemm}

## Commands

```
python {' '.join(sys.argv)}
{commands}
```

## Raw measurements

```json
{json.dumps(results, indent=1)}
```
"""
    out_dir = ROOT / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{datetime.date.today().isoformat()}-{common.commit().split('+')[0]}-release.md"
    if args.scale != "mid":
        out = out.with_name(out.stem + f"-{args.scale}.md")
    out.write_text(report)
    print("\n".join(lines) + not_measured)
    print(f"{summary}; {(time.monotonic() - started) / 60:.1f} min\nwrote {out}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
