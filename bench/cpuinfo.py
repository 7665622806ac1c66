"""cpuinfo.py - the CPU line every benchmark report starts with, read from /proc/cpuinfo.

A virtual machine often names its processor only "AMD EPYC", which says neither the generation
nor how it runs 512-bit instructions (Zen 4 splits them in two halves, Zen 5 does not), so the
line adds the CPU family and model numbers beside the name, and the instruction-set flags that
nnt's kernels choose between.
"""
from __future__ import annotations

import os

# the flags nnt's cpu backend and its peers choose kernels by
FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "avx512vbmi",
         "avx512_vnni", "amx_tile", "amx_bf16")


def read() -> tuple[str, set[str]]:
    """The processor's name with its family and model numbers, and the full set of its flags."""
    name, family, model, flags = "unknown CPU", None, None, set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "model name" and name == "unknown CPU":
                    name = value
                elif key == "cpu family" and family is None:
                    family = value
                elif key == "model" and model is None:
                    model = value
                elif key in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    if family is not None and model is not None:
        name = f"{name} (family {family}, model {model})"
    return name, flags


def describe() -> tuple[str, str]:
    """The processor's name (with family and model) and the kernel-relevant flags it has, space-separated."""
    name, flags = read()
    return name, " ".join(f for f in FLAGS if f in flags)


def cpu_line() -> str:
    """One line for a report: name, family and model, logical CPUs, flags."""
    name, flags = describe()
    return f"{name}; {os.cpu_count()} CPUs; flags: {flags}"


if __name__ == "__main__":
    print(cpu_line())
