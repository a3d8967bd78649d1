"""What an experiment's grid costs on W workers, from its runs' own records (issue 29's
target: the 52-language SIGMORPHON 2017 medium grid, 3 seeds, overnight on a 2-core
laptop, 8 hours at most).

Reads DIR, an experiment's folder (`experiment run --out DIR`, or its committed copy in
results/): its cells.json, each cell's train.json and each ensemble's ensemble.json.

- A finished run costs its training and validation time (`training_seconds`, all
  sessions) plus what its process spends outside them (preparing the data, loading, the
  test decode): the median, over the runs whose `wall_seconds` (the last session's) is at
  least their `training_seconds`, of the difference (approximate: a resumed run whose
  last session was its longest counts too).
- With `--basis cpu` (the default), a run of one process and one thread on the CPU whose
  train.json counts `cpu_seconds` costs those instead of its training time: an estimate
  of its time alone on the machine, less swayed by other processes on the cores than
  `training_seconds`, which is an upper bound for a run that shared them. Other runs (on a
  GPU, of several threads or processes) cost their training time. The report says how
  many runs each basis timed.
- A decoded ensemble costs the seconds its ensemble.json records (else the median of
  those recorded; 0 where none is).

The grid's wall time on W workers is then simulated as `experiment run --workers W` runs
it: the cells start in the experiment's order, each on the first free worker, and an
ensemble is decoded on the worker whose run finished its last member, at once, before
that worker takes the next cell. `measured_hours`: the finished cells and the decoded
ensembles; `projected_hours`: every cell and ensemble, an unfinished cell at the median of
its system's finished runs on the same dataset, else on all datasets. Machines differ (the
same recipe ran twice as fast on one session's 2-core EPYC as on another's), so the hours
hold for the machines in the runs' `machine`. `--device cpu` counts only the runs trained on
the CPU as finished, and projects the others like unfinished ones (at the median of the CPU
runs), and an ensemble decoded on a GPU (its ensemble.json's `device`) at the median of the
CPU's decodes: what a grid costs on cores alone when some of it ran on a GPU.
Prints one JSON line.

    python benchmarks/grid_cost.py DIR [--workers 2] [--cells 'small-ref.*'] [--basis cpu|training]
        [--device any|cpu]
"""

from __future__ import annotations

import argparse
import collections
import fnmatch
import heapq
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from transduce.runs import RunReport

TARGET_HOURS = 8.0  # issue 29: the medium grid overnight on 2 cores


def schedule(
    cells: list[tuple[str, float]],
    ensembles: list[tuple[list[str], float]] | None = None,
    workers: int = 2,
) -> float:
    """The wall time of `cells` (id, seconds), started in order, each on the first free of
    `workers`, and of `ensembles` (members, seconds), each decoded on the worker that
    finished its last member, as soon as it did, before that worker's next cell. An
    ensemble with a member not among `cells` is not decoded."""
    ensembles = ensembles or []
    left = [set(members) for members, _ in ensembles]  # each ensemble's unfinished members
    groups: dict[str, list[int]] = {}
    for index, (members, _) in enumerate(ensembles):
        for member in members:
            groups.setdefault(member, []).append(index)
    queue = collections.deque(cells)
    # (when a worker is free, the worker, the cell it has just finished: "" for none)
    free: list[tuple[float, int, str]] = [(0.0, w, "") for w in range(workers)]
    end = 0.0
    while free:
        time, worker, finished = heapq.heappop(free)
        end = max(end, time)
        decode = 0.0
        for index in groups.get(finished, []):
            left[index].discard(finished)
            if not left[index]:
                decode += ensembles[index][1]
        if decode:
            heapq.heappush(free, (time + decode, worker, ""))
        elif queue:
            cell, seconds = queue.popleft()
            heapq.heappush(free, (time + seconds, worker, cell))
    return end


def spread(values: list[float]) -> dict[str, Any]:
    """Median, range and count, in minutes (None where there are no values)."""
    if not values:
        return {"n": 0, "median": None, "min": None, "max": None}
    minutes = [v / 60 for v in values]
    return {
        "n": len(values),
        "median": round(statistics.median(minutes), 2),
        "min": round(min(minutes), 2),
        "max": round(max(minutes), 2),
    }


def run_cost(report: RunReport, basis: str) -> tuple[float, str]:
    """A finished run's seconds of training and validation, and the train.json field they
    come from (see the module's docstring)."""
    fields = report.fields
    alone = fields.get("processes", 1) == 1 and fields.get("threads") == 1
    if basis == "cpu" and alone and report.on_cpu and report.cpu_seconds is not None:
        return report.cpu_seconds, "cpu_seconds"
    return float(report.training_seconds or 0.0), "training_seconds"


def grid_cost(
    directory: Path,
    workers: int = 2,
    patterns: list[str] | None = None,
    basis: str = "cpu",
    device: str = "any",
) -> dict[str, Any]:
    """The report (see the module's docstring) for the experiment folder `directory`."""
    state = json.loads((directory / "cells.json").read_text(encoding="utf-8"))
    cells = [
        c
        for c in state["cells"]
        if not patterns or any(fnmatch.fnmatchcase(c["id"], p) for p in patterns)
    ]
    if not cells:
        raise ValueError(f"{directory}: no cell matches {' or '.join(patterns or [])}")
    reports: dict[str, RunReport] = {}
    elsewhere = 0  # finished, but not on `device`: projected as if unfinished
    for cell in cells:
        report = RunReport.read(directory / cell["run_dir"] / "train.json")
        if report is not None and report.finished and report.training_seconds is not None:
            if device == "cpu" and not report.on_cpu:
                elsewhere += 1
                continue
            reports[cell["id"]] = report
    outside = [
        r.fields["wall_seconds"] - r.training_seconds
        for r in reports.values()
        if isinstance(r.fields.get("wall_seconds"), int | float)
        and r.fields["wall_seconds"] >= r.training_seconds
    ]
    overhead = statistics.median(outside) if outside else 0.0
    cost: dict[str, float] = {}
    timed_by = {"cpu_seconds": 0, "training_seconds": 0}
    for cell_id, report in reports.items():
        seconds, key = run_cost(report, basis)
        cost[cell_id] = seconds + overhead
        timed_by[key] += 1
    by_system: dict[str, list[float]] = {}
    by_dataset: dict[tuple[str, Any], list[float]] = {}
    for cell in cells:
        if cell["id"] in cost:
            by_system.setdefault(cell["system"], []).append(cost[cell["id"]])
            by_dataset.setdefault((cell["system"], cell.get("dataset")), []).append(
                cost[cell["id"]]
            )
    ids = {c["id"] for c in cells}
    groups = [g for g in state.get("ensembles") or [] if set(g["members"]) <= ids]
    recorded: dict[str, float] = {}
    for group in groups:
        path = directory / group.get("directory", f"ensembles/{group['id']}") / "ensemble.json"
        try:
            facts = json.loads(path.read_text(encoding="utf-8"))
            seconds, where = facts.get("seconds"), str(facts.get("device") or "cpu")
        except (OSError, ValueError, AttributeError):
            seconds, where = group.get("seconds"), "cpu"
        if device == "cpu" and not where.startswith("cpu"):
            continue  # decoded on a GPU: costed as the CPU's decodes are
        if isinstance(seconds, int | float) and not isinstance(seconds, bool):
            recorded[group["id"]] = float(seconds)
    ensemble_cost = statistics.median(recorded.values()) if recorded else 0.0

    def median_for(cell: dict[str, Any]) -> float | None:
        same = by_dataset.get((cell["system"], cell.get("dataset"))) or by_system.get(
            cell["system"]
        )
        return statistics.median(same) if same else None

    measured = [(c["id"], cost[c["id"]]) for c in cells if c["id"] in cost]
    unprojected = sorted({c["system"] for c in cells if median_for(c) is None})
    projected = [
        (c["id"], cost[c["id"]] if c["id"] in cost else median_for(c) or 0.0) for c in cells
    ]
    decoded = [
        (g["members"], recorded.get(g["id"], ensemble_cost))
        for g in groups
        if g.get("status") == "done" and set(g["members"]) <= set(cost)
    ]
    every = [(g["members"], recorded.get(g["id"], ensemble_cost)) for g in groups]
    return {
        "benchmark": "grid_cost",
        "directory": str(directory),
        "experiment": state.get("experiment"),
        "cells": len(cells),
        "finished": len(cost),
        "ensembles": len(groups),
        "ensembles_decoded": len(decoded),
        "workers": workers,
        "basis": basis,
        "device": device,
        "finished_elsewhere": elsewhere,  # finished on another device: projected (--device)
        "timed_by": timed_by,  # finished runs timed by each field of train.json
        "outside_training_s": round(overhead, 1),  # per run, the median (n below)
        "outside_training_n": len(outside),
        "ensemble_s": round(ensemble_cost, 1),  # the median of those recorded (n below)
        "ensemble_n": len(recorded),
        "machines": dict(
            collections.Counter(r.machine for r in reports.values() if r.machine is not None)
        ),
        "per_system": {
            system: {
                "cells": sum(c["system"] == system for c in cells),
                "finished": len(by_system.get(system, [])),
                "minutes": spread(by_system.get(system, [])),
            }
            for system in dict.fromkeys(c["system"] for c in cells)
        },
        "measured_hours": round(schedule(measured, decoded, workers) / 3600, 2),
        # each unfinished cell at its median; None where a system has no finished run
        "projected_hours": None
        if unprojected
        else round(schedule(projected, every, workers) / 3600, 2),
        "not_projected": unprojected,
        "target_hours": TARGET_HOURS,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path, help="runs/EXPERIMENT or results/EXPERIMENT")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--cells", action="append", help="only cells whose id matches (repeatable; fnmatch)"
    )
    parser.add_argument("--basis", choices=("cpu", "training"), default="cpu")
    parser.add_argument(
        "--device", choices=("any", "cpu"), default="any", help="cpu: only CPU runs as measured"
    )
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error(f"--workers {args.workers}: at least 1")
    if not (args.directory / "cells.json").is_file():
        print(
            f"error: {args.directory}: no cells.json (an experiment's --out folder, or "
            f"results/EXPERIMENT)",
            file=sys.stderr,
        )
        return 2
    try:
        print(
            json.dumps(grid_cost(args.directory, args.workers, args.cells, args.basis, args.device))
        )
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
