"""What a shorter training schedule would have saved and cost, from finished runs' own
dev histories (issue 29: the 52-language SIGMORPHON 2017 medium grid must finish in 8
hours on 2 cores; can a lower patience, fewer validations or a lower update limit get it
there without retraining to find out?).

Reads DIR, an experiment's folder (`experiment run --out DIR`, or its committed copy in
results/): each finished run's train.json (`runs/CELL/train.json`), with its `history` of
validations and its configuration's `select_on`, `patience`, `validate_every` and
`max_updates`. For each variant (`--variant PATIENCE,EVERY,CAP`, repeatable), each run's
history is replayed as `transduce.training.Limits` would have stopped it: only the
validations at multiples of EVERY (a multiple of the run's own `validate_every`), none
after CAP updates, stopping at the first validation that is the PATIENCE-th in a row
without a better dev score (strictly better, as the trainer counts). A variant's run
"ends" at its last replayed validation and keeps the best dev score up to there.

Prints one JSON line: per variant, the mean over runs of that best dev score (the
selected checkpoint's, on the dev set it was selected on: an optimistic number, and less
so for a variant that validates less often, so differences between variants are a guide,
not an estimate of test scores), its mean difference from the run's own schedule
(replayed the same way), on how many runs it is worse, and the updates trained as a
fraction of the recorded schedule's (the cost, less the fixed cost of each run's start
and test decode). `undecided`: the runs whose history ends before the variant would have
stopped them (a variant that waits longer than the run's own schedule did, e.g. the same
patience at a longer interval); for those the updates are a lower bound and the best
score may be too low, so a variant with undecided runs is not fully replayed. Each run's
own schedule must replay to the best dev score its train.json recorded, and its rate
must not depend on the validations or the limit (a constant or inverse square root
schedule: a plateau or cosine one, and selection on several metrics, are refused). The
replay compares best.pt's dev scores, also for runs whose model is an average.

    python benchmarks/early_stopping_whatif.py DIR [--cells 'small-ref.*']
        [--variant 4,500,30000 ...]
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from transduce.metrics import get_metric
from transduce.runs import RunReport

# schedules whose rate at an update depends on neither the validations nor the limit
SCHEDULES = ("constant", "inverse_sqrt", "sockeye_inv_sqrt")
DEFAULT_VARIANTS = ["5,500,30000", "4,500,30000", "3,500,30000", "6,500,15000"]


def replay(
    history: list[dict[str, Any]], metric: str, higher: bool, patience: int, every: int, cap: int
) -> tuple[float, int, bool]:
    """The best dev `metric`, the updates trained and whether the history decides the
    stop, when the run is stopped after `patience` validations in a row without a better
    score (the first is always the best; a tie is not better), validating every `every`
    updates, never past `cap` (a multiple of `every`). Undecided: the history ends
    before this schedule would have stopped (its own stopped sooner), so the updates are
    a lower bound and the best score may be too low."""
    best: float | None = None
    bad, trained = 0, 0
    for entry in history:
        update = entry["update"]
        if update % every or update > cap:
            continue
        trained = update
        score = entry["dev_scores"][metric]
        if best is None or (score > best if higher else score < best):
            best, bad = score, 0
        else:
            bad += 1
            if bad >= patience:
                return best, trained, True
    if best is None:
        raise ValueError("no validation in the history at these settings")
    return best, trained, trained == cap


def parse_variant(text: str) -> tuple[int, int, int]:
    """`--variant PATIENCE,EVERY,CAP` as three integers; a bad one exits with its reason."""
    try:
        patience, every, cap = (int(part) for part in text.split(","))
    except ValueError:
        raise SystemExit(f"--variant {text!r}: give PATIENCE,EVERY,CAP (three integers)") from None
    if min(patience, every, cap) < 1:
        raise SystemExit(f"--variant {text!r}: each number must be at least 1")
    if cap % every:
        raise SystemExit(f"--variant {text!r}: CAP must be a multiple of EVERY")
    return patience, every, cap


def whatif(directory: Path, patterns: list[str], variants: list[tuple[int, int, int]]) -> dict:
    """The comparison of each variant with the runs' own schedules (the JSON printed)."""
    runs = []
    for path in sorted((directory / "runs").glob("*/train.json")):
        cell = path.parent.name
        if patterns and not any(fnmatch.fnmatchcase(cell, p) for p in patterns):
            continue
        report = RunReport.read(path)
        if report is None or not report.finished or not report.get("history"):
            continue
        train = report.config.get("train") or {}
        if train.get("select_also"):
            raise SystemExit(f"{cell}: selects on select_also too, which this replay does not")
        for key in ("patience", "validate_every"):
            if not isinstance(train.get(key), int):
                raise SystemExit(
                    f"{cell}: train.{key} is {train.get(key)!r}; the replay needs a number"
                )
        kind = (train.get("schedule") or {}).get("type", "constant")
        if kind not in SCHEDULES:
            raise SystemExit(
                f"{cell}: its learning rate follows a {kind} schedule, which changes with "
                "the validations or the update limit; the replay takes constant, "
                "inverse_sqrt and sockeye_inv_sqrt ones"
            )
        higher = get_metric(train["select_on"]).higher_is_better
        runs.append((cell, report.get("history"), train, higher, report.get("best") or {}))
    if not runs:
        raise SystemExit(f"{directory}: no finished run with a dev history matches")
    own, results = [], []
    for cell, history, train, higher, recorded in runs:
        metric = train["select_on"]
        cap = train.get("max_updates") or history[-1]["update"]
        best, trained, _ = replay(
            history, metric, higher, train["patience"], train["validate_every"], cap
        )
        if recorded.get("score") is not None and abs(best - recorded["score"]) > 1e-9:
            raise SystemExit(
                f"{cell}: its history replays to a best dev {metric} of {best}, not the "
                f"{recorded['score']} it recorded; its schedule is not one this replay knows"
            )
        own.append((best, trained))
    for patience, every, cap in variants:
        scores, diffs, updates, undecided = [], [], 0, 0
        for (cell, history, train, higher, _), (own_best, _) in zip(runs, own):
            if every % train["validate_every"]:
                raise SystemExit(
                    f"{cell}: validated every {train['validate_every']} updates; EVERY "
                    f"{every} must be a multiple of it"
                )
            try:
                best, trained, decided = replay(
                    history, train["select_on"], higher, patience, every, cap
                )
            except ValueError as error:
                raise SystemExit(f"{cell}: {error} (EVERY {every}, CAP {cap})") from None
            scores.append(best)
            diffs.append((best - own_best) if higher else (own_best - best))
            updates += trained
            undecided += not decided
        results.append(
            {
                "patience": patience,
                "every": every,
                "cap": cap,
                "best_dev_mean": round(statistics.mean(scores), 3),
                "better_minus_own": round(statistics.mean(diffs), 3),
                "worse_on": sum(d < 0 for d in diffs),
                "updates_fraction": round(updates / sum(u for _, u in own), 4),
                "undecided": undecided,
            }
        )
    return {
        "benchmark": "early_stopping_whatif",
        "directory": str(directory),
        "runs": len(runs),
        "metric": sorted({train["select_on"] for _, _, train, _, _ in runs}),
        "own_best_dev_mean": round(statistics.mean(b for b, _ in own), 3),
        "own_updates": sum(u for _, u in own),
        "variants": results,
    }


def main(argv: list[str] | None = None) -> int:
    """The command: one JSON line on stdout."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path, help="runs/EXPERIMENT or results/EXPERIMENT")
    parser.add_argument("--cells", action="append", default=[], help="fnmatch; repeatable")
    parser.add_argument("--variant", action="append", default=[], help="PATIENCE,EVERY,CAP")
    args = parser.parse_args(argv)
    variants = [parse_variant(v) for v in (args.variant or DEFAULT_VARIANTS)]
    print(json.dumps(whatif(args.directory, args.cells, variants)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
