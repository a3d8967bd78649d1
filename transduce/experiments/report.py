"""An experiment's table: every metric's mean +- std over seeds, per system and dataset,
beside the published numbers.

The numbers are the test scores in each finished cell's train.json (each cell's best
checkpoint on the test split), and its test monotonicity (`spec.MONOTONICITY`). Per system
and dataset: the number of seeds n, the mean and the sample standard deviation (n - 1 in
the denominator; none for one seed), the published number and the difference (mean -
published). Per system over the datasets ("average"): for each seed that every dataset
has, the mean over the datasets, then the mean and standard deviation of those over the
seeds, as papers that average languages report it. Cells not finished are left out and
listed.

The ensembles of the seeds (`experiments.ensembles`) are rows of their own, `SYSTEM
(ensemble of K)` (and `SYSTEM (ensemble of K, rule tie-break)`): per dataset the score in
its ensemble.json (n = 1), and over the datasets their mean where every dataset has its
ensemble; an ensemble whose members changed since it
was decoded is left out and named. With `--dev` (`split="dev"`) the rows are each cell's
best validation (its averaged model's, `train.average_best_last`) and each ensemble's
dev scores (decoded as a validation decodes). The
references (systems not run here) are a column each beside the mean, their average the
mean over the experiment's datasets where they have every one, and `against_references`
counts per system the datasets where it is better.
With a baseline system (`baseline:` of the experiment file), every other system's row
(per dataset, and the average) has the difference of its mean from the baseline's and the
two-sided p-value of Welch's t-test over the seeds (`experiments.significance`: unequal
variances, Welch-Satterthwaite degrees of freedom; None with fewer than 2 seeds on either
side, or no variance on both); the ensembles' rows (one number each) are not compared.
Over the datasets (`paired_over_datasets`), the paired t-test and Wilcoxon's signed-rank
test compare two rows' per-dataset means on the datasets where both are complete: each
ensemble against its own runs (what ensembling adds), and, with a baseline, each other
system against the baseline's runs and each other ensemble against the baseline's
ensemble. `experiment report --baseline SYSTEM` names the baseline for one report
(instead of the experiment file's, or where it has none).
Everything comes from cells.json, the runs' train.json and test.predictions and the
ensembles' files, so a copy of those alone (`experiments.export`) gives the same table.

`plot` draws the learning curves of every cell (`experiment report --plot FILE`).
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import io
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transduce import defaults, runlog
from transduce.errors import TransduceError
from transduce.experiments import ensembles, significance
from transduce.experiments.runner import RUNS, finished, run_report
from transduce.experiments.spec import AVERAGE, MONOTONICITY, Experiment
from transduce.runs import RunDir, RunReport


@dataclass
class Row:
    """One (system, dataset, metric) of the table."""

    system: str
    dataset: str | None  # None: no datasets; AVERAGE: over the datasets
    metric: str
    values: list[float]  # one per seed (an ensemble's: its one score)
    members: int | None = None  # an ensemble's row: of this many runs

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None

    @property
    def std(self) -> float | None:
        return statistics.stdev(self.values) if len(self.values) > 1 else None


def scores(
    experiment: Experiment,
    directory: Path,
    reports: dict[str, RunReport] | None = None,
    unscored: dict[str, str] | None = None,
    split: str = "test",
) -> tuple[dict[str, dict], list[str]]:
    """The test scores of each finished cell (by id), with the test split's monotonicity
    where the run measured it (`MONOTONICITY`), and the ids of the others; `reports` gets
    each finished cell's train.json (its stop, seconds, machine), `unscored` why a cell
    could not be scored again
    (`rescore`: it then counts without those metrics). With `split="dev"`: the dev scores
    and monotonicity of each cell's model instead (`best_dev`: its best validation, or its
    averaged model's)."""
    found, missing = {}, []
    for cell in experiment.cells:
        run_dir = directory / RUNS / cell.id
        report = run_report(run_dir) if finished(run_dir) else None
        if report is not None:
            if reports is not None:
                reports[cell.id] = report
            if split == "dev":
                found[cell.id] = best_dev(report)
                continue
            found[cell.id] = dict(report.test_scores or {})
            if experiment.score and report.test_scores is not None:
                try:
                    found[cell.id].update(
                        rescore(cell.id, run_dir, report, experiment.score, experiment.variants)
                    )
                except TransduceError as error:  # the cell counts without those metrics
                    for name in experiment.score:
                        found[cell.id].pop(name, None)
                    if unscored is not None:
                        unscored[cell.id] = str(error)
            overall = (report.get("test_monotonicity") or {}).get("overall") or {}
            for name, key in MONOTONICITY.items():
                if isinstance(overall.get(key), int | float):
                    found[cell.id][name] = overall[key]
        else:
            missing.append(cell.id)
    return found, missing


def best_dev(report: RunReport) -> dict[str, float]:
    """The dev scores (and dev monotonicity, `MONOTONICITY`) of a run's model
    (`RunReport.model_dev`): its best validation, the validation of train.json's `history`
    at the update its `best` names, or where the run averaged (`train.average_best_last`),
    the averaged model's validation (train.json's `final`)."""
    entry = report.model_dev()
    scores = entry.get("dev_scores") or {}
    out = {k: float(v) for k, v in scores.items() if isinstance(v, int | float)}
    overall = (entry.get("dev_monotonicity") or {}).get("overall") or {}
    for name, key in MONOTONICITY.items():
        if isinstance(overall.get(key), int | float):
            out[name] = float(overall[key])
    return out


def rescore(
    cell: str,
    run_dir: Path,
    report: RunReport,
    options: dict[str, dict[str, Any]],
    variants: str = "merge",
) -> dict[str, float]:
    """The metrics of `options` (METRIC: its options) scored again, as `transduce score`
    scores them, from the run's test.predictions against the prepared test split it was
    tested on (the one recorded in train.json, else RUN_DIR/data; either only if its hash
    is the recorded one); `variants`: "each" scores every line against its own reference
    (no merging of a source's lines, `--no-merge-variants`).

    Raises:
        TransduceError: no such test split, test.predictions changed since the run wrote
            it, or the files cannot be scored (naming the cell).
    """
    data = report.data
    return _rescore(
        cell,
        RunDir(run_dir).predictions,
        (data.get("outputs") or {}).get("test.tsv"),
        test_candidates(run_dir, report),
        data.get("test_predictions_sha256"),
        options,
        variants,
    )


def test_candidates(run_dir: Path, report: RunReport) -> list[Path]:
    """Where a run's test split may be: its prepared data directory, else RUN_DIR/data."""
    data = report.data
    candidates = [Path(data["directory"]) / "test.tsv"] if data.get("directory") else []
    return [*candidates, RunDir(run_dir).data / "test.tsv"]  # where `train` prepares raw data


def _rescore(
    name: str,
    predictions: Path,
    expected: str | None,
    candidates: list[Path],
    written: str | None,
    options: dict[str, dict[str, Any]],
    variants: str = "merge",
) -> dict[str, float]:
    """`rescore` of a predictions file: the first candidate test split of the `expected`
    hash (any, if None); `written`: the hash the predictions had when written."""
    from transduce.io import sha256_file
    from transduce.scoring import ScoreRequest, score_request

    same = [
        c for c in candidates if c.is_file() and (expected is None or sha256_file(c) == expected)
    ]
    problem = f"{name}: cannot score its test.predictions again: "
    if not same:
        raise TransduceError(
            problem
            + f"no test split it was tested on (looked for {', '.join(map(str, candidates))})"
        )
    if written and predictions.is_file() and sha256_file(predictions) != written:
        raise TransduceError(problem + "it changed since the run wrote it")
    request = ScoreRequest(
        str(predictions),
        [str(same[0])],
        list(options),
        ref_col=2,
        metric_options=options,
        merge_variants=False if variants == "each" else None,
    )
    try:
        result = score_request(request)[0]
    except TransduceError as error:
        raise TransduceError(problem + str(error)) from None
    return {label: score["value"] for label, score in result["scores"].items()}


def ensemble_scores(
    experiment: Experiment,
    directory: Path,
    unscored: dict[str, str] | None = None,
    missing: list[str] | None = None,
    stale: list[str] | None = None,
    split: str = "test",
) -> dict[str, dict[str, float]]:
    """The test scores of each up-to-date ensemble (by `Group.id`), from its ensemble.json
    alone (and its test.predictions, for the metrics of `score:`); `missing` gets the ids of
    those not decoded, `stale` of those whose members changed since, `unscored` why one
    could not be scored again (it then counts without those metrics). `split="dev"`: the
    dev scores instead (as decoded, not scored again), `missing` also gets those decoded
    before ensembles scored the dev split."""
    found = {}
    for group in ensembles.groups(experiment):
        data = ensembles.record(directory, group)
        if data is None or not isinstance(data.get(split), dict):
            if missing is not None:
                missing.append(group.id)
            continue
        if not ensembles.up_to_date(directory, group, data):
            if stale is not None:
                stale.append(group.id)
            continue
        found[group.id] = dict(data[split])
        if experiment.score and split == "test":
            candidates = []
            for member in group.members:
                run_dir = directory / RUNS / member
                report = run_report(run_dir) or RunReport()
                candidates += test_candidates(run_dir, report)
            try:
                found[group.id].update(
                    _rescore(
                        f"ensemble {group.id}",
                        directory / ensembles.ENSEMBLES / group.id / ensembles.PREDICTIONS,
                        data.get("test_sha256"),
                        list(dict.fromkeys(candidates)),
                        data.get("test_predictions_sha256"),
                        experiment.score,
                        experiment.variants,
                    )
                )
            except TransduceError as error:
                for name in experiment.score:
                    found[group.id].pop(name, None)
                if unscored is not None:
                    unscored[f"ensemble {group.id}"] = str(error)
    return found


def table(
    experiment: Experiment, directory: Path, split: str = "test", baseline: str | None = None
) -> dict[str, Any]:
    """The rows of the report, as plain data (what --json writes). `split="dev"`: each
    cell's best validation instead of its test scores, each ensemble's dev scores, and no
    references or published numbers (those are test numbers). `baseline`: a system of the
    experiment to compare the others with, instead of the experiment file's.

    Raises:
        TransduceError: `baseline` is not a system of the experiment.
    """
    if baseline is not None:
        if baseline not in experiment.systems:
            raise TransduceError(
                f"--baseline: {baseline!r} is not a system of the experiment in {directory} "
                f"(valid: {', '.join(experiment.systems)})"
            )
        experiment = dataclasses.replace(experiment, baseline=baseline)
    reports: dict[str, RunReport] = {}
    unscored: dict[str, str] = {}
    found, missing = scores(experiment, directory, reports, unscored, split)
    stops = {cell: str(r.stop) for cell, r in reports.items()}

    def each(field: str) -> dict[str, Any]:  # a RunReport property, where it has one
        values = {cell: getattr(r, field) for cell, r in reports.items()}
        return {cell: value for cell, value in values.items() if value is not None}

    not_decoded: list[str] = []
    stale: list[str] = []
    combined = ensemble_scores(experiment, directory, unscored, not_decoded, stale, split)
    if split == "dev":
        experiment = dataclasses.replace(experiment, published={}, references={})
    metrics = experiment.metrics or sorted({m for s in found.values() for m in s})
    rows: list[Row] = []
    by_system: dict[str, dict[str, list[ensembles.Group]]] = {}  # system: label: groups
    for group in ensembles.groups(experiment):
        by_system.setdefault(group.system, {}).setdefault(group.label, []).append(group)
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
        for kind in by_system.get(system, {}).values():  # the ensembles, then tie-broken
            rows += _ensemble_rows(kind, combined, metrics, experiment)
    data: dict[str, Any] = {
        "experiment": str(experiment.path),
        "split": split,
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
                "ensemble": r.members,  # an ensemble of this many runs (None: the runs)
                "published": (
                    published := experiment.published_value(r.system, r.dataset, r.metric)
                ),
                "difference": None if published is None or r.mean is None else r.mean - published,
                # systems not run here: their number on this dataset (average: their mean
                # over the experiment's datasets, where they have every one)
                "references": {
                    name: experiment.reference_value(name, r.dataset, r.metric)
                    for name in experiment.references
                },
            }
            for r in rows
        ],
        "reference_names": list(experiment.references),
        "baseline": experiment.baseline,  # the system of each row's against_baseline
        "significance": significance.TEST if experiment.baseline else None,
        "cells_done": len(found),
        "cells": len(experiment.cells),
        "seeds": len(experiment.seeds),
        "not_done": missing,
        "ensembles": len(ensembles.groups(experiment)),
        "ensembles_done": len(combined),
        # runs whose model is final.pt (train.average_best_last): tested and, with --dev,
        # read on dev as that averaged model
        "averaged": sorted(cell for cell, report in reports.items() if report.final),
        "ensembles_not_done": not_decoded,  # not decoded (yet)
        "ensembles_out_of_date": stale,  # a member changed since: not shown
        "score": experiment.score,  # metrics scored again from test.predictions
        "variants": experiment.variants,  # each: every test line against its own reference
        "unscored": unscored,  # cells that could not be: counted without those metrics
        "training_seconds": each("training_seconds"),  # of each finished cell, all sessions
        # the same cells' CPU seconds, where counted, of the runs trained on the CPU (a GPU
        # run's host process is not its cost)
        "cpu_seconds": {
            cell: seconds for cell, seconds in each("cpu_seconds").items() if reports[cell].on_cpu
        },
        "machines": each("machine"),  # what trained each, where its train.json says
        # finished at a training limit, not by early stopping: maybe short of convergence
        "at_limit": {
            cell: stop for cell, stop in stops.items() if stop.startswith(defaults.STOP_AT_LIMIT)
        },
    }
    for row, against in zip(data["rows"], against_baseline(data), strict=True):
        row["against_baseline"] = against
    # metric: system: reference: datasets where the system's mean is better, of those compared
    data["against_references"] = against_references(data)
    groups = ensembles.groups(experiment)
    plain = {(g.system, g.dataset): g.label for g in groups if not g.tie_break}
    data["paired"] = paired_over_datasets(
        data,
        {g.label: g.system for g in groups},
        {g.label: plain[(g.system, g.dataset)] for g in groups if g.tie_break},
    )
    data["search"] = ranking(experiment, directory)
    return data


def paired_over_datasets(
    data: dict[str, Any],
    ensemble_of: dict[str, str],
    tie_broken_of: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Per metric, two rows' per-dataset means compared by the paired t-test
    (`significance.paired`) on the datasets where both rows are complete (every seed of
    the experiment; an ensemble: decoded): each ensemble (`ensemble_of`: its label, its
    system) against its own system's runs, each tie-broken ensemble (`tie_broken_of`: its
    label, the plain ensemble's) against the plain one, and with a baseline, each other
    system against the baseline's runs and each other ensemble against the baseline's
    ensemble of the same kind (its runs where it has none). Each:
    {"metric", "a", "b", "n", "difference" (mean of a - b), "higher", "lower" (datasets),
    "t", "df", "p"} (the test's numbers None where it is undefined); pairs with no dataset
    in common are left out."""
    baseline = data.get("baseline")
    systems = list(dict.fromkeys(r["system"] for r in data["rows"] if r["ensemble"] is None))
    tie_broken_of = tie_broken_of or {}
    pairs = [(label, system) for label, system in ensemble_of.items()]
    pairs += list(tie_broken_of.items())
    if baseline is not None:
        # an ensemble against the baseline's ensemble of its kind where it has one (the
        # same kind of model on both sides), else against the baseline's runs
        def theirs(label: str) -> str:
            kind = label in tie_broken_of
            return next(
                (
                    other
                    for other, s in ensemble_of.items()
                    if s == baseline and (other in tie_broken_of) == kind
                ),
                baseline,
            )

        pairs = (
            [(s, baseline) for s in systems if s != baseline]
            + pairs
            + [
                (label, theirs(label))
                for label, system in ensemble_of.items()
                if system != baseline
            ]
        )
    out = []
    for metric in data["metrics"]:
        means: dict[str, dict[str, float]] = {}
        for r in data["rows"]:
            complete = r["n"] == (1 if r["ensemble"] is not None else data["seeds"])
            if r["metric"] == metric and r["dataset"] not in (None, AVERAGE) and complete:
                means.setdefault(r["system"], {})[r["dataset"]] = r["mean"]
        for a, b in pairs:
            both = [d for d in means.get(a, {}) if d in means.get(b, {})]
            test = significance.paired([means[a][d] for d in both], [means[b][d] for d in both])
            if test is not None:
                out.append({"metric": metric, "a": a, "b": b, **dataclasses.asdict(test)})
    return out


def ranking(experiment: Experiment, directory: Path) -> dict[str, Any]:
    """Each random search's trials ranked by their best dev score (train.json's `best`:
    the score of the run's select_on at its best validation; its `final` one, where the run
    averaged, `train.average_best_last`): per dataset the mean over
    the finished seeds, then the mean over the datasets searched, those where any trial of
    the search has a finished run (a search run on some datasets only, with `--cells`, is
    ranked on those); a trial without a finished run on every dataset searched is not
    ranked (listed last)."""
    from transduce.metrics import METRICS

    out = {}
    for base, search in experiment.search.items():
        metric = None
        found = []
        for trial, values in search["trials"].items():
            per_dataset: dict[str | None, list[float]] = {}
            for cell in experiment.cells:
                run_dir = directory / RUNS / cell.id
                report = run_report(run_dir) if finished(run_dir) else None
                if cell.system != trial or report is None:
                    continue
                best = report.best  # by the run's model's dev score (final.pt's, if any)
                final = report.final.get("dev_scores") or {}
                score = final.get(best.get("metric")) if report.final else best.get("score")
                if isinstance(score, int | float) and best.get("metric") in METRICS:
                    metric = metric or best["metric"]
                    per_dataset.setdefault(cell.dataset, []).append(float(score))
            found.append((trial, values, per_dataset))
        searched = [d for d in experiment.datasets if any(d in f[2] for f in found)]
        entries = []
        for trial, values, per_dataset in found:
            every = bool(searched) and len(per_dataset) == len(searched)
            dev = (
                statistics.fmean(statistics.fmean(v) for v in per_dataset.values())
                if every
                else None
            )
            runs = sum(map(len, per_dataset.values()))
            entries.append({"trial": trial, "values": values, "dev": dev, "n": runs})
        higher = METRICS[metric].higher_is_better if metric else True
        ranked = sorted(
            (e for e in entries if e["dev"] is not None),
            key=lambda e: -e["dev"] if higher else e["dev"],
        )
        for rank, entry in enumerate(ranked, 1):
            entry["rank"] = rank
        rest = [{**e, "rank": None} for e in entries if e["dev"] is None]
        out[base] = {
            "metric": metric,
            "seed": search["seed"],
            "datasets": searched,
            "trials": ranked + rest,
        }
    return out


def _ensemble_rows(
    groups: list[ensembles.Group],
    combined: dict[str, dict[str, float]],
    metrics: list[str],
    experiment: Experiment,
) -> list[Row]:
    """A system's ensemble rows: one per dataset (its one score), and, with several
    datasets, their mean where every dataset has its ensemble."""
    if not groups:
        return []
    rows = []
    label = groups[0].label
    size = len(groups[0].members)
    for metric in metrics:
        values = {}
        for group in groups:
            value = (combined.get(group.id) or {}).get(metric)
            if isinstance(value, int | float):
                values[group.dataset] = float(value)
            rows.append(
                Row(
                    label,
                    group.dataset,
                    metric,
                    [values[group.dataset]] if group.dataset in values else [],
                    size,
                )
            )
        if len(experiment.datasets) > 1:
            every = len(values) == len(experiment.datasets)
            mean = [statistics.fmean(values.values())] if every else []
            rows.append(Row(label, AVERAGE, metric, mean, size))
    return rows


def against_baseline(data: dict[str, Any]) -> list[dict[str, float | None] | None]:
    """Per row of `data`, its mean against the baseline system's on the same dataset (or
    average) and metric: {"difference": mean - the baseline's mean, "t", "df", "p": Welch's
    t-test over the seeds, two-sided}; the test's numbers None where it is undefined (fewer
    than 2 seeds on either side, or no variance on both), the difference None where either
    has no number. None for every row without a baseline, for the baseline's own rows and
    for the ensembles' rows."""
    baseline = data.get("baseline")
    theirs = {
        (r["dataset"], r["metric"]): r["values"]
        for r in data["rows"]
        if r["system"] == baseline and r["ensemble"] is None
    }
    out: list[dict[str, float | None] | None] = []
    for row in data["rows"]:
        if baseline is None or row["system"] == baseline or row["ensemble"] is not None:
            out.append(None)
            continue
        ours, other = row["values"], theirs.get((row["dataset"], row["metric"])) or []
        test = significance.welch(ours, other)
        out.append(
            {
                "difference": (
                    statistics.fmean(ours) - statistics.fmean(other) if ours and other else None
                ),
                "t": None if test is None else test.t,
                "df": None if test is None else test.df,
                "p": None if test is None else test.p,
            }
        )
    return out


def against_references(data: dict[str, Any]) -> dict[str, dict[str, dict[str, dict[str, int]]]]:
    """metric: system row: reference: {"better", "equal", "of"}: on how many datasets the
    row's mean is better than the reference (by the metric's direction), equal to it, of
    those where both have a number; metrics without a direction (monotonicity) left out."""
    from transduce.metrics import METRICS

    out: dict[str, dict[str, dict[str, dict[str, int]]]] = {}
    for metric in data["metrics"]:
        kind = METRICS.get(metric.split("_")[0])
        if kind is None or metric in MONOTONICITY or not data.get("reference_names"):
            continue
        higher = kind.higher_is_better
        per_system = out.setdefault(metric, {})
        for row in data["rows"]:
            if row["metric"] != metric or row["dataset"] in (None, AVERAGE) or row["mean"] is None:
                continue
            for name, value in row["references"].items():
                counts = per_system.setdefault(row["system"], {}).setdefault(
                    name, {"better": 0, "equal": 0, "of": 0}
                )
                if value is None:
                    continue
                counts["of"] += 1
                if row["mean"] == value:
                    counts["equal"] += 1
                elif (row["mean"] > value) == higher:
                    counts["better"] += 1
    return out


def _number(value: float | None, scale: float | None = None) -> str:
    """Two decimals for numbers of magnitude 1 and more (WER 29.38 ± 0.05), three
    significant digits for smaller ones (LEV 0.128, L_mono 5.12e-05); `scale`: the
    magnitude that decides (a metric's largest number, so that a column is alike)."""
    if value is None:
        return ""
    scale = value if scale is None else scale
    return f"{value:.2f}" if scale == 0 or abs(scale) >= 1 else f"{value:.3g}"


def _column_scale(rows: list[dict[str, Any]]) -> float:
    """The largest magnitude among a metric's means and published numbers."""
    numbers = [abs(r[k]) for r in rows for k in ("mean", "published") if r[k] is not None]
    numbers += [abs(v) for r in rows for v in r.get("references", {}).values() if v is not None]
    return max(numbers, default=0.0)


def _p_value(against: dict[str, Any] | None) -> str:
    """A p-value with three decimals (below 0.001: "< 0.001"); "–" where the test is
    undefined; blank for a row not compared."""
    if against is None:
        return ""
    p = against["p"]
    return "–" if p is None else "< 0.001" if p < 0.001 else f"{p:.3f}"


def _cell(row: dict[str, Any], scale: float) -> str:
    if row["mean"] is None:
        return "–"
    std = f" ± {_number(row['std'], scale)}" if row["std"] is not None else ""
    return f"{_number(row['mean'], scale)}{std} (n={row['n']})"


def markdown(data: dict[str, Any]) -> str:
    """One Markdown table per metric: a row per system and dataset (the averages last),
    mean ± std (n), a column per reference (systems not run here), the published number
    and the difference; with a baseline system, the difference from its mean and the
    p-value (`against_baseline`), and a line that says which test; then, per system and
    reference, on how many datasets it is better."""
    out = []
    references = data.get("reference_names") or []
    baseline = data.get("baseline")
    compared = [f"vs {baseline}", "p"] if baseline else []
    counts = against_references(data)
    for metric in data["metrics"]:
        rows = [r for r in data["rows"] if r["metric"] == metric]
        scale = _column_scale(rows)  # one number format per metric
        with_datasets = any(r["dataset"] is not None for r in rows)
        again = (data.get("score") or {}).get(metric)
        how = [f"{k}={v}" for k, v in (again or {}).items()]
        if data.get("variants") == "each":
            how.append("each line against its own reference")
        dev = data.get("split") == "dev"
        out.append(
            f"### {metric}"
            + (
                " (dev: each run's best validation"
                + (" or averaged model's" if data.get("averaged") else "")
                + (", each ensemble's dev split" if data.get("ensembles_done") else "")
                + ")"
                if dev
                else ""
            )
            + (
                f" (scored again from test.predictions{': ' if how else ''}{', '.join(how)})"
                if again is not None and not dev
                else ""
            )
            + "\n"
        )
        head = (
            ["system"]
            + (["dataset"] if with_datasets else [])
            + [f"{metric} mean ± std (n)", *references, "published", "difference", *compared]
        )
        numeric = 3 + len(references) + len(compared)
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "|".join(["---"] * (len(head) - numeric) + ["--:"] * numeric) + "|")
        ordered = [r for r in rows if r["dataset"] != AVERAGE] + [
            r for r in rows if r["dataset"] == AVERAGE
        ]
        for r in ordered:
            cells = [r["system"]] + ([r["dataset"] or ""] if with_datasets else [])
            cells += [
                _cell(r, scale),
                *(_number(r["references"].get(name), scale) for name in references),
                _number(r["published"], scale),
                _number(r["difference"], scale),
            ]
            if baseline:
                against = r.get("against_baseline")
                difference = None if against is None else against["difference"]
                mark = "–" if against is not None and difference is None else ""
                cells += [_number(difference, scale) or mark, _p_value(against)]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
        if baseline:
            out.append(
                f"vs {baseline}: the mean minus {baseline}'s (on the same dataset, or the "
                f"average); p: {significance.TEST} (unequal variances, Welch-Satterthwaite "
                "degrees of freedom; – with fewer than 2 seeds on either side, or no variance on "
                "both).\n"
            )
        lines = []
        for system, against in counts.get(metric, {}).items():  # metrics with a direction
            word = "above" if _higher(metric) else "below"
            phrases = [
                f"{word} {name} on {c['better']} of {c['of']}"
                + (f" ({c['equal']} equal)" if c["equal"] else "")
                for name, c in against.items()
                if c["of"]
            ]
            if phrases:
                lines.append(f"- {system}: " + "; ".join(phrases))
        if lines:  # only where a reference has numbers for this metric
            better = "higher" if _higher(metric) else "lower"
            out += [f"Datasets where the mean is better ({better} {metric}):\n", *lines, ""]
    out += _paired_lines(data)
    for base, search in (data.get("search") or {}).items():
        out.append(_search_table(base, search))
    done = f"{data['cells_done']} of {data['cells']} cells finished"
    if data["not_done"]:
        done += "; not finished: " + ", ".join(data["not_done"])
    out.append(done)
    if data.get("averaged"):
        out.append(
            f"{len(data['averaged'])} of them tested (and read on dev) as the mean of their "
            "best.pt and last.pt (train.average_best_last)"
        )
    if data.get("ensembles"):
        if data.get("split") == "dev":
            line = f"{data['ensembles_done']} of {data['ensembles']} ensembles scored on dev"
            if data.get("ensembles_not_done"):
                line += (
                    "; without dev scores (not decoded, decoded before ensembles scored the "
                    "dev split, or members validated on different dev sets: see their "
                    "ensemble.json): " + ", ".join(data["ensembles_not_done"])
                )
        else:
            line = f"{data['ensembles_done']} of {data['ensembles']} ensembles decoded"
            if data.get("ensembles_not_done"):
                line += "; not decoded: " + ", ".join(data["ensembles_not_done"])
        if data.get("ensembles_out_of_date"):
            line += (
                "; out of date (a run changed since; `experiment run` decodes them again): "
                + ", ".join(data["ensembles_out_of_date"])
            )
        out.append(line)
    if data.get("unscored"):
        names = ", ".join(data.get("score") or {})
        out.append(
            f"\nNot scored again, so left out of {names}: " + "; ".join(data["unscored"].values())
        )
    for key, what in (
        ("training_seconds", "Training time per run (training and validation, all sessions)"),
        (
            "cpu_seconds",
            "CPU time per run (of the training process, all its threads: for a one-thread "
            "run, an estimate of its time alone; where train.json counts it)",
        ),
    ):
        timed = data.get(key) or {}
        if timed:
            out.append(f"\n{what}, " + _per_system(timed, data.get("machines") or {}))
    kinds = collections.Counter((data.get("machines") or {}).values())
    if kinds:
        out.append(
            "\nMachines that trained the finished runs (where train.json records it): "
            + "; ".join(
                f"{kind} ({n} run{'s' if n != 1 else ''})" for kind, n in sorted(kinds.items())
            )
        )
    if data.get("at_limit"):
        out.append(
            "\nStopped at a training limit, not by early stopping (maybe short of "
            "convergence): "
            + ", ".join(f"{cell} ({stop})" for cell, stop in data["at_limit"].items())
        )
    return "\n".join(out) + "\n"


def _paired_lines(data: dict[str, Any]) -> list[str]:
    """The paired comparisons over the datasets (`paired_over_datasets`), a line each."""

    def p(value: float) -> str:
        return "< 0.0001" if value < 0.0001 else f"= {value:.4f}"

    lines = []
    for c in data.get("paired") or []:
        scale = abs(c["difference"]) or 1.0
        test = (
            "no t-test (fewer than 2 datasets, or every difference the same)"
            if c["p"] is None
            else f"t = {c['t']:.2f}, df = {c['df']}, p {p(c['p'])}"
        )
        if c.get("wilcoxon_p") is not None:
            test += f"; Wilcoxon p {p(c['wilcoxon_p'])}"
        lines.append(
            f"- {c['metric']}, {c['a']} minus {c['b']}: {'+' if c['difference'] > 0 else ''}"
            f"{_number(c['difference'], scale)} on {c['n']} dataset{'s' if c['n'] != 1 else ''} "
            f"(higher on {c['higher']}, lower on {c['lower']}); {test}"
        )
    if not lines:
        return []
    return [
        f"Paired over the datasets ({significance.PAIRED_TEST}, and Wilcoxon's signed-rank "
        "test, exact, two-sided; a run row's number on a "
        "dataset is its mean over the seeds, an ensemble's its one score; only the datasets "
        "where both rows have every seed; higher and lower: the sign of the difference, "
        "whichever direction is better; p not corrected for the number of pairs):\n",
        *lines,
        "",
    ]


def _per_system(timed: dict[str, float], machines: dict[str, str] | None = None) -> str:
    """Seconds by cell id, as each system's median, range and count: in minutes, or in
    seconds when a run would show as "0.0" minutes. A system whose timed runs' train.json
    name more than one kind of machine (`machines`: cell id -> kind) is split by machine, so
    that a GPU's minutes are not a median with a laptop's: "SYSTEM on KIND", and "SYSTEM
    on a machine not recorded" for its runs whose train.json does not say. A run's machine
    is its last session's (`RunReport.machine`): a run resumed on another machine counts
    all its sessions' time under the last one."""
    machines = machines or {}
    kinds: dict[str, set[str]] = {}
    for cell in timed:
        if machines.get(cell):
            kinds.setdefault(cell.split(".")[0], set()).add(machines[cell])
    unit, scale, digits = ("minutes", 60, 1) if min(timed.values()) >= 3 else ("seconds", 1, 0)
    per_system: dict[str, list[float]] = {}
    for cell, value in timed.items():
        system = cell.split(".")[0]
        if len(kinds.get(system, ())) > 1:
            system += f" on {machines.get(cell) or 'a machine not recorded'}"
        per_system.setdefault(system, []).append(value / scale)
    return f"{unit}: " + "; ".join(
        f"{system} {statistics.median(v):.{digits}f} median "
        f"({min(v):.{digits}f}-{max(v):.{digits}f}, n={len(v)})"
        for system, v in per_system.items()
    )


def _search_table(base: str, search: dict[str, Any]) -> str:
    """A search's trials, best first: rank, trial, dev score (n runs), sampled values."""
    metric = search["metric"] or "score"
    searched = (
        ", ".join("the recipe's data" if d is None else d for d in search.get("datasets") or [])
        or "none yet"
    )
    keys = list(dict.fromkeys(k for t in search["trials"] for k in t["values"]))
    lines = [
        f"### random search {base}: trials by dev {metric} (best validation of each run; "
        f"mean over seeds, then over the datasets searched: {searched}; "
        f"seed {search['seed']})\n",
        "| " + " | ".join(["rank", "trial", f"dev {metric} (n)", *keys]) + " |",
        "|--:|---|--:|" + "--:|" * len(keys),
    ]
    scale = max((abs(t["dev"]) for t in search["trials"] if t["dev"] is not None), default=0.0)
    for t in search["trials"]:
        dev = f"{_number(t['dev'], scale)} (n={t['n']})" if t["dev"] is not None else "–"
        cells = [str(t["rank"] or ""), t["trial"], dev]
        cells += [_value(t["values"].get(k)) for k in keys]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _value(value: Any) -> str:
    """A sampled value as the table shows it (4 significant digits for real numbers)."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return value if isinstance(value, str) else json.dumps(value)


def _higher(metric: str) -> bool:
    from transduce.metrics import METRICS

    return bool(METRICS[metric.split("_")[0]].higher_is_better)


def csv_text(data: dict[str, Any]) -> str:
    """A CSV row per (system, dataset, metric); a column `reference.NAME` per reference;
    with a baseline system, `against_baseline.difference` and `against_baseline.p` (blank
    for its own rows and the ensembles', and where undefined)."""
    out = io.StringIO()
    columns = ["system", "dataset", "metric", "n", "mean", "std", "published", "difference"]
    names = data.get("reference_names") or []
    columns += [f"reference.{name}" for name in names]
    compared = ("difference", "p") if data.get("baseline") else ()
    columns += [f"against_baseline.{key}" for key in compared]
    writer = csv.DictWriter(out, columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in data["rows"]:
        against = row.get("against_baseline") or {}
        writer.writerow(
            {
                **row,
                **{f"reference.{n}": (row.get("references") or {}).get(n) for n in names},
                **{f"against_baseline.{key}": against.get(key) for key in compared},
            }
        )
    return out.getvalue()


def histories(experiment: Experiment, directory: Path) -> dict[str, list[dict[str, Any]]]:
    """Each cell's validations so far, finished, interrupted or still running: its
    metrics.csv (`train.log: [csv]`, written at each validation), else its train.json's
    history (written when a run stops), as flat rows (`runlog.row`); cells with neither
    are left out."""
    out = {}
    for cell in experiment.cells:
        run_dir = directory / RUNS / cell.id
        files = RunDir(run_dir)
        rows = _log_rows(files.metrics) if files.metrics.is_file() else None
        if rows is not None:
            out[cell.id] = rows
        elif files.report.is_file():
            report = files.read_report()
            history = report.history if report is not None else []
            out[cell.id] = [runlog.row(entry) for entry in history]
    return out


def _log_rows(log: Path) -> list[dict[str, Any]] | None:
    """The rows of a metrics.csv; None if it cannot be read as one (not UTF-8, not CSV):
    train.json's history stands in for it."""
    try:
        with log.open(encoding="utf-8", newline="") as handle:
            rows = [_numbers(row) for row in csv.DictReader(handle)]
    except (OSError, ValueError, csv.Error):
        return None
    return rows


def _numbers(row: dict[str, str]) -> dict[str, Any]:
    """A metrics.csv row with its numbers read (an empty field: None)."""
    values: dict[str, Any] = {}
    for key, text in row.items():
        try:
            values[key] = int(text) if key == "update" else float(text) if text else None
        except (TypeError, ValueError):
            values[key] = None
    return values


def plot_format(path: Path) -> str:
    """The file format of a plot, from its suffix; matplotlib must be installed.

    Raises:
        TransduceError: another suffix, or no matplotlib (one line each).
    """
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in defaults.PLOT_FORMATS:
        suffixes = ", ".join("." + f for f in defaults.PLOT_FORMATS)
        raise TransduceError(f"--plot: {path}: the file name must end in {suffixes}")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise TransduceError(
            "--plot: plots need matplotlib: pip install 'transduce[plot]' (or pip install "
            "matplotlib)"
        ) from None
    return fmt


def _points(history: list[dict[str, Any]], column: str) -> list[tuple[int, float]]:
    return [(e["update"], e[column]) for e in history if e.get(column) is not None]


@dataclass
class Curves:
    """The learning curves of one system in one panel (a dataset and a column)."""

    seeds: list[list[tuple[int, float]]]  # (update, value) of each seed that has any
    mean: list[tuple[int, float]]  # at the updates every seed has; none for one seed


def curves(
    experiment: Experiment, directory: Path
) -> tuple[list[str], dict[tuple[str | None, str], dict[str, Curves]]]:
    """The plot's columns (the dev loss, then the dev score of each report metric, or of
    every dev score when the experiment names none) and, per (dataset, column), each
    system's curves."""
    rows = histories(experiment, directory)
    found = {key for history in rows.values() for entry in history for key in entry}
    columns = ["dev_loss"] + [f"dev_{m}" for m in (experiment.metrics or []) if f"dev_{m}" in found]
    if not experiment.metrics:
        columns += sorted(k for k in found if k.startswith("dev_") and k not in columns)
    panels: dict[tuple[str | None, str], dict[str, Curves]] = {}
    for dataset in experiment.datasets:
        for column in columns:
            panel = panels.setdefault((dataset, column), {})
            for system in experiment.systems:
                cells = [c for c in experiment.cells if (c.system, c.dataset) == (system, dataset)]
                seeds = [_points(rows.get(c.id, []), column) for c in cells]
                seeds = [points for points in seeds if points]
                mean: list[tuple[int, float]] = []
                if len(seeds) > 1:
                    common = sorted(set.intersection(*({u for u, _ in p} for p in seeds)))
                    values = [dict(p) for p in seeds]
                    mean = [(u, statistics.fmean(v[u] for v in values)) for u in common]
                panel[system] = Curves(seeds, mean)
    return columns, panels


def plot(experiment: Experiment, directory: Path, path: Path) -> None:
    """Learning curves per system (`curves`): a panel per dataset (rows) and per column,
    the update on the x axis. Each seed is a thin line in its system's colour; where a
    system has several seeds, a thick line is their mean at the validations every seed has
    reached. Unfinished cells are drawn as far as they have gone. The file is written
    atomically, without dates (the same curves give the same bytes).
    """
    fmt = plot_format(path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from transduce.io import save_figure

    columns, panels = curves(experiment, directory)
    datasets = experiment.datasets
    figure, axes = plt.subplots(
        len(datasets),
        len(columns),
        figsize=(3.6 * len(columns) + 1.6, 2.6 * len(datasets) + 0.4),
        squeeze=False,
        layout="constrained",
    )
    colours = plt.get_cmap("tab10")
    for i, dataset in enumerate(datasets):
        for j, column in enumerate(columns):
            axis = axes[i][j]
            for k, (system, drawn) in enumerate(panels[(dataset, column)].items()):
                colour = colours(k % 10)
                for points in drawn.seeds:
                    axis.plot(*zip(*points), color=colour, linewidth=0.8, alpha=0.45)
                if drawn.mean:
                    axis.plot(*zip(*drawn.mean), color=colour, linewidth=2.0)
                axis.plot([], [], color=colour, linewidth=2.0, label=system)  # the legend
            axis.set_title(f"{dataset} · {column}" if dataset else column, fontsize=9)
            axis.set_xlabel("update", fontsize=8)
            axis.tick_params(labelsize=7)
            axis.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    figure.suptitle(f"{experiment.path.stem}: learning curves (thin: a seed; thick: mean)",
                    fontsize=10)  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(figure, path, fmt, dpi=150)
    plt.close(figure)
