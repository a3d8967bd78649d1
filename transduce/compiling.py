"""`train.compile`: the model's forward compiled with `torch.compile` (TorchInductor).

What it is for: a character-level model's update is hundreds of small kernels, and on a GPU
their launches, not the arithmetic, bound the speed (issue 32: the main job's GPU was busy
17% of its training time). Inductor fuses the element-wise work between the matrix
products (the attention's softmax and mix, the copy distribution, the loss's
log-softmax), so fewer kernels run.

What it computes: the same numbers. Inductor draws random numbers with its own generator
unless `fallback_random` is set; it is set here, so dropout draws exactly the masks of the
uncompiled model and a compiled run follows the uncompiled one to rounding
(tests/test_compiling.py: 40 updates of the LSTM with copy and of the transformer, losses
within 1e-5 relative; the same to 5 decimals over 330 updates of `small/inflection` and
60 of the main job's LSTM).

What it costs: the first updates compile (on 2 CPU cores 20 to 60 s per model from a cold
cache, 5 to 15 s once TorchInductor's cache directory holds the same model's code), and
again when the batch shape changes until PyTorch marks the lengths dynamic; evaluation
(dev loss) compiles once more. With input feeding the decoder's loop over the target is
unrolled, so each target length compiles anew until PyTorch's limit of recompilations,
after which those calls run uncompiled (slower to start, not faster). Greedy and beam
search call the model's `step`, which is not compiled.

Measured on the CPU (`benchmarks/device_training.py --device cpu --compile off,on`, and
side by side in one sitting on the 2-core AMD EPYC of the development machine, 1 thread):
slower, the LSTM of `small/inflection` 694-744 against 807-811 examples/s, the Rios
transformer 108-110 against 121-122; quiet, at 2 threads (`benchmarks/train_throughput.py
--compile`, median of 3), compiled over uncompiled 1.07 for the benchmark LSTM at batch 20
(within the spread of the runs), 0.97 at batch 256, 0.82 in bf16, 0.88 for the
transformer at batch 400; so it is off by default. On a GPU it is not measured
yet: `benchmarks/gpu_check.py` runs the main job with it (its `compile` part, beside the
`main` part without), and `benchmarks/device_training.py --compile off,on` compares the
two side by side.

Inductor needs a C++ compiler on the CPU and Triton on a GPU: without one, the run stops
before training with a one-line error. Its cache keys leave ATEN_CPU_CAPABILITY out: after
changing that variable, point TORCHINDUCTOR_CACHE_DIR elsewhere (seen here: code cached
without it failed to build under `default`; the tests keep a cache per setting).
"""

from __future__ import annotations

import os
import shutil

import torch
from torch import nn

from transduce.errors import ConfigError


def missing(device: torch.device) -> str | None:
    """Why torch.compile cannot run on `device` here, or None: asked of Inductor itself
    (the compiler it would call, $CXX or g++; Triton and a GPU it supports)."""
    if device.type == "cuda":
        if not triton_runs():
            return "torch.compile on a GPU needs Triton and a GPU it supports (capability 7.0+)"
        return None
    compiler = cpu_compiler()
    if shutil.which(compiler) is None and not os.path.isfile(compiler):
        return f"torch.compile on the CPU needs a C++ compiler ($CXX or g++): {compiler} not found"
    return None


def triton_runs() -> bool:
    """Whether Inductor can generate GPU code here (Triton, and a GPU it supports)."""
    try:
        from torch.utils._triton import has_triton
    except ImportError:  # another torch's layout: is Triton installed at all
        import importlib.util

        return importlib.util.find_spec("triton") is not None
    return bool(has_triton())


def cpu_compiler() -> str:
    """The C++ compiler Inductor calls on the CPU ($CXX, else g++ on Linux)."""
    try:
        from torch._inductor import cpp_builder

        return str(cpp_builder.get_cpp_compiler())
    except (ImportError, AttributeError, RuntimeError, OSError):  # another torch's layout
        return os.environ.get("CXX") or "g++"


def compile_forward(model: nn.Module, device: torch.device) -> None:
    """Compile the calls of `model` (its forward; `train.compile`) in place: the module,
    its parameters and its state dict are unchanged, so checkpoints are as without."""
    reason = missing(device)
    if reason is not None:
        raise ConfigError(f"train.compile: {reason}; or set train.compile: false")
    # fallback_random for this model's graphs only: dropout draws the uncompiled masks
    model.compile(options={"fallback_random": True})  # nn.Module.compile: in place
