"""Split updates: gradient accumulation (`train.accumulate`) and data-parallel training in
several processes through a real `torchrun` (gloo, on the CPU); `transduce.distributed`.

The claim under test: an update is the same however its batch is split, so a run with
micro-batches, or in 2 processes, ends with the weights (within float tolerance) and the
validation scores of the run in one process on the whole batch, and a run can be resumed
in another number of processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from transduce import checkpoint
from transduce import config as configuration
from transduce.distributed import World
from transduce.training import Trainer

from .conftest import none_left_within, processes_naming, transduce_env
from .test_tagger import TINY as TINY_TAGGER
from .test_tagger import write_conllu
from .toy import TINY_LSTM, TINY_TRANSFORMER, recipe, write_task

LSTM = {**TINY_LSTM, "dropout": 0.0}  # dropout draws differ with the split; nothing else


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    return write_task(tmp_path_factory.mktemp("toy"), "copy")


def weights(path: Path) -> dict[str, torch.Tensor]:
    return checkpoint.load(path)["model"]


def assert_close_weights(a: Path, b: Path, atol: float = 2e-5) -> None:
    first, second = weights(a), weights(b)
    assert first.keys() == second.keys()
    gap = max((first[k].float() - second[k].float()).abs().max().item() for k in first)
    assert gap <= atol, f"{a} and {b} differ by up to {gap}"


def history(run: Path) -> list[tuple[int, dict, float]]:
    report = json.loads((run / "train.json").read_text(encoding="utf-8"))
    return [(h["update"], h["dev_scores"], h["dev_loss"]) for h in report["history"]]


def assert_same_validations(a: Path, b: Path) -> None:
    for (update, scores, loss), (update_b, scores_b, loss_b) in zip(
        history(a), history(b), strict=True
    ):
        assert update == update_b
        assert scores == pytest.approx(scores_b, abs=1e-6)
        assert loss == pytest.approx(loss_b, abs=1e-5)


def test_parts_cut_a_batch_once_and_contiguously():
    batch = list(range(10, 21))  # 11 examples
    for size in (1, 2, 3):
        for accumulate in (1, 2, 4):
            parts = [
                part
                for rank in range(size)
                for part in World(rank, size).parts(batch, accumulate)
            ]  # fmt: skip
            assert [i for part in parts for i in part] == batch
            assert len(parts) == min(size * accumulate, len(batch))
            assert max(map(len, parts)) - min(map(len, parts)) <= 1
    # a batch of one in 2 processes: one of them has no micro-batch (and adds no gradient)
    assert sorted(list(World(rank, 2).parts([7], 1)) for rank in (0, 1)) == [[], [[7]]]
    assert list(World().parts([1, 2, 3], 1)) == [[1, 2, 3]]


def gradients(data: dict, accumulate: int, run: Path) -> dict[str, torch.Tensor]:
    """The gradients of the first update of the recipe `data`, in `accumulate` parts
    (not clipped: clipping would hide a gradient off by a constant factor)."""
    data["train"].update(accumulate=accumulate, precision="fp32", clip_norm=None)
    trainer = Trainer(configuration.parse(data), run)
    state = trainer.setup()
    batch = trainer.batches(state.data, 0)[0]
    trainer.update(batch, 1)
    return {n: p.grad.clone() for n, p in state.model.named_parameters() if p.grad is not None}


def assert_same_gradients(first: dict, second: dict) -> None:
    assert first.keys() == second.keys()
    for name in first:
        torch.testing.assert_close(first[name], second[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize(
    ("model", "extra"),
    [
        (LSTM, {}),
        (LSTM, {"loss": {"label_smoothing": 0.1}}),
        ({**TINY_LSTM, "name": "hard", "dropout": 0.0}, {}),  # exact marginalization
        (  # the monotonicity loss, a mean over the target tokens
            TINY_TRANSFORMER,
            {"loss": {"monotonicity": {"weight": 0.5, "normalize": "tokens"}}},
        ),
        (  # as the authors computed it: a sum over the sentences
            TINY_TRANSFORMER,
            {"loss": {"monotonicity": {"weight": 0.1, "normalize": "sentences_summed"}}},
        ),
    ],
    ids=["lstm", "smoothing", "hard", "transformer-mono-tokens", "transformer-mono-sentences"],
)
def test_micro_batches_give_the_gradient_of_the_whole_batch(copy, tmp_path, model, extra):
    whole, parts = (
        gradients({**recipe(copy, model, batch_size=20), **extra}, k, tmp_path / str(k))
        for k in (1, 3)
    )
    assert_same_gradients(whole, parts)


def test_accumulated_micro_batches_train_as_the_whole_batch(copy, tmp_path):
    """End to end: the weights and validations of 6 updates in 3 parts each (Adam turns a
    gradient that is zero but for rounding into a full step, so the LSTM: its parameters
    all have real gradients)."""
    runs = {}
    for accumulate in (1, 3):
        data = recipe(copy, LSTM, max_updates=6, validate_every=3, batch_size=20)
        data["train"].update(accumulate=accumulate, precision="fp32", clip_norm=1.0)
        runs[accumulate] = tmp_path / f"a{accumulate}"
        Trainer(configuration.parse(data), runs[accumulate]).run()
    assert_close_weights(runs[1] / "last.pt", runs[3] / "last.pt")
    assert_same_validations(runs[1], runs[3])
    # the loss in the history is the whole batch's loss, not a micro-batch's
    first, second = (json.loads((r / "train.json").read_text())["history"] for r in runs.values())
    assert [h["train_loss"] for h in first] == pytest.approx([h["train_loss"] for h in second])


def test_micro_batches_of_the_tagger(tmp_path):
    root = tmp_path / "ud"
    root.mkdir()
    for split, n, seed in (("train", 120, 0), ("dev", 20, 1), ("test", 20, 2)):
        write_conllu(root / f"{split}.conllu", n, seed)
    data = {
        "data": {
            "format": "conllu",
            **{s: [str(root / f"{s}.conllu")] for s in ("train", "dev", "test")},
        },
        "model": TINY_TAGGER,
        "train": {"batch_size": 16, "max_updates": 4, "select_on": "tagacc"},
    }
    whole, parts = (gradients(dict(data), k, tmp_path / str(k)) for k in (1, 2))
    assert_same_gradients(whole, parts)


# ------------------------------------------------------------------ torchrun


def write_recipe(path: Path, prepared: Path, **train) -> Path:
    data = recipe(
        prepared, LSTM, **{"max_updates": 6, "validate_every": 3, "batch_size": 16, **train}
    )
    data["train"].update(precision="fp32", threads=1)
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def transduce(*args: str | Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "transduce", *map(str, args)],
        capture_output=True,
        text=True,
        env={**transduce_env(), **(env or {})},
        timeout=300,
    )


def nproc_2(config: Path, run: Path) -> subprocess.Popen:
    """`transduce train --nproc=2` in a process group of its own (as a terminal's foreground
    job; not the test's), its stderr piped."""
    command = [sys.executable, "-m", "transduce", "train", "-c", str(config), "-o", str(run)]
    return subprocess.Popen(
        [*command, "--nproc=2"],
        stderr=subprocess.PIPE,
        text=True,
        env=transduce_env(),
        start_new_session=True,
    )


def test_two_processes_under_torchrun_match_one_process(copy, tmp_path):
    """A real `torchrun --nproc-per-node 2` with gloo: the same validations and weights
    as one process on the same batches; only rank 0 writes; a run of two processes
    resumed in one continues as if it had never stopped."""
    config = write_recipe(tmp_path / "r.yaml", copy)
    one, two = tmp_path / "one", tmp_path / "two"
    assert transduce("train", "-c", config, "-o", one).returncode == 0
    launched = subprocess.run(
        [
            *(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"),
            *("-m", "transduce", "train", "-c", str(config), "-o", str(two)),
        ],
        capture_output=True,
        text=True,
        env=transduce_env(),
        timeout=300,
    )
    assert launched.returncode == 0, launched.stderr
    assert launched.stderr.count("best dev acc") == 1  # rank 0 reports, rank 1 is silent
    assert "training on cpu, fp32, 2 processes (16 per update in all)" in launched.stderr
    assert_same_validations(one, two)
    assert_close_weights(one / "last.pt", two / "last.pt")
    assert (one / "test.predictions").read_text() == (two / "test.predictions").read_text()
    report = json.loads((two / "train.json").read_text())
    assert report["processes"] == 2 and report["updates"] == 6
    assert sorted(p.name for p in two.iterdir()) == sorted(p.name for p in one.iterdir())
    # stopped after 3 updates in 2 processes (`--nproc`), resumed in 1 up to 6
    split = tmp_path / "split"
    first = transduce(
        "train", "-c", config, "-o", split, "--nproc", "2", "--set", "train.max_updates=3"
    )
    assert first.returncode == 0, first.stderr
    assert json.loads((split / "train.json").read_text())["processes"] == 2
    assert transduce("train", "-c", config, "-o", split, "--resume").returncode == 0
    assert_close_weights(one / "last.pt", split / "last.pt")
    assert_same_validations(one, split)


def test_nproc_1_is_one_process_in_a_process_group_that_trains_as_without(copy, tmp_path):
    """`--nproc 1`: one process under torchrun, in a process group of one (gloo here, NCCL
    on a GPU: the distributed path checked on one device), with the result of a run in
    this process, which joins no group."""
    config = write_recipe(tmp_path / "r.yaml", copy)
    alone, grouped = tmp_path / "alone", tmp_path / "grouped"
    assert transduce("train", "-c", config, "-o", alone).returncode == 0
    launched = transduce("train", "-c", config, "-o", grouped, "--nproc", "1")
    assert launched.returncode == 0, launched.stderr
    report = json.loads((grouped / "train.json").read_text())
    assert report["processes"] == 1 and report["backend"] == "gloo"
    assert json.loads((alone / "train.json").read_text())["backend"] is None
    assert_same_validations(alone, grouped)
    assert_close_weights(alone / "last.pt", grouped / "last.pt")


def test_nproc_on_a_run_directory_in_use_is_refused_once(copy, tmp_path):
    """N16: every rank said it (the refusal, and rank 1's "another process stopped")."""
    from transduce.locking import DirectoryLock
    from transduce.outputs import LOCK

    config = write_recipe(tmp_path / "r.yaml", copy, max_updates=2)
    run = tmp_path / "run"
    assert transduce("train", "-c", config, "-o", run).returncode == 0
    with DirectoryLock(run / LOCK, run):  # as a run in progress holds it
        refused = transduce("train", "-c", config, "-o", run, "--nproc", "2", "--resume")
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        f"error: {run}: in use by another transduce process (PID {os.getpid()}); "
        "wait for it to end or stop it"
    )


def test_nproc_errors_are_one_line_with_the_status_of_rank_0(copy, tmp_path):
    config = write_recipe(tmp_path / "r.yaml", copy)
    refused = transduce(
        "train", "-c", config, "-o", tmp_path / "a", "--nproc", "2", "--set", "train.precision=fp16"
    )  # checked before any process starts
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        "error: train.precision: fp16 needs a CUDA device (this run is on the CPU); "
        "use bf16, fp32 or auto"
    )
    missing = transduce(
        "train", "-c", config, "-o", tmp_path / "b", "--nproc", "2", "--set", "data.prepared=nope"
    )  # found by rank 0 while preparing: rank 1 stops too, saying why in one line
    assert missing.returncode == 2, missing.stderr
    assert "Traceback" not in missing.stderr
    assert "error: nope: not a prepared dataset directory" in missing.stderr
    lines = [line for line in missing.stderr.splitlines() if line.strip()]
    assert len(lines) <= 2 and all(line.startswith("error: ") for line in lines), lines
    assert not (tmp_path / "b").exists()
    under = transduce("train", "-c", config, env={"WORLD_SIZE": "2", "RANK": "0"})
    assert under.returncode == 2 and "under torchrun, give --out RUN_DIR" in under.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="process groups and SIGINT")
def test_ctrl_c_stops_every_process_after_its_update(copy, tmp_path):
    """Ctrl-C at a terminal signals the whole foreground process group: the launcher
    leaves it to the training processes, which agree to stop after one update; rank 0
    writes last.pt and train.json, exit 130, and the run resumes."""
    config = write_recipe(
        tmp_path / "r.yaml", copy, max_updates=100_000, validate_every=50, max_epochs=None
    )
    run = tmp_path / "run"
    process = nproc_2(config, run)
    assert process.stderr is not None
    seen = ""
    deadline = time.monotonic() + 120
    while "update 50 " not in seen and time.monotonic() < deadline:
        seen += process.stderr.readline()
    os.killpg(process.pid, signal.SIGINT)
    rest = process.stderr.read()
    assert process.wait(timeout=120) == 130, seen + rest
    assert "Traceback" not in rest
    assert rest.count("stopping after this update") == 1
    assert f"transduce train --out {run} --resume" in rest
    report = json.loads((run / "train.json").read_text())
    assert report["stop"] == "interrupted" and report["updates"] >= 50
    assert checkpoint.load(run / "last.pt")["training"]["progress"]["update"] == report["updates"]


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="finds processes in /proc")
@pytest.mark.parametrize(
    "sig", [pytest.param(s, marks=pytest.mark.long) for s in ("SIGTERM", "SIGHUP")] + ["SIGKILL"]
)
def test_a_killed_launcher_leaves_no_training_process_and_the_run_resumes(copy, tmp_path, sig):
    """N9: `kill PID` of `train --nproc 2` (SIGTERM, or SIGHUP: to the launcher alone) is
    a Ctrl-C for the training processes, without torch's "Received 15 death signal" line;
    and a launcher killed with -9 has them stop by themselves (the parent-death signal).
    Within 10 s none is left, rank 0 has written last.pt and train.json, and the run
    resumes."""
    config = write_recipe(
        tmp_path / "r.yaml", copy, max_updates=100_000, validate_every=10, max_epochs=None
    )
    run = tmp_path / "run"
    process = nproc_2(config, run)
    assert process.stderr is not None
    seen, deadline = "", time.monotonic() + 120
    while "update 20 " not in seen and time.monotonic() < deadline:
        seen += process.stderr.readline()
    assert len(processes_naming(run)) == 3, "the launcher and two training processes"
    process.send_signal(getattr(signal, sig))
    left = none_left_within(run, 10)
    for pid in left:  # not to leave them running after the test
        os.kill(pid, signal.SIGKILL)
    assert not left, f"{sig}: still running after 10 s: {left}"
    rest = process.communicate(timeout=10)[1]
    if sig != "SIGKILL":
        assert process.returncode == 130, seen + rest
        assert "Traceback" not in rest and "death signal" not in rest, rest
        assert rest.count("stopping after this update") == 1, rest
        assert f"transduce train --out {run} --resume" in rest
    report = json.loads((run / "train.json").read_text())
    assert report["stop"] == "interrupted" and report["updates"] >= 20
    assert checkpoint.load(run / "last.pt")["training"]["progress"]["update"] == report["updates"]
    resumed = transduce(  # bounded where it stopped: it tests at once
        "train",
        "-o",
        run,
        "--resume",
        "--nproc",
        "2",
        "--set",
        f"train.max_updates={report['updates']}",
    )
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((run / "train.json").read_text())["test"] is not None


@pytest.mark.skipif(sys.platform == "win32", reason="signals")
def test_a_rank_killed_by_a_signal_is_named_with_the_signal(copy, tmp_path):
    """N10: a rank killed by a signal (as by the out-of-memory killer) is one line naming
    the rank and the signal, not only "another training process stopped first"."""
    config = write_recipe(
        tmp_path / "r.yaml", copy, max_updates=100_000, validate_every=10, max_epochs=None
    )
    run = tmp_path / "run"
    process = nproc_2(config, run)
    assert process.stderr is not None
    seen, deadline = "", time.monotonic() + 120
    while "update 10 " not in seen and time.monotonic() < deadline:
        seen += process.stderr.readline()
    rank_1 = [
        pid
        for pid in processes_naming(run)
        if b"RANK=1\0" in Path(f"/proc/{pid}/environ").read_bytes().replace(b"LOCAL_", b"")
    ]
    assert len(rank_1) == 1, rank_1
    os.kill(rank_1[0], signal.SIGKILL)
    killed = subprocess.CompletedProcess(process.args, 0, "", "")
    killed.stderr = seen + process.communicate(timeout=120)[1]
    killed.returncode = process.returncode
    assert killed.returncode == 2, killed.stderr
    assert "Traceback" not in killed.stderr
    assert (
        "error: rank 1 was killed by SIGKILL (signal 9; the out-of-memory killer sends it)"
        in killed.stderr.splitlines()
    ), killed.stderr


# ------------------------------------------- the CUDA paths, up to the device call


def test_batches_go_to_a_gpu_from_pinned_memory_without_waiting(monkeypatch):
    from transduce.data.batching import collate

    calls = []
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda t: calls.append("pin") or t)
    real_to = torch.Tensor.to

    def to(t, *args, **kwargs):
        if args and str(args[0]).startswith("cuda"):
            calls.append(("to", str(args[0]), kwargs.get("non_blocking")))
            return t
        return real_to(t, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", to)
    batch = collate([[4, 5], [6]], [[7], [8, 9]]).to(torch.device("cuda", 0))
    assert calls == ["pin", ("to", "cuda:0", True)] * 5  # source, masks, targets
    assert batch.index is None
    calls.clear()
    collate([[4]], [[5]]).to("cpu")
    assert "pin" not in calls  # the CPU: no pinned copy


def test_a_gpu_process_takes_its_own_gpu_and_nccl_with_a_gloo_side_group(monkeypatch):
    import torch.distributed as dist

    seen = {}
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: seen.update(device=index))
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(
        dist, "init_process_group", lambda backend, timeout: seen.update(backend=backend)
    )
    monkeypatch.setattr(dist, "new_group", lambda backend: seen.update(side=backend) or "g")
    world = World(rank=3, size=4, local_rank=1, local_size=2)
    assert world.device(torch.device("cuda")) == torch.device("cuda", 1)
    world.start(torch.device("cuda", 1))
    assert seen == {"device": 1, "backend": "nccl", "side": "gloo"}
    assert world.threads(8) == 4 and not world.main
    assert World().device(torch.device("cuda")) == torch.device("cuda")  # one process


def test_nproc_is_refused_beyond_the_gpus_there_are(monkeypatch, tmp_path):
    from transduce import preflight
    from transduce.errors import ConfigError
    from transduce.launch import launch

    monkeypatch.setattr(preflight, "resolve_device", lambda name: torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    config = configuration.parse(recipe(tmp_path, LSTM, precision="fp32"))
    with pytest.raises(ConfigError, match=r"--nproc 2: this machine has 1 CUDA devices"):
        launch(2, config, ["train"])


def _sum_gradients_in(rank: int, port: int, out: str) -> None:
    """One of 2 processes: parameter a has a gradient in both, b in none, c in rank 1."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    os.environ.update(WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK=str(rank))
    world = World.from_environment()
    world.start(torch.device("cpu"))
    a, b, c = (torch.nn.Parameter(torch.zeros(2)) for _ in range(3))
    a.grad = torch.full((2,), float(rank + 1))
    if rank == 1:
        c.grad = torch.tensor([5.0, 6.0])
    world.sum_gradients([a, b, c])
    torch.save({"a": a.grad, "b": b.grad, "c": c.grad}, f"{out}.{rank}")
    world.stop()


def test_gradients_are_summed_and_a_parameter_unused_everywhere_keeps_none(tmp_path):
    """So that Adam skips it, as it does in one process (a zero gradient would move it)."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    mp.spawn(_sum_gradients_in, args=(port, str(tmp_path / "g")), nprocs=2)
    for rank in (0, 1):
        grads = torch.load(tmp_path / f"g.{rank}")
        assert grads["a"].tolist() == [3.0, 3.0] and grads["b"] is None
        assert grads["c"].tolist() == [5.0, 6.0]
