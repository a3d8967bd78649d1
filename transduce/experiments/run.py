"""`experiment run` as a library call: `run_experiment(experiment, directory, executor)`
runs the cells not finished yet with any `Executor` (chosen by name with
`executor_class`, made by its `from_options`), decodes each ensemble as soon as its last
run is done (on the CPU; else after the cells), then those ready before, and says what is
left (`ExperimentRun`). The command only parses its options and prints.

    experiment = spec.load("wu2018-g2p")
    options = ExecutorOptions(workers=2)
    executor = LocalExecutor.from_options(directory, options, experiment.cells, print)
    result = run_experiment(experiment, directory, executor, announce=print)
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transduce.errors import ConfigError
from transduce.experiments import ensembles
from transduce.experiments.runner import (
    DONE,
    FAILED,
    RUNS,
    Executor,
    LocalExecutor,
    Outcome,
    finished,
    state,
    write_state,
)
from transduce.experiments.spec import Cell, Experiment
from transduce.locking import DirectoryLock
from transduce.progress import clock
from transduce.runs import LOCK

EXECUTORS = ("local", "ray")  # the names of `executor_class`


def executor_class(name: str) -> type[Executor]:
    """The executor of that name (Ray's module is imported only when it is chosen)."""
    if name == "local":
        return LocalExecutor
    if name == "ray":
        from transduce.experiments.ray_executor import RayExecutor

        return RayExecutor
    raise ConfigError(f"--executor {name}: unknown (valid: {', '.join(EXECUTORS)})")


def choose_cells(experiment: Experiment, patterns: list[str] | None) -> list[Cell]:
    """The cells whose id matches one of the shell `patterns` (all without any).

    Raises:
        ConfigError: a pattern that matches no cell.
    """
    if not patterns:
        return list(experiment.cells)
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(c.id, pattern) for c in experiment.cells):
            raise ConfigError(
                f"--cells {pattern}: no cell of {experiment.path.name} matches "
                f"(its cells are like {experiment.cells[0].id})"
            )
    return [c for c in experiment.cells if any(fnmatch.fnmatchcase(c.id, p) for p in patterns)]


@dataclass
class ExperimentRun:
    """What `run_experiment` did: the outcomes of this session's cells and ensembles,
    whether a signal stopped it, and what is left."""

    outcomes: list[Outcome]
    decoded: list[ensembles.EnsembleOutcome]  # the ensembles decoded in this session
    stopped: bool
    left: list[Cell]  # chosen cells not finished
    waiting: list[ensembles.Group]  # ensembles whose runs are done, not decoded

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == FAILED]

    @property
    def failed_ensembles(self) -> list[ensembles.EnsembleOutcome]:
        return [o for o in self.decoded if o.status == FAILED]


def run_experiment(
    experiment: Experiment,
    directory: Path,
    executor: Executor,
    cells: list[Cell] | None = None,
    announce: Callable[[str], None] = lambda text: None,
) -> ExperimentRun:
    """Run the `cells` (default: all) of `experiment` not finished yet in `directory`
    with `executor`, and decode its ensembles whose runs are done (here, on this machine),
    keeping cells.json up to date and announcing each outcome; a second `run_experiment`
    of the directory waits for none (its lock refuses it).

    With an executor that `decodes_inline` (local, on the CPU), an ensemble is decoded as
    soon as a cell finishes its last run, in that cell's place (no new cell starts
    meanwhile; the running ones go on), with the executor's threads, so that a grid
    stopped later (a session or a machine that ends) keeps the ensembles of the groups it
    finished. Once the cells are done, the rest (ensembles not tried in this run: ready
    before it, or made ready by other executors) are decoded with the executor's workers
    and threads. An ensemble is tried at most once a run.

    Raises:
        ConfigError: `directory` is a file, or another process runs in it.
    """
    chosen = list(experiment.cells) if cells is None else cells
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"{directory}: exists and is not a directory; choose another --out")
    directory.mkdir(parents=True, exist_ok=True)
    lock = DirectoryLock(directory / LOCK, directory).acquire()
    decoded: list[ensembles.EnsembleOutcome] = []
    try:
        todo = [c for c in chosen if not finished(directory / RUNS / c.id)]
        each = f"{executor.threads} thread{'s' if executor.threads > 1 else ''} each"
        of = f" ({len(chosen)} chosen by --cells)" if len(chosen) < len(experiment.cells) else ""
        announce(
            f"{len(experiment.cells)} cells in {directory}{of}: {len(chosen) - len(todo)} "
            f"finished before, {len(todo)} to run ({executor.describe()}, {each})"
        )

        def save(outcomes: list[Outcome]) -> dict[str, Any]:
            kept = ensembles.states(experiment, directory, decoded) if experiment.ensemble else None
            data = state(experiment, directory, outcomes, kept, todo=[c.id for c in todo])
            write_state(directory, data)
            return data

        def progress(outcomes: list[Outcome]) -> None:
            statuses = [c["status"] for c in save(outcomes)["cells"]]
            last = outcomes[-1]
            timed = [o.seconds for o in outcomes if o.status == DONE]
            left = len(todo) - len(outcomes)
            eta = sum(timed) / len(timed) * left / executor.workers if timed and left else 0
            what = last.status + (f" ({last.error})" if last.error else "")
            announce(
                f"{last.cell.id} {what} in {clock(last.seconds)}: "
                f"{statuses.count(DONE)}/{len(statuses)} done, {statuses.count(FAILED)} failed"
                + (f"; about {clock(eta)} left" if eta else "")
            )

        outcomes: list[Outcome] = []

        def ensemble_progress(done: list[ensembles.EnsembleOutcome]) -> None:
            decoded.append(done[-1])
            save(outcomes)
            last = done[-1]
            what = last.status + (f" ({last.error})" if last.error else "")
            announce(f"the ensemble {last.group.id} {what} in {clock(last.seconds)}")

        tried: set[str] = set()  # the ensembles decoded (or tried) in this run

        def cell_done(cell_outcomes: list[Outcome]) -> None:
            outcomes[:] = cell_outcomes
            progress(cell_outcomes)
            cell = cell_outcomes[-1].cell
            if experiment.ensemble is None or not executor.decodes_inline:
                return
            if cell_outcomes[-1].status != DONE or executor.stopping:
                return
            completed = [
                g
                for g in ensembles.groups(experiment)
                if cell.id in g.members
                and g.id not in tried
                and ensembles.ready(directory, g)
                and ensembles.needs_decoding(directory, g)
            ]
            if not completed:
                return
            tried.update(g.id for g in completed)
            members = [c for c in chosen if any(c.id in g.members for g in completed)]
            try:  # in this cell's place, sharing the executor's signals with its cells
                ensembles.run_all(
                    experiment,
                    directory,
                    1,
                    executor.threads,
                    members,
                    announce,
                    ensemble_progress,
                    executor,
                    executor.processes,
                )
            except OSError as error:  # the cells go on; it is tried again after them
                tried.difference_update(g.id for g in completed)
                announce(f"the ensemble {completed[0].id} could not start ({error}): later")

        save([])
        outcomes[:] = executor.run(todo, cell_done)
        stopped = executor.stopping
        if experiment.ensemble is not None and not stopped:
            done = {m for g in ensembles.groups(experiment) if g.id in tried for m in g.members}
            rest = [c for c in chosen if c.id not in done]
            _, stopped = ensembles.run_all(
                experiment,
                directory,
                executor.workers,
                executor.threads,
                rest,
                announce,
                ensemble_progress,
            )
    finally:
        lock.release()
    return ExperimentRun(
        outcomes,
        list(decoded),
        stopped,
        [c for c in chosen if not finished(directory / RUNS / c.id)],
        [
            g
            for g in ensembles.groups(experiment)
            if ensembles.ready(directory, g) and ensembles.needs_decoding(directory, g)
        ],
    )
