"""`train.compile` (transduce.compiling): a compiled run computes what the uncompiled one
computes, dropout included, and a machine that cannot compile is refused before training.
On the CPU (pinned): the GPU's compiled path is measured by benchmarks/gpu_check.py
(its compile part: tests/test_gpu_check.py). The tests that compile are `slow` (`-m
slow`): together they take about two minutes on 2 cores from a cold Inductor cache, 20 s
from a warm one."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from transduce import checkpoint, compiling
from transduce import config as configuration
from transduce.errors import ConfigError
from transduce.preflight import preflight
from transduce.training import Trainer

from .toy import TINY_LSTM, TINY_TRANSFORMER, recipe, write_task

CPU = torch.device("cpu")
needs_compiler = pytest.mark.skipif(
    compiling.missing(CPU) is not None, reason=str(compiling.missing(CPU))
)
pytestmark = pytest.mark.usefixtures("inductor_cache")
LSTM_COPY = {**TINY_LSTM, "copy": True, "dropout": 0.3}
TRANSFORMER = {**TINY_TRANSFORMER, "dropout": 0.3}


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    return write_task(tmp_path_factory.mktemp("toy"), "copy")


def settings(prepared: Path, model: dict, compiled: bool, **train) -> dict:
    return recipe(
        prepared, model, device="cpu", precision="fp32", compile=compiled, threads=1, **train
    )


def losses(prepared: Path, run: Path, model: dict, compiled: bool, updates: int) -> list[float]:
    """The losses of the first `updates` updates, through the trainer's own update."""
    trainer = Trainer(configuration.parse(settings(prepared, model, compiled)), run)
    state = trainer.setup()
    state.model.train()
    assert (state.model._compiled_call_impl is not None) == compiled  # not silently ignored
    batches = itertools.islice(itertools.cycle(trainer.batches(state.data, 0)), updates)
    return [float(trainer.update(indices, n)) for n, indices in enumerate(batches, 1)]


@pytest.mark.slow
@needs_compiler
@pytest.mark.parametrize("model", [LSTM_COPY, TRANSFORMER], ids=["lstm-copy", "transformer"])
def test_a_compiled_run_follows_the_uncompiled_one(copy, tmp_path, model):
    plain = losses(copy, tmp_path / "plain", model, False, 40)
    compiled = losses(copy, tmp_path / "compiled", model, True, 40)
    worst = max(abs(a - b) / abs(a) for a, b in zip(plain, compiled, strict=True))
    assert worst < 1e-5, (worst, plain[:3], compiled[:3])  # dropout: the same masks
    assert sum(plain[-10:]) < 0.9 * sum(plain[:10])  # and it learns: not a frozen model


@pytest.mark.slow
@needs_compiler
def test_a_compiled_run_saves_and_decodes_as_any(copy, tmp_path):
    data = settings(copy, LSTM_COPY, True, max_updates=6, validate_every=3)
    report = Trainer(configuration.parse(data), tmp_path / "run").run()
    assert report is not None and report["updates"] == 6
    assert report["config"]["train"]["compile"] is True
    saved = checkpoint.load(tmp_path / "run" / "best.pt")["model"]
    plain = Trainer(configuration.parse(settings(copy, LSTM_COPY, False)), tmp_path / "p")
    assert set(saved) == set(plain.setup().model.state_dict())  # no compiled-module keys
    assert (tmp_path / "run" / "test.predictions").read_text(encoding="utf-8").strip()


def test_no_compiler_is_refused_in_one_line_before_training(copy, monkeypatch):
    monkeypatch.setattr(compiling.shutil, "which", lambda name: None)
    config = configuration.parse(settings(copy, TINY_LSTM, True))
    with pytest.raises(ConfigError, match=r"^train\.compile: torch\.compile on the CPU needs"):
        preflight(config)
    preflight(configuration.parse(settings(copy, TINY_LSTM, False)))  # off: nothing needed
