"""bfloat16 autocast where the device runs it, float32 where it cannot.

On the CPU, PyTorch's bfloat16 LSTM is a oneDNN primitive that exists only where oneDNN
supports bfloat16 on that CPU (measured: yes on the project's Intel machine with AMX and
its AMD Zen 4 with AVX512-BF16; no on an AVX2-only AMD Zen 3). Where it does not,
`nn.LSTM` under bfloat16 autocast fails with "could not create a primitive descriptor for
the LSTM forward propagation primitive". So `train.bf16` and `decode --bf16` are requests:
`use_bf16` answers whether this device honours them, by running a tiny LSTM once, and
the caller falls back to float32 with a warning where it does not.
"""

from __future__ import annotations

import functools
from typing import Any

import torch


@functools.cache
def bf16_works(device_type: str) -> bool:
    """Whether bfloat16 autocast runs on `device_type` ("cpu", "cuda"), LSTMs included."""
    if device_type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    probe = torch.nn.LSTM(4, 4, batch_first=True)
    try:
        with torch.no_grad(), torch.autocast(device_type, dtype=torch.bfloat16):
            probe(torch.zeros(1, 2, 4))
    except RuntimeError:
        return False
    return True


def use_bf16(requested: bool, device: torch.device) -> tuple[bool, str | None]:
    """Whether to autocast to bfloat16, and a warning when a request cannot be honoured."""
    if not requested or bf16_works(device.type):
        return requested, None
    return False, (
        f"bfloat16 was asked for, but this {device.type.upper()} cannot run it"
        + (
            " (oneDNN has no bfloat16 LSTM here, as on AVX2-only CPUs)"
            if device.type == "cpu"
            else ""
        )
        + ": running in float32"
    )


def autocast(device: torch.device, enabled: bool) -> Any:
    """The bfloat16 autocast context on `device` (a no-op context when not `enabled`)."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=enabled)
