"""`transduce.optimizers`: PyTorch's Adam and RMSprop without the TorchDynamo import.
Their updates and state dicts must equal `torch.optim`'s bit for bit (on the CPU, where
both run the same kernels), checkpoints must move between the two, and a process that
trains must not import `torch._dynamo` (the reason the module exists)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap

import pytest
import torch

from transduce import optimizers

CASES = [
    (optimizers.Adam, torch.optim.Adam, {"lr": 1e-2}),
    (optimizers.Adam, torch.optim.Adam, {"lr": 1e-2, "fused": True, "weight_decay": 0.01}),
    (optimizers.Adam, torch.optim.Adam, {"lr": 1e-2, "foreach": True, "amsgrad": True}),
    (optimizers.RMSprop, torch.optim.RMSprop, {"lr": 1e-2, "alpha": 0.9, "eps": 1e-7}),
]


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))


def train(net: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int) -> None:
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(16, 5, generator=generator)
        y = torch.randn(16, 3, generator=generator)
        optimizer.zero_grad(set_to_none=True)
        ((net(x) - y) ** 2).mean().backward()
        optimizer.step()


def same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


@pytest.mark.parametrize("ours, theirs, kwargs", CASES)
def test_updates_and_state_equal_torch_optim(ours, theirs, kwargs):
    a, b = model(), model()
    mine, reference = ours(a.parameters(), **kwargs), theirs(b.parameters(), **kwargs)
    train(a, mine, 20)
    train(b, reference, 20)
    assert same(a, b)
    assert not same(a, model())  # it did learn something
    state, expected = mine.state_dict(), reference.state_dict()
    assert state["param_groups"] == expected["param_groups"]
    assert state["state"].keys() == expected["state"].keys()
    for index, values in expected["state"].items():
        assert state["state"][index].keys() == values.keys()
        for key, value in values.items():
            assert torch.equal(state["state"][index][key], value), (index, key)


@pytest.mark.parametrize("ours, theirs, kwargs", CASES)
def test_a_checkpoint_moves_between_them(ours, theirs, kwargs):
    """A run saved with `torch.optim` (every checkpoint before this module) resumes with
    ours and goes on exactly as it would have, and the other way round."""
    for first, second in [(theirs, ours), (ours, theirs)]:
        a, b = model(), model()
        start = first(a.parameters(), **kwargs)
        train(a, start, 5)
        b.load_state_dict(a.state_dict())
        resumed, uninterrupted = second(b.parameters(), **kwargs), start
        saved = io.BytesIO()  # as a checkpoint holds it: no tensor shared with `start`
        torch.save(start.state_dict(), saved)
        saved.seek(0)
        resumed.load_state_dict(torch.load(saved))
        train(a, uninterrupted, 7)
        train(b, resumed, 7)
        assert same(a, b)


def test_step_hooks_run_once_and_a_closure_gets_gradients():
    net = model()
    optimizer = optimizers.Adam(net.parameters(), lr=1e-2)
    calls = []
    optimizer.register_step_pre_hook(lambda *_: calls.append("pre"))
    optimizer.register_step_post_hook(lambda *_: calls.append("post"))
    x, y = torch.randn(4, 5), torch.randn(4, 3)

    def closure():
        optimizer.zero_grad()
        loss = ((net(x) - y) ** 2).mean()
        loss.backward()  # fails if the step had turned gradients off around the closure
        return loss

    loss = optimizer.step(closure)
    assert calls == ["pre", "post"]
    assert loss is not None and loss.requires_grad
    assert torch.is_grad_enabled()


def test_training_does_not_import_torch_dynamo():
    """Fails if a PyTorch version wraps the optimizer in another way: training still
    works then, but pays the import again (2.3 CPU seconds a process)."""
    program = textwrap.dedent(
        """
        import sys
        import torch
        from transduce import config, training
        net = torch.nn.Linear(3, 2)
        for kind in ["adam", "rmsprop"]:
            optimizer = training.make_optimizer(net, config.OptimizerConfig(type=kind))
            optimizer.zero_grad()
            net(torch.ones(1, 3)).sum().backward()
            optimizer.step()
            optimizer.load_state_dict(optimizer.state_dict())
        print("torch._dynamo" in sys.modules)
        """
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr


def test_after_a_torch_optimizer_was_made_the_hooks_still_run_once():
    """Constructing a `torch.optim.Adam` first puts the profiling hook on its class's
    `step`; ours must not take that hook over as well (hooks would run twice)."""
    program = textwrap.dedent(
        """
        import json
        import torch
        torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])
        from transduce import optimizers
        parameter = torch.nn.Parameter(torch.zeros(2))
        optimizer = optimizers.Adam([parameter], lr=0.1)
        calls = []
        optimizer.register_step_pre_hook(lambda *_: calls.append("pre"))
        optimizer.register_step_post_hook(lambda *_: calls.append("post"))
        parameter.grad = torch.ones(2)
        optimizer.step()
        print(json.dumps([calls, parameter.tolist()]))
        """
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    calls, values = json.loads(done.stdout)
    assert calls == ["pre", "post"]
    assert values == pytest.approx([-0.1, -0.1], abs=1e-6)  # one step of Adam: lr


def test_a_wrapper_of_another_kind_is_kept():
    @torch.no_grad()
    def double(x):
        return x * 2

    assert optimizers._unwrapped(double) is double
    assert optimizers._unwrapped(torch.optim.Adam.step).__name__ == "step"
    assert optimizers._unwrapped(torch.optim.Optimizer.zero_grad).__name__ == "zero_grad"


@pytest.mark.parametrize("fused", [False, True])
def test_with_a_grad_scaler_as_torch_optim(fused):
    """torch.amp.GradScaler (the fp16 path of training): unscale, clipping, a step skipped
    for an infinite gradient, and fused Adam's own unscaling (`_step_supports_amp_scaling`)."""
    nets = []
    for cls in (optimizers.Adam, torch.optim.Adam):
        net = model()
        optimizer = cls(net.parameters(), lr=1e-2, fused=fused)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
        generator = torch.Generator().manual_seed(1)
        for update in range(6):
            x = torch.randn(16, 5, generator=generator)
            optimizer.zero_grad()
            loss = ((net(x) - 1) ** 2).mean() * (float("inf") if update == 3 else 1.0)
            scaler.scale(loss).backward()
            if update % 2:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)
            scaler.step(optimizer)
            scaler.update()
        nets.append((net, scaler.get_scale()))
    (a, scale_a), (b, scale_b) = nets
    assert same(a, b) and scale_a == scale_b
    assert scale_a < 2.0**10  # the infinite step lowered the scale
