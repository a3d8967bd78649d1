"""The CUDA paths, marked `cuda`: skipped, with the reason, where torch sees no GPU; run
alone with `python -m pytest -m cuda -v` (`benchmarks/gpu_check.py` runs them first).

Training a few updates on the GPU in fp32, bf16 and fp16 (with its gradient scaler),
learning a toy task there, resume, decoding (greedy, beam, an ensemble) as on the CPU,
the copy of symbols training never showed, `average`, `analyze-monotonicity`, `--nproc 1`
with NCCL, the refusal of `--nproc` beyond the GPUs there are, and several grid cells
sharing one GPU.

On a GPU the kernels differ from the CPU's (cuDNN's LSTM, TF32-free float32 matrix
products, atomics in the embeddings' backward pass): the comparisons with the CPU allow
for rounding, and the learning bars are those of the CPU tests (`toy.DEV_BAR`).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from transduce import checkpoint, precision
from transduce import config as configuration
from transduce.cli import app
from transduce.inference import Transducer
from transduce.training import Trainer

from .conftest import transduce_env
from .test_copy import copies_unseen_letters
from .toy import DEV_BAR, TEST_BAR, TINY_LSTM, TINY_TRANSFORMER, recipe, write_task

pytestmark = pytest.mark.cuda


@pytest.fixture(scope="module", autouse=True)
def _gpus(gpus_visible) -> None:
    """The GPUs, hidden from the other tests (tests/conftest.py), seen by these and by
    this module's fixtures (autouse: set up before them)."""


HARD = {**TINY_LSTM, "name": "hard"}
COPYING = {**TINY_LSTM, "copy": True}


@pytest.fixture(scope="module")
def copy(_gpus, tmp_path_factory) -> Path:
    return write_task(tmp_path_factory.mktemp("toy"), "copy")


def gpu_recipe(prepared: Path, model: dict, **train) -> dict:
    data = recipe(prepared, model, **{"max_updates": 6, "validate_every": 3, **train})
    data["train"]["device"] = "cuda"
    return data


def train(run: Path, data: dict, resume: bool = False) -> dict:
    return Trainer(configuration.parse(data), run, resume=resume).run()


def write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def cli(*args: str | Path, input: str | None = None):
    return CliRunner().invoke(app, [str(a) for a in args], input=input)


def transduce(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "transduce", *map(str, args)],
        capture_output=True,
        text=True,
        env=transduce_env(),
        timeout=300,
    )


@pytest.mark.parametrize(
    ("model", "used"),
    [
        (TINY_LSTM, "fp32"),
        (TINY_LSTM, "bf16"),
        (TINY_LSTM, "fp16"),
        (TINY_TRANSFORMER, "fp32"),
        (TINY_TRANSFORMER, "bf16"),
        (TINY_TRANSFORMER, "fp16"),
        (HARD, "fp32"),
        (COPYING, "bf16"),
    ],
    ids=["lstm-fp32", "lstm-bf16", "lstm-fp16", "tf-fp32", "tf-bf16", "tf-fp16", "hard", "copy"],
)
def test_a_few_updates_on_the_gpu(copy, tmp_path, model, used):
    if used == "bf16" and not precision.bf16_works("cuda"):
        pytest.skip("this GPU has no bfloat16 (before Ampere)")
    run = tmp_path / "run"
    report = train(run, gpu_recipe(copy, model, precision=used, clip_norm=1.0))
    assert report["device"].startswith("cuda") and report["precision"] == used
    assert report["updates"] == 6 and report["processes"] == 1
    losses = [h["train_loss"] for h in report["history"]] + [
        h["dev_loss"] for h in report["history"]
    ]
    assert all(math.isfinite(loss) for loss in losses), losses
    payload = checkpoint.load(run / "last.pt")  # saved from the GPU, read onto the CPU
    assert all(t.device.type == "cpu" for t in payload["model"].values())
    scaler = payload["training"]["scaler"]
    assert (scaler is not None and scaler["scale"] > 0) == (used == "fp16")
    assert len((run / "test.predictions").read_text(encoding="utf-8").splitlines()) > 0


def test_device_auto_and_precision_auto_take_the_gpu(copy, tmp_path):
    expected = "bf16" if torch.cuda.get_device_capability()[0] >= 8 else "fp16"
    assert precision.choose("auto", torch.device("cuda")) == expected
    data = recipe(copy, TINY_LSTM, max_updates=2, validate_every=2)
    assert data["train"].get("device", "auto") == "auto"
    report = train(tmp_path / "run", data)
    assert report["device"].startswith("cuda") and report["precision"] == expected


@pytest.fixture(scope="module")
def learned(copy, tmp_path_factory) -> Path:
    """A toy LSTM trained on the GPU in float32 until it has learned to copy, keeping its
    2 last checkpoints."""
    run = tmp_path_factory.mktemp("learned") / "run"
    data = recipe(copy, TINY_LSTM, max_epochs=30, precision="fp32", keep_last=2)
    data["train"]["device"] = "cuda"
    train(run, data)
    return run


def test_training_on_the_gpu_learns_the_toy_task(learned):
    report = json.loads((learned / "train.json").read_text(encoding="utf-8"))
    assert report["device"].startswith("cuda")
    assert report["best"]["score"] >= DEV_BAR, [h["dev_scores"]["acc"] for h in report["history"]]
    assert report["test"]["acc"] >= TEST_BAR


def _inputs(copy: Path) -> list[str]:
    """The test split's lines (source TAB target, symbols spaced): decoded as `tsv`."""
    return (copy / "test.tsv").read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("beam", [1, 4], ids=["greedy", "beam"])
def test_decoding_on_the_gpu_as_on_the_cpu(learned, copy, beam):
    words = _inputs(copy)
    gpu = Transducer.from_checkpoint(learned, "cuda").transduce(
        words, input_format="tsv", beam=beam
    )
    cpu = Transducer.from_checkpoint(learned, "cpu").transduce(words, input_format="tsv", beam=beam)
    same = sum(g.texts == c.texts for g, c in zip(gpu, cpu, strict=True))
    assert same >= 0.95 * len(words), f"{same} of {len(words)} alike"
    close = [
        abs(g.scores[0] - c.scores[0]) < 1e-2
        for g, c in zip(gpu, cpu, strict=True)
        if g.texts == c.texts and g.scores
    ]
    assert close and sum(close) >= 0.95 * len(close)


def test_greedy_decoding_waits_for_the_gpu_once_a_step(learned, copy):
    """transduce.decoding.greedy copies each step's tokens and scores to the host in one
    transfer: the synchronizing calls (torch's sync debug mode) are at most one a step,
    plus the few of the start (the limits) and of leaving rows out."""
    import warnings

    from transduce.data.batching import collate
    from transduce.decoding import greedy

    transducer = Transducer.from_checkpoint(learned, "cuda")
    model = transducer.model
    words = [line.split("\t")[0].split() for line in _inputs(copy)[:64]]
    batch = collate([transducer.vocabs["source"].encode(word) for word in words]).to("cuda")
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            found = greedy(model, batch)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    lengths = [len(h.tokens) for h in found]
    steps = max(lengths) + 1
    leaving = len(set(lengths) - {max(lengths)})  # steps after which some rows left
    assert len(found) == len(words)
    # one copy a step, one put of the kept rows at each step some leave, and the start's
    # few; before, 3 a step (the limits put, the scores and the tokens copied)
    assert len(syncs) <= steps + leaving + 4, (len(syncs), steps, leaving)


def test_a_run_resumes_on_the_gpu(copy, tmp_path):
    data = gpu_recipe(copy, TINY_LSTM, precision="fp16", max_updates=8, validate_every=4)
    straight = train(tmp_path / "straight", data)
    stopped = dict(data, train={**data["train"], "max_updates": 4})
    assert train(tmp_path / "split", stopped)["updates"] == 4
    resumed = train(tmp_path / "split", data, resume=True)
    assert resumed["updates"] == 8 and resumed["precision"] == "fp16"
    assert [h["update"] for h in resumed["history"]] == [4, 8]
    # the same updates, up to the GPU's rounding (atomics in the embeddings' backward)
    for a, b in zip(straight["history"], resumed["history"], strict=True):
        assert a["dev_loss"] == pytest.approx(b["dev_loss"], rel=1e-2, abs=1e-3)
    first = checkpoint.load(tmp_path / "straight" / "last.pt")["model"]
    second = checkpoint.load(tmp_path / "split" / "last.pt")["model"]
    gap = max((first[k].float() - second[k].float()).abs().max().item() for k in first)
    assert gap < 1e-2, gap


def test_an_ensemble_decodes_on_the_gpu(learned, copy, tmp_path):
    other = tmp_path / "other"
    train(other, recipe(copy, TINY_LSTM, max_updates=60, precision="fp32", seed=2, device="cuda"))
    words, report = copy / "test.tsv", tmp_path / "report.json"
    options = ("--input-format", "tsv", "--beam", "3")
    gpu = cli("decode", learned, other, words, *options, "--device", "cuda", "--report", report)
    assert gpu.exit_code == 0, gpu.output
    written = json.loads(report.read_text(encoding="utf-8"))
    assert written["options"]["device"].startswith("cuda") and len(written["ensemble"]) == 2
    cpu = cli("decode", learned, other, words, *options, "--device", "cpu")
    gpu_lines, cpu_lines = gpu.stdout.splitlines(), cpu.stdout.splitlines()
    assert len(gpu_lines) == len(cpu_lines) == len(_inputs(copy))
    assert sum(a == b for a, b in zip(gpu_lines, cpu_lines)) >= 0.95 * len(gpu_lines)


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_copy_of_unseen_symbols_on_the_gpu_as_on_the_cpu(copy, tmp_path, device):
    """The extended vocabulary (See et al.): letters training never showed are copied as
    themselves on the GPU too, by greedy and beam search and by an ensemble, from a model
    trained on the GPU (tests/test_copy.py: the same checks of a model trained on the
    CPU)."""
    run = tmp_path / "run"
    train(run, gpu_recipe(copy, COPYING, precision="fp32"))
    copies_unseen_letters(checkpoint.load(run / "last.pt"), device, rel=1e-3, abs_=1e-3)


def test_average_of_checkpoints_saved_on_the_gpu(learned, tmp_path):
    out = tmp_path / "last2.pt"
    result = cli("average", learned, "--last", "2", "--out", out)
    assert result.exit_code == 0, result.output
    averaged = checkpoint.load(out)
    index = checkpoint.read_index(learned)
    members = [checkpoint.load(learned / checkpoint.KEPT / e["file"]) for e in index]
    assert len(members) == 2
    for key, value in averaged["model"].items():
        mean = (members[0]["model"][key].double() + members[1]["model"][key].double()) / 2
        assert torch.allclose(value.double(), mean, atol=1e-6), key
    decoded = cli("decode", out, "--device", "cuda", input="abc\ncab\n")
    assert decoded.exit_code == 0 and len(decoded.stdout.splitlines()) == 2, decoded.output


def test_analyze_monotonicity_on_the_gpu_as_on_the_cpu(learned, copy):
    data = copy / "test.tsv"
    shown = {}
    for device in ("cuda", "cpu"):
        result = cli("analyze-monotonicity", learned, data, "--json", "--device", device)
        assert result.exit_code == 0, result.output
        shown[device] = json.loads(result.stdout)
    gpu, cpu = shown["cuda"], shown["cpu"]
    assert gpu["examples"] == cpu["examples"]
    assert gpu["accuracy"] == pytest.approx(cpu["accuracy"], abs=5.0)
    for delta in gpu["monotonicity"]:
        a, b = gpu["monotonicity"][delta]["overall"], cpu["monotonicity"][delta]["overall"]
        assert a["mono"] == pytest.approx(b["mono"], abs=5.0), delta


def test_nproc_1_trains_in_a_process_group_with_nccl(copy, tmp_path):
    config = write(tmp_path / "r.yaml", gpu_recipe(copy, TINY_LSTM, precision="fp32"))
    run = tmp_path / "run"
    launched = transduce("train", "-c", config, "-o", run, "--nproc", "1")
    assert launched.returncode == 0, launched.stderr
    report = json.loads((run / "train.json").read_text(encoding="utf-8"))
    assert report["backend"] == "nccl" and report["processes"] == 1
    assert report["device"] == "cuda:0" and report["updates"] == 6


def test_nproc_beyond_the_gpus_is_refused_in_one_line(copy, tmp_path):
    config = write(tmp_path / "r.yaml", gpu_recipe(copy, TINY_LSTM, precision="fp32"))
    count = torch.cuda.device_count()
    refused = transduce("train", "-c", config, "-o", tmp_path / "run", "--nproc", count + 1)
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        f"error: --nproc {count + 1}: this machine has {count} CUDA devices (one process per GPU)"
    )
    assert not (tmp_path / "run").exists()


def test_the_command_line_trains_and_decodes_on_the_gpu(copy, tmp_path):
    config = write(tmp_path / "r.yaml", recipe(copy, TINY_TRANSFORMER, max_updates=4))
    run = tmp_path / "run"
    trained = transduce("train", "-c", config, "-o", run, "--device", "cuda")
    assert trained.returncode == 0, trained.stderr
    assert "training on cuda" in trained.stderr
    decoded = transduce("decode", run, "--device", "cuda", "--beam", "2", "--nbest", "2")
    assert decoded.returncode == 0, decoded.stderr


def test_batches_reach_the_gpu_from_pinned_memory():
    from transduce.data.batching import collate

    batch = collate([[4, 5, 6], [7]], [[5], [6, 7]]).to("cuda")
    assert batch.source.device.type == "cuda" and batch.target_out.device.type == "cuda"
    assert batch.source.tolist()[1][0] == 7 and batch.source_mask.device.type == "cuda"


def test_grid_cells_share_one_gpu(copy, tmp_path):
    """`experiment run --workers 2 --per-gpu 2 --gpu-memory 0.3`: two cells on the one GPU
    at once, each allowed 30% of its memory."""
    base = write(tmp_path / "base.yaml", gpu_recipe(copy, TINY_LSTM, precision="fp32"))
    grid = {
        "systems": {"tiny": {"recipe": str(base)}},
        "seeds": [1, 2],
        "metrics": ["acc"],
    }
    experiment = write(tmp_path / "grid.yaml", grid)
    out = tmp_path / "grid"
    result = transduce(
        "experiment",
        "run",
        experiment,
        "--out",
        out,
        "--workers",
        "2",
        "--per-gpu",
        "2",
        "--gpu-memory",
        "0.3",
    )
    assert result.returncode == 0, result.stderr
    reports = [json.loads(p.read_text()) for p in sorted(out.glob("runs/*/train.json"))]
    assert len(reports) == 2 and all(r["device"].startswith("cuda") for r in reports)
    lines = result.stderr.splitlines()
    started = [i for i, line in enumerate(lines) if line.startswith("started ")]
    ended = [i for i, line in enumerate(lines) if " done in " in line]
    assert len(started) == 2 and max(started) < min(ended)  # the two at once
    assert all(lines[i].endswith("on GPU 0") for i in started)
