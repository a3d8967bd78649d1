"""benchmarks/grid_cost.py: a grid's wall time on W workers from its runs' records,
checked against schedules worked out by hand."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def grid_cost_module():
    """benchmarks/grid_cost.py as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("grid_cost", REPO / "benchmarks" / "grid_cost.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_makespan_by_hand():
    makespan = grid_cost_module().makespan
    assert makespan([], 2) == 0.0
    assert makespan([3.0, 3.0, 3.0], 1) == 9.0
    # in order, each on the first free worker: 4 | 1, then 2 on the second (3), 3 on it (6)
    assert makespan([4.0, 1.0, 2.0, 3.0], 2) == 6.0
    assert makespan([1.0, 1.0, 1.0, 1.0, 5.0], 2) == 7.0  # the last one starts at 2


def write_run(directory: Path, cell: str, **fields) -> None:
    run = directory / "runs" / cell
    run.mkdir(parents=True)
    report = {"stop": "no better dev acc in 6 validations", "test": {"acc": 50.0}}
    report.update(config={"train": {}}, data={"test_sources": 10}, **fields)
    (run / "train.json").write_text(json.dumps(report))


def experiment(directory: Path) -> None:
    """System s on one dataset, 3 seeds and their ensemble, and system t with none finished.
    In units of 36 s (0.01 h): seed 1 trained 10 (CPU 6) in one session of wall 11, so
    outside its training 1; seed 2 trained 20 over two sessions (its wall covers the last);
    seed 3 and t's run are not finished; the ensemble took 1 when it was decoded. Seed 2 ran
    with 2 threads, so its CPU time (40) does not stand for its wall time."""
    cells = [
        {"id": f"{s}.d.seed{k}", "system": s, "run_dir": f"runs/{s}.d.seed{k}"}
        for s, k in (("s", 1), ("s", 2), ("s", 3), ("t", 1))
    ]
    members = ["s.d.seed1", "s.d.seed2", "s.d.seed3"]
    group = {"id": "s.d", "members": members, "status": "pending", "seconds": 36.0}
    state = {"experiment": "e.yaml", "cells": cells, "ensembles": [group]}
    (directory / "cells.json").write_text(json.dumps(state))
    seconds = {"training_seconds": 360.0, "cpu_seconds": 216.0, "wall_seconds": 396.0}
    write_run(directory, "s.d.seed1", threads=1, **seconds)
    seconds = {"training_seconds": 720.0, "cpu_seconds": 1440.0, "wall_seconds": 300.0}
    write_run(directory, "s.d.seed2", threads=2, **seconds)
    (directory / "runs" / "s.d.seed3").mkdir()  # started, nothing written


def test_grid_cost_by_hand(tmp_path):
    cost = grid_cost_module().grid_cost
    experiment(tmp_path)
    data = cost(tmp_path, 2)
    assert data["cells"] == 4 and data["finished"] == 2 and data["ensembles"] == 1
    assert data["timed_by"] == {"cpu_seconds": 1, "training_seconds": 1}
    assert data["outside_training_s"] == 36.0 and data["outside_training_n"] == 1
    # seed 1 costs 6 + 1, seed 2 20 + 1: side by side, 21
    assert data["measured_hours"] == 0.21
    assert data["projected_hours"] is None and data["not_projected"] == ["t"]
    data = cost(tmp_path, 2, ["s.*"])
    assert data["ensembles"] == 1 and data["ensemble_s"] == 36.0
    assert data["per_system"]["s"]["minutes"] == {"n": 2, "median": 8.4, "min": 4.2, "max": 12.6}
    # seed 3 at the median 14: 7 | 21, then 7 + 14 = 21, then the ensemble: 22
    assert data["measured_hours"] == 0.21 and data["projected_hours"] == 0.22
    # by training time: seed 1 costs 11; seed 3 16: 11 + 16 = 27 | 21 + 1
    data = cost(tmp_path, 2, ["s.*"], basis="training")
    assert data["timed_by"] == {"cpu_seconds": 0, "training_seconds": 2}
    assert data["projected_hours"] == 0.27
    assert cost(tmp_path, 1, ["s.*"], basis="training")["projected_hours"] == 0.49  # 11+21+16+1


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
    assert json.loads(ok.stdout)["projected_hours"] == 0.43  # 7 + 21 + 14 + 1
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
