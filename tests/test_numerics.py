"""Pinned CPU numerics: the kernel settings every `shapelm` process starts with (x86-64), the
opt-out, and that torch obeys them (shapelm.numerics)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from shapelm.numerics import PINNED_CPU_NUMERICS, is_x86_64, numerics_settings, pin_cpu_numerics


def test_pinned_by_default_kept_where_set_and_off_when_fast(monkeypatch):
    monkeypatch.setattr("shapelm.numerics.is_x86_64", lambda: True)
    env = {}
    settings = pin_cpu_numerics(env)
    assert {k: env[k] for k in PINNED_CPU_NUMERICS} == PINNED_CPU_NUMERICS
    assert settings["mode"] == "pinned" and settings["MKL_CBWR"] == "COMPATIBLE"
    env = {"ATEN_CPU_CAPABILITY": "default"}  # the user's own choice stays
    assert pin_cpu_numerics(env)["ATEN_CPU_CAPABILITY"] == "default"
    env = {"SHAPELM_NUMERICS": "fast"}
    assert pin_cpu_numerics(env) == {"mode": "fast", "machine": numerics_settings(env)["machine"],
                                     **{k: None for k in PINNED_CPU_NUMERICS}}
    monkeypatch.setattr("shapelm.numerics.is_x86_64", lambda: False)  # ARM, Apple: nothing to pin
    assert not any(pin_cpu_numerics({})[k] for k in PINNED_CPU_NUMERICS)


_PROBE = """
import shapelm.cli
try:
    shapelm.cli.main(["shapes", "--help"])
except SystemExit:
    pass
import torch
print(torch.backends.cpu.get_cpu_capability())
"""


@pytest.mark.skipif(not is_x86_64(), reason="the kernel pins are x86-64's")
def test_the_cli_pins_before_torch_loads():
    """`shapelm` sets the pins before any stage imports torch: torch then runs its AVX2 kernels
    (on an AVX-512 machine too); with SHAPELM_NUMERICS=fast, its own choice."""
    base = {k: v for k, v in os.environ.items() if k not in PINNED_CPU_NUMERICS and k != "SHAPELM_NUMERICS"}
    pinned = subprocess.run([sys.executable, "-c", _PROBE], env=base, capture_output=True, text=True,
                            check=True).stdout.split()[-1]
    fast = subprocess.run([sys.executable, "-c", _PROBE], env={**base, "SHAPELM_NUMERICS": "fast"},
                          capture_output=True, text=True, check=True).stdout.split()[-1]
    assert pinned in ("AVX2", "DEFAULT")  # DEFAULT: a machine without AVX2
    assert fast in ("AVX512", "AVX2", "DEFAULT") and (fast != "AVX512" or pinned == "AVX2")
