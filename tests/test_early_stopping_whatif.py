"""benchmarks/early_stopping_whatif.py: a shorter schedule replayed from recorded dev
histories, checked against stopping points worked out by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, benchmark_script

whatif = benchmark_script("early_stopping_whatif")

# dev acc at updates 100..800: best 50 at 200, then 40, 50 (a tie is not better), 60 at
# 500, then three worse
ACC = [30.0, 50.0, 40.0, 50.0, 60.0, 55.0, 55.0, 58.0]
HISTORY = [
    {"update": 100 * (i + 1), "dev_scores": {"acc": a, "wer": 100 - a}} for i, a in enumerate(ACC)
]


def test_replay_by_hand():
    # patience 3: 40, 50 (tie) and ... 60 resets at 500; 55, 55, 58 are three bad: stop at 800
    assert whatif.replay(HISTORY, "acc", True, 3, 100, 10**6) == (60.0, 800)
    # patience 2: 40 and 50 (a tie counts as bad) stop it at 400 with 50
    assert whatif.replay(HISTORY, "acc", True, 2, 100, 10**6) == (50.0, 400)
    # every 200: 50, 50 (bad), 55 (better than 50), 58 (better): ends at 800 with 58
    assert whatif.replay(HISTORY, "acc", True, 1, 200, 10**6) == (50.0, 400)
    assert whatif.replay(HISTORY, "acc", True, 2, 200, 10**6) == (58.0, 800)
    # a cap of 300 updates: 50 at 200
    assert whatif.replay(HISTORY, "acc", True, 6, 100, 300) == (50.0, 300)
    # lower is better for wer: the same stops
    assert whatif.replay(HISTORY, "wer", False, 2, 100, 10**6) == (50.0, 400)


def write_run(root: Path, cell: str, history, finished=True, select_also=None):
    run = root / "runs" / cell
    run.mkdir(parents=True)
    train = {"select_on": "acc", "patience": 3, "validate_every": 100, "max_updates": 800}
    if select_also:
        train["select_also"] = select_also
    report = {
        "schema": 1,
        "config": {"train": train},
        "history": history,
        "stop": "no better dev acc in 3 validations" if finished else None,
        "updates": history[-1]["update"],
    }
    (run / "train.json").write_text(json.dumps(report), encoding="utf-8")


def test_the_command_compares_each_variant_with_the_runs_own_schedule(tmp_path):
    write_run(tmp_path, "a.x.seed1", HISTORY)
    write_run(
        tmp_path,
        "a.y.seed1",
        [dict(h, dev_scores={"acc": 10.0 * (i + 1)}) for i, h in enumerate(HISTORY)],
    )
    write_run(tmp_path, "a.z.seed1", HISTORY[:2], finished=False)  # not counted
    write_run(tmp_path, "b.x.seed1", HISTORY)  # not chosen by --cells
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "early_stopping_whatif.py"),
            str(tmp_path),
            "--cells",
            "a.*",
            "--variant",
            "2,100,800",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    out = json.loads(done.stdout)
    assert out["runs"] == 2
    # own schedule (patience 3): x ends at 800 with 60, y (always better) at 800 with 80
    assert out["own_best_dev_mean"] == 70.0 and out["own_updates"] == 1600
    [variant] = out["variants"]
    # patience 2: x stops at 400 with 50 (-10), y unchanged
    assert variant["best_dev_mean"] == 65.0 and variant["better_minus_own"] == -5.0
    assert variant["worse_on"] == 1 and variant["updates_fraction"] == 0.75


def test_bad_variants_and_select_also_are_refused(tmp_path):
    with pytest.raises(SystemExit, match="PATIENCE,EVERY,CAP"):
        whatif.parse_variant("3,500")
    with pytest.raises(SystemExit, match="at least 1"):
        whatif.parse_variant("0,500,100")
    write_run(tmp_path, "a.x.seed1", HISTORY)
    with pytest.raises(SystemExit, match="multiple of it"):
        whatif.whatif(tmp_path, [], [(3, 150, 800)])
    write_run(tmp_path, "a.w.seed1", HISTORY, select_also=["lev"])
    with pytest.raises(SystemExit, match="select_also"):
        whatif.whatif(tmp_path, [], [(3, 100, 800)])
