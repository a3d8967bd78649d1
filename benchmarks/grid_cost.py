"""What an experiment's grid costs on W workers, from its runs' own records (issue 29's
target: the 52-language SIGMORPHON 2017 medium grid, 3 seeds, overnight on a 2-core
laptop, 8 hours at most).

Reads DIR, an experiment's folder (`experiment run --out DIR`, or its committed copy in
results/): its cells.json and each cell's train.json. A finished run costs its training
and validation time (`training_seconds`, all sessions) plus what its process spends
outside them (preparing the data, loading, the test decode; the median of the runs whose
train.json covers a single session, where `wall_seconds` minus `training_seconds` is
that); a decoded ensemble costs its recorded seconds (the median of those recorded, for
the others). With `--basis cpu` (the default) a one-thread run whose train.json counts
`cpu_seconds` costs those instead of its training time: that is close to its time alone
on a quiet machine, however loaded the machine was, whereas
`training_seconds` of a run that shared its cores is an upper bound. The report says
how many runs each basis timed.

The grid's wall time on W workers is then the makespan of the cells started in the
experiment's order, each on the first free worker (as `experiment run --workers W` starts
them), the ensembles in their last seed's place: `measured_hours` over the finished cells,
`projected_hours` with each unfinished cell at its system's median. Prints one JSON line.

    python benchmarks/grid_cost.py DIR [--workers 2] [--cells 'small-ref.*'] [--basis cpu|training]
"""

from __future__ import annotations

import argparse
import fnmatch
import heapq
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from transduce.runs import RunReport

TARGET_HOURS = 8.0  # issue 29: the medium grid overnight on 2 cores


def makespan(costs: list[float], workers: int) -> float:
    """The wall time of `costs` started in order, each on the first free of `workers`."""
    free = [0.0] * workers
    for cost in costs:
        heapq.heappush(free, heapq.heappop(free) + cost)
    return max(free)


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


def grid_cost(
    directory: Path, workers: int = 2, patterns: list[str] | None = None, basis: str = "cpu"
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
    for cell in cells:
        report = RunReport.read(directory / cell["run_dir"] / "train.json")
        if report is not None and report.finished and report.training_seconds is not None:
            reports[cell["id"]] = report
    outside = [
        r.fields["wall_seconds"] - r.training_seconds
        for r in reports.values()
        if isinstance(r.fields.get("wall_seconds"), int | float)
        and r.fields["wall_seconds"] >= r.training_seconds  # one session: it covers them all
    ]
    overhead = statistics.median(outside) if outside else 0.0
    cost: dict[str, float] = {}
    timed_by = {"cpu_seconds": 0, "training_seconds": 0}
    for cell_id, report in reports.items():
        one_thread = report.fields.get("threads") == 1  # CPU time is the wall time's match
        if basis == "cpu" and one_thread and report.cpu_seconds is not None:
            cost[cell_id], key = report.cpu_seconds, "cpu_seconds"
        else:
            cost[cell_id], key = float(report.training_seconds or 0.0), "training_seconds"
        timed_by[key] += 1
        cost[cell_id] += overhead
    systems: dict[str, dict[str, Any]] = {}
    for cell in cells:
        entry = systems.setdefault(cell["system"], {"cells": 0, "finished": 0, "costs": []})
        entry["cells"] += 1
        if cell["id"] in cost:
            entry["finished"] += 1
            entry["costs"].append(cost[cell["id"]])
    ids = {c["id"] for c in cells}
    groups = [g for g in state.get("ensembles") or [] if set(g["members"]) <= ids]
    decoded = [g["seconds"] for g in groups if isinstance(g.get("seconds"), int | float)]
    ensemble_cost = statistics.median(decoded) if decoded else 0.0
    last_member = {g["members"][-1]: g for g in groups}

    def costs(project: bool) -> list[float]:
        out = []
        for cell in cells:
            costs_of_system = systems[cell["system"]]["costs"]
            if cell["id"] in cost:
                out.append(cost[cell["id"]])
            elif project and costs_of_system:
                out.append(statistics.median(costs_of_system))
            else:
                continue
            group = last_member.get(cell["id"])
            if group is not None and (project or group.get("status") == "done"):
                seconds = group.get("seconds")
                out.append(seconds if isinstance(seconds, int | float) else ensemble_cost)
        return out

    unprojected = [s for s, e in systems.items() if not e["costs"]]
    measured, projected = costs(project=False), costs(project=True)
    return {
        "benchmark": "grid_cost",
        "directory": str(directory),
        "experiment": state.get("experiment"),
        "cells": len(cells),
        "finished": len(cost),
        "ensembles": len(groups),
        "workers": workers,
        "basis": basis,
        "timed_by": timed_by,  # finished runs timed by each field of train.json
        "outside_training_s": round(overhead, 1),  # per run, the median (n below)
        "outside_training_n": len(outside),
        "ensemble_s": round(ensemble_cost, 1),  # the median of the decoded ones
        "per_system": {
            s: {"cells": e["cells"], "finished": e["finished"], "minutes": spread(e["costs"])}
            for s, e in systems.items()
        },
        "measured_hours": round(makespan(measured, workers) / 3600, 2),
        # each unfinished cell at its system's median; None if a system has no finished run
        "projected_hours": None if unprojected else round(makespan(projected, workers) / 3600, 2),
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
        print(json.dumps(grid_cost(args.directory, args.workers, args.cells, args.basis)))
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
