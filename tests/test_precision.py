"""Devices and precisions: `train.device: auto`, `train.precision` (transduce.precision),
float16 with its gradient scaler, and the refusals of what a machine cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from transduce import checkpoint, precision
from transduce import config as configuration
from transduce.errors import ConfigError
from transduce.precision import resolve_device as device
from transduce.tasks import make_task
from transduce.training import Trainer

from .toy import TINY_LSTM, TINY_TRANSFORMER, recipe, write_task

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    return write_task(tmp_path_factory.mktemp("toy"), "copy")


def machine(monkeypatch, native: bool, cpu_bf16: bool = True, cuda_bf16: bool = True) -> None:
    """Pretend to be a machine: native bfloat16 on the CPU or not, and what bf16 runs on."""
    monkeypatch.setenv(precision.NATIVE_BF16_ENV, "1" if native else "0")
    works = {"cpu": cpu_bf16, "cuda": cuda_bf16}
    monkeypatch.setattr(precision, "bf16_works", lambda device_type: works[device_type])


def test_device_auto_is_cuda_only_where_torch_sees_one(monkeypatch):
    assert device("auto") == (CUDA if torch.cuda.is_available() else CPU)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device("auto") == CPU and device("cpu") == CPU
    with pytest.raises(ConfigError, match="cuda requested, but this PyTorch sees no CUDA"):
        device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert device("auto") == CUDA
    assert configuration.TrainConfig().device == "auto"
    assert configuration.TrainConfig().precision == "auto"


def test_auto_precision_by_machine(monkeypatch):
    machine(monkeypatch, native=True)  # Intel with AMX, AMD Zen 4: bf16 on the CPU
    assert precision.choose("auto", CPU) == "bf16"
    machine(monkeypatch, native=False)  # no native bfloat16: float32, even if oneDNN emulates
    assert precision.choose("auto", CPU) == "fp32"
    machine(monkeypatch, native=True, cpu_bf16=False)  # flags, but no bf16 LSTM in oneDNN
    assert precision.choose("auto", CPU) == "fp32"
    machine(monkeypatch, native=False, cuda_bf16=True)  # Ampere and later
    assert precision.choose("auto", CUDA) == "bf16"
    machine(monkeypatch, native=False, cuda_bf16=False)  # older GPUs: float16, scaled
    assert precision.choose("auto", CUDA) == "fp16"
    machine(monkeypatch, native=False)
    for asked in ("fp32", "bf16", "fp16"):
        assert precision.choose(asked, CUDA) == asked
    assert precision.choose("fp32", CPU) == "fp32"


def test_precisions_a_device_cannot_run_are_refused_in_one_line(monkeypatch):
    machine(monkeypatch, native=False, cpu_bf16=False, cuda_bf16=False)
    with pytest.raises(ConfigError) as error:
        precision.choose("fp16", CPU)
    assert str(error.value) == (
        "train.precision: fp16 needs a CUDA device (this run is on the CPU); use bf16, fp32 or auto"
    )
    with pytest.raises(ConfigError, match="^train.precision: bf16 cannot run here .*AVX2"):
        precision.choose("bf16", CPU)
    with pytest.raises(ConfigError, match="bf16 cannot run here .this GPU has no bfloat16"):
        precision.choose("bf16", CUDA)
    with pytest.raises(ConfigError, match="one of auto, fp32, bf16, fp16, not 'half'"):
        precision.choose("half", CPU)


def test_train_refuses_them_before_touching_the_run_directory(copy, tmp_path, monkeypatch):
    import yaml
    from typer.testing import CliRunner

    from transduce.cli import app

    machine(monkeypatch, native=False, cpu_bf16=False)
    config = tmp_path / "r.yaml"
    config.write_text(yaml.safe_dump(recipe(copy, TINY_LSTM, max_updates=2)))
    run = tmp_path / "run"
    for setting, message in (
        ("train.precision=fp16", "train.precision: fp16 needs a CUDA device"),
        ("train.precision=bf16", "train.precision: bf16 cannot run here"),
    ):
        result = CliRunner().invoke(
            app, ["train", "-c", str(config), "--set", setting, "--device", "cpu", "-o", str(run)]
        )
        assert result.exit_code == 2, result.output
        assert message in result.output and "Traceback" not in result.output
        assert not run.exists()
    if not torch.cuda.is_available():
        result = CliRunner().invoke(app, ["train", "-c", str(config), "--device", "cuda"])
        assert result.exit_code == 2 and "sees no CUDA device" in result.output


def test_the_old_bf16_key_is_read_as_the_precision():
    """A run's config.yaml of transduce < 0.4 holds train.bf16: `--resume` reads it."""
    base = {"data": {"prepared": "p"}, "model": {"name": "lstm"}}
    for old, new in ((True, "bf16"), (False, "fp32")):
        assert configuration.parse({**base, "train": {"bf16": old}}).train.precision == new
    with pytest.raises(ConfigError, match="train.bf16: unknown key .replaced by train.precision"):
        configuration.parse({**base, "train": {"bf16": True, "precision": "fp32"}})
    data = {**base, "train": {"precision": "fp32"}}  # a recipe of today, --set of then
    configuration.apply_overrides(data, ["train.bf16=true"])
    assert configuration.parse(data).train.precision == "bf16"
    old = {"config": {"train": {"bf16": True}}, "versions": {"transduce": "0.3.1"}}
    assert checkpoint.upgrade(old)["config"]["train"] == {"precision": "bf16"}


def test_native_bf16_is_read_from_the_cpu_flags(tmp_path, monkeypatch):
    monkeypatch.delenv(precision.NATIVE_BF16_ENV)
    for flags, native in (
        ("fpu sse avx2 avx512f avx512_bf16", True),  # AMD Zen 4
        ("fpu avx2 avx512f amx_bf16 amx_tile", True),  # Intel Sapphire Rapids
        ("fpu sse avx2 fma", False),  # AVX2 only
    ):
        info = tmp_path / f"cpuinfo-{native}-{len(flags)}"
        info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n\nprocessor\t: 1\n")
        assert precision.native_bf16_cpu(str(info)) is native
    assert precision.native_bf16_cpu(str(tmp_path / "missing")) is False
    monkeypatch.setenv(precision.NATIVE_BF16_ENV, "1")
    assert precision.native_bf16_cpu(str(tmp_path / "missing")) is True


def test_decoding_follows_the_training_precision_where_it_can(monkeypatch):
    machine(monkeypatch, native=False, cpu_bf16=True)
    assert precision.decoding("bf16", None, CPU) == ("bf16", None)
    assert precision.decoding("fp16", None, CPU) == ("fp32", None)  # fp16 weights are fp32
    assert precision.decoding("fp32", True, CPU) == ("bf16", None)
    assert precision.decoding("bf16", False, CPU) == ("fp32", None)
    machine(monkeypatch, native=False, cpu_bf16=False)
    used, warning = precision.decoding("bf16", None, CPU)
    assert used == "fp32" and "running in float32" in warning


def test_fp16_trains_with_a_gradient_scaler_saved_and_resumed(copy, tmp_path):
    """The float16 path (autocast, scaled loss, unscaled clipping, scaler state in the
    checkpoint) up to the device: run here on the CPU, where PyTorch autocasts linear
    layers to float16 (not LSTMs: hence the transformer), as it would on CUDA."""
    data = recipe(copy, TINY_TRANSFORMER, max_updates=4, validate_every=2, clip_norm=1.0)
    config = configuration.parse(data)
    run = tmp_path / "run"
    report = Trainer(config, run, task=make_task(config, CPU, "fp16")).run()
    assert report["precision"] == "fp16" and report["device"] == "cpu"
    payload = checkpoint.load(run / "last.pt")
    assert payload["precision"] == "fp16"
    scaler = payload["training"]["scaler"]
    assert scaler["scale"] > 0 and scaler["_growth_tracker"] >= 0
    assert all(h["train_loss"] == h["train_loss"] for h in report["history"])  # not NaN
    data["train"]["max_updates"] = 6
    config = configuration.parse(data)
    resumed = Trainer(config, run, resume=True, task=make_task(config, CPU, "fp16"))
    assert resumed.run()["updates"] == 6
    # decoding a float16-trained model: float32 (its weights are float32)
    from transduce.inference import Transducer

    assert Transducer.from_checkpoint(run / "best.pt").task.precision == "fp32"


def test_fp32_is_the_same_as_before_and_recorded(copy, tmp_path):
    report = Trainer(
        configuration.parse(recipe(copy, TINY_LSTM, max_updates=2, precision="fp32")),
        tmp_path / "run",
    ).run()
    assert report["precision"] == "fp32" and report["processes"] == 1
    assert checkpoint.load(tmp_path / "run" / "best.pt")["training"]["scaler"] is None


def test_the_gpu_memory_limit_of_a_grid_cell(monkeypatch):
    """$TRANSDUCE_GPU_MEMORY (`experiment run --gpu-memory F`) caps a process on a GPU."""
    from transduce.precision import limit_gpu_memory

    calls = []
    monkeypatch.setattr(
        torch.cuda, "set_per_process_memory_fraction", lambda f, d: calls.append((f, d))
    )
    monkeypatch.setenv("TRANSDUCE_GPU_MEMORY", "1.5")
    limit_gpu_memory(CPU)  # the CPU: nothing to cap
    with pytest.raises(
        ConfigError, match=r"TRANSDUCE_GPU_MEMORY: a fraction in \(0, 1\], not '1.5'"
    ):
        limit_gpu_memory(CUDA)
    monkeypatch.setenv("TRANSDUCE_GPU_MEMORY", "0.25")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    limit_gpu_memory(CUDA)  # without an index: the current device (a cell sees one GPU)
    monkeypatch.delenv("TRANSDUCE_GPU_MEMORY")
    limit_gpu_memory(CUDA)
    assert calls == [(0.25, 0)]
