"""The numeric precision of training and decoding: float32, or autocast to bfloat16 or
float16, where the device runs it.

`train.precision` is one of `PRECISIONS`:
- `fp32`: float32 everywhere (the paper recipes and the main job pin it): no machine
  trains at a lower precision than another, but the numbers are not the same bit for bit
  on every CPU (ATen's AVX2 and AVX512 kernels round differently; README, precision);
- `bf16`: bfloat16 autocast. On CUDA where the GPU supports it (Ampere and later). On the
  CPU where oneDNN runs a bfloat16 LSTM: measured yes on the project's Intel machine with
  AMX and its AMD Zen 4 with AVX512-BF16, no on an AVX2-only AMD Zen 3, where `nn.LSTM`
  under bfloat16 autocast fails with "could not create a primitive descriptor for the
  LSTM forward propagation primitive";
- `fp16`: float16 autocast with a gradient scaler (`torch.amp.GradScaler`), on CUDA only
  (on the CPU it is slower than float32 and gains nothing);
- `auto` (the default): bf16 on a GPU that supports it, else fp16 on CUDA; on the CPU
  bf16 where the CPU has native bfloat16 arithmetic (AVX512-BF16 or AMX: measured faster
  than float32 on both of the project's machine kinds, e.g. 524 vs 340 examples/s for the
  LSTM at batch 256 on the AMD one), float32 elsewhere.

`choose` turns a request into what runs, and refuses in one line (`ConfigError`) an
explicit request the device cannot honour. Decoding follows the training precision where
the device runs it (`decoding`), falling back to float32 with a warning.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Any

import torch

from transduce import defaults
from transduce.errors import ConfigError

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@functools.cache
def bf16_works(device_type: str) -> bool:
    """Whether bfloat16 autocast runs on `device_type` ("cpu", "cuda"), LSTMs included."""
    if device_type == "cuda":  # native only: before Ampere it is emulated, slow, and
        # cuDNN has no bfloat16 LSTM
        if not torch.cuda.is_available():
            return False
        try:
            return torch.cuda.is_bf16_supported(including_emulation=False)
        except TypeError:  # torch < 2.4: native bfloat16 is compute capability 8 and later
            return torch.cuda.get_device_capability()[0] >= 8
    probe = torch.nn.LSTM(4, 4, batch_first=True)
    try:
        with torch.no_grad(), torch.autocast(device_type, dtype=torch.bfloat16):
            probe(torch.zeros(1, 2, 4))
    except RuntimeError:
        return False
    return True


NATIVE_BF16_ENV = "TRANSDUCE_NATIVE_BF16"  # 0 or 1: what `native_bf16_cpu` answers


def native_bf16_cpu(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this CPU does bfloat16 arithmetic in hardware (the `avx512_bf16` or
    `amx_bf16` flag of Linux's /proc/cpuinfo; False where there is no such file).
    $TRANSDUCE_NATIVE_BF16 (0 or 1) answers instead: `auto` then trains as on another
    kind of CPU (the tests set 0, so that they run the same everywhere)."""
    forced = os.environ.get(NATIVE_BF16_ENV)
    if forced in ("0", "1"):
        return forced == "1"
    return _cpu_flags_have_bf16(cpuinfo)


@functools.cache
def _cpu_flags_have_bf16(cpuinfo: str) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        text = Path(cpuinfo).read_text("ascii", errors="replace")
    except OSError:
        return False
    flags = next((line for line in text.splitlines() if line.startswith("flags")), "")
    return bool({"avx512_bf16", "amx_bf16"} & set(flags.split()))


def choose(requested: str, device: torch.device, key: str = "train.precision") -> str:
    """What `requested` (one of `PRECISIONS`) runs as on `device`: fp32, bf16 or fp16.

    Raises:
        ConfigError: bf16 or fp16 asked for where the device cannot run it (one line
            naming `key`).
    """
    if requested not in PRECISIONS:
        raise ConfigError(f"{key}: one of {', '.join(PRECISIONS)}, not {requested!r}")
    cuda = device.type == "cuda"
    if requested == "auto":
        if cuda:
            return "bf16" if bf16_works("cuda") else "fp16"
        return "bf16" if native_bf16_cpu() and bf16_works("cpu") else "fp32"
    if requested == "fp16" and not cuda:
        raise ConfigError(
            f"{key}: fp16 needs a CUDA device (this run is on the {device.type.upper()}); "
            "use bf16, fp32 or auto"
        )
    if requested == "bf16" and not bf16_works(device.type):
        why = (
            "this GPU has no bfloat16"
            if cuda
            else "oneDNN has no bfloat16 LSTM on this CPU, as on AVX2-only ones"
        )
        raise ConfigError(f"{key}: bf16 cannot run here ({why}); use fp32 or auto")
    return requested


def decoding(trained: str, bf16: bool | None, device: torch.device) -> tuple[str, str | None]:
    """The precision to decode in, and a warning when a wish cannot be honoured.

    `bf16` None decodes as the model was trained (`trained`, what `choose` gave in
    training): bf16 where this device runs it, float32 otherwise (fp16 training decodes
    in float32, which its weights are in)."""
    wanted = (trained == "bf16") if bf16 is None else bf16
    if not wanted:
        return "fp32", None
    if bf16_works(device.type):
        return "bf16", None
    return "fp32", (
        f"bfloat16 was asked for, but this {device.type.upper()} cannot run it"
        + (
            " (oneDNN has no bfloat16 LSTM here, as on AVX2-only CPUs)"
            if device.type == "cpu"
            else ""
        )
        + ": running in float32"
    )


def autocast(device: torch.device, precision: str) -> Any:
    """The autocast context of `precision` on `device` (a no-op context for fp32)."""
    dtype = DTYPES.get(precision)
    return torch.autocast(device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None)


def scaler(device: torch.device, precision: str) -> torch.amp.GradScaler:
    """The gradient scaler of a run: scaling float16 losses so that small gradients do not
    underflow; a pass-through (disabled) in every other precision."""
    return torch.amp.GradScaler(device.type, enabled=precision == "fp16")


def resolve_device(name: str, option: str = "train.device") -> torch.device:
    """The device a user named (cpu, cuda, cuda:N, or auto: CUDA when there is one) as a
    torch device: the one rule of `train.device`, `decode --device` and the Python API.
    A CUDA device where PyTorch sees none is a `ConfigError` naming `option`."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"{option}: {name} requested, but this PyTorch sees no CUDA device; use cpu or auto"
        )
    return torch.device(name)


def limit_gpu_memory(where: torch.device) -> None:
    """On a GPU: at most the fraction $TRANSDUCE_GPU_MEMORY of its memory, where set (cells
    sharing a GPU), for PyTorch's allocator in this process."""
    value = os.environ.get(defaults.GPU_MEMORY_ENV)
    if where.type != "cuda" or not value:
        return
    try:
        fraction = float(value)
    except ValueError:
        fraction = -1.0
    if not 0 < fraction <= 1:
        raise ConfigError(f"${defaults.GPU_MEMORY_ENV}: a fraction in (0, 1], not {value!r}")
    index = where.index if where.index is not None else torch.cuda.current_device()
    torch.cuda.set_per_process_memory_fraction(fraction, index)
