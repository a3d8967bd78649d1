"""The Ray executor (`transduce experiment run ... --executor ray`, the `ray` extra): each
cell is a Ray task asking for `cpus` CPUs and `gpus` GPUs (a fraction lets several small
character-level models share one GPU), which runs the cell's `transduce train` command
where Ray places it. Ray schedules; this module only submits, waits and records.

The run directories must be on a path every node of the cluster sees (they are given to
`transduce train` as absolute paths), as must the data and the Python environment with
transduce installed: a local cluster (`ray.init()`, or `ray start --head` on this machine)
has them all. Ctrl-C cancels the tasks: those not started never start, the running ones
pass a SIGINT to their `transduce train`, which stops after its update and writes last.pt;
the same command again goes on where it stopped.
"""

from __future__ import annotations

import importlib.util
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transduce.errors import ConfigError
from transduce.experiments.runner import (
    FAILED,
    LOGS,
    Executor,
    ExecutorOptions,
    Outcome,
    default_workers,
)
from transduce.experiments.spec import Cell


def train_cell(command: list[str], log: str) -> tuple[int, float]:
    """Run one cell's command with its output appended to `log` (in a Ray worker); its
    exit status and seconds. A cancelled task passes SIGINT on and waits for the run."""
    start = time.monotonic()
    process = None
    with open(log, "ab") as out:
        try:
            process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_sigint_unblocked
            )
            while True:  # short waits: ray.cancel's KeyboardInterrupt comes between them
                try:
                    return process.wait(timeout=0.5), time.monotonic() - start
                except subprocess.TimeoutExpired:
                    continue
        except KeyboardInterrupt:  # ray.cancel: stop after the update, as Ctrl-C does
            if process is None:
                return 130, time.monotonic() - start
            process.send_signal(signal.SIGINT)
            return process.wait(), time.monotonic() - start


def _sigint_unblocked() -> None:
    """In the cell's process: Ray starts its workers with SIGINT blocked, and a child
    inherits the mask; `transduce train` must get the SIGINT of a cancel."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def reachable(address: str, seconds: float = 5.0) -> None:
    """Refuse in one line a HOST:PORT (or ray://HOST:PORT) that nothing listens on: Ray
    itself would wait for minutes."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # "auto", or another form: Ray's to judge
    try:
        socket.create_connection((host, int(port)), timeout=seconds).close()
    except OSError as error:
        raise ConfigError(
            f"--address {address}: no Ray cluster to join ({error.strerror or error})"
        ) from None


class RayExecutor(Executor):
    """Run cells as Ray tasks on the cluster at `address` (None: a local one, started and
    stopped here)."""

    name = "ray"

    def __init__(
        self,
        directory: Path,
        cpus: float,
        gpus: float,
        address: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(directory, max(1, int(cpus)), **kwargs)
        self.cpus, self.gpus, self.address = cpus, gpus, address
        # not Ray's (it places the cells): the ensembles decoded here at once afterwards,
        # and the estimate of the time left
        self.workers = default_workers()

    @classmethod
    def from_options(
        cls,
        directory: Path,
        options: ExecutorOptions,
        cells: list[Cell],
        announce: Callable[[str], None],
    ) -> RayExecutor:
        o = options
        if (o.workers, o.threads, o.per_gpu, o.gpu_memory) != (None, None, None, None):
            raise ConfigError(
                "--workers, --threads, --per-gpu and --gpu-memory are of --executor local "
                "(Ray places cells by --cpus/--gpus)"
            )
        cpus = 1.0 if o.cpus is None else o.cpus
        gpus = 0.0 if o.gpus is None else o.gpus
        for name, value in (("--cpus", cpus), ("--gpus", gpus)):
            if value > 1 and value != int(value):
                raise ConfigError(f"{name} {value:g}: above 1, Ray takes whole numbers only")
        if importlib.util.find_spec("ray") is None:
            raise ConfigError("--executor ray: needs Ray: pip install 'transduce[ray]'")
        if o.address is not None:
            reachable(o.address)
        return cls(directory, cpus, gpus, o.address, data_root=o.data_root, announce=announce)

    def describe(self) -> str:
        return f"as Ray tasks, {self.cpus:g} CPU and {self.gpus:g} GPU"

    def run(self, cells: list[Cell], report: Callable[[list[Outcome]], None]) -> list[Outcome]:
        if not cells:
            return []
        try:
            import ray
        except ImportError:
            raise ConfigError("--executor ray: needs Ray: pip install 'transduce[ray]'") from None
        (self.directory / LOGS).mkdir(parents=True, exist_ok=True)
        started_here = not ray.is_initialized()
        if started_here and self.address is not None:
            reachable(self.address)
        if started_here:
            try:
                ray.init(
                    address=self.address,
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                )
            except (ConnectionError, RuntimeError, ValueError) as error:
                first = str(error).strip().splitlines()[0] if str(error).strip() else ""
                where = f"--address {self.address}: no Ray cluster to join"
                raise ConfigError(
                    f"{where if self.address else 'Ray could not start here'} ({first})"
                ) from None
        have = ray.cluster_resources()
        for name, asked in (("CPU", self.cpus), ("GPU", self.gpus)):
            if asked > have.get(name, 0):
                raise ConfigError(
                    f"--{name.lower()}s {asked:g}: the Ray cluster has {have.get(name, 0):g} "
                    f"{name}s, so no cell could ever start"
                )
        # no retries: a retried task would run a command decided before the first attempt
        task = ray.remote(train_cell).options(num_cpus=self.cpus, num_gpus=self.gpus, max_retries=0)
        outcomes: list[Outcome] = []
        try:
            with self.interrupts():
                waiting = {}
                for cell in cells:
                    command = self.command(cell)
                    waiting[task.remote(command, str(self.log(cell)))] = cell
                    self.announce(f"queued {cell.id}{' (resume)' if '--resume' in command else ''}")
                cancelled = False
                while waiting:
                    if self.stopping and not cancelled:
                        for ref in waiting:
                            ray.cancel(ref)  # not force: a KeyboardInterrupt in the task
                        cancelled = True
                    ready, _ = ray.wait(list(waiting), num_returns=1, timeout=0.2)
                    for ref in ready:
                        cell = waiting.pop(ref)
                        try:
                            code, seconds = ray.get(ref)
                        except ray.exceptions.TaskCancelledError:
                            continue  # never started: still pending
                        except ray.exceptions.RayError as error:
                            lines = [x for x in str(error).strip().splitlines() if x.strip()]
                            why = lines[-1].strip() if lines else type(error).__name__
                            outcomes.append(Outcome(cell, FAILED, 0.0, f"Ray: {why}"))
                            report(outcomes)
                            continue
                        outcomes.append(self.outcome(cell, code, seconds))
                        report(outcomes)
        finally:
            if started_here:
                ray.shutdown()
        return outcomes
