"""benchmarks/grid_cost.py: a grid's wall time on W workers from its runs' records,
checked against schedules worked out by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .conftest import REPO, benchmark_script


def grid_cost_module():
    """benchmarks/grid_cost.py as a module."""
    return benchmark_script("grid_cost")


def test_schedule_by_hand():
    schedule = grid_cost_module().schedule
    assert schedule([], [], 2) == 0.0
    assert schedule([("a", 3.0), ("b", 3.0), ("c", 3.0)], [], 1) == 9.0
    # in order, each on the first free worker: a 0-4 | b 0-1, c 1-3, d 3-6
    assert schedule([("a", 4.0), ("b", 1.0), ("c", 2.0), ("d", 3.0)], [], 2) == 6.0
    # the ensemble waits for its last member (s3, 10-20) and is decoded in its place, while
    # the other worker takes x at 10: s1 0-10, s3 10-20, ensemble 20-21 | s2 0-10, x 10-25
    # (decoded on the first free worker at 10, it would have put x at 11-26)
    cells = [("s1", 10.0), ("s2", 10.0), ("s3", 10.0), ("x", 15.0)]
    assert schedule(cells, [(["s1", "s2", "s3"], 1.0)], 2) == 25.0
    assert schedule(cells[:3], [(["s1", "s2", "s3"], 1.0)], 2) == 21.0
    # the member that finishes last is the first: s1 0-30, ensemble 30-32 | s2 0-5, s3
    # 5-10, y 10-11
    cells = [("s1", 30.0), ("s2", 5.0), ("s3", 5.0), ("y", 1.0)]
    assert schedule(cells, [(["s1", "s2", "s3"], 2.0)], 2) == 32.0
    # one worker: the ensemble comes between its last member and the next cell
    assert schedule(cells, [(["s1", "s2", "s3"], 2.0)], 1) == 43.0
    # a member that is not among the cells: that ensemble is never decoded
    assert schedule([("s1", 1.0)], [(["s1", "s9"], 5.0)], 1) == 1.0


def test_run_cost_takes_cpu_seconds_only_for_one_process_of_one_thread_on_the_cpu():
    module = grid_cost_module()
    from transduce.runs import RunReport

    alone = {"training_seconds": 10.0, "cpu_seconds": 6.0, "threads": 1, "processes": 1}
    alone["device"] = "cpu"
    assert module.run_cost(RunReport(alone), "cpu") == (6.0, "cpu_seconds")
    assert module.run_cost(RunReport(alone), "training") == (10.0, "training_seconds")
    for other in ({"threads": 2}, {"processes": 2}, {"device": "cuda:0"}, {"cpu_seconds": None}):
        assert module.run_cost(RunReport({**alone, **other}), "cpu") == (10.0, "training_seconds")


def write_run(directory: Path, cell: str, **fields) -> None:
    run = directory / "runs" / cell
    run.mkdir(parents=True)
    report = {"stop": "no better dev acc in 6 validations", "test": {"acc": 50.0}}
    report.update(config={"train": {}}, data={"test_sources": 10}, device="cpu", processes=1)
    report.update(fields)
    (run / "train.json").write_text(json.dumps(report))


def experiment(directory: Path) -> None:
    """System s on datasets d (3 seeds) and e (1 seed), each with its ensemble, and system t
    with no run finished. In units of 36 s (0.01 h): s.d.seed1 trained 10 (CPU 6, one
    thread) in one session of wall 11; s.d.seed2 trained 20 over two sessions with 2
    threads (its CPU 40 is not its wall time); s.d.seed3 is not finished; s.e.seed1 trained
    3 on a GPU (its CPU 100 is not its time) in one session of wall 4. So the time outside
    training is 1 a run. s.e's ensemble was decoded in 1 (its ensemble.json); s.d's was
    not decoded."""
    cells = [
        {"id": f"{s}.{d}.seed{k}", "system": s, "dataset": d, "run_dir": f"runs/{s}.{d}.seed{k}"}
        for s, d, k in (("s", "d", 1), ("s", "d", 2), ("s", "d", 3), ("s", "e", 1), ("t", "d", 1))
    ]
    groups = [
        {"id": "s.d", "members": ["s.d.seed1", "s.d.seed2", "s.d.seed3"], "status": "pending"},
        {"id": "s.e", "members": ["s.e.seed1"], "status": "done", "directory": "ensembles/s.e"},
    ]
    state = {"experiment": "e.yaml", "cells": cells, "ensembles": groups}
    (directory / "cells.json").write_text(json.dumps(state))
    unit = 36.0
    seconds = {"training_seconds": 10 * unit, "cpu_seconds": 6 * unit, "wall_seconds": 11 * unit}
    write_run(directory, "s.d.seed1", threads=1, **seconds)
    seconds = {"training_seconds": 20 * unit, "cpu_seconds": 40 * unit, "wall_seconds": 5 * unit}
    write_run(directory, "s.d.seed2", threads=2, **seconds)
    (directory / "runs" / "s.d.seed3").mkdir()  # started, nothing written
    seconds = {"training_seconds": 3 * unit, "cpu_seconds": 100 * unit, "wall_seconds": 4 * unit}
    write_run(directory, "s.e.seed1", threads=1, **{**seconds, "device": "cuda:0"})
    (directory / "ensembles" / "s.e").mkdir(parents=True)
    (directory / "ensembles" / "s.e" / "ensemble.json").write_text(json.dumps({"seconds": unit}))


def test_grid_cost_by_hand(tmp_path):
    cost = grid_cost_module().grid_cost
    experiment(tmp_path)
    data = cost(tmp_path, 2)
    assert (data["cells"], data["finished"], data["ensembles"]) == (5, 3, 2)
    assert data["timed_by"] == {"cpu_seconds": 1, "training_seconds": 2}
    assert data["outside_training_s"] == 36.0 and data["outside_training_n"] == 2
    assert data["ensemble_s"] == 36.0 and data["ensemble_n"] == 1
    assert data["ensembles_decoded"] == 1
    # costs 7, 21, 4: s.d.seed1 0-7, s.e.seed1 7-11, its ensemble 11-12 | s.d.seed2 0-21
    assert data["measured_hours"] == 0.21
    assert data["projected_hours"] is None and data["not_projected"] == ["t"]
    data = cost(tmp_path, 2, ["s.*"])
    minutes = {"n": 3, "median": 4.2, "min": 2.4, "max": 12.6}  # 7, 21 and 4 units
    assert data["per_system"] == {"s": {"cells": 4, "finished": 3, "minutes": minutes}}
    # s.d.seed3 at d's median, 14: seed1 0-7, seed3 7-21, s.e.seed1 21-25, its ensemble
    # 25-26 | seed2 0-21, then s.d's ensemble (its last member done) 21-22
    assert data["measured_hours"] == 0.21 and data["projected_hours"] == 0.26
    # by training time: seed1 costs 11, seed3 16: seed1 0-11, seed3 11-27, s.d's ensemble
    # 27-28 | seed2 0-21, s.e.seed1 21-25, its ensemble 25-26
    data = cost(tmp_path, 2, ["s.*"], basis="training")
    assert data["timed_by"] == {"cpu_seconds": 0, "training_seconds": 3}
    assert data["projected_hours"] == 0.28
    assert cost(tmp_path, 1, ["s.*"], basis="training")["projected_hours"] == 0.54
    assert cost(tmp_path, 1, ["s.*"])["projected_hours"] == 0.48  # 7 + 21 + 14 + 1 + 4 + 1
    # --device cpu: s.e.seed1 (on a GPU) is projected at s's median on the CPU (e has no CPU
    # run), 14, and s.e's ensemble waits for it: seed1 0-7 | seed2 0-21; seed3 7-21; at
    # 21 one worker decodes s.d's ensemble (21-22), the other takes s.e.seed1 (21-35) and
    # then its ensemble (35-36). Measured: seed1 and seed2 alone (s.e's ensemble has a
    # member not among them: not decoded, not counted as decoded)
    data = cost(tmp_path, 2, ["s.*"], device="cpu")
    assert (data["finished"], data["finished_elsewhere"]) == (2, 1)
    assert data["timed_by"] == {"cpu_seconds": 1, "training_seconds": 1}
    assert data["measured_hours"] == 0.21 and data["projected_hours"] == 0.36
    assert data["ensembles_decoded"] == 0 and data["ensemble_n"] == 1
    assert cost(tmp_path, 2, ["s.*"], device="any")["finished_elsewhere"] == 0
    # s.e's ensemble decoded on a GPU: --device cpu leaves its time out (no CPU decode is
    # recorded, so each ensemble costs 0): the same schedule, 1 unit shorter at the end
    path = tmp_path / "ensembles" / "s.e" / "ensemble.json"
    path.write_text(json.dumps({"seconds": 36.0, "device": "cuda"}))
    data = cost(tmp_path, 2, ["s.*"], device="cpu")
    assert (data["ensemble_n"], data["projected_hours"]) == (0, 0.35)
    assert cost(tmp_path, 2, ["s.*"], device="any")["ensemble_n"] == 1
    path.write_text(json.dumps({"seconds": 36.0}))


def test_grid_cost_command(tmp_path):
    experiment(tmp_path)
    script = str(REPO / "benchmarks" / "grid_cost.py")
    ok = subprocess.run(
        [sys.executable, script, str(tmp_path), "--cells", "s.*", "--workers", "1"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["projected_hours"] == 0.48
    ok = subprocess.run(
        [sys.executable, script, str(tmp_path), "--cells", "s.*", "--device", "cpu"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert ok.returncode == 0 and json.loads(ok.stdout)["projected_hours"] == 0.36, ok.stderr
    none = subprocess.run(
        [sys.executable, script, str(tmp_path), "--cells", "x.*"], capture_output=True, text=True
    )
    assert none.returncode == 2 and none.stderr == f"error: {tmp_path}: no cell matches x.*\n"
    bad = subprocess.run(
        [sys.executable, script, str(tmp_path / "runs")], capture_output=True, text=True, cwd=REPO
    )
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip() == f"error: {tmp_path / 'runs'}: no cells.json (an experiment's " + (
        "--out folder, or results/EXPERIMENT)"
    )
