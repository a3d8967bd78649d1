"""An experiment's table: every metric's mean +- std over seeds, per system and dataset,
beside the published numbers.

The numbers are the test scores in each finished cell's train.json (each cell's best
checkpoint on the test split). Per system and dataset: the number of seeds n, the mean
and the sample standard deviation (n - 1 in the denominator; none for one seed), the
published number and the difference (mean - published). Per system over the datasets
("average"): for each seed that every dataset has, the mean over the datasets, then the
mean and standard deviation of those over the seeds, as papers that average languages
report it. Cells not finished are left out and listed.
"""

from __future__ import annotations

import csv
import io
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transduce.experiments.runner import RUNS, finished
from transduce.experiments.spec import AVERAGE, Experiment


@dataclass
class Row:
    """One (system, dataset, metric) of the table."""

    system: str
    dataset: str | None  # None: no datasets; AVERAGE: over the datasets
    metric: str
    values: list[float]  # one per seed

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None

    @property
    def std(self) -> float | None:
        return statistics.stdev(self.values) if len(self.values) > 1 else None


def scores(experiment: Experiment, directory: Path) -> tuple[dict[str, dict], list[str]]:
    """The test scores of each finished cell (by id), and the ids of the others."""
    found, missing = {}, []
    for cell in experiment.cells:
        run_dir = directory / RUNS / cell.id
        if finished(run_dir):
            report = json.loads((run_dir / "train.json").read_text(encoding="utf-8"))
            found[cell.id] = report.get("test") or {}
        else:
            missing.append(cell.id)
    return found, missing


def table(experiment: Experiment, directory: Path) -> dict[str, Any]:
    """The rows of the report, as plain data (what --json writes)."""
    found, missing = scores(experiment, directory)
    metrics = experiment.metrics or sorted({m for s in found.values() for m in s})
    rows: list[Row] = []
    for system in experiment.systems:
        by_seed: dict[str, dict[int, dict[str | None, float]]] = {m: {} for m in metrics}
        for dataset in experiment.datasets:
            for metric in metrics:
                values = []
                for cell in experiment.cells:
                    if (cell.system, cell.dataset) != (system, dataset) or cell.id not in found:
                        continue
                    value = found[cell.id].get(metric)
                    if isinstance(value, int | float):
                        values.append(float(value))
                        by_seed[metric].setdefault(cell.seed, {})[dataset] = float(value)
                rows.append(Row(system, dataset, metric, values))
        if len(experiment.datasets) > 1:
            for metric in metrics:
                complete = [
                    statistics.fmean(per.values())
                    for seed, per in sorted(by_seed[metric].items())
                    if len(per) == len(experiment.datasets)
                ]
                rows.append(Row(system, AVERAGE, metric, complete))
    return {
        "experiment": str(experiment.path),
        "metrics": metrics,
        "rows": [
            {
                "system": r.system,
                "dataset": r.dataset,
                "metric": r.metric,
                "n": r.n,
                "mean": r.mean,
                "std": r.std,
                "values": r.values,
                "published": (
                    published := experiment.published_value(r.system, r.dataset, r.metric)
                ),
                "difference": None if published is None or r.mean is None else r.mean - published,
            }
            for r in rows
        ],
        "cells_done": len(found),
        "cells": len(experiment.cells),
        "not_done": missing,
    }


def _number(value: float | None, digits: int = 2) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _cell(row: dict[str, Any]) -> str:
    if row["mean"] is None:
        return "–"
    std = f" ± {row['std']:.2f}" if row["std"] is not None else ""
    return f"{row['mean']:.2f}{std} (n={row['n']})"


def markdown(data: dict[str, Any]) -> str:
    """One Markdown table per metric: a row per system and dataset (the averages last),
    mean ± std (n), the published number and the difference."""
    out = []
    for metric in data["metrics"]:
        rows = [r for r in data["rows"] if r["metric"] == metric]
        with_datasets = any(r["dataset"] is not None for r in rows)
        out.append(f"### {metric}\n")
        head = (
            ["system"]
            + (["dataset"] if with_datasets else [])
            + [f"{metric} mean ± std (n)", "published", "difference"]
        )
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "|".join(["---"] * (len(head) - 3) + ["--:"] * 3) + "|")
        ordered = [r for r in rows if r["dataset"] != AVERAGE] + [
            r for r in rows if r["dataset"] == AVERAGE
        ]
        for r in ordered:
            cells = [r["system"]] + ([r["dataset"] or ""] if with_datasets else [])
            cells += [_cell(r), _number(r["published"]), _number(r["difference"])]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    done = f"{data['cells_done']} of {data['cells']} cells finished"
    if data["not_done"]:
        done += "; not finished: " + ", ".join(data["not_done"])
    out.append(done)
    return "\n".join(out) + "\n"


def csv_text(data: dict[str, Any]) -> str:
    """A CSV row per (system, dataset, metric)."""
    out = io.StringIO()
    columns = ["system", "dataset", "metric", "n", "mean", "std", "published", "difference"]
    writer = csv.DictWriter(out, columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(data["rows"])
    return out.getvalue()
