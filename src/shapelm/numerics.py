"""CPU numerics that any x86-64 machine with AVX2 computes bit for bit alike.

torch picks its CPU kernels by what the machine offers: ATen's vectorised kernels (softmax,
norms, reductions, the optimizer's elementwise math) run AVX-512 code where the CPU has it and
AVX2 code where not, and MKL's GEMM picks its own code path per CPU model and vendor. Each
choice rounds differently, so the same seed trains to other bits on another machine. Pinned:

    ATEN_CPU_CAPABILITY=avx2        ATen's AVX2 kernels, also on AVX-512 machines
    MKL_CBWR=COMPATIBLE             MKL's conditional numerical reproducibility, the one branch
                                    MKL honours on AMD and Intel CPUs alike (it answers AVX2
                                    with AUTO on AMD)
    ONEDNN_MAX_CPU_ISA=AVX2         oneDNN's kernels (where torch uses them) at most AVX2

These are read once, when torch loads: :func:`pin_cpu_numerics` sets them in the environment of
the `shapelm` process before any torch import, and so of every process it starts (torchrun,
srun); a value already in the environment is kept. ``SHAPELM_NUMERICS=fast`` leaves torch's own
choice (faster on AVX-512 machines; bits then depend on the machine). With the thread count
pinned too (`shapelm.train.threads`), a CPU run is bitwise equal across x86-64 machines.
On ARM and macOS none of these apply: runs agree within seed noise, not bitwise. GPUs are not
affected (their kernels are another matter; at paper scale only seed-level agreement holds).
"""

from __future__ import annotations

import os
import platform

PINNED_CPU_NUMERICS = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "COMPATIBLE",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}
MODE_VARIABLE = "SHAPELM_NUMERICS"
MODES = ("pinned", "fast")


def numerics_mode(environ=None) -> str:
    """'pinned' (the default) or 'fast', from ``$SHAPELM_NUMERICS``."""
    env = os.environ if environ is None else environ
    mode = env.get(MODE_VARIABLE, "").strip().lower() or "pinned"
    return mode if mode in MODES else "pinned"


def is_x86_64() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


def pin_cpu_numerics(environ=None) -> dict:
    """Put the pinned kernel settings into ``environ`` (default ``os.environ``) unless the mode
    is 'fast' or the machine is not x86-64; returns the settings now in force."""
    env = os.environ if environ is None else environ
    if numerics_mode(env) == "pinned" and is_x86_64():
        for key, value in PINNED_CPU_NUMERICS.items():
            env.setdefault(key, value)
    return numerics_settings(env)


def numerics_settings(environ=None) -> dict:
    """The kernel settings of this process's environment, for provenance records."""
    env = os.environ if environ is None else environ
    return {
        "mode": numerics_mode(env),
        "machine": platform.machine(),
        **{key: env.get(key) for key in PINNED_CPU_NUMERICS},
    }
