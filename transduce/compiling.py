"""`train.compile`: the model's forward compiled with `torch.compile` (TorchInductor).

What it is for: a character-level model's update is hundreds of small kernels, and on a GPU
their launches, not the arithmetic, bound the speed (issue 32: the main job's GPU was busy
17% of its training time). Inductor fuses the element-wise work between the matrix
products (the attention's softmax and mix, the copy distribution, the loss's
log-softmax), so fewer kernels run.

What it computes: the same numbers. Inductor draws random numbers with its own generator
unless `fallback_random` is set; it is set here, so dropout draws exactly the masks of the
uncompiled model and a compiled run follows the uncompiled one to rounding
(tests/test_compiling.py: 40 updates of the LSTM with copy, losses within 1e-5 relative;
measured 3e-8 on the transformer).

What it costs: the first updates compile (on the CPU 20 to 50 s for the recipes here; the
compiled code is cached in TorchInductor's cache directory and reused by later runs of the
same model and shapes), and again when the batch shape changes until PyTorch marks the
lengths dynamic; evaluation (dev loss) compiles once more. Greedy and beam search call the
model's `step`, which is not compiled.

Measured on the CPU (`benchmarks/device_training.py --device cpu --compile off,on`, and
side by side in one sitting on the 2-core AMD EPYC of the development machine, 1 thread):
slower, the LSTM of `small/inflection` 694-744 against 807-811 examples/s, the Rios
transformer 108-110 against 121-122; so it is off by default. On a GPU it is not measured
yet: `benchmarks/gpu_check.py` measures it (the `bench` part, compile on and off).

Inductor needs a C++ compiler on the CPU and Triton on a GPU: without one, the run stops
before training with a one-line error.
"""

from __future__ import annotations

import importlib.util
import os
import shutil

import torch
from torch import nn

from transduce.errors import ConfigError


def missing(device: torch.device) -> str | None:
    """Why torch.compile cannot run on `device` here, or None."""
    if device.type == "cuda":
        if importlib.util.find_spec("triton") is None:
            return "torch.compile on a GPU needs Triton (pip install triton)"
        return None
    compilers = [os.environ.get("CXX"), "c++", "g++", "clang++"]
    if not any(c and shutil.which(c) for c in compilers):
        return "torch.compile on the CPU needs a C++ compiler (g++ or clang++) on PATH"
    return None


def compile_forward(model: nn.Module, device: torch.device) -> None:
    """Compile the calls of `model` (its forward; `train.compile`) in place: the module,
    its parameters and its state dict are unchanged, so checkpoints are as without."""
    reason = missing(device)
    if reason is not None:
        raise ConfigError(f"train.compile: {reason}; or set train.compile: false")
    import torch._inductor.config as inductor

    inductor.fallback_random = True  # dropout: the uncompiled model's masks
    model.compile()  # nn.Module.compile: its calls go through torch.compile, in place
