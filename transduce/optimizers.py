"""PyTorch's Adam and RMSprop, without the `torch._dynamo` import that they pay for in
eager mode.

In PyTorch 2.13, `torch.optim.Optimizer`'s `add_param_group`, `zero_grad`, `state_dict`
and `load_state_dict` are wrapped by `torch._disable_dynamo`, which imports TorchDynamo on
a wrapped function's first call, and every optimizer's `step` by
`_use_grad_for_differentiable`, which imports it when called. They keep TorchDynamo from
tracing into the optimizer from a compiled function; training calls the optimizer from
none (`train.compile` compiles the model's forward alone), so here they only cost the
import: 2.3 CPU seconds on the 2-core EPYC
(`python benchmarks/startup.py --training`), about a third of what a short `transduce
train` process spends, paid again by every process that trains (each test-suite run starts
them by the dozen).

The classes here are PyTorch's own optimizers, their update arithmetic and their
`state_dict` format unchanged; only those methods are swapped for the functions under the
wrappers (these and the profiling hook's, `_TORCH_WRAPPERS`, and no other), with
gradients off during `step` as `_use_grad_for_differentiable` does for an optimizer that
is not differentiable. Where a later PyTorch wraps a method in another way, the wrapper
stays, and may import TorchDynamo again: slower, not different.
`tests/test_optimizers.py` checks that the updates and state dicts equal `torch.optim`'s,
that checkpoints move between the two, and that a training process does not import
TorchDynamo.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

# The wrappers that are taken off, by the file and name of their code: TorchDynamo's
# `_disable_dynamo` (`inner`), `_use_grad_for_differentiable` (`_use_grad`) and the profiling
# hook that constructing an optimizer puts on its class's `step` (`profile_hook_step`'s
# `wrapper`). Any other decoration is kept, so a wrapper that a later PyTorch adds for
# another purpose still runs.
_TORCH_WRAPPERS = {
    ("torch", "_compile.py", "inner"),
    ("optim", "optimizer.py", "_use_grad"),
    ("optim", "optimizer.py", "wrapper"),
}


def _unwrapped(method: Callable[..., Any]) -> Callable[..., Any]:
    """`method` without the wrappers of `_TORCH_WRAPPERS` (through the `__wrapped__` that
    `functools.wraps` sets), down to the first layer of another kind."""
    while hasattr(method, "__wrapped__"):
        code = getattr(method, "__code__", None)
        if (
            code is None
            or (*Path(code.co_filename).parts[-2:], code.co_name) not in _TORCH_WRAPPERS
        ):
            break
        method = method.__wrapped__
    return method


def _eager_step(step: Callable[..., Any]) -> Callable[..., Any]:
    """`step` (the function under `_use_grad_for_differentiable`), with gradients recorded
    only for a differentiable optimizer, as that wrapper does."""

    def eager(self: torch.optim.Optimizer, closure: Callable[[], Any] | None = None) -> Any:
        with torch.set_grad_enabled(bool(self.defaults["differentiable"])):
            return step(self, closure)

    return functools.update_wrapper(eager, step)


class _Eager:
    """The methods of `torch.optim.Optimizer` that its TorchDynamo wrappers cover, without
    them; put before the PyTorch class in the bases."""

    add_param_group = _unwrapped(torch.optim.Optimizer.add_param_group)
    zero_grad = _unwrapped(torch.optim.Optimizer.zero_grad)
    state_dict = _unwrapped(torch.optim.Optimizer.state_dict)
    load_state_dict = _unwrapped(torch.optim.Optimizer.load_state_dict)


class Adam(_Eager, torch.optim.Adam):
    """`torch.optim.Adam` (Kingma & Ba 2015, Algorithm 1, as PyTorch computes it; `fused`,
    `foreach` and the rest as there) without the TorchDynamo import (module docstring)."""

    step = _eager_step(_unwrapped(torch.optim.Adam.step))  # type: ignore[assignment]


class RMSprop(_Eager, torch.optim.RMSprop):
    """`torch.optim.RMSprop` without the TorchDynamo import (module docstring)."""

    step = _eager_step(_unwrapped(torch.optim.RMSprop.step))  # type: ignore[assignment]
