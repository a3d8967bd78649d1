"""Running an experiment's cells: each one `transduce train` in a process of its own, in
EXP_DIR/runs/CELL_ID/, N at a time on this machine (the local executor; the Ray executor
is `transduce.experiments.ray_executor`).

The run directories are the state: a cell whose train.json says it finished is skipped
(not even started, so its files are untouched), one with a last.pt is continued with
`--resume`, any other is started. Re-running the same command after a Ctrl-C, a crash or
a kill therefore goes on where it stopped and redoes nothing that finished.

A Ctrl-C, SIGTERM or SIGHUP (at the terminal, `kill -INT PID`, `kill PID`, a closed
terminal) is passed on to the running cells as a Ctrl-C: each stops after its update and
writes last.pt, as `transduce train` does, and no new cell starts; the command exits with
130 once they have. The cells run in sessions of their own, so that every signal reaches
them once, through this process, whichever way it was sent (a `kill -INT` to this
process alone stopped nothing when they shared its process group and a terminal's Ctrl-C
was left to reach them); a second one stops them at once, as a second Ctrl-C stops
`transduce train`. A cell whose runner died (kill -9) stops as at Ctrl-C by itself
(`io.stop_with_parent`). Job control is not passed on: Ctrl-Z suspends this process, not
the cells, which train on. (This is the local executor; the Ray executor cancels its
tasks, `transduce.experiments.ray_executor`.)
A cell that fails (its exit status, and the last line of its log in
EXP_DIR/logs/CELL_ID.log) is reported and does not stop the others. EXP_DIR/cells.json
records every cell's state (done, failed, interrupted, pending) after each change.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from transduce import defaults, recipe_loader
from transduce.errors import EXIT_INTERRUPTED, ConfigError
from transduce.experiments.spec import Cell, EnsembleSpec, Experiment
from transduce.io import atomic_write_text, child_environment
from transduce.runs import RunDir, RunReport

RUNS, LOGS, STATE = "runs", "logs", "cells.json"
STOPPING = "\n{}: the running cells stop after their update; no new cell starts\n"
# what stops an experiment, each passed on to the running cells as a Ctrl-C
STOP_SIGNALS = {"SIGINT": "Ctrl-C", "SIGTERM": "SIGTERM", "SIGHUP": "SIGHUP"}
DONE, FAILED, INTERRUPTED, PENDING, RUNNING = "done", "failed", "interrupted", "pending", "running"


def run_report(run_dir: Path) -> RunReport | None:
    """The train.json of the run in `run_dir`, if it is one of the shape `train` writes;
    None if there is none, or it is unreadable or damaged (the run counts as not finished,
    so `experiment run` resumes it, which writes it again)."""
    return RunDir(run_dir).read_report()


def finished(run_dir: Path) -> bool:
    """Whether the run in `run_dir` has finished (`RunReport.finished`)."""
    report = run_report(run_dir)
    return report is not None and report.finished


PER_GPU = 4  # cells at once on each GPU, by default (`benchmarks/gpu_check.py` measures 1-8)


def visible_gpus() -> list[str]:
    """The GPUs the cells may use, as CUDA_VISIBLE_DEVICES names them for a child process
    (this process's own list where it has one; none where torch sees no GPU)."""
    import torch

    if not torch.cuda.is_available():
        return []
    count = torch.cuda.device_count()
    named = [n.strip() for n in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    if "CUDA_VISIBLE_DEVICES" in os.environ and all(named):
        return named[:count]
    return [str(index) for index in range(count)]


def default_workers(gpus: int = 0, per_gpu: int = PER_GPU) -> int:
    """One cell per core, at most 8 (threads then go to the cells: `threads_per_cell`);
    with GPUs, `per_gpu` cells on each, as far as there are cores."""
    cores = os.cpu_count() or 1
    if gpus:
        return max(1, min(cores, gpus * per_gpu))
    return max(1, min(cores, 8))


def threads_per_cell(workers: int) -> int:
    return max(1, (os.cpu_count() or 1) // workers)


@dataclass
class Outcome:
    """What became of a cell in this session."""

    cell: Cell
    status: str
    seconds: float = 0.0
    error: str | None = None


def last_line(log: Path) -> str:
    try:
        lines = [line.strip() for line in log.read_text("utf-8", "replace").splitlines()]
    except OSError:
        return ""
    return next((line for line in reversed(lines) if line), "")


class Stopping:
    """Ctrl-C, SIGTERM and SIGHUP while child processes run: `stopping` once one came (no
    new process starts); each is passed on to the children as a Ctrl-C (`pass_on`), which
    run in sessions of their own (`sessions`: while `interrupts` handles the signals, i.e.
    in the main thread), out of reach of a terminal's Ctrl-C, so that each gets every
    signal exactly once. Several loops of processes may share one (the
    ensembles that `experiment run` decodes while its cells run): each process is given
    each signal once, whichever loop passes it on."""

    def __init__(self) -> None:
        self.stopping = False
        self._signals = 0  # the signals had, each to pass on as a Ctrl-C
        self._passed: dict[int, int] = {}  # how many of them each process (pid) was given
        # whether children start in sessions of their own: only while this process handles
        # the signals to pass on; elsewhere (not the main thread) a terminal's Ctrl-C must
        # still reach them itself
        self.sessions = False

    @contextlib.contextmanager
    def interrupts(self) -> Iterator[None]:
        """While running: the first Ctrl-C, SIGTERM or SIGHUP sets `stopping`; each is
        counted, for `pass_on` to give the children."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        outer = self.sessions
        self.sessions = True

        def stop(signum: int, frame: Any) -> None:
            if not self.stopping:  # a raw write: a signal may come in the middle of a print
                what = STOP_SIGNALS.get(signal.Signals(signum).name, "a signal")
                with contextlib.suppress(OSError):
                    os.write(2, STOPPING.format(what).encode())
            self.stopping = True
            self._signals += 1

        names = [name for name in STOP_SIGNALS if hasattr(signal, name)]
        previous = {name: signal.signal(getattr(signal, name), stop) for name in names}
        try:
            yield
        finally:
            self.sessions = outer
            for name, handler in previous.items():
                signal.signal(getattr(signal, name), handler)

    def pass_on(self, processes: Iterable[subprocess.Popen[bytes]]) -> None:
        """Give each of the running `processes` a Ctrl-C (SIGINT) for each stop signal this
        process has had and it was not given yet."""
        for process in processes:
            while self._passed.get(process.pid, 0) < self._signals and process.poll() is None:
                self._passed[process.pid] = self._passed.get(process.pid, 0) + 1
                with contextlib.suppress(OSError):
                    process.send_signal(signal.SIGINT)


@dataclass
class ExecutorOptions:
    """The options of `experiment run` that place cells, as given (None: not given); each
    executor refuses those of the others (`Executor.from_options`)."""

    workers: int | None = None
    threads: int | None = None
    per_gpu: int | None = None
    gpu_memory: float | None = None
    address: str | None = None
    cpus: float | None = None
    gpus: float | None = None
    data_root: str | Path | None = None


class Executor(Stopping, ABC):
    """What every executor does: the `transduce train` command of a cell, its log, what
    its exit status means, and Ctrl-C (`stopping`: no new cell starts). A kind of
    executor implements `run` and `from_options`, and is named in `EXECUTORS`."""

    name: ClassVar[str]
    workers: int  # cells at once (for the estimate of the time left)
    # whether `experiment run` decodes an ensemble in the place of the cell that finished
    # its last run, while the others run on (executors that place cells on GPUs or other
    # machines decode them after the cells, where nothing else runs beside them)
    decodes_inline: bool = False

    def __init__(
        self,
        directory: Path,
        threads: int,
        data_root: str | Path | None = None,
        announce: Callable[[str], None] = lambda text: None,
    ) -> None:
        super().__init__()
        self.directory, self.threads = Path(directory), threads
        self.data_root, self.announce = data_root, announce

    @classmethod
    @abstractmethod
    def from_options(
        cls,
        directory: Path,
        options: ExecutorOptions,
        cells: list[Cell],
        announce: Callable[[str], None],
    ) -> Executor:
        """The executor for `cells`, from the options of `experiment run`.

        Raises:
            ConfigError: an option of another executor, a bad value, or what it needs is
                missing (a GPU, Ray).
        """

    @abstractmethod
    def run(self, cells: list[Cell], report: Callable[[list[Outcome]], None]) -> list[Outcome]:
        """Run `cells` (those not finished); `report` is called after each outcome."""

    def describe(self) -> str:
        """How it runs the cells, for the first line of `experiment run`."""
        return f"{self.workers} at a time"

    def processes(self) -> list[subprocess.Popen[bytes]]:
        """The cells' processes running on this machine now (for `pass_on` by another
        loop that shares this executor's signals)."""
        return []

    def command(self, cell: Cell) -> list[str]:
        """The `transduce train` command of a cell (`--resume` when it has a last.pt)."""
        run_dir = self.directory / RUNS / cell.id
        recipe = str(Path(cell.recipe).resolve()) if Path(cell.recipe).is_file() else cell.recipe
        command = [sys.executable, "-m", "transduce", "train", "--config", recipe]
        command += ["--out", str(run_dir.resolve())]
        for override in (f"train.threads={self.threads}", *cell.overrides):  # the file's last
            command += ["--set", override]
        # absolute: a cell may run elsewhere (a Ray worker), in another directory
        root, _ = recipe_loader.data_root(self.data_root)
        command += ["--data-root", os.path.abspath(root.expanduser())]
        return command + (["--resume"] if RunDir(run_dir).resumable() else [])

    def log(self, cell: Cell) -> Path:
        return (self.directory / LOGS / f"{cell.id}.log").resolve()

    def outcome(self, cell: Cell, code: int, seconds: float) -> Outcome:
        if code == 0:
            return Outcome(cell, DONE, seconds)
        if code == EXIT_INTERRUPTED or (self.stopping and code < 0):
            return Outcome(cell, INTERRUPTED, seconds)
        return Outcome(cell, FAILED, seconds, f"exit {code}: {last_line(self.log(cell))}")


class LocalExecutor(Executor):
    """Run cells as `transduce train` processes on this machine, `workers` at a time.
    Each runs in a session of its own; this command passes the signals on (`Stopping`).

    With `gpus` (CUDA_VISIBLE_DEVICES names), each cell is given one of them, the one
    running the fewest cells, and at most `per_gpu` cells share a GPU (a cell waits for a
    place); `gpu_memory` (a fraction) caps what each cell's PyTorch may allocate on it."""

    name = "local"

    def __init__(
        self,
        directory: Path,
        workers: int,
        threads: int,
        gpus: Iterable[str] = (),
        per_gpu: int = PER_GPU,
        gpu_memory: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(directory, threads, **kwargs)
        self.workers, self.gpus, self.per_gpu = workers, list(gpus), per_gpu
        self.gpu_memory = gpu_memory
        self.decodes_inline = not self.gpus  # on the CPU: an ensemble takes a cell's place
        self._running: dict[subprocess.Popen[bytes], tuple[Cell, float]] = {}

    @classmethod
    def from_options(
        cls,
        directory: Path,
        options: ExecutorOptions,
        cells: list[Cell],
        announce: Callable[[str], None],
    ) -> LocalExecutor:
        o = options
        if o.address is not None or o.cpus is not None or o.gpus is not None:
            raise ConfigError("--address, --cpus and --gpus are options of --executor ray")
        gpus = visible_gpus()
        if (o.per_gpu is not None or o.gpu_memory is not None) and not gpus:
            raise ConfigError("--per-gpu and --gpu-memory: torch sees no GPU on this machine")
        if all(c.device == "cpu" for c in cells):  # train.device: cpu: no GPU to share
            gpus = []
        per_gpu = o.per_gpu or PER_GPU
        workers = o.workers or default_workers(len(gpus), per_gpu)
        threads = o.threads or threads_per_cell(workers)
        return cls(
            directory,
            workers,
            threads,
            gpus,
            per_gpu,
            o.gpu_memory,
            data_root=o.data_root,
            announce=announce,
        )

    def describe(self) -> str:
        how = f"{self.workers} at a time"
        if self.gpus:
            many = "s" if len(self.gpus) > 1 else ""
            how += f" on {len(self.gpus)} GPU{many}, at most {self.per_gpu} on each"
        return how

    def processes(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self._running if p.poll() is None]

    def place(self, placed: Iterable[str | None]) -> str | None:
        """The GPU for the next cell, given those of the running cells (None: no place)."""
        taken = list(placed)
        free = [gpu for gpu in self.gpus if taken.count(gpu) < self.per_gpu]
        return min(free, key=taken.count) if free else None

    def environment(self, gpu: str | None) -> dict[str, str]:
        env = child_environment()  # it stops if this process is killed
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = gpu
            if self.gpu_memory is not None:
                env[defaults.GPU_MEMORY_ENV] = f"{self.gpu_memory:g}"
        return env

    def run(self, cells: list[Cell], report: Callable[[list[Outcome]], None]) -> list[Outcome]:
        """Run `cells` (those not finished); `report` is called after each change."""
        (self.directory / LOGS).mkdir(parents=True, exist_ok=True)
        pending = list(cells)
        running: dict[subprocess.Popen[bytes], tuple[Cell, float]] = {}
        self._running = running  # the same dict: `processes` sees it change
        placed: dict[subprocess.Popen[bytes], str | None] = {}  # each running cell's GPU
        outcomes: list[Outcome] = []
        with self.interrupts():
            while pending or running:
                while pending and len(running) < self.workers and not self.stopping:
                    on_gpu = bool(self.gpus) and pending[0].device != "cpu"
                    gpu = self.place(placed.values()) if on_gpu else None
                    if on_gpu and gpu is None:
                        break  # every GPU has its `per_gpu` cells
                    cell = pending.pop(0)
                    command = self.command(cell)
                    with open(self.log(cell), "ab") as log:
                        process = subprocess.Popen(
                            command,
                            stdout=log,
                            stderr=subprocess.STDOUT,
                            env=self.environment(gpu),
                            start_new_session=self.sessions,
                        )
                    running[process] = (cell, time.monotonic())
                    placed[process] = gpu
                    where = f" on GPU {gpu}" if gpu is not None else ""
                    what = "resumed" if "--resume" in command else "started"
                    self.announce(f"{what} {cell.id}{where}")
                self.pass_on(running)
                if self.stopping and not running:
                    break
                time.sleep(0.1)
                for process in [p for p in running if p.poll() is not None]:
                    cell, started = running.pop(process)
                    placed.pop(process, None)
                    code = process.returncode
                    outcomes.append(self.outcome(cell, code, time.monotonic() - started))
                    report(outcomes)
        return outcomes


def state(
    experiment: Experiment,
    directory: Path,
    outcomes: list[Outcome],
    ensembles: list[dict[str, Any]] | None = None,
    todo: Iterable[str] = (),
) -> dict[str, Any]:
    """Every cell's state: done (now or before), failed, interrupted, running or pending;
    and the ensembles' (`ensembles.states`), when the experiment has any. A cell of `todo`
    (ids: the cells this session runs) is done once its outcome says so, not when its
    train.json is written: it is counted when it is reported."""
    latest = {o.cell.id: o for o in outcomes}
    running = set(todo)
    before = recorded_seconds(directory)  # a done cell not run again keeps its seconds
    cells = []
    for cell in experiment.cells:
        outcome = latest.get(cell.id)
        run_dir = directory / RUNS / cell.id
        status = (
            outcome.status
            if outcome is not None
            else DONE
            if cell.id not in running and finished(run_dir)
            else INTERRUPTED
            if RunDir(run_dir).resumable()
            else PENDING
        )
        cells.append(
            {
                "id": cell.id,
                "system": cell.system,
                "dataset": cell.dataset,
                "seed": cell.seed,
                "status": status,
                "seconds": entry_seconds(outcome, before.get(cell.id), status == DONE),
                "error": None if outcome is None else outcome.error,
                "run_dir": str(Path(RUNS) / cell.id),
            }
        )
    return {
        "experiment": str(experiment.path),
        "systems": experiment.systems,
        "datasets": experiment.datasets,
        "seeds": experiment.seeds,
        "metrics": experiment.metrics,
        "published": experiment.published,
        "score": experiment.score,
        "references": experiment.references,
        "search": experiment.search,
        "baseline": experiment.baseline,
        "variants": experiment.variants,
        "ensemble": None if experiment.ensemble is None else experiment.ensemble.as_dict(),
        "cells": cells,
        **({"ensembles": ensembles} if ensembles is not None else {}),
    }


def entry_seconds(outcome: Any, recorded: float | None, done: bool) -> float | None:
    """The seconds of a cells.json entry: its outcome's in this run (`outcome.seconds`),
    else, done before this run, what cells.json recorded for it."""
    if outcome is not None:
        return round(outcome.seconds, 1)
    return recorded if done else None


def recorded_seconds(
    directory: Path, part: str = "cells", statuses: tuple[str, ...] = (DONE,)
) -> dict[str, float]:
    """The seconds that the directory's cells.json records for each done cell (`part`
    "cells"; "ensembles": each ensemble whose status is one of `statuses`), by id: the
    wall time of the `experiment run` that finished it (of a resumed run, its last
    session's), kept by the runs after it; none where the file is missing or unreadable,
    and none for an entry that is not as `state` writes it."""
    try:
        cells = json.loads((directory / STATE).read_text(encoding="utf-8"))[part]
        iter(cells)
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    found: dict[str, float] = {}
    for c in cells:  # an entry that is not as `state` writes it is skipped, alone
        if not isinstance(c, dict) or not isinstance(c.get("id"), str):
            continue
        seconds = c.get("seconds")
        if (
            c.get("status") in statuses
            and isinstance(seconds, int | float)
            and not isinstance(seconds, bool)
            and math.isfinite(seconds)
        ):
            found[c["id"]] = float(seconds)
    return found


def write_state(directory: Path, data: dict[str, Any]) -> None:
    atomic_write_text(directory / STATE, json.dumps(data, indent=1) + "\n")


# the shape of cells.json: key -> the kinds it may be
STATE_SHAPE: dict[str, tuple[type, ...]] = {
    "experiment": (str,),
    "cells": (list,),
    "systems": (list,),
    "datasets": (list,),
    "seeds": (list,),
    "metrics": (list, type(None)),
    "published": (dict, type(None)),
    "score": (dict, type(None)),
    "references": (dict, type(None)),
    "search": (dict, type(None)),
    "baseline": (str, type(None)),
    "variants": (str, type(None)),
    "ensemble": (dict, type(None)),
}


def state_problem(data: Any) -> str | None:
    """What in a cells.json is not of the shape `experiment run` writes (None: nothing)."""
    if not isinstance(data, dict):
        return f"it is {type(data).__name__}, not a JSON object"
    for key, kinds in STATE_SHAPE.items():
        if key not in data:
            if type(None) in kinds:
                continue
            return f"no {key!r}"
        if isinstance(data[key], bool) or not isinstance(data[key], kinds):
            return f"its {key!r} is {data[key]!r:.60}, not what experiment run writes"
    for number, cell in enumerate(data["cells"], 1):
        if not isinstance(cell, dict) or not all(k in cell for k in ("system", "dataset", "seed")):
            return f"its cell {number} is not an object with system, dataset and seed"
    if any(not isinstance(name, str) for name in data.get("metrics") or []):
        return "its 'metrics' holds a value that is not a metric's name"
    return None


def read_state(directory: Path) -> Experiment:
    """The experiment an experiment directory holds (its cells.json), for reports."""
    path = Path(directory) / STATE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        problem = state_problem(data)
        if problem:
            raise ConfigError(f"{path}: not an experiment's cells.json: {problem}")
        cells = [Cell(c["system"], c["dataset"], int(c["seed"]), "", ()) for c in data["cells"]]
        return Experiment(
            Path(data["experiment"]),
            cells,
            list(data["systems"]),
            list(data["datasets"]),
            list(data["seeds"]),
            data.get("metrics"),
            data.get("published") or {},
            score=data.get("score") or {},
            ensemble=(
                EnsembleSpec(
                    tuple(data["ensemble"]["systems"]),
                    data["ensemble"]["mean"],
                    bool(data["ensemble"].get("tie_break_rules", False)),  # older: none
                )
                if data.get("ensemble")
                else None
            ),
            references=data.get("references") or {},
            search=data.get("search") or {},
            baseline=data.get("baseline"),
            variants=data.get("variants") or "merge",
        )
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: no such file: {directory} is not an experiment directory "
            "(`transduce experiment run` makes one)"
        ) from None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ConfigError(f"{path}: not an experiment's cells.json ({error})") from None
