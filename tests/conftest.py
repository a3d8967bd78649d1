"""Shared fixtures: the CLI runner, fixture files, and the optional real datasets."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from transduce.cli import app

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).parent.parent

# `train.precision: auto` trains in bfloat16 on CPUs with native bfloat16 and in float32
# elsewhere; the tests train as on a CPU without it (in this process and its children),
# so that they run the same on every machine. Tests of `auto` set it themselves.
os.environ["TRANSDUCE_NATIVE_BF16"] = "0"

# A test run started in the background by a non-interactive shell (`pytest &`) inherits
# SIGINT ignored, and Python then installs no KeyboardInterrupt handler: the Ctrl-C tests
# need the handler a terminal gives, in this process and the runs it starts.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Every test not marked `cuda` means the CPU, and runs as on a machine without a GPU on a
# machine with one too: `train.device: auto`, `--device auto`, the precision `auto` picks
# and `--nproc` (gloo) then take the CPU path, in the test processes (torch.cuda.is_available()
# is False) and in the processes they start (an empty CUDA_VISIBLE_DEVICES). It is done
# here, once for the session, so that module-scoped fixtures (a toy run trained for a whole
# module) are on the CPU too; the tests marked `cuda` see the GPUs again (`gpus_visible`).
# The precision is pinned above ($TRANSDUCE_NATIVE_BF16). The machine's own
# CUDA_VISIBLE_DEVICES is kept in $TRANSDUCE_TESTS_CUDA_VISIBLE_DEVICES for pytest-xdist's
# workers, which start from this process's environment.
SAVED_VISIBLE = "TRANSDUCE_TESTS_CUDA_VISIBLE_DEVICES"
UNSET = "<unset>"
if SAVED_VISIBLE in os.environ:  # a pytest-xdist worker: see the machine's GPUs first
    if os.environ[SAVED_VISIBLE] == UNSET:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = os.environ[SAVED_VISIBLE]
else:
    os.environ[SAVED_VISIBLE] = os.environ.get("CUDA_VISIBLE_DEVICES", UNSET)

# One thread per process, in this process and the ones it starts (PyTorch's default is one
# per core): the suite runs tests side by side (`pytest -n 2`) and many tests start
# training processes, and OpenMP threads of several processes on the same cores wait for
# each other (a 4-update run of a 7M-parameter transformer took 53 s with 2 threads on 2
# busy cores, 9 s with 1). $TRANSDUCE_TEST_THREADS (`tests.toy.toy_threads`) sets another
# count, to show the suite passes with it (a machine's $OMP_NUM_THREADS is overridden).
TEST_THREADS = int(os.environ.get("TRANSDUCE_TEST_THREADS", "1"))
os.environ["OMP_NUM_THREADS"] = str(TEST_THREADS)

import torch  # noqa: E402  (after the environment is settled: CUDA reads it once)

torch.set_num_threads(TEST_THREADS)

HAS_GPU = torch.cuda.is_available()  # the devices CUDA sees are fixed from here on
_REAL_IS_AVAILABLE = torch.cuda.is_available
NO_GPU = "torch sees no CUDA device (the tests marked cuda run on a machine with a GPU)"


def hide_gpus() -> None:
    """Run as on a machine without a GPU, here and in the processes started from here."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    torch.cuda.is_available = lambda: False


def show_gpus() -> None:
    """The machine's GPUs, here and in the processes started from here."""
    if os.environ[SAVED_VISIBLE] == UNSET:
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        os.environ["CUDA_VISIBLE_DEVICES"] = os.environ[SAVED_VISIBLE]
    torch.cuda.is_available = _REAL_IS_AVAILABLE


hide_gpus()


@pytest.fixture(scope="module")
def gpus_visible():
    """For a module of tests marked `cuda` (autouse there, so that its module-scoped
    fixtures see the GPUs too): the GPUs, then hidden again."""
    show_gpus()
    yield
    hide_gpus()


# the longest tests, started first: under `-n 2 --dist load` (CI's run of the tests marked
# `long`) one that starts last keeps a worker busy after the other has finished. Under the
# default `--dist loadfile` (pyproject.toml) xdist hands out whole files, most tests first,
# and this order holds within each file. The first two (3 and 1.5 minutes of CPU) are
# marked `long`, the others (half a minute each) run by default.
LONGEST_FIRST = (
    "test_the_readme_examples_run",
    "test_interrupted_halfway_and_run_again_every_cell_is_done_once",
    "test_every_family_decodes_as_decode_does_without_transduce",
    "test_the_seeds_of_a_system_decode_the_test_split_as_one_ensemble",
    "test_two_processes_under_torchrun_match_one_process",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest tests first (`LONGEST_FIRST`, the rest in their order); the tests marked
    `cuda` are skipped, with the reason, where torch sees no GPU."""
    items.sort(key=lambda item: item.name not in LONGEST_FIRST)  # stable
    if HAS_GPU:
        return
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(pytest.mark.skip(reason=NO_GPU))


@pytest.fixture
def inductor_cache(monkeypatch) -> None:
    """TorchInductor's cache apart for each ATEN_CPU_CAPABILITY: its cache keys leave the
    variable out, so code compiled under one setting was reused under another and failed
    to build (seen with `default` after runs without it); a machine keeps one setting."""
    capability = os.environ.get("ATEN_CPU_CAPABILITY", "native")
    user = os.environ.get("USER", "user")
    where = Path(tempfile.gettempdir()) / f"transduce-inductor-{user}-{capability}"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(where))


def benchmark_script(name: str) -> Any:
    """benchmarks/NAME.py as a module (the scripts are not part of the package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def transduce_env() -> dict[str, str]:
    """The environment for real subprocesses: this Python's scripts first on PATH."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.pop("COLUMNS", None)
    env.pop("PYTHONUNBUFFERED", None)  # stdout buffered, as a user's shell has it
    return env


def processes_naming(text: str | Path) -> list[int]:
    """The processes (not zombies) whose command line holds `text` (Linux: /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue  # gone meanwhile
            if str(text).encode() in command:
                found.append(int(entry.name))
    return found


def none_left_within(text: str | Path, seconds: float) -> list[int]:
    """`processes_naming(text)` once none is left, or after `seconds`."""
    import time

    deadline = time.monotonic() + seconds
    while (left := processes_naming(text)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def shared_data() -> Path | None:
    """The real datasets ($TRANSDUCE_SHARED_DATA, the recipes' data root $TRANSDUCE_DATA,
    or ../shared/data), if present."""
    candidates = [
        os.environ.get("TRANSDUCE_SHARED_DATA"),
        os.environ.get("TRANSDUCE_DATA"),
        REPO.parent / "shared" / "data",
    ]
    for candidate in candidates:
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return None


@pytest.fixture
def data() -> Path:
    return DATA


@pytest.fixture
def shared() -> Path:
    path = shared_data()
    if path is None:
        pytest.skip("real datasets not found (set TRANSDUCE_SHARED_DATA)")
    return path


@pytest.fixture
def run():
    """Invoke the CLI in-process: run("score", "a", "b") -> click Result."""
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None):
        return runner.invoke(app, [str(a) for a in args], input=input)

    return invoke
