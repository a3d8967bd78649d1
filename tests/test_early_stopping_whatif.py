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
# 500, then three worse; wer is not 100 - acc, so a replay of the wrong metric fails
ACC = [30.0, 50.0, 40.0, 50.0, 60.0, 55.0, 55.0, 58.0]
WER = [80.0, 60.0, 70.0, 65.0, 62.0, 50.0, 55.0, 52.0]
HISTORY = [
    {"update": 100 * (i + 1), "dev_scores": {"acc": a, "wer": w}}
    for i, (a, w) in enumerate(zip(ACC, WER))
]


def test_replay_by_hand():
    # patience 3: 40, 50 (tie); 60 resets at 500; 55, 55, 58 are three bad: stop at 800
    assert whatif.replay(HISTORY, "acc", True, 3, 100, 10**6) == (60.0, 800, True)
    # patience 2: 40 and 50 (a tie counts as bad) stop it at 400 with 50
    assert whatif.replay(HISTORY, "acc", True, 2, 100, 10**6) == (50.0, 400, True)
    # every 200: 50, then 50 at 400 (bad): patience 1 stops there
    assert whatif.replay(HISTORY, "acc", True, 1, 200, 10**6) == (50.0, 400, True)
    # every 200, patience 2: 50, 50 (bad), 55 (better), 58 (better); the history ends
    # before this schedule would stop: undecided
    assert whatif.replay(HISTORY, "acc", True, 2, 200, 10**6) == (58.0, 800, False)
    # a cap of 300 updates: 50 at 200, stopped by the cap (decided)
    assert whatif.replay(HISTORY, "acc", True, 6, 100, 300) == (50.0, 300, True)
    # lower is better for wer: 80, 60, 70 and 65 (two bad): patience 2 stops at 400
    assert whatif.replay(HISTORY, "wer", False, 2, 100, 10**6) == (60.0, 400, True)
    # patience 3: 62 (bad 3) stops it at 500 with 60
    assert whatif.replay(HISTORY, "wer", False, 3, 100, 10**6) == (60.0, 500, True)


def write_run(root: Path, cell: str, history, best, finished=True, **train):
    run = root / "runs" / cell
    run.mkdir(parents=True)
    settings = {"select_on": "acc", "patience": 3, "validate_every": 100, "max_updates": 800}
    report = {
        "schema": 1,
        "config": {"train": {**settings, **train}},
        "history": history,
        "best": {"metric": "acc", "score": best},
        "stop": "no better dev acc in 3 validations" if finished else None,
        "updates": history[-1]["update"],
    }
    (run / "train.json").write_text(json.dumps(report), encoding="utf-8")


def test_the_command_compares_each_variant_with_the_runs_own_schedule(tmp_path):
    rising = [dict(h, dev_scores={"acc": 10.0 * (i + 1)}) for i, h in enumerate(HISTORY)]
    write_run(tmp_path, "a.x.seed1", HISTORY, 60.0)
    write_run(tmp_path, "a.y.seed1", rising, 80.0)
    write_run(tmp_path, "a.z.seed1", HISTORY[:2], 50.0, finished=False)  # not counted
    write_run(tmp_path, "b.x.seed1", HISTORY, 60.0)  # not chosen by --cells
    script = str(REPO / "benchmarks" / "early_stopping_whatif.py")
    command = [sys.executable, script, str(tmp_path), "--cells", "a.*"]
    done = subprocess.run(
        [*command, "--variant", "2,100,800", "--variant", "2,200,1000"],
        capture_output=True,
        text=True,
        check=True,
    )
    out = json.loads(done.stdout)
    assert out["runs"] == 2
    # own schedule (patience 3): x ends at 800 with 60, y (always better) at the cap with 80
    assert out["own_best_dev_mean"] == 70.0 and out["own_updates"] == 1600
    first, second = out["variants"]
    # patience 2: x stops at 400 with 50 (-10), y unchanged
    assert first["best_dev_mean"] == 65.0 and first["better_minus_own"] == -5.0
    assert first["worse_on"] == 1 and first["updates_fraction"] == 0.75
    assert first["undecided"] == 0
    # every 200, patience 2, at most 1,000: both histories end at 800, before the variant
    # would stop either (x with 58, y with 80): undecided
    assert second["undecided"] == 2 and second["best_dev_mean"] == 69.0


def test_what_the_replay_cannot_stand_for_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="PATIENCE,EVERY,CAP"):
        whatif.parse_variant("3,500")
    with pytest.raises(SystemExit, match="at least 1"):
        whatif.parse_variant("0,500,100")
    with pytest.raises(SystemExit, match="multiple of EVERY"):
        whatif.parse_variant("3,500,1200")
    write_run(tmp_path, "a.x.seed1", HISTORY, 60.0)
    with pytest.raises(SystemExit, match="multiple of it"):
        whatif.whatif(tmp_path, [], [(3, 150, 1500)])
    with pytest.raises(SystemExit, match="no validation"):
        whatif.whatif(tmp_path, [], [(3, 200, 100)])
    for cell, best, train, said in (
        ("a.w.seed1", 60.0, {"select_also": ["lev"]}, "select_also"),
        ("a.v.seed1", 60.0, {"schedule": {"type": "plateau"}}, "plateau schedule"),
        ("a.u.seed1", 60.0, {"validate_every": None}, "train.validate_every is None"),
        ("a.t.seed1", 55.0, {}, "replays to a best dev acc of 60.0, not the 55.0"),
    ):
        write_run(tmp_path, cell, HISTORY, best, **train)
        with pytest.raises(SystemExit, match=said):
            whatif.whatif(tmp_path, [cell], [(3, 100, 800)])
