"""Experiments: grids of runs (`transduce experiment run`), resumable after Ctrl-C, their
tables (`transduce experiment report`), and bad experiment files refused before any run."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from transduce.errors import TransduceError
from transduce.experiments import report, runner, spec

from .conftest import none_left_within, transduce_env
from .test_cli import one_line_error
from .toy import TINY_LSTM, TINY_TRANSFORMER, recipe, write_task


@pytest.fixture(scope="module")
def grid(tmp_path_factory) -> Path:
    """A 2-dataset x 2-system x 2-seed toy grid: its experiment file."""
    root = tmp_path_factory.mktemp("grid")
    data = root / "data"
    data.mkdir()
    for task in ("copy", "reverse"):
        write_task(data, task)
    short = {"max_updates": 60, "validate_every": 20, "precision": "fp32"}
    (root / "lstm.yaml").write_text(
        yaml.safe_dump(recipe(data / "copy-prepared", TINY_LSTM, **short))
    )
    (root / "tf.yaml").write_text(
        yaml.safe_dump(recipe(data / "copy-prepared", TINY_TRANSFORMER, **short))
    )
    experiment = {
        "systems": {
            "lstm": {"recipe": "lstm.yaml"},
            "tf": {"recipe": "tf.yaml", "set": {"train.optimizer.lr": 0.003}},
        },
        "datasets": {
            "match": str(data / "{task}-prepared"),
            "set": {"data.prepared": str(data / "{task}-prepared")},
        },
        "seeds": [1, 2],
        "metrics": ["acc", "per"],
        "published": {"lstm": {"copy": {"acc": 99.0}}},
    }
    path = root / "grid.yaml"
    path.write_text(yaml.safe_dump(experiment, sort_keys=False))
    return path


def run_experiment(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "transduce", "experiment", *map(str, args)],
        capture_output=True,
        text=True,
        env=transduce_env(),
        cwd=cwd,
        timeout=600,
    )


def test_the_grid_is_every_system_dataset_and_seed(grid):
    loaded = spec.load(grid)
    assert [c.id for c in loaded.cells] == [
        f"{s}.{d}.seed{n}" for s in ("lstm", "tf") for d in ("copy", "reverse") for n in (1, 2)
    ]
    cell = next(c for c in loaded.cells if c.id == "tf.reverse.seed2")
    assert cell.recipe == str(grid.parent / "tf.yaml")  # relative to the experiment file
    assert cell.overrides[0] == "train.optimizer.lr=0.003"
    assert (
        cell.overrides[1].startswith("data.prepared=") and "reverse-prepared" in cell.overrides[1]
    )
    assert cell.overrides[-1] == "train.seed=2"


@pytest.mark.long
def test_interrupted_halfway_and_run_again_every_cell_is_done_once(grid, tmp_path):
    """SIGINT to the command's process group (as Ctrl-C at a terminal) once 2 cells have
    finished: exit 130, the running cells stop with a last.pt; the same command again
    finishes the rest, resuming the interrupted ones and leaving the finished untouched."""
    out = tmp_path / "exp"
    command = [sys.executable, "-m", "transduce", "experiment", "run", str(grid)]
    process = subprocess.Popen(
        [*command, "--out", str(out), "--workers", "2"],
        stderr=subprocess.PIPE,
        text=True,
        env=transduce_env(),
        start_new_session=True,
    )
    assert process.stderr is not None
    seen, deadline = "", time.monotonic() + 300
    while seen.count(" done in ") < 2 and time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        seen += line
    os.killpg(process.pid, signal.SIGINT)
    rest = process.stderr.read()
    assert process.wait(timeout=300) == 130, seen + rest
    assert "run the same command again to go on" in rest and "Traceback" not in rest
    first = json.loads((out / "cells.json").read_text())["cells"]
    done = [c["id"] for c in first if c["status"] == "done"]
    assert 2 <= len(done) < 8, first
    for cell in first:  # one Ctrl-C each (the runner passes it on), not a second one
        if cell["status"] == "interrupted":
            log = (out / "logs" / f"{cell['id']}.log").read_text()
            assert "stopped at once" not in log, log
    stamps = {
        cell: {p.name: p.stat().st_mtime_ns for p in (out / "runs" / cell).iterdir()}
        for cell in done
    }
    again = run_experiment(
        "run", grid, "--out", out, "--workers", "2", "--threads", "2", cwd=tmp_path
    )
    assert again.returncode == 0, again.stderr
    assert f"{len(done)} finished before" in again.stderr
    final = json.loads((out / "cells.json").read_text())["cells"]
    assert [c["status"] for c in final] == ["done"] * 8
    assert "2 at a time, 2 threads each" in again.stderr
    rerun = next(c["id"] for c in final if c["id"] not in done)
    assert (
        yaml.safe_load((out / "runs" / rerun / "config.yaml").read_text())["train"]["threads"] == 2
    )
    for cell in final:  # each trained to its end once: one summary line in its log
        log = (out / "logs" / f"{cell['id']}.log").read_text()
        assert log.count("best dev acc") == 1, (cell["id"], log)
        assert runner.finished(out / "runs" / cell["id"])
    for cell, files in stamps.items():  # the finished cells were not even started again
        assert {p.name: p.stat().st_mtime_ns for p in (out / "runs" / cell).iterdir()} == files
    curves = tmp_path / "plots" / "curves.svg"
    table = run_experiment(
        "report", out, "--json", tmp_path / "t.json", "--plot", curves, cwd=tmp_path
    )
    assert table.returncode == 0, table.stderr
    assert curves.read_text().startswith("<?xml") and "learning curves" in table.stderr
    rows = json.loads((tmp_path / "t.json").read_text())["rows"]
    assert (
        all(r["n"] == 2 for r in rows) and len(rows) == 2 * 3 * 2
    )  # systems x datasets+avg x metrics
    assert "| lstm | copy |" in table.stderr and "99.00" in table.stderr
    # each toy run stopped at its max_updates: named as maybe short of convergence
    assert "(maybe short of convergence): lstm.copy.seed1 (reached max_updates (60))" in (
        table.stderr
    )


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="finds processes in /proc")
@pytest.mark.parametrize(
    "sig", [pytest.param("SIGTERM", marks=pytest.mark.long), "SIGINT", "SIGKILL"]
)
def test_a_killed_runner_leaves_no_training_process_and_a_rerun_resumes(tmp_path, sig):
    """N9: `kill PID` (SIGTERM, to the runner alone) is a Ctrl-C for the running cells, so
    is `kill -INT PID` (it stopped nothing while the cells were left to get a terminal's
    Ctrl-C themselves: the runner waited for them for ever), and a runner killed with -9
    has its cells stop by themselves (the parent-death signal):
    within 10 s no training process is left, each cell has its last.pt, and the same
    command again resumes them instead of failing on their locks."""
    data = tmp_path / "data"
    data.mkdir()
    prepared = write_task(data, "copy")
    long = {"max_updates": 100_000, "max_epochs": None, "validate_every": 10}
    (tmp_path / "lstm.yaml").write_text(
        yaml.safe_dump(recipe(prepared, TINY_LSTM, precision="fp32", threads=1, **long))
    )
    experiment = tmp_path / "grid.yaml"
    experiment.write_text(
        yaml.safe_dump({"systems": {"lstm": {"recipe": "lstm.yaml"}}, "seeds": [1, 2]})
    )
    out = tmp_path / "exp"
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "transduce", "experiment", "run", experiment, "--out", out),
            "--workers",
            "2",
            "--threads",
            "1",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=transduce_env(),
        start_new_session=True,  # not in the test's process group
    )
    runs = [out / "runs" / f"lstm.seed{seed}" for seed in (1, 2)]
    deadline = time.monotonic() + 120
    while not all((r / "last.pt").is_file() for r in runs) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert none_left_within(out, 0) != [], "the cells should be running"
    process.send_signal(getattr(signal, sig))
    left = none_left_within(out, 10)
    if left:  # not to leave them running after the test
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert not left, f"{sig}: still running after 10 s: {left}"
    stderr = process.communicate(timeout=10)[1]
    if sig != "SIGKILL":
        assert process.returncode == 130, stderr
        what = {"SIGTERM": "SIGTERM", "SIGINT": "Ctrl-C"}[sig]
        assert f"{what}: the running cells stop after their update" in stderr
        assert "Traceback" not in stderr
        cells = json.loads((out / "cells.json").read_text())["cells"]
        assert [c["status"] for c in cells] == ["interrupted"] * 2, cells
    for run in runs:  # each stopped as at Ctrl-C: after an update, with last.pt
        report = json.loads((run / "train.json").read_text())
        assert report["stop"] == "interrupted", report
    # the same command again, now bounded, resumes both (no "in use by another process");
    # bounded where the further one stopped (a limit it has passed is refused)
    bound = max(json.loads((run / "train.json").read_text())["updates"] for run in runs)
    (tmp_path / "lstm.yaml").write_text(
        yaml.safe_dump(
            recipe(
                prepared, TINY_LSTM, precision="fp32", threads=1, **dict(long, max_updates=bound)
            )
        )
    )
    again = run_experiment("run", experiment, "--out", out, "--workers", "2", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("resumed lstm.seed") == 2, again.stderr
    assert all(runner.finished(run) for run in runs)


def fake_run(directory: Path, cell: str, test: dict, monotonicity: dict | None = None) -> None:
    run = directory / "runs" / cell
    run.mkdir(parents=True)
    report = {"stop": "reached max_updates (1)", "test": test, "config": {"train": {}}}
    report["training_seconds"] = 60.0 * (1 + len(cell))  # minutes: 1 + the id's length
    report["test_monotonicity"] = monotonicity
    (run / "train.json").write_text(json.dumps(report))


def test_short_runs_are_timed_in_seconds_and_a_cell_is_done_once_reported(tmp_path):
    """N16: runs of a few seconds showed as "0.0" minutes each; and the progress counted a
    cell this session runs as done by its train.json, before its outcome was reported."""
    cells = [spec.Cell("a", None, seed, "", ()) for seed in (1, 2)]
    experiment = spec.Experiment(tmp_path / "e.yaml", cells, ["a"], [None], [1, 2], ["acc"])
    for cell, seconds in zip(cells, (1.0, 3.0)):
        fake_run(tmp_path, cell.id, {"acc": 50.0})
        path = tmp_path / "runs" / cell.id / "train.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "training_seconds": seconds}))
    text = report.markdown(report.table(experiment, tmp_path))
    assert "all sessions), seconds: a 2 median (1-3, n=2)" in text, text
    assert "CPU time per run" not in text and "Machines" not in text  # no train.json says
    path = tmp_path / "runs" / cells[1].id / "train.json"
    facts = {"cpu": "X", "cpu_family": None, "cpus": 2, "cpu_capability": "AVX2", "gpu": None}
    path.write_text(json.dumps({**json.loads(path.read_text()), "cpu_seconds": 2.0}))
    for cell in cells:
        run = tmp_path / "runs" / cell.id / "train.json"
        run.write_text(json.dumps({**json.loads(run.read_text()), "machine": facts}))
    data = report.table(experiment, tmp_path)
    assert data["cpu_seconds"] == {cells[1].id: 2.0}
    path.write_text(json.dumps({**json.loads(path.read_text()), "device": "cuda:0"}))
    assert report.table(experiment, tmp_path)["cpu_seconds"] == {}  # a GPU run's: not its cost
    path.write_text(json.dumps({**json.loads(path.read_text()), "device": "cpu"}))
    text = report.markdown(data)
    assert "where train.json counts it), seconds: a 2 median (2-2, n=1)" in text
    assert "records it): X, AVX2 kernels, 2 CPUs (2 runs)\n" in text
    run.write_text(json.dumps({**json.loads(run.read_text()), "machine": {**facts, "cpus": 4}}))
    text = report.markdown(report.table(experiment, tmp_path))
    assert "records it): X, AVX2 kernels, 2 CPUs (1 run); X, AVX2 kernels, 4 CPUs (1 run)\n" in text
    # two kinds of machine: each system's times split by machine, never one median
    assert "counts it), seconds: a 2 median (2-2, n=1)" in text  # the one counted run
    assert "all sessions), seconds: a on X, AVX2 kernels, 2 CPUs 1 median (1-1, n=1); " in text
    assert "a on X, AVX2 kernels, 4 CPUs 3 median (3-3, n=1)\n" in text
    fake_run(tmp_path, "a.seed3", {"acc": 50.0})  # a third run, whose train.json names none
    path3 = tmp_path / "runs" / "a.seed3" / "train.json"
    path3.write_text(json.dumps({**json.loads(path3.read_text()), "training_seconds": 5.0}))
    three = spec.Experiment(
        tmp_path / "e.yaml", [*cells, spec.Cell("a", None, 3, "", ())], ["a"], [None],
        [1, 2, 3], ["acc"],
    )  # fmt: skip
    text = report.markdown(report.table(three, tmp_path))
    assert "; a on a machine not recorded 5 median (5-5, n=1)\n" in text, text
    shutil.rmtree(tmp_path / "runs" / "a.seed3")
    run.write_text(json.dumps({**json.loads(run.read_text()), "machine": None}))
    text = report.markdown(report.table(experiment, tmp_path))
    assert "all sessions), seconds: a 2 median (1-3, n=2)" in text  # one kind recorded
    from transduce.runs import RunReport

    assert RunReport.from_json(path).cpu_seconds == 2.0
    counted = path.read_text()
    path.write_text(json.dumps({**json.loads(counted), "cpu_seconds": "2"}))
    with pytest.raises(ValueError, match="'cpu_seconds' is '2', not what train writes"):
        RunReport.from_json(path)
    path.write_text(counted)
    # the first cell reported, the second finished on disk but not reported yet
    outcomes = [runner.Outcome(cells[0], runner.DONE, 1.0)]
    data = runner.state(experiment, tmp_path, outcomes, todo=[c.id for c in cells])
    assert [c["status"] for c in data["cells"]] == ["done", "pending"]
    assert [c["status"] for c in runner.state(experiment, tmp_path, [])["cells"]] == ["done"] * 2
    # an experiment run that starts again keeps the seconds of the cells done before it
    runner.write_state(tmp_path, data)
    outcomes = [runner.Outcome(cells[1], runner.DONE, 2.0)]
    runner.write_state(tmp_path, runner.state(experiment, tmp_path, outcomes))
    again = runner.state(experiment, tmp_path, [])["cells"]
    assert [c["seconds"] for c in again] == [1.0, 2.0], again
    state = json.loads((tmp_path / "cells.json").read_text())
    state["cells"][0] = {"status": "done", "seconds": 1.0}  # no id: that entry alone skipped
    (tmp_path / "cells.json").write_text(json.dumps(state))
    assert [c["seconds"] for c in runner.state(experiment, tmp_path, [])["cells"]] == [None, 2.0]
    (tmp_path / "cells.json").write_text("{")  # unreadable: nothing recorded, no error
    assert [c["seconds"] for c in runner.state(experiment, tmp_path, [])["cells"]] == [None] * 2


def test_a_metric_scored_again_with_the_papers_options(tmp_path):
    """score: {per: {average: word}}: PER from test.predictions against the prepared test
    split, per word (Wu et al.), where the run's own test score is the corpus PER."""
    experiment = spec.Experiment(
        tmp_path / "e.yaml",
        [spec.Cell("a", None, 1, "", ())],
        ["a"],
        [None],
        [1],
        ["per", "wer"],
        score={"per": {"average": "word"}},
    )
    fake_run(tmp_path, "a.seed1", {"per": 100 / 6, "wer": 50.0})
    run = tmp_path / "runs" / "a.seed1"
    (run / "data").mkdir()
    (run / "data" / "test.tsv").write_text("a b\tx y\nc\tz w v u\n")
    (run / "test.predictions").write_text("x q\nz w v u\n")  # 1 edit of 2, 0 of 4
    data = report.table(experiment, tmp_path)
    rows = {r["metric"]: r for r in data["rows"]}
    assert rows["per"]["values"] == [25.0]  # 100 * mean(1/2, 0/4), not 100 * 1/6
    assert rows["wer"]["values"] == [50.0]  # as the run scored it
    text = report.markdown(data)
    assert "### per (scored again from test.predictions: average=word)" in text
    # a cell that cannot be scored again counts without that metric, and is named
    (run / "test.predictions").write_text("x y\nz w v u\n")
    report_path = run / "train.json"
    recorded = json.loads(report_path.read_text())
    recorded["data"] = {"test_predictions_sha256": "0" * 64}  # not what the run wrote
    report_path.write_text(json.dumps(recorded))
    data = report.table(experiment, tmp_path)
    rows = {r["metric"]: r for r in data["rows"]}
    assert rows["per"]["values"] == [] and rows["wer"]["values"] == [50.0]
    assert data["unscored"] == {
        "a.seed1": "a.seed1: cannot score its test.predictions again: it changed since the "
        "run wrote it"
    }
    assert "Not scored again, so left out of per: a.seed1: cannot" in report.markdown(data)
    recorded["data"] = {"outputs": {"test.tsv": "0" * 64}}  # another test split
    report_path.write_text(json.dumps(recorded))
    data = report.table(experiment, tmp_path)
    assert "no test split it was tested on (looked for " in data["unscored"]["a.seed1"]


def test_each_test_line_against_its_own_reference(tmp_path):
    """score: {wer: {}, per: {average: word}, variants: each}: Rios et al.'s eval.py, where
    a word with two pronunciations is two items (the default merges them into one)."""
    cells = [spec.Cell("a", None, 1, "", ())]
    fake_run(tmp_path, "a.seed1", {"per": 0.0, "wer": 0.0})
    run = tmp_path / "runs" / "a.seed1"
    from transduce.data.prepare import PrepareRequest, prepare

    raw = {"train": "cat\tK AE T\ndog\tD AO G\n", "dev": "bat\tB AE T\n"}
    raw["test"] = "cat\tK AE T\ncat\tK AA T\ndog\tD AO G\n"  # cat: two pronunciations
    inputs = {}
    for split, text in raw.items():
        (tmp_path / f"{split}.tsv").write_text(text)
        inputs[split] = [tmp_path / f"{split}.tsv"]
    options = {"source_unit": "char", "target_unit": "symbol"}
    prepare(PrepareRequest("tsv", run / "data", inputs=inputs, options=options))
    (run / "test.predictions").write_text("K AE T\nK AE T\nD AO G\n")
    options = {"wer": {}, "per": {"average": "word"}}
    values = {}
    for variants in ("merge", "each"):
        experiment = spec.Experiment(
            tmp_path / "e.yaml", cells, ["a"], [None], [1], ["wer", "per"], score=options,
            variants=variants,
        )  # fmt: skip
        data = report.table(experiment, tmp_path)
        values[variants] = {r["metric"]: r["values"] for r in data["rows"]}
    assert values["merge"] == {"wer": [0.0], "per": [0.0]}  # cat: one item, a variant matched
    assert values["each"]["wer"] == [pytest.approx(100 / 3)]  # line 2 against K AA T
    assert values["each"]["per"] == [pytest.approx(100 * (1 / 3) / 3)]
    text = report.markdown(data)
    assert "### wer (scored again from test.predictions: each line against its own" in text
    path = tmp_path / "grid.yaml"
    path.write_text(
        yaml.safe_dump({"systems": {"a": {"recipe": "g2p"}}, "score": {"variants": "x"}})
    )
    with pytest.raises(spec.ConfigError, match=r"score.variants: one of merge, each, not 'x'"):
        spec.load(path)
    path.write_text(
        yaml.safe_dump({"systems": {"a": {"recipe": "g2p"}}, "score": {"variants": "each"}})
    )
    with pytest.raises(spec.ConfigError, match=r"score.variants: name the metrics"):
        spec.load(path)
    both = {"variants": "each", "wer": {}}
    path.write_text(yaml.safe_dump({"systems": {"a": {"recipe": "g2p"}}, "score": both}))
    assert spec.load(path).variants == "each" and spec.load(path).score == {"wer": {}}


def found_cells(directory: Path) -> list[str]:
    return sorted(p.name for p in (directory / "runs").iterdir())


def test_a_cell_stopped_early_is_not_at_a_limit(tmp_path):
    experiment = spec.Experiment(
        tmp_path / "e.yaml", [spec.Cell("a", None, 1, "", ())], ["a"], [None], [1], ["acc"]
    )
    fake_run(tmp_path, "a.seed1", {"acc": 1.0})
    path = tmp_path / "runs" / "a.seed1" / "train.json"
    early = "no better dev acc in 3 validations"
    path.write_text(path.read_text().replace("reached max_updates (1)", early))
    data = report.table(experiment, tmp_path)
    assert data["at_limit"] == {} and "short of convergence" not in report.markdown(data)


def test_the_test_monotonicity_is_a_metric_of_the_table(tmp_path):
    """train.json's test_monotonicity (overall) as mono, loss_mono, mono_authors and
    loss_authors; small numbers keep three significant digits."""
    experiment = spec.Experiment(
        tmp_path / "e.yaml",
        [spec.Cell("a", None, s, "", ()) for s in (1, 2)],
        ["a"],
        [None],
        [1, 2],
        ["wer", "mono_authors", "loss_authors", "loss_mono"],
        {"a": {"mono_authors": 84.6, "loss_authors": 5.12e-05}},
    )
    for seed, (authors, loss) in {1: (80.0, 4e-05), 2: (86.0, 6e-05)}.items():
        overall = {"mono": 99.0, "loss": 1e-06, "mono_authors": authors, "loss_authors": loss}
        fake_run(tmp_path, f"a.seed{seed}", {"wer": 30.0}, {"delta": 0.0, "overall": overall})
    rows = {r["metric"]: r for r in report.table(experiment, tmp_path)["rows"]}
    assert rows["mono_authors"]["mean"] == 83.0 and rows["mono_authors"]["published"] == 84.6
    assert rows["loss_authors"]["mean"] == pytest.approx(5e-05)
    assert rows["loss_mono"]["values"] == [1e-06, 1e-06]
    text = report.markdown(report.table(experiment, tmp_path))
    assert "| a | 5e-05 ± 1.41e-05 (n=2) | 5.12e-05 | -1.2e-06 |" in text
    assert "| a | 83.00 ± 4.24 (n=2) | 84.60 | -1.60 |" in text


def test_the_table_against_hand_computed_numbers(tmp_path):
    """mean, sample std, the average over datasets per seed, published and difference;
    a cell not finished is left out and named."""
    experiment = spec.Experiment(
        tmp_path / "e.yaml",
        [spec.Cell("a", d, s, "", ()) for d in ("x", "y") for s in (1, 2, 3)],
        ["a"],
        ["x", "y"],
        [1, 2, 3],
        ["acc"],
        {"a": {"x": {"acc": 50.0}, "average": {"acc": 60}}},
    )
    accs = {("x", 1): 40.0, ("x", 2): 50.0, ("x", 3): 60.0, ("y", 1): 70.0, ("y", 2): 90.0}
    for (dataset, seed), acc in accs.items():
        fake_run(tmp_path, f"a.{dataset}.seed{seed}", {"acc": acc, "per": 1.0})
    data = report.table(experiment, tmp_path)
    rows = {r["dataset"]: r for r in data["rows"]}
    assert rows["x"]["mean"] == 50.0 and rows["x"]["std"] == pytest.approx(10.0)
    assert rows["x"]["published"] == 50.0 and rows["x"]["difference"] == 0.0
    assert rows["y"]["n"] == 2 and rows["y"]["mean"] == 80.0
    assert rows["y"]["std"] == pytest.approx(statistics.stdev([70.0, 90.0]))
    # seeds 1 and 2 have both datasets: their means 55 and 70
    assert rows["average"]["values"] == [55.0, 70.0] and rows["average"]["mean"] == 62.5
    assert rows["average"]["difference"] == 2.5
    assert data["not_done"] == ["a.y.seed3"] and data["cells_done"] == 5
    assert data["at_limit"] == {c: "reached max_updates (1)" for c in found_cells(tmp_path)}
    text = report.markdown(data)
    assert "| a | x | 50.00 ± 10.00 (n=3) | 50.00 | 0.00 |" in text
    assert "5 of 6 cells finished; not finished: a.y.seed3" in text
    assert "short of convergence): a.x.seed1 (reached max_updates (1))," in text
    assert "minutes: a 10.0 median (10.0-10.0, n=5)" in text  # len("a.x.seed1") == 9
    assert report.csv_text(data).splitlines()[0] == (
        "system,dataset,metric,n,mean,std,published,difference"
    )


def test_learning_curves_by_hand(tmp_path):
    """Per panel (dataset, column) and system: each seed's validations, and their mean at
    the updates every seed has reached; an unfinished cell counts as far as it went."""
    experiment = spec.Experiment(
        tmp_path / "e.yaml",
        [spec.Cell(sys_, None, s, "", ()) for sys_ in ("a", "b") for s in (1, 2)],
        ["a", "b"],
        [None],
        [1, 2],
        ["acc"],
    )

    def validation(update: int, loss: float, acc: float) -> dict:
        return {"update": update, "dev_loss": loss, "dev_scores": {"acc": acc, "per": 1.0}}

    histories = {
        "a.seed1": [validation(10, 2.0, 40.0), validation(20, 1.0, 60.0)],
        "a.seed2": [validation(10, 4.0, 50.0)],  # stopped after one validation
        "b.seed1": [validation(10, 3.0, 30.0)],
    }
    for cell, history in histories.items():
        (tmp_path / "runs" / cell).mkdir(parents=True)
        (tmp_path / "runs" / cell / "train.json").write_text(json.dumps({"history": history}))
    columns, panels = report.curves(experiment, tmp_path)
    assert columns == ["dev_loss", "dev_acc"]  # the report's metrics only: no dev_per
    a = panels[(None, "dev_acc")]["a"]
    assert a.seeds == [[(10, 40.0), (20, 60.0)], [(10, 50.0)]] and a.mean == [(10, 45.0)]
    assert panels[(None, "dev_loss")]["a"].mean == [(10, 3.0)]
    b = panels[(None, "dev_loss")]["b"]
    assert b.seeds == [[(10, 3.0)]] and b.mean == []  # one seed: no mean line
    # a running cell: no train.json yet, its metrics.csv as far as it has gone
    (tmp_path / "runs" / "b.seed2").mkdir()
    (tmp_path / "runs" / "b.seed2" / "metrics.csv").write_text(
        "update,epoch,dev_loss,dev_acc\n10,1.0,1.0,20.0\n20,2.0,0.5,\n"
    )
    _, panels = report.curves(experiment, tmp_path)
    b = panels[(None, "dev_loss")]["b"]
    assert b.seeds == [[(10, 3.0)], [(10, 1.0), (20, 0.5)]] and b.mean == [(10, 2.0)]
    assert panels[(None, "dev_acc")]["b"].seeds[1] == [(10, 20.0)]  # an empty field: none
    pytest.importorskip("matplotlib")
    first, second = tmp_path / "1.svg", tmp_path / "2.svg"
    report.plot(experiment, tmp_path, first)
    report.plot(experiment, tmp_path, second)
    assert first.read_bytes() == second.read_bytes()  # no dates: the same bytes


def test_plot_refusals_write_nothing(grid, tmp_path, run, monkeypatch):
    (tmp_path / "exp").mkdir()
    result = run("experiment", "report", tmp_path / "exp", "--plot", tmp_path / "c.txt")
    assert result.exit_code == 2 and "the file name must end in .png, .pdf, .svg" in result.output
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    result = run("experiment", "report", tmp_path / "exp", "--plot", tmp_path / "c.png")
    assert result.exit_code == 2 and "pip install 'transduce[plot]'" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"systems": {"a": {"recipe": "no-such-recipe"}}},
            "systems.a.recipe: no-such-recipe: no such recipe",
        ),
        (
            {"datasets": {"match": "/nowhere/{lang}-train"}},
            "datasets.match: no file matches /nowhere/{lang}-train",
        ),
        ({"set": {"train.bogus": 1}}, "systems.lstm, dataset copy: "),
        ({"sets": {}}, "sets: unknown key"),
        ({"seeds": [1, 1]}, "seeds: a seed is listed twice"),
        ({"published": {"nope": {}}}, "published.nope: not a system of this experiment"),
        ({"published": {"lstm": {"copy": 92.8}}}, "published.lstm.copy: expected METRIC: num"),
        ({"published": {"lstm": {"german": {"acc": 1}}}}, "published.lstm.german: not a dataset"),
        ({"published": {"lstm": {"copy": {"acc": "x"}}}}, "published.lstm.copy.acc: expected a"),
        ({"metrics": ["accuracy"]}, "metrics: unknown metric 'accuracy'"),
        ({"seeds": [True]}, "seeds: expected a list of integers"),
        ({"score": {"per": {"average": "line"}}}, "score.per: metric per: average must be"),
        ({"score": {"per": "word"}}, "score: expected METRIC: {OPTION: VALUE}"),
        ({"score": {"lev": {}}}, "score.lev: not one of the report's metrics ['acc', 'per']"),
        ({"ensemble": ["lstm"]}, "ensemble: expected {systems: [NAME, ...], mean: ...}"),
        ({"ensemble": {"systems": ["nope"]}}, "ensemble.systems: 'nope' is not a system of"),
        ({"ensemble": {"mean": "median"}}, "ensemble.mean: 'median': one of probability, log-"),
        (
            {"ensemble": {"members": 3}},
            "ensemble.members: unknown key (valid: mean, systems, tie_break_rules)",
        ),
        ({"references": {"lstm": {}}}, "references.lstm: a system of this experiment (give"),
        ({"references": {"b": {"german": {"acc": 1}}}}, "references.b.german: not a dataset"),
        ({"references": {"b": {"average": {"acc": 1}}}}, "references.b.average: the average"),
        ({"references": {"b": {"copy": {"accuracy": 1}}}}, "references.b.copy.accuracy: not a"),
        ({"references": {"b": {"copy": {"acc": "x"}}}}, "references.b.copy.acc: expected a n"),
        ({"references": {"b c": {}}}, "references.b c: a name of letters, digits"),
        (
            {"systems": {"a": {"recipe": "lstm.yaml", "search": {"trials": 0, "space": {}}}}},
            "systems.a.search.trials: expected a positive integer, got 0",
        ),
        (
            {
                "systems": {
                    "a": {
                        "recipe": "lstm.yaml",
                        "search": {
                            "trials": 2,
                            "space": {"train.optimizer.lr": {"normal": [0, 1]}},
                        },
                    }
                }
            },
            "systems.a.search.space.train.optimizer.lr: expected one of {uniform: [A, B]}",
        ),
        (
            {
                "systems": {
                    "a": {
                        "recipe": "lstm.yaml",
                        "search": {
                            "trials": 2,
                            "space": {"train.optimizer.lr": {"loguniform": [0, 1]}},
                        },
                    }
                }
            },
            "systems.a.search.space.train.optimizer.lr.loguniform: expected A > 0",
        ),
        (
            {
                "systems": {
                    "a": {
                        "recipe": "lstm.yaml",
                        "search": {
                            "trials": 2,
                            "space": {"model.encoder_size": {"int": [16.5, 32]}},
                        },
                    }
                }
            },
            "systems.a.search.space.model.encoder_size.int: expected [A, B], integers",
        ),
        (
            {
                "systems": {
                    "a": {
                        "recipe": "lstm.yaml",
                        "search": {"trials": 2, "space": {"train.seed": {"int": [1, 3]}}},
                    }
                }
            },
            "systems.a.search.space.train.seed: not searched",
        ),
        (
            {
                "systems": {
                    "a": {
                        "recipe": "lstm.yaml",
                        "search": {"trials": 2, "space": {"train.bogus": {"choice": [1, 2]}}},
                    }
                }
            },
            "systems.a (trial a-t1), dataset copy: ",
        ),
        (
            {"systems": {"a": {"recipe": "lstm.yaml", "search": {"trials": 2, "sapce": {}}}}},
            "systems.a.search.sapce: unknown key (valid: seed, space, trials)",
        ),
    ],
    ids=[
        *("unknown-recipe", "empty-pattern", "unknown-setting", "unknown-key", "seeds"),
        *("published", "published-shape", "published-dataset", "published-number"),
        *("metric", "seed-bool", "score-option", "score-shape", "score-not-shown"),
        *("ensemble-shape", "ensemble-system", "ensemble-mean", "ensemble-key"),
        *("reference-system", "reference-dataset", "reference-average", "reference-metric"),
        *("reference-number", "reference-name"),
        *("search-trials", "search-distribution", "search-loguniform", "search-int"),
        *("search-seed", "search-unknown-setting", "search-key"),
    ],
)
def test_bad_experiment_files_fail_before_any_run(grid, tmp_path, run, change, message):
    data = yaml.safe_load(grid.read_text())
    if "systems" in change:
        data["systems"] = change["systems"]
        data.pop("published")
    else:
        data.update(change)
    bad = grid.parent / f"bad-{tmp_path.name}.yaml"
    bad.write_text(yaml.safe_dump(data))
    result = run("experiment", "run", bad, "--out", tmp_path / "exp")  # in-process
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {bad}: "), result.output
    assert message in lines[0]
    if change == {"set": {"train.bogus": 1}} or "train.bogus" in str(change):
        assert "train.bogus: unknown key" in lines[0]
    assert not (tmp_path / "exp").exists()


def test_every_problem_of_the_top_level_keys_is_said_at_once(grid, tmp_path, run):
    """As a recipe's problems: an unknown key, a repeated seed, an unknown metric, a
    published system and a baseline that are not systems, all in one line."""
    data = yaml.safe_load(grid.read_text())
    data.update(seeds=[1, 1], metrics=["nope"], bogus=3, baseline="qq")
    data["published"] = {"zzz": {}}
    bad = grid.parent / f"bad-{tmp_path.name}.yaml"
    bad.write_text(yaml.safe_dump(data))
    result = run("experiment", "run", bad, "--out", tmp_path / "exp")
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {bad}: 5 problems: "), result.output
    for part in ("bogus: unknown key", "seeds: a seed is listed twice", "unknown metric 'nope'",
                 "published.zzz: not a system", "baseline: 'qq' is not a system"):  # fmt: skip
        assert part in lines[0], part
    assert not (tmp_path / "exp").exists()


@pytest.mark.slow
def test_the_grid_on_a_real_local_ray_cluster_gives_the_local_table(grid, tmp_path):
    """`--executor ray` (a local Ray cluster started for the run, real Ray tasks): the
    same table as the local executor, for the same seeds and threads (1 per cell)."""
    pytest.importorskip("ray")
    tables = {}
    for executor, options in (("local", ["--workers", "2"]), ("ray", ["--cpus", "1"])):
        out = tmp_path / executor
        result = run_experiment(
            "run", grid, "--out", out, "--executor", executor, *options, cwd=tmp_path
        )
        assert result.returncode == 0, result.stderr
        report_file = tmp_path / f"{executor}.json"
        assert run_experiment("report", out, "--json", report_file, cwd=tmp_path).returncode == 0
        tables[executor] = json.loads(report_file.read_text())["rows"]
    assert tables["ray"] == tables["local"]
    assert all(row["n"] == 2 for row in tables["ray"])
    # a cluster that is not there: one line
    wrong = run_experiment(
        "run", grid, "--out", tmp_path / "x", "--executor", "ray", "--address", "127.0.0.1:9",
        cwd=tmp_path,
    )  # fmt: skip
    assert wrong.returncode == 2 and "no Ray cluster to join" in wrong.stderr, wrong.stderr
    assert not (tmp_path / "x").exists()


def test_ray_options_belong_to_the_ray_executor(grid, tmp_path, run):
    result = run("experiment", "run", grid, "--out", tmp_path / "x", "--gpus", "0.5")
    assert result.exit_code == 2
    assert "--address, --cpus and --gpus are options of --executor ray" in result.output
    result = run("experiment", "run", grid, "--out", tmp_path / "x", "--executor", "ray",
                 "--threads", "2")  # fmt: skip
    assert result.exit_code == 2
    assert "--workers, --threads, --per-gpu and --gpu-memory are of --executor local" in (
        result.output
    )
    assert not (tmp_path / "x").exists()


def test_gpu_options_are_refused_where_torch_sees_no_gpu(grid, tmp_path, run):
    for option in (["--per-gpu", "2"], ["--gpu-memory", "0.5"]):
        result = run("experiment", "run", grid, "--out", tmp_path / "x", *option)
        assert result.exit_code == 2
        assert "--per-gpu and --gpu-memory: torch sees no GPU on this machine" in result.output
    assert not (tmp_path / "x").exists()


def test_cells_are_placed_on_the_least_busy_gpu_up_to_per_gpu(tmp_path, monkeypatch):
    """The placement and the environment of a cell, without a GPU (the cells sharing a
    real one: tests/test_cuda.py)."""
    executor = runner.LocalExecutor(tmp_path, 8, 1, gpus=["2", "5"], per_gpu=2, gpu_memory=0.25)
    assert executor.place([]) == "2"
    assert executor.place(["2"]) == "5"
    assert executor.place(["2", "5", "5"]) == "2"
    assert executor.place(["2", "5", "2", "5"]) is None  # each has its 2
    shows = "import os; print(os.environ.get('CUDA_VISIBLE_DEVICES', 'none'))"
    executor.command = lambda cell: [sys.executable, "-c", shows]  # type: ignore[method-assign]
    cells = [spec.Cell("g", None, 1, "r", ()), spec.Cell("c", None, 1, "r", (), device="cpu")]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    executor.run(cells, lambda outcomes: None)
    seen = {c.id: executor.log(c).read_text().strip() for c in cells}
    assert seen == {"g.seed1": "2", "c.seed1": "none"}  # a train.device: cpu cell gets none
    env = executor.environment("5")
    assert env["CUDA_VISIBLE_DEVICES"] == "5" and env["TRANSDUCE_GPU_MEMORY"] == "0.25"
    assert "TRANSDUCE_GPU_MEMORY" not in runner.LocalExecutor(tmp_path, 1, 1).environment(None)
    monkeypatch.setattr(runner.os, "cpu_count", lambda: 16)
    assert runner.default_workers() == 8 and runner.default_workers(1) == runner.PER_GPU
    assert runner.default_workers(2, per_gpu=8) == 16 and runner.default_workers(8, 4) == 16
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert runner.visible_gpus() == ["0", "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,7")  # this process's own: theirs too
    assert runner.visible_gpus() == ["3", "7"]


def test_shipped_experiments_are_found_by_name():
    assert "wu2018-g2p-nettalk-small" in spec.shipped_experiments()
    path = spec.experiment_path("wu2018-g2p-nettalk-small")
    assert path.is_file() and path.parent == spec.SHIPPED
    listed = "not a shipped experiment .shipped: .*wu2018-g2p-nettalk-small"
    with pytest.raises(spec.ConfigError, match=listed):
        spec.experiment_path("no-such-experiment")


NO_PUBLISHED_NUMBERS = {
    "wu2018-inflection-medium-small",
    "dufter2020-pos-ewt",
    "small-data-search-g2p",  # dev searches: nothing published to compare
    "small-data-probe-g2p-average",  # a dev probe of the averaging
    "small-data-probe-g2p-cap",  # a dev probe of the update cap
    "small-data-probe-g2p-average-split",  # a dev probe of the averaging
    "small-data-search-inflection",
}


@pytest.mark.slow
def test_shipped_experiments_load_with_the_real_data():
    from .conftest import shared_data

    root = shared_data()
    if root is None:
        pytest.skip("the shared datasets are not here")
    for name in spec.shipped_experiments():
        loaded = spec.load(name, root)
        assert loaded.cells
        # every paper experiment carries the paper's numbers (or a shared task's, as
        # references), except where the paper has none for that data (the file says so)
        assert loaded.published or loaded.references or name in NO_PUBLISHED_NUMBERS, name


def test_an_unquoted_field_in_a_yaml_list_is_named_with_its_line(tmp_path):
    path = tmp_path / "e.yaml"
    path.write_text(
        "systems: {a: {recipe: g2p}}\n"
        "datasets:\n"
        "  match: $DATA/x/{lang}-train\n"
        "  set: {data.train: [$DATA/x/{lang}-train]}\n"
    )
    with pytest.raises(spec.ConfigError) as caught:
        spec.load(path, tmp_path)
    message = str(caught.value)
    assert message.startswith(f"{path}:4: not a YAML experiment file") and "quote" in message


def test_the_shipped_experiments_are_listed_with_what_they_are(run):
    result = run("experiment", "list")
    assert result.exit_code == 0, result.output
    rows = dict(line.split("\t") for line in result.stdout.splitlines())
    assert sorted(rows) == spec.shipped_experiments()
    assert rows["wu2018-g2p-nettalk-small"].startswith("Wu, Shapiro & Cotterell (2018), Table 6")
    assert all(text and len(text) <= 110 for text in rows.values())


def test_cells_chosen_by_pattern_run_alone(grid, tmp_path, run):
    """--cells runs the matching cells only (exit 0 when they finish); the table names the
    others as not finished; a pattern that matches nothing is refused before anything."""
    out = tmp_path / "exp"
    result = run("experiment", "run", grid, "--out", out, "--cells", "lstm.*", "--cells", "nope.*")
    assert result.exit_code == 2 and "--cells nope.*: no cell of grid.yaml matches" in (
        result.output
    )
    assert not out.exists()
    done = run_experiment("run", grid, "--out", out, "--cells", "lstm.copy.*", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "(2 chosen by --cells): 0 finished before, 2 to run" in done.stderr
    assert sorted(p.name for p in (out / "runs").iterdir()) == [
        "lstm.copy.seed1",
        "lstm.copy.seed2",
    ]
    assert "2 of 8 cells finished; not finished: lstm.reverse.seed1" in done.stderr


# ------------------------------------------------------------------ ensembles of the seeds


@pytest.fixture(scope="module")
def ensembled(tmp_path_factory) -> tuple[Path, Path]:
    """A 1-system x 2-dataset x 2-seed toy grid with `ensemble:` (beam 2), run once: its
    experiment file and its experiment directory (copy it before changing it)."""
    root = tmp_path_factory.mktemp("ensembled")
    data = root / "data"
    data.mkdir()
    for task in ("copy", "reverse"):
        write_task(data, task)
    short = {"max_updates": 60, "validate_every": 20, "precision": "fp32"}
    (root / "lstm.yaml").write_text(
        yaml.safe_dump(recipe(data / "copy-prepared", TINY_LSTM, **short))
    )
    experiment = {
        "systems": {"lstm": {"recipe": "lstm.yaml", "set": {"decode.beam": 2}}},
        "datasets": {
            "match": str(data / "{task}-prepared"),
            "set": {"data.prepared": str(data / "{task}-prepared")},
        },
        "seeds": [1, 2],
        "metrics": ["acc", "per"],
        "ensemble": {"systems": "all"},
    }
    path = root / "ensembled.yaml"
    path.write_text(yaml.safe_dump(experiment, sort_keys=False))
    out = root / "exp"
    result = run_experiment("run", path, "--out", out, "--workers", "2", cwd=root)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.count("started the ensemble") == 2  # each once, as its seeds finish
    return path, out


class FakeProcess:
    """A running child process as `Stopping.pass_on` sees it, recording its signals."""

    def __init__(self, pid: int) -> None:
        self.pid, self.signals = pid, []

    def poll(self) -> None:
        return None

    def send_signal(self, signum: int) -> None:
        self.signals.append(signum)


def test_one_stopping_shared_by_two_loops_passes_each_signal_once_to_each_process():
    """A SIGTERM while an ensemble decodes in a cell's place: the decode's loop and the
    cells' loop share the executor's `Stopping`; each process gets one Ctrl-C for it,
    whichever loop passes it on first, one more for a second SIGTERM, and one for a
    Ctrl-C."""
    control = runner.Stopping()
    cells, decode = [FakeProcess(11), FakeProcess(12)], [FakeProcess(13)]
    with control.interrupts():
        control.pass_on([*cells, *decode])
        assert all(p.signals == [] for p in (*cells, *decode))  # nothing had yet
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 5
        while not control.stopping and time.monotonic() < deadline:
            time.sleep(0.01)
        assert control.stopping
        control.pass_on(decode)  # the decode's loop first
        control.pass_on(cells)
        control.pass_on([*cells, *decode])  # again: nothing new
        assert all(p.signals == [signal.SIGINT] for p in (*cells, *decode))
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 5
        while control._signals < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        control.pass_on([*cells, *decode])
        assert all(p.signals == [signal.SIGINT] * 2 for p in (*cells, *decode))
        os.kill(os.getpid(), signal.SIGINT)  # a Ctrl-C: the children are in other sessions
        deadline = time.monotonic() + 5
        while control._signals < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        control.pass_on([*cells, *decode])
        assert all(p.signals == [signal.SIGINT] * 3 for p in (*cells, *decode))


def results_only(source: Path, destination: Path) -> Path:
    """What a report needs, copied by hand: cells.json, each run's train.json and
    test.predictions, ensembles/*/* (no checkpoints, data, metrics.csv or logs)."""
    import shutil

    destination.mkdir(parents=True)
    shutil.copy(source / "cells.json", destination)
    for run in (source / "runs").iterdir():
        (destination / "runs" / run.name).mkdir(parents=True)
        for name in ("train.json", "test.predictions"):
            shutil.copy(run / name, destination / "runs" / run.name)
    shutil.copytree(source / "ensembles", destination / "ensembles")
    return destination


def test_the_seeds_of_a_system_decode_the_test_split_as_one_ensemble(ensembled, tmp_path):
    """EXP_DIR/ensembles/SYSTEM.DATASET/: test.predictions as `transduce decode RUN_1 RUN_2
    test.tsv --beam 2` prints it (the cells' decode options), a line per test line in its
    order; ensemble.json with the members, the test split's hash as their train.json
    record it, the decode options, and the test scores as a run scores its test split."""
    from transduce.scoring import ScoreRequest, score_request

    _, out = ensembled
    for dataset in ("copy", "reverse"):
        members = [f"lstm.{dataset}.seed{s}" for s in (1, 2)]
        folder = out / "ensembles" / f"lstm.{dataset}"
        record = json.loads((folder / "ensemble.json").read_text())
        trained = [json.loads((out / "runs" / m / "train.json").read_text()) for m in members]
        assert [m["cell"] for m in record["members"]] == members
        assert record["test_sha256"] == trained[0]["data"]["outputs"]["test.tsv"]
        assert record["decode"]["beam"] == 2 and record["mean"] == "probability"
        test = Path(trained[0]["data"]["directory"]) / "test.tsv"
        decoded = subprocess.run(
            [sys.executable, "-m", "transduce", "decode", *(out / "runs" / m for m in members),
             test, "--input-format", "tsv", "--beam", "2"],
            capture_output=True, text=True, env=transduce_env(), check=True,
        ).stdout  # fmt: skip
        predictions = (folder / "test.predictions").read_text()
        assert predictions == decoded
        assert len(predictions.splitlines()) == len(test.read_text().splitlines())
        assert record["test"].keys() == trained[0]["test"].keys()  # the run's metrics
        # scored as a run scores its test split: as `transduce score` scores the files,
        # for the ensemble as for each of its members
        for scored, predicted in [
            (record["test"], folder / "test.predictions"),
            *((t["test"], out / "runs" / m / "test.predictions") for t, m in zip(trained, members)),
        ]:
            request = ScoreRequest(str(predicted), [str(test)], ["acc", "per"], ref_col=2)
            again = score_request(request)[0]["scores"]
            assert scored["acc"] == pytest.approx(again["acc"]["value"])
            assert scored["per"] == pytest.approx(again["per"]["value"])
    states = json.loads((out / "cells.json").read_text())["ensembles"]
    assert [(s["id"], s["status"]) for s in states] == [
        ("lstm.copy", "done"),
        ("lstm.reverse", "done"),
    ]


def test_the_report_has_a_row_per_ensemble_and_reads_the_results_alone(ensembled, tmp_path):
    """`SYSTEM (ensemble of K)` per dataset (n = 1, no std) and its average over the
    datasets; the same table from a folder with nothing but cells.json, the runs'
    train.json and test.predictions, and ensembles/."""
    _, out = ensembled
    full = report.table(runner.read_state(out), out)
    rows = {(r["system"], r["dataset"], r["metric"]): r for r in full["rows"]}
    for dataset in ("copy", "reverse"):
        record = json.loads((out / "ensembles" / f"lstm.{dataset}" / "ensemble.json").read_text())
        row = rows[("lstm (ensemble of 2)", dataset, "acc")]
        assert row["values"] == [record["test"]["acc"]] and row["n"] == 1
        assert row["std"] is None and row["ensemble"] == 2
    average = rows[("lstm (ensemble of 2)", "average", "per")]
    assert average["mean"] == pytest.approx(
        statistics.fmean(
            rows[("lstm (ensemble of 2)", d, "per")]["mean"] for d in ("copy", "reverse")
        )
    )
    assert rows[("lstm", "copy", "acc")]["ensemble"] is None
    assert full["ensembles_done"] == 2 and full["ensembles_not_done"] == []
    bare = results_only(out, tmp_path / "results")
    assert (
        run_experiment("report", bare, "--json", tmp_path / "bare.json", cwd=tmp_path).returncode
        == 0
    )
    assert (
        run_experiment("report", out, "--json", tmp_path / "full.json", cwd=tmp_path).returncode
        == 0
    )
    assert json.loads((tmp_path / "bare.json").read_text()) == json.loads(
        (tmp_path / "full.json").read_text()
    )
    text = report.markdown(full)
    assert "| lstm (ensemble of 2) | average |" in text and "2 of 2 ensembles decoded" in text
    # what the ensemble adds, over the datasets: no baseline needed
    for paired in full["paired"]:
        assert (paired["a"], paired["b"], paired["n"]) == ("lstm (ensemble of 2)", "lstm", 2)
        gains = [
            rows[("lstm (ensemble of 2)", d, paired["metric"])]["mean"]
            - rows[("lstm", d, paired["metric"])]["mean"]
            for d in ("copy", "reverse")
        ]
        assert paired["difference"] == pytest.approx(statistics.fmean(gains))
    assert [p["metric"] for p in full["paired"]] == ["acc", "per"]
    # without ensembles/: the runs' table, the ensembles named as not decoded
    import shutil

    shutil.rmtree(bare / "ensembles")
    data = report.table(runner.read_state(bare), bare)
    assert data["ensembles_not_done"] == ["lstm.copy", "lstm.reverse"]
    assert all(r["n"] == 0 for r in data["rows"] if r["ensemble"])
    assert "0 of 2 ensembles decoded; not decoded: lstm.copy, lstm.reverse" in report.markdown(data)


def test_an_ensemble_is_decoded_once_and_again_when_a_member_changed(ensembled, tmp_path):
    import shutil

    path, source = ensembled
    out = shutil.copytree(source, tmp_path / "exp")
    stamps = {p: p.stat().st_mtime_ns for p in (out / "ensembles").glob("*/*")}
    first = json.loads((out / "cells.json").read_text())

    def seconds(part: str) -> dict[str, float | None]:
        data = json.loads((out / "cells.json").read_text())
        return {c["id"]: c["seconds"] for c in data[part]}

    assert None not in [c["seconds"] for c in first["cells"] + first["ensembles"]], first
    again = run_experiment("run", path, "--out", out, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "started the ensemble" not in again.stderr  # nothing decoded again
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    # ... and each cell and ensemble keeps the seconds its first run recorded
    assert seconds("cells") == {c["id"]: c["seconds"] for c in first["cells"]}
    assert seconds("ensembles") == {c["id"]: c["seconds"] for c in first["ensembles"]}
    # a member's train.json changes (the run was redone): that ensemble is out of date
    member = out / "runs" / "lstm.copy.seed2" / "train.json"
    member.write_text(json.dumps(json.loads(member.read_text()), indent=4))
    data = report.table(runner.read_state(out), out)
    assert data["ensembles_out_of_date"] == ["lstm.copy"]
    assert "out of date (a run changed since" in report.markdown(data)
    again = run_experiment("run", path, "--out", out, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "started the ensemble lstm.copy" in again.stderr
    assert "started the ensemble lstm.reverse" not in again.stderr
    record = json.loads((out / "ensembles" / "lstm.copy" / "ensemble.json").read_text())
    assert record["members"][1]["train_json_sha256"] == runner_sha(member)
    reverse = out / "ensembles" / "lstm.reverse" / "ensemble.json"
    assert reverse.stat().st_mtime_ns == stamps[reverse]
    before = {c["id"]: c["seconds"] for c in first["ensembles"]}
    assert seconds("ensembles")["lstm.reverse"] == before["lstm.reverse"]
    assert seconds("ensembles")["lstm.copy"] is not None  # this run's own


def runner_sha(path: Path) -> str:
    from transduce.io import sha256_file

    return sha256_file(path)


def test_a_failed_ensemble_is_reported_and_the_others_go_on(ensembled, tmp_path):
    import shutil

    path, source = ensembled
    out = shutil.copytree(source, tmp_path / "exp")
    shutil.rmtree(out / "ensembles")
    (out / "runs" / "lstm.copy.seed1" / "best.pt").unlink()
    result = run_experiment("run", path, "--out", out, cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert (
        "the ensemble lstm.copy: exit 2: error: ensemble lstm.copy: lstm.copy.seed1: no best.pt "
        f"(log: {out}/logs/lstm.copy.ensemble.log)" in result.stderr
    )
    assert (out / "ensembles" / "lstm.reverse" / "ensemble.json").is_file()
    assert not (out / "ensembles" / "lstm.copy").exists()
    states = {s["id"]: s for s in json.loads((out / "cells.json").read_text())["ensembles"]}
    assert states["lstm.copy"]["status"] == "failed" and states["lstm.reverse"]["status"] == "done"
    assert "1 of 2 ensembles decoded; not decoded: lstm.copy" in result.stderr


def test_an_ensemble_is_tried_once_a_run_when_its_seeds_are_reported_together(ensembled, tmp_path):
    """Both seeds of lstm.copy reported done (as when both end within one poll): its
    decode, which fails (a best.pt is gone), is tried once, in the cells' place (as soon
    as the first report finds both runs finished, before the second is reported), not
    again for the second seed nor after the cells; lstm.reverse, whose cells this executor
    does not report, is decoded after them."""
    import shutil

    from transduce.experiments.run import run_experiment as run_library

    _, source = ensembled
    out = shutil.copytree(source, tmp_path / "exp")
    shutil.rmtree(out / "ensembles")
    (out / "runs" / "lstm.copy.seed1" / "best.pt").unlink()
    experiment = runner.read_state(out)
    copy_cells = [c for c in experiment.cells if c.id.startswith("lstm.copy.")]

    class Reporting(runner.LocalExecutor):
        def run(self, cells, report):
            outcomes = []
            for cell in copy_cells:
                outcomes.append(runner.Outcome(cell, runner.DONE, 1.0))
                report(list(outcomes))
            return outcomes

    said: list[str] = []
    executor = Reporting(out, workers=1, threads=1)
    assert executor.decodes_inline
    result = run_library(experiment, out, executor, experiment.cells, said.append)
    assert [(o.group.id, o.status) for o in result.decoded] == [
        ("lstm.copy", "failed"),
        ("lstm.reverse", "done"),
    ], said
    assert sum("started the ensemble lstm.copy" in line for line in said) == 1
    started = next(i for i, line in enumerate(said) if "started the ensemble lstm.copy" in line)
    first, second = (
        next(i for i, line in enumerate(said) if f"lstm.copy.seed{s} done" in line) for s in (1, 2)
    )
    assert first < started < second  # in the cells' place, not after them
    first_reverse = min(i for i, line in enumerate(said) if "ensemble lstm.reverse" in line)
    assert max(i for i, line in enumerate(said) if "lstm.copy.seed2 done" in line) < first_reverse


def test_members_written_before_a_decode_option_existed_decode_as_one(ensembled, tmp_path):
    """A member whose train.json has no `decode.prob_mass` (trained before the option
    existed, so decoded with its default) and one with it form one ensemble; a member with
    another beam does not."""
    import shutil

    path, source = ensembled
    out = shutil.copytree(source, tmp_path / "exp")
    shutil.rmtree(out / "ensembles")
    older = out / "runs" / "lstm.copy.seed1" / "train.json"
    record = json.loads(older.read_text())
    assert record["config"]["decode"].pop("prob_mass") is None
    older.write_text(json.dumps(record))
    other = out / "runs" / "lstm.reverse.seed2" / "train.json"
    record = json.loads(other.read_text())
    record["config"]["decode"]["beam"] = 3
    other.write_text(json.dumps(record))
    result = run_experiment("run", path, "--out", out, cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert (out / "ensembles" / "lstm.copy" / "ensemble.json").is_file()
    assert (
        "ensemble lstm.reverse: lstm.reverse.seed2 decodes otherwise than lstm.reverse.seed1"
        in result.stderr
    )


def test_members_that_averaged_ensemble_with_their_final_pt(ensembled, tmp_path):
    """Members with a final.pt (`train.average_best_last`; here made as a run makes it,
    `transduce average RUN/best.pt RUN/last.pt`) ensemble with it, not with best.pt: the
    predictions are `transduce decode` of the two final.pt."""
    import shutil

    path, source = ensembled
    out = shutil.copytree(source, tmp_path / "exp")
    shutil.rmtree(out / "ensembles")
    members = [out / "runs" / f"lstm.copy.seed{s}" for s in (1, 2)]
    for run in members:  # `average` writes no file of a run directory: then moved in
        averaged = tmp_path / f"{run.name}.pt"
        subprocess.run(
            [sys.executable, "-m", "transduce", "average", run / "best.pt", run / "last.pt",
             "--out", averaged],
            capture_output=True, text=True, env=transduce_env(), check=True,
        )  # fmt: skip
        shutil.move(averaged, run / "final.pt")
    result = run_experiment("run", path, "--out", out, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    folder = out / "ensembles" / "lstm.copy"
    record = json.loads((folder / "ensemble.json").read_text())
    assert record["checkpoints"] == [f"runs/lstm.copy.seed{s}/final.pt" for s in (1, 2)]
    trained = json.loads((members[0] / "train.json").read_text())
    test = Path(trained["data"]["directory"]) / "test.tsv"
    decoded = subprocess.run(
        [sys.executable, "-m", "transduce", "decode", *(m / "final.pt" for m in members), test,
         "--input-format", "tsv", "--beam", "2"],
        capture_output=True, text=True, env=transduce_env(), check=True,
    ).stdout  # fmt: skip
    assert (folder / "test.predictions").read_text() == decoded
    record = json.loads((out / "ensembles" / "lstm.reverse" / "ensemble.json").read_text())
    assert record["checkpoints"] == [f"runs/lstm.reverse.seed{s}/best.pt" for s in (1, 2)]


def test_an_ensemble_scores_the_dev_split_as_a_validation_does(ensembled, tmp_path):
    """ensemble.json's dev scores: those of `transduce decode RUN_1 RUN_2 dev.tsv` scored
    against dev.tsv; an ensemble of one run has exactly that run's best validation (the
    dev split is decoded and scored as a validation does); `report --dev` shows them."""
    from transduce.experiments import ensembles
    from transduce.runs import RunReport
    from transduce.scoring import ScoreRequest, score_request

    _, source = ensembled
    for dataset in ("copy", "reverse"):
        members = [f"lstm.{dataset}.seed{s}" for s in (1, 2)]
        record = json.loads(
            (source / "ensembles" / f"lstm.{dataset}" / "ensemble.json").read_text()
        )
        trained = json.loads((source / "runs" / members[0] / "train.json").read_text())
        assert record["dev_sha256"] == trained["data"]["outputs"]["dev.tsv"]
        dev = Path(trained["data"]["directory"]) / "dev.tsv"
        decoded = subprocess.run(
            [sys.executable, "-m", "transduce", "decode", *(source / "runs" / m for m in members),
             dev, "--input-format", "tsv", "--beam", "2"],
            capture_output=True, text=True, env=transduce_env(), check=True,
        ).stdout  # fmt: skip
        (tmp_path / f"{dataset}.dev").write_text(decoded)
        request = ScoreRequest(
            str(tmp_path / f"{dataset}.dev"), [str(dev)], ["acc", "per"], ref_col=2
        )
        again = score_request(request)[0]["scores"]
        assert record["dev"]["acc"] == pytest.approx(again["acc"]["value"])
        assert record["dev"]["per"] == pytest.approx(again["per"]["value"])
        # one member alone: its own best validation's dev scores
        alone = ensembles.Group("lstm", dataset, (members[1],), "probability")
        import shutil

        out = tmp_path / f"one-{dataset}"
        shutil.copytree(source / "runs" / members[1], out / "runs" / members[1])
        result = ensembles.build(out, alone)
        best = report.best_dev(RunReport.from_json(out / "runs" / members[1] / "train.json"))
        assert {"acc", "per"} <= result["dev"].keys() <= best.keys()
        assert result["dev"] == pytest.approx({k: best[k] for k in result["dev"]})
    data = report.table(runner.read_state(source), source, "dev")
    rows = {(r["system"], r["dataset"], r["metric"]): r for r in data["rows"]}
    copy = json.loads((source / "ensembles" / "lstm.copy" / "ensemble.json").read_text())
    assert rows[("lstm (ensemble of 2)", "copy", "acc")]["values"] == [copy["dev"]["acc"]]
    assert rows[("lstm (ensemble of 2)", "average", "acc")]["n"] == 1
    text = report.markdown(data)
    assert "(dev: each run's best validation, each ensemble's dev split)" in text
    assert "2 of 2 ensembles scored on dev" in text


def test_an_ensemble_decoded_before_dev_scores_is_decoded_again(ensembled, tmp_path):
    """An ensemble.json without `dev` (written before ensembles scored the dev split) still
    counts for the test table, is named by `report --dev` and in cells.json, and
    `experiment run` decodes it again (only it), unless a member's best checkpoint is gone
    (then it stays as it is, and the run succeeds)."""
    import shutil

    from transduce.experiments import ensembles

    path, source = ensembled
    out = shutil.copytree(source, tmp_path / "exp")
    older = out / "ensembles" / "lstm.copy" / "ensemble.json"
    record = json.loads(older.read_text())
    del record["dev"], record["dev_sha256"]
    older.write_text(json.dumps(record))
    assert report.table(runner.read_state(out), out)["ensembles_done"] == 2
    dev = report.table(runner.read_state(out), out, "dev")
    assert dev["ensembles_done"] == 1 and dev["ensembles_not_done"] == ["lstm.copy"]
    assert "1 of 2 ensembles scored on dev; without dev scores (" in report.markdown(dev)
    states = ensembles.states(runner.read_state(out), out, [])
    assert [s["status"] for s in states] == ["no dev scores", "done"]
    # a member's checkpoint gone: not decoded again, nothing fails
    best = out / "runs" / "lstm.copy.seed1" / "best.pt"
    best.rename(best.with_name("kept.pt"))
    again = run_experiment("run", path, "--out", out, "--workers", "2", cwd=tmp_path)
    assert again.returncode == 0 and "started the ensemble" not in again.stderr, again.stderr
    assert "dev" not in json.loads(older.read_text())
    best.with_name("kept.pt").rename(best)
    again = run_experiment("run", path, "--out", out, "--workers", "2", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "started the ensemble lstm.copy" in again.stderr
    assert "started the ensemble lstm.reverse" not in again.stderr
    redone = json.loads(older.read_text())
    first = json.loads((source / "ensembles" / "lstm.copy" / "ensemble.json").read_text())
    assert redone["dev"] == first["dev"]
    assert (out / "ensembles" / "lstm.copy" / "test.predictions").read_text() == (
        source / "ensembles" / "lstm.copy" / "test.predictions"
    ).read_text()
    assert [s["status"] for s in json.loads((out / "cells.json").read_text())["ensembles"]] == [
        "done",
        "done",
    ]


@pytest.mark.parametrize(
    "change, why",
    [
        (
            lambda r: r["data"]["outputs"].update({"dev.tsv": "0" * 64}),
            "lstm.reverse.seed2 was validated on another dev split than lstm.reverse.seed1",
        ),
        (
            lambda r: r["config"]["train"].update({"dev_subset": 3}),
            "lstm.reverse.seed2 validated on another sample of the dev split than "
            "lstm.reverse.seed1 (train.dev_subset",
        ),
    ],
    ids=["another-dev-file", "another-dev-sample"],
)
def test_members_validated_on_different_dev_sets_ensemble_without_dev_scores(
    ensembled, tmp_path, change, why
):
    """Members validated on another dev file, or on a sample of it drawn with each run's
    own seed: the ensemble decodes the test split as before and records why it has no dev
    scores (they could not be read beside the members' best validations)."""
    import shutil

    from transduce.experiments import ensembles

    _, source = ensembled
    out = shutil.copytree(source, tmp_path / "exp")
    for seed in (1, 2):  # the same dev_subset on both, drawn with seeds 1 and 2
        member = out / "runs" / f"lstm.reverse.seed{seed}" / "train.json"
        data = json.loads(member.read_text())
        if seed == 2 or "dev_subset" in why:
            change(data)
        member.write_text(json.dumps(data))
    group = next(g for g in ensembles.groups(runner.read_state(out)) if g.id == "lstm.reverse")
    result = ensembles.build(out, group)
    assert result["dev"] is None and why in result["dev_skipped"]
    first = json.loads((source / "ensembles" / "lstm.reverse" / "ensemble.json").read_text())
    assert result["test"] == first["test"]
    assert not ensembles.needs_decoding(out, group)  # dealt with: not decoded at every run
    dev = report.table(runner.read_state(out), out, "dev")
    assert dev["ensembles_not_done"] == ["lstm.reverse"]


def test_ensemble_rows_by_hand(tmp_path):
    """n = 1 and no std per dataset; the average only where every dataset has its
    ensemble; an ensemble.json that does not name the members as they are is not shown."""
    cells = [spec.Cell("a", d, s, "", ()) for d in ("x", "y") for s in (1, 2)]
    experiment = spec.Experiment(
        tmp_path / "e.yaml", cells, ["a"], ["x", "y"], [1, 2], ["acc"],
        ensemble=spec.EnsembleSpec(("a",)),
    )  # fmt: skip
    for cell in cells:
        fake_run(tmp_path, cell.id, {"acc": 50.0})
    from transduce.experiments import ensembles

    for group, acc in zip(ensembles.groups(experiment), (60.0, 80.0)):
        folder = tmp_path / "ensembles" / group.id
        folder.mkdir(parents=True)
        (folder / "test.predictions").write_text("x\n")
        record = {
            "members": ensembles.fingerprint(tmp_path, group),
            "mean": "probability",
            "test_predictions_sha256": runner_sha(folder / "test.predictions"),
            "test": {"acc": acc},
        }
        (folder / "ensemble.json").write_text(json.dumps(record))
    rows = {r["dataset"]: r for r in report.table(experiment, tmp_path)["rows"] if r["ensemble"]}
    assert rows["x"]["values"] == [60.0] and rows["x"]["std"] is None
    assert rows["average"]["values"] == [70.0] and rows["average"]["system"] == "a (ensemble of 2)"
    (tmp_path / "ensembles" / "a.y" / "test.predictions").write_text("changed\n")
    data = report.table(experiment, tmp_path)
    rows = {r["dataset"]: r for r in data["rows"] if r["ensemble"]}
    assert rows["y"]["values"] == [] and rows["average"]["values"] == []
    assert data["ensembles_out_of_date"] == ["a.y"]


# ---------------------------------------------------- references: systems not run here


def test_references_are_columns_beside_our_means_with_their_average_and_counts(tmp_path):
    """A column per reference next to the mean; its average over the experiment's
    datasets only where it has every one; per system and reference, the datasets where the
    mean is better (higher acc, lower lev), of those where both have a number."""
    cells = [spec.Cell("a", d, 1, "", ()) for d in ("x", "y", "z")]
    experiment = spec.Experiment(
        tmp_path / "e.yaml", cells, ["a"], ["x", "y", "z"], [1], ["acc", "lev"],
        references={
            "baseline": {"x": {"acc": 40.0, "lev": 1.0}, "y": {"acc": 90.0, "lev": 0.1},
                         "z": {"acc": 50.0, "lev": 0.5}},
            "CLUZH-7": {"x": {"acc": 60.0}},
        },
    )  # fmt: skip
    for dataset, (acc, lev) in {"x": (50.0, 0.5), "y": (80.0, 0.2), "z": (50.0, 0.3)}.items():
        fake_run(tmp_path, f"a.{dataset}.seed1", {"acc": acc, "lev": lev})
    data = report.table(experiment, tmp_path)
    rows = {(r["dataset"], r["metric"]): r for r in data["rows"]}
    assert rows[("x", "acc")]["references"] == {"baseline": 40.0, "CLUZH-7": 60.0}
    assert rows[("y", "acc")]["references"] == {"baseline": 90.0, "CLUZH-7": None}
    assert rows[("average", "acc")]["references"] == {"baseline": 60.0, "CLUZH-7": None}
    assert rows[("average", "lev")]["references"]["baseline"] == pytest.approx(1.6 / 3)
    assert data["against_references"] == {
        "acc": {
            "a": {
                "baseline": {"better": 1, "equal": 1, "of": 3},  # x above, z equal, y below
                "CLUZH-7": {"better": 0, "equal": 0, "of": 1},
            }
        },
        "lev": {
            "a": {
                "baseline": {"better": 2, "equal": 0, "of": 3},  # x and z lower
                "CLUZH-7": {"better": 0, "equal": 0, "of": 0},
            }
        },
    }
    text = report.markdown(data)
    assert "| system | dataset | acc mean ± std (n) | baseline | CLUZH-7 | published | diff" in text
    assert "|---|---|--:|--:|--:|--:|--:|" in text
    assert "| a | x | 50.00 (n=1) | 40.00 | 60.00 |  |  |" in text
    assert "| a | average | 60.00 (n=1) | 60.00 |  |  |  |" in text
    assert (
        "Datasets where the mean is better (higher acc):\n\n"
        "- a: above baseline on 1 of 3 (1 equal); above CLUZH-7 on 0 of 1\n" in text
    )
    assert "- a: below baseline on 2 of 3\n" in text  # none compared with CLUZH-7: not named
    lines = report.csv_text(data).splitlines()
    assert lines[0].endswith(",difference,reference.baseline,reference.CLUZH-7")
    assert lines[1] == "a,x,acc,1,50.0,,,,40.0,60.0"


def test_references_load_and_go_into_cells_json(grid, tmp_path):
    """A dataset that `only` leaves out may be given (a paper's whole table) and is not
    kept; the references travel in cells.json to the report."""
    data = yaml.safe_load(grid.read_text())
    data["datasets"]["only"] = ["copy"]
    data["references"] = {"baseline": {"copy": {"acc": 50}, "reverse": {"acc": 60.5}}}
    path = grid.parent / f"refs-{tmp_path.name}.yaml"
    path.write_text(yaml.safe_dump(data))
    loaded = spec.load(path)
    assert loaded.references == {"baseline": {"copy": {"acc": 50.0}}}
    runner.write_state(tmp_path, runner.state(loaded, tmp_path, []))
    assert runner.read_state(tmp_path).references == loaded.references


# ---------------------------------------------------- committable results: export


def test_export_copies_what_the_report_reads_and_gives_the_same_table(ensembled, tmp_path, run):
    _, out = ensembled
    dest = tmp_path / "results" / "ensembled"
    result = run_experiment("export", out, dest, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"`transduce experiment report {dest}` gives the table" in result.stderr
    copied = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    runs = [f"runs/lstm.{d}.seed{s}" for d in ("copy", "reverse") for s in (1, 2)]
    assert copied == sorted(
        ["cells.json", "export.json"]
        + [f"{r}/{name}" for r in runs for name in ("train.json", "test.predictions")]
        + [f"ensembles/lstm.{d}/{n}" for d in ("copy", "reverse")
           for n in ("ensemble.json", "test.predictions")]
    )  # fmt: skip
    tables = {}
    for name, folder in (("exp", out), ("dest", dest)):
        done = run_experiment("report", folder, "--json", tmp_path / f"{name}.json", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        tables[name] = json.loads((tmp_path / f"{name}.json").read_text())
        tables[name + ".md"] = done.stderr
    assert tables["dest"] == tables["exp"] and tables["dest.md"] == tables["exp.md"]
    # again: it replaces what it wrote
    assert run("experiment", "export", out, dest).exit_code == 0
    # a file it did not write (or that changed since): refused before copying anything
    stamps = {p: p.stat().st_mtime_ns for p in dest.rglob("*")}
    (dest / "cells.json").write_text((dest / "cells.json").read_text() + "\n")
    refused = run("experiment", "export", out, dest)
    assert refused.exit_code == 2
    lines = refused.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {dest}/cells.json: exists and was not")
    assert {p: p.stat().st_mtime_ns for p in dest.rglob("*") if p.name != "cells.json"} == {
        p: t for p, t in stamps.items() if p.name != "cells.json"
    }
    other = tmp_path / "other"
    other.mkdir()
    (other / "runs" / "lstm.copy.seed1").mkdir(parents=True)
    (other / "runs" / "lstm.copy.seed1" / "train.json").write_text("{}")
    refused = run("experiment", "export", out, other)
    assert refused.exit_code == 2 and "train.json: exists and was not written" in refused.output
    assert sorted(p.name for p in other.rglob("*")) == ["lstm.copy.seed1", "runs", "train.json"]
    (other / "export.json").write_text("{}")
    refused = run("experiment", "export", out, other)
    assert (
        refused.exit_code == 2
        and "export.json: not written by `transduce experiment export`" in (refused.output)
    )
    refused = run("experiment", "export", out, out)
    assert refused.exit_code == 2 and "is the experiment directory itself" in refused.output
    refused = run("experiment", "export", tmp_path / "nothing", tmp_path / "x")
    assert refused.exit_code == 2 and "is not an experiment directory" in refused.output
    assert not (tmp_path / "x").exists()


def test_export_takes_the_test_split_where_metrics_are_scored_again(tmp_path):
    """score: the report scores test.predictions again against the test split: the
    export copies it (runs/CELL/data/test.tsv), and the table is the same."""
    from transduce.experiments.export import export

    source = tmp_path / "exp"
    experiment = spec.Experiment(
        tmp_path / "e.yaml", [spec.Cell("a", None, 1, "", ())], ["a"], [None], [1],
        ["per", "wer"], score={"per": {"average": "word"}},
    )  # fmt: skip
    fake_run(source, "a.seed1", {"per": 100 / 6, "wer": 50.0})
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    (prepared / "test.tsv").write_text("a b\tx y\nc\tz w v u\n")
    (source / "runs" / "a.seed1" / "test.predictions").write_text("x q\nz w v u\n")
    recorded = json.loads((source / "runs" / "a.seed1" / "train.json").read_text())
    recorded["data"] = {
        "directory": str(prepared),
        "outputs": {"test.tsv": runner_sha(prepared / "test.tsv")},
    }
    (source / "runs" / "a.seed1" / "train.json").write_text(json.dumps(recorded))
    runner.write_state(source, runner.state(experiment, source, []))
    written = export(source, tmp_path / "dest")
    assert "runs/a.seed1/data/test.tsv" in written
    import shutil

    shutil.rmtree(prepared)  # the results alone
    again = report.table(runner.read_state(tmp_path / "dest"), tmp_path / "dest")
    assert {r["metric"]: r["values"] for r in again["rows"]} == {"per": [25.0], "wer": [50.0]}
    assert again["unscored"] == {}


def _grid_part(
    tmp_path: Path, name: str, scores: dict[str, float], datasets=("x", "y"), dev=True
) -> Path:
    """A machine's directory of a grid in parts (system a, `datasets`, seeds 1 and 2)
    that has run `scores`' cells, and the ensemble of each dataset whose seeds it has both
    run (without dev scores, and with its members' models, when not `dev`)."""
    from transduce.experiments import ensembles as ens
    from transduce.runs import RunDir

    cells = [spec.Cell("a", d, s, "", ()) for d in datasets for s in (1, 2)]
    experiment = spec.Experiment(
        tmp_path / "e.yaml", cells, ["a"], list(datasets), [1, 2], ["acc"],
        ensemble=spec.EnsembleSpec(("a",), "probability"),
    )  # fmt: skip
    directory = tmp_path / name
    for cell, acc in scores.items():
        fake_run(directory, cell, {"acc": acc})
        (directory / "runs" / cell / "test.predictions").write_text(f"{name} {cell}\n")
        if not dev:
            RunDir(directory / "runs" / cell).model.write_bytes(b"model")
    for group in ens.groups(experiment):
        if all(m in scores for m in group.members):
            folder = directory / "ensembles" / group.id
            folder.mkdir(parents=True)
            (folder / "test.predictions").write_text(f"{name}\n")
            record = {
                "members": ens.fingerprint(directory, group),
                "mean": group.mean,
                "test_predictions_sha256": runner_sha(folder / "test.predictions"),
                "test": {"acc": 90.0},
                **({"dev": {"acc": 91.0}} if dev else {}),
            }
            (folder / "ensemble.json").write_text(json.dumps(record))
    runner.write_state(
        directory, runner.state(experiment, directory, [], ens.states(experiment, directory, []))
    )
    return directory


def test_exports_of_parts_of_a_grid_add_up_in_one_dest(tmp_path):
    """A grid run in parts on machines that may not come back: each part's export keeps
    what the earlier ones put in DEST (the cells and ensembles this part has not finished,
    in its cells.json as well), a cell run again replaces DEST's, an ensemble whose member
    was run again is no longer done, the grid may grow between exports but not shrink."""
    from transduce.experiments.export import export

    def part(name: str, scores: dict[str, float], datasets=("x", "y"), dev=True) -> Path:
        return _grid_part(tmp_path, name, scores, datasets, dev)

    def statuses(dest: Path) -> dict[str, str]:
        data = json.loads((dest / "cells.json").read_text())
        return {e["id"]: e["status"] for e in data["cells"] + data["ensembles"]}

    def table(dest: Path) -> dict:
        return report.table(runner.read_state(dest), dest)

    dest = tmp_path / "results" / "grid"  # made by the first export
    first = part("m1", {"a.x.seed1": 50.0, "a.x.seed2": 60.0}, datasets=("x",), dev=False)
    export(first, dest)
    assert statuses(dest) == {"a.x.seed1": "done", "a.x.seed2": "done", "a.x": "no dev scores"}
    manifest = json.loads((dest / "export.json").read_text())
    assert manifest["sources"] == [str(first.resolve())]
    del manifest["sources"]  # as an export before `sources` wrote it
    (dest / "export.json").write_text(json.dumps(manifest))
    # the grid grew (dataset y); this part ran y alone
    second = part("m2", {"a.y.seed1": 70.0, "a.y.seed2": 80.0})
    export(second, dest)
    assert statuses(dest) == {
        "a.x.seed1": "done", "a.x.seed2": "done", "a.y.seed1": "done",
        "a.y.seed2": "done", "a.x": "no dev scores", "a.y": "done",
    }  # fmt: skip
    assert table(dest)["not_done"] == [] and table(dest)["ensembles_out_of_date"] == []
    manifest = json.loads((dest / "export.json").read_text())
    assert manifest["sources"] == [str(first.resolve()), str(second.resolve())]
    assert manifest["source"] == str(second.resolve())
    for name, digest in manifest["files"].items():  # the merged cells.json too
        assert runner_sha(dest / name) == digest, name
    # a third machine runs x's seed 2 again: it replaces DEST's, and x's ensemble is stale
    third = part("m3", {"a.x.seed2": 65.0})
    export(third, dest)
    assert json.loads((dest / "runs/a.x.seed2/train.json").read_text())["test"]["acc"] == 65.0
    assert statuses(dest) == {
        "a.x.seed1": "done", "a.x.seed2": "done", "a.y.seed1": "done",
        "a.y.seed2": "done", "a.x": "pending", "a.y": "done",
    }  # fmt: skip
    assert table(dest)["ensembles_out_of_date"] == ["a.x"]
    # a run whose files left DEST is no longer done there; the same part again: one source
    (dest / "runs/a.y.seed1/train.json").unlink()
    export(third, dest)
    assert statuses(dest)["a.y.seed1"] == "pending" and statuses(dest)["a.y"] == "pending"
    assert json.loads((dest / "export.json").read_text())["sources"] == [
        str(first.resolve()), str(second.resolve()), str(third.resolve()),
    ]  # fmt: skip
    # a grid without y (fewer cells than DEST's) is refused before anything is copied
    before = {q: q.read_bytes() for q in dest.rglob("*") if q.is_file()}
    smaller = part("m4", {"a.x.seed1": 55.0}, datasets=("x",))
    with pytest.raises(
        spec.ConfigError, match=r"another grid than .*m4's, with 3 cells or ensembles"
    ):
        export(smaller, dest)
    assert {q: q.read_bytes() for q in dest.rglob("*") if q.is_file()} == before


def test_an_export_cut_short_at_any_write_is_finished_by_exporting_it_again(tmp_path, monkeypatch):
    """A crash at any file write of an export (the first into DEST, or one into a DEST
    that earlier exports filled): an export of the same EXP_DIR again accepts what it left
    (each file as before, or as it was about to write it) and leaves DEST as an export that
    was never cut short; an export of another EXP_DIR is refused meanwhile, since a cell's
    files may be half replaced. A killed export's temporary files are removed."""
    import contextlib

    from transduce import io
    from transduce.experiments.export import export

    first = _grid_part(tmp_path, "m1", {"a.x.seed1": 50.0, "a.x.seed2": 60.0})
    second = _grid_part(tmp_path, "m2", {"a.y.seed1": 70.0, "a.y.seed2": 80.0})
    again = _grid_part(tmp_path, "m3", {"a.x.seed2": 65.0})

    def contents(dest: Path) -> dict[str, bytes]:
        return {str(q.relative_to(dest)): q.read_bytes() for q in dest.rglob("*") if q.is_file()}

    expected = {}
    for parts in ((first,), (first, second, again)):
        clean = tmp_path / f"clean{len(parts)}"
        for part in parts:
            export(part, clean)
        expected[len(parts)] = contents(clean)

    real_binary, real_text = io.atomic_binary, io.atomic_write_text
    writes: list[str] = []
    cut_at = [0]

    def write(path) -> None:
        writes.append(Path(path).name)
        if len(writes) == cut_at[0]:
            raise OSError("the machine is gone")

    @contextlib.contextmanager
    def binary(path):
        write(path)
        with real_binary(path) as handle:
            yield handle

    def text(path, content) -> None:
        write(path)
        real_text(path, content)

    monkeypatch.setattr(io, "atomic_binary", binary)
    monkeypatch.setattr(io, "atomic_write_text", text)
    for parts in ((first,), (first, second, again)):
        *before, last = parts
        writes.clear()
        for part in parts:
            export(part, tmp_path / f"count{len(parts)}")
        total = len(writes)  # writes of the last export (and the earlier ones)
        assert {"export.json", "cells.json", "train.json", "test.predictions"} <= set(writes)
        for k in range(1, total + 1):
            dest = tmp_path / f"dest{len(parts)}-{k}"
            cut_at[0] = 0
            for part in before:
                export(part, dest)
            start = contents(dest) if dest.exists() else {}
            writes.clear()
            cut_at[0] = k
            try:
                export(last, dest)
            except OSError as error:
                assert "the machine is gone" in str(error)
            else:
                continue  # k is past the last export's writes
            cut_at[0] = 0
            manifest = dest / "export.json"
            if manifest.exists() and "pending" in json.loads(manifest.read_text()):
                held = contents(dest)
                with pytest.raises(spec.ConfigError, match=r"an export of .*m\d into it was"):
                    export(first if last is again else second, dest)
                assert contents(dest) == held  # refused, nothing touched
            else:  # cut before anything was written
                assert contents(dest) == start
            export(last, dest)
            assert contents(dest) == expected[len(parts)], (len(parts), k)

    # a kill (no cleanup of the temporary file), then the same export again by the CLI
    monkeypatch.undo()
    dest = tmp_path / "killed"
    export(first, dest)
    export(second, dest)
    env = {**transduce_env(), "TRANSDUCE_FAULT": "before-rename:test.predictions"}
    killed = subprocess.run(
        [sys.executable, "-m", "transduce", "experiment", "export", str(again), str(dest)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert killed.returncode == -9, killed.stderr
    assert any(".test.predictions.transduce-" in q.name for q in dest.rglob("*"))
    assert run_experiment("export", again, dest, cwd=tmp_path).returncode == 0
    assert contents(dest) == expected[3]
    assert sorted(q.name for q in tmp_path.iterdir() if q.name.startswith(".")) == []


# ---------------------------------------------------------------------- random search

SPACE = {
    "train.optimizer.lr": {"loguniform": [0.001, 0.01]},
    "model.dropout": {"uniform": [0.0, 0.3]},
    "train.batch_size": {"choice": [8, 16]},
    "model.encoder_size": {"int": [16, 32]},
}


def test_a_random_search_is_a_system_per_trial(grid, tmp_path):
    """search: N trials NAME-t1 ... NAME-tN, each the system with its sampled values as
    overrides (after the system's own); the same seed gives the same trials."""
    data = yaml.safe_load(grid.read_text())
    data["systems"]["lstm"]["set"] = {"model.dropout": 0.5, "train.patience": 7}
    data["systems"]["lstm"]["search"] = {"trials": 3, "seed": 7, "space": SPACE}
    data.pop("published")
    data["ensemble"] = {"systems": ["lstm"]}  # a search's name: its trials
    path = grid.parent / f"search-{tmp_path.name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    loaded = spec.load(path)
    assert loaded.systems == ["lstm-t1", "lstm-t2", "lstm-t3", "tf"]
    assert loaded.ensemble is not None
    assert loaded.ensemble.systems == ("lstm-t1", "lstm-t2", "lstm-t3")
    trials = spec.sample(SPACE, 3, 7)
    assert loaded.search == {
        "lstm": {"seed": 7, "trials": {f"lstm-t{k}": v for k, v in enumerate(trials, 1)}}
    }
    cell = next(c for c in loaded.cells if c.id == "lstm-t2.reverse.seed2")
    sampled = [f"{k}={json.dumps(v)}" for k, v in trials[1].items()]
    assert list(cell.overrides[:6]) == ["model.dropout=0.5", "train.patience=7", *sampled]
    assert cell.overrides[-1] == "train.seed=2"
    assert spec.load(path).cells == loaded.cells  # deterministic
    data["systems"]["lstm"]["search"]["seed"] = 8
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert spec.load(path).search["lstm"]["trials"] != loaded.search["lstm"]["trials"]
    # the search travels in cells.json to the report
    runner.write_state(tmp_path, runner.state(loaded, tmp_path, []))
    assert runner.read_state(tmp_path).search == loaded.search


def test_search_samples_by_hand():
    """One random.Random(seed), the keys in order: these values on any machine; bounds
    kept (int: both ends), real numbers to 6 significant digits."""
    space = {
        "x": {"int": [1, 100]},
        "y": {"loguniform": [0.001, 0.1]},
        "z": {"choice": ["a", "b", "c"]},
        "w": {"uniform": [0, 1]},
    }
    assert spec.sample(space, 3, 0) == [
        {"x": 50, "y": 0.0328026, "z": "b", "w": 0.0404844},
        {"x": 66, "y": 0.0093725, "z": "b", "w": 0.9678},
        {"x": 46, "y": 0.0146813, "z": "a", "w": 0.504687},
    ]
    many = spec.sample({"i": {"int": [1, 3]}, "l": {"loguniform": [1e-4, 1e-2]}}, 400, 1)
    assert {t["i"] for t in many} == {1, 2, 3}
    logs = sorted(t["l"] for t in many)
    assert logs[0] >= 1e-4 and logs[-1] <= 1e-2
    assert 5e-4 < statistics.median(logs) < 2e-3  # log-uniform: the median near 1e-3


def write_best(directory: Path, cell: str, metric: str, score: float) -> None:
    fake_run(directory, cell, {metric: score})
    path = directory / "runs" / cell / "train.json"
    data = json.loads(path.read_text())
    data["best"] = {"update": 10, "metric": metric, "score": score}
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("metric", "order"), [("acc", ["a-t2", "a-t1"]), ("per", ["a-t1", "a-t2"])]
)
def test_trials_ranked_by_their_best_dev_score(tmp_path, metric, order):
    """Per trial: the mean over seeds per dataset, then over datasets, of train.json's
    best dev score; best first by the metric's direction; a trial without a finished run
    on every dataset unranked, last."""
    trials = {"a-t1": {"lr": 0.001}, "a-t2": {"lr": 0.01}, "a-t3": {"lr": 0.1}}
    cells = [spec.Cell(t, d, s, "", ()) for t in trials for d in ("x", "y") for s in (1, 2)]
    experiment = spec.Experiment(
        tmp_path / "e.yaml", cells, list(trials), ["x", "y"], [1, 2], [metric],
        search={"a": {"seed": 3, "trials": trials}},
    )  # fmt: skip
    scores = {
        "a-t1": {("x", 1): 10.0, ("x", 2): 20.0, ("y", 1): 30.0},  # x 15, y 30: 22.5
        "a-t2": {("x", 1): 40.0, ("y", 1): 50.0, ("y", 2): 70.0},  # x 40, y 60: 50
        "a-t3": {("x", 1): 90.0},  # no y: not ranked
    }
    for trial, runs in scores.items():
        for (dataset, seed), score in runs.items():
            write_best(tmp_path, f"{trial}.{dataset}.seed{seed}", metric, score)
    data = report.table(experiment, tmp_path)
    ranked = data["search"]["a"]
    assert ranked["metric"] == metric and ranked["seed"] == 3
    assert [t["trial"] for t in ranked["trials"]] == [*order, "a-t3"]
    by_trial = {t["trial"]: t for t in ranked["trials"]}
    assert by_trial["a-t1"]["dev"] == 22.5 and by_trial["a-t1"]["n"] == 3
    assert by_trial["a-t2"]["dev"] == 50.0 and by_trial["a-t2"]["values"] == {"lr": 0.01}
    assert by_trial["a-t3"]["rank"] is None and by_trial["a-t3"]["dev"] is None
    text = report.markdown(data)
    assert f"### random search a: trials by dev {metric} (best validation of each run" in text
    assert f"| rank | trial | dev {metric} (n) | lr |" in text
    best = order[0]
    assert (
        f"| 1 | {best} | {by_trial[best]['dev']:.2f} (n=3) | {by_trial[best]['values']['lr']} |"
        in text
    )
    assert "|  | a-t3 | – | 0.1 |" in text


def test_a_search_run_on_some_datasets_is_ranked_on_those(tmp_path):
    """A search run with --cells on some of the experiment's datasets: ranked over the
    datasets where any trial has a finished run (named in the heading); a trial missing
    one of those is not ranked, and a dataset none of them ran is not counted."""
    trials = {"a-t1": {"lr": 0.001}, "a-t2": {"lr": 0.01}, "a-t3": {"lr": 0.1}}
    datasets = ["x", "y", "z"]
    cells = [spec.Cell(t, d, 1, "", ()) for t in trials for d in datasets]
    experiment = spec.Experiment(
        tmp_path / "e.yaml", cells, list(trials), datasets, [1], ["wer"],
        search={"a": {"seed": 1, "trials": trials}},
    )  # fmt: skip
    for cell, score in {"a-t1.x": 10.0, "a-t1.y": 20.0, "a-t2.x": 4.0, "a-t2.y": 6.0,
                        "a-t3.x": 1.0}.items():  # fmt: skip
        write_best(tmp_path, f"{cell}.seed1", "wer", score)
    ranked = report.table(experiment, tmp_path)["search"]["a"]
    assert ranked["datasets"] == ["x", "y"]
    assert [(t["trial"], t["rank"], t["dev"]) for t in ranked["trials"]] == [
        ("a-t2", 1, 5.0), ("a-t1", 2, 15.0), ("a-t3", None, None)
    ]  # fmt: skip
    text = report.markdown(report.table(experiment, tmp_path))
    assert "mean over seeds, then over the datasets searched: x, y; seed 1)" in text
    # one run on z makes z a dataset of the search: no trial has every one now
    write_best(tmp_path, "a-t3.z.seed1", "wer", 2.0)
    ranked = report.table(experiment, tmp_path)["search"]["a"]
    assert ranked["datasets"] == datasets
    assert all(t["rank"] is None for t in ranked["trials"])


def test_a_search_without_datasets_is_ranked_on_the_recipes_data(tmp_path):
    """No `datasets:` (one dataset, None): searched once a trial has finished; before any
    has, no trial is ranked and the heading says so."""
    trials = {"a-t1": {"lr": 0.001}, "a-t2": {"lr": 0.01}}
    cells = [spec.Cell(t, None, 1, "", ()) for t in trials]
    experiment = spec.Experiment(
        tmp_path / "e.yaml", cells, list(trials), [None], [1], ["acc"],
        search={"a": {"seed": 1, "trials": trials}},
    )  # fmt: skip
    data = report.table(experiment, tmp_path)
    assert data["search"]["a"]["datasets"] == []
    assert all(t["rank"] is None for t in data["search"]["a"]["trials"])
    assert "then over the datasets searched: none yet;" in report.markdown(data)
    write_best(tmp_path, "a-t2.seed1", "acc", 70.0)
    data = report.table(experiment, tmp_path)
    assert data["search"]["a"]["datasets"] == [None]
    assert [(t["trial"], t["rank"]) for t in data["search"]["a"]["trials"]] == [
        ("a-t2", 1), ("a-t1", None)
    ]  # fmt: skip
    assert "then over the datasets searched: the recipe's data;" in report.markdown(data)


def test_the_dev_table_reads_each_runs_best_validation(tmp_path):
    """`report --dev`: the dev scores of the validation at `best.update`, not the last one,
    not the test scores; no published numbers beside them."""
    experiment = spec.Experiment(
        tmp_path / "e.yaml",
        [spec.Cell("a", "x", s, "", ()) for s in (1, 2)],
        ["a"],
        ["x"],
        [1, 2],
        ["acc"],
        {"a": {"x": {"acc": 99.0}}},
    )
    for seed, best in ((1, 30.0), (2, 50.0)):
        cell = f"a.x.seed{seed}"
        fake_run(tmp_path, cell, {"acc": 1.0})
        path = tmp_path / "runs" / cell / "train.json"
        data = json.loads(path.read_text())
        data["best"] = {"update": 20, "metric": "acc", "score": best}
        data["history"] = [
            {"update": 10, "dev_scores": {"acc": best - 10}},
            {"update": 20, "dev_scores": {"acc": best}},
            {"update": 30, "dev_scores": {"acc": best - 5}},
        ]
        path.write_text(json.dumps(data))
    dev = report.table(experiment, tmp_path, "dev")
    row = next(r for r in dev["rows"] if r["dataset"] == "x")
    assert row["values"] == [30.0, 50.0] and row["published"] is None
    assert "(dev: each run's best validation)" in report.markdown(dev)
    test = next(r for r in report.table(experiment, tmp_path)["rows"] if r["dataset"] == "x")
    assert test["values"] == [1.0, 1.0] and test["published"] == 99.0


# Files an experiment reads back, damaged by hand (valid JSON of the wrong shape, bytes
# that are not UTF-8): (id, what to do to a directory of two finished cells, the exit code
# of `experiment report`, what its output says or its one error line holds).
def _write(path: Path, text: str | bytes) -> None:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)


DAMAGED = [
    ("train-json-null", lambda d: _write(d / "runs/a.seed2/train.json", "null"), 0,
     "not finished: a.seed2"),
    ("train-json-a-list", lambda d: _write(d / "runs/a.seed2/train.json", "[1]"), 0,
     "not finished: a.seed2"),
    ("train-json-test-a-string",
     lambda d: _write(d / "runs/a.seed2/train.json", json.dumps(
         {"stop": "reached max_updates (1)", "test": "acc", "config": {"train": {}}})), 0,
     "not finished: a.seed2"),
    ("train-json-test-score-a-string",
     lambda d: _write(d / "runs/a.seed2/train.json", json.dumps(
         {"stop": "reached max_updates (1)", "test": {"acc": "1"}, "config": {}})), 0,
     "not finished: a.seed2"),
    ("cells-json-metrics-a-number",
     lambda d: _write(d / "cells.json", json.dumps(
         {**json.loads((d / "cells.json").read_text()), "metrics": 3})), 2,
     "cells.json: not an experiment's cells.json: its 'metrics' is 3"),
    ("cells-json-cells-null",
     lambda d: _write(d / "cells.json", json.dumps(
         {**json.loads((d / "cells.json").read_text()), "cells": None})), 2,
     "cells.json: not an experiment's cells.json: its 'cells' is None"),
    ("cells-json-null", lambda d: _write(d / "cells.json", "null"), 2,
     "cells.json: not an experiment's cells.json: it is NoneType"),
]  # fmt: skip


@pytest.mark.parametrize("damage,code,said", [c[1:] for c in DAMAGED], ids=[c[0] for c in DAMAGED])
def test_damaged_files_read_back_are_one_line_or_a_missing_cell(tmp_path, run, damage, code, said):
    """N7: valid JSON of the wrong shape in one cell gave tracebacks for the whole grid."""
    experiment = spec.Experiment(
        tmp_path / "e.yaml",
        [spec.Cell("a", None, s, "", ()) for s in (1, 2)],
        ["a"],
        [None],
        [1, 2],
        ["acc"],
    )
    for cell in ("a.seed1", "a.seed2"):
        fake_run(tmp_path, cell, {"acc": 90.0})
    runner.write_state(tmp_path, runner.state(experiment, tmp_path, []))
    damage(tmp_path)
    if code == 0:
        assert not runner.finished(tmp_path / "runs" / "a.seed2")  # run again: resumed
    result = run("experiment", "report", tmp_path)
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    if code == 2:
        one_line_error(result, said)
    else:
        assert said in result.stderr and "n=1" in result.stderr, result.stderr


def test_a_metrics_csv_that_is_not_utf8_is_left_for_train_json(tmp_path):
    """N7: `experiment report --plot` with a metrics.csv that is not UTF-8: a traceback
    after the table; now the run's train.json history stands in for it."""
    experiment = spec.Experiment(
        tmp_path / "e.yaml", [spec.Cell("a", None, 1, "", ())], ["a"], [None], [1], ["acc"]
    )
    history = [{"update": 10, "dev_loss": 2.0, "dev_scores": {"acc": 40.0}}]
    (tmp_path / "runs" / "a.seed1").mkdir(parents=True)
    (tmp_path / "runs" / "a.seed1" / "train.json").write_text(json.dumps({"history": history}))
    (tmp_path / "runs" / "a.seed1" / "metrics.csv").write_bytes(b"update,dev_acc\n10,\xff\xfe\n")
    assert report.histories(experiment, tmp_path)["a.seed1"][0]["update"] == 10


def _laughs(levels: int) -> str:
    """YAML of nested 10-fold aliases: a few hundred bytes that stand for 10**levels."""
    lines = ["  a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels + 1):
        lines.append(f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "published:\n" + "\n".join(lines) + f"\nset:\n  train.seed: *a{levels}\n"


# (id, the bytes of an experiment file, what its one error line holds): N5 and N6
RAW_FILES = [
    ("not-utf8", b"# caf\xe9\nsystems: {a: {recipe: lstm.yaml}}\n", "not UTF-8 text"),
    ("recursive-alias-in-set", b"systems: {a: {recipe: lstm.yaml, set: &s {x: [*s]}}}\n",
     "systems.a.set.x.0: a YAML alias refers to a value that holds it"),
    ("nested-aliases", (_laughs(9) + "systems: {a: {recipe: lstm.yaml}}\n").encode(),
     "YAML aliases expand to more than"),
]  # fmt: skip


@pytest.mark.parametrize("text,message", [c[1:] for c in RAW_FILES], ids=[c[0] for c in RAW_FILES])
def test_experiment_files_get_the_recipes_limits(grid, tmp_path, run, text, message):
    bad = grid.parent / f"raw-{tmp_path.name}.yaml"
    bad.write_bytes(text)
    started = time.monotonic()
    result = run("experiment", "run", bad, "--out", tmp_path / "exp")
    assert time.monotonic() - started < 30
    one_line_error(result, f"{bad}: ", message)
    assert not (tmp_path / "exp").exists()


MACHINE = [
    ("fp16-on-the-cpu", {"train.device": "cpu", "train.precision": "fp16"},
     "train.precision: fp16 needs a CUDA device"),
    ("cuda-without-cuda", {"train.device": "cuda"}, "train.device: cuda requested"),
]  # fmt: skip


@pytest.mark.parametrize("settings,message", [c[1:] for c in MACHINE], ids=[c[0] for c in MACHINE])
def test_the_machine_is_checked_once_before_any_cell_starts(grid, tmp_path, run, settings, message):
    """N12: a grid with train.device: cuda on a CPU machine started every cell, each of
    which then failed."""
    import torch

    if "train.precision" not in settings and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    data = yaml.safe_load(grid.read_text())
    data["set"] = settings
    bad = grid.parent / f"machine-{tmp_path.name}.yaml"
    bad.write_text(yaml.safe_dump(data))
    result = run("experiment", "run", bad, "--out", tmp_path / "exp")
    one_line_error(result, f"{bad}: systems.lstm", message)
    assert not (tmp_path / "exp").exists()


# ---------------------------------------------------- significance against a baseline


def test_each_system_against_the_baseline_by_welchs_t_test(tmp_path):
    """baseline: add. Per dataset and on the average, each other system's mean minus the
    baseline's and the two-sided p of Welch's t over the seeds. Hand values: equal
    variances and 3 seeds a side give df = 4, whose two-sided p has the closed form
    1 - 3/4 u (1 - u^2/12), u = |t| / sqrt(1 + t^2/4); a side without variance gives df =
    the other's n - 1 = 2, p = 1 - |t| / sqrt(2 + t^2); one seed: no test ("–")."""
    scores = {
        ("add", "vtb"): [90.0, 90.3, 90.6], ("conv", "vtb"): [90.8, 91.1, 91.4],
        ("add", "ewt"): [79.0, 80.0, 81.0], ("conv", "ewt"): [80.0, 81.0, 82.0],
        ("conv2d", "vtb"): [92.0], ("conv2d", "ewt"): [85.0, 85.0, 85.0],
    }  # fmt: skip
    cells = [
        spec.Cell(system, dataset, seed, "", ())
        for system in ("add", "conv", "conv2d")
        for dataset in ("vtb", "ewt")
        for seed in (1, 2, 3)
    ]
    experiment = spec.Experiment(
        tmp_path / "e.yaml", cells, ["add", "conv", "conv2d"], ["vtb", "ewt"], [1, 2, 3],
        ["acc"], {"conv": {"vtb": {"acc": 91.0}}}, baseline="add",
    )  # fmt: skip
    for (system, dataset), values in scores.items():
        for seed, acc in enumerate(values, 1):
            fake_run(tmp_path, f"{system}.{dataset}.seed{seed}", {"acc": acc})

    def df4(t: float) -> float:
        u = abs(t) / (1 + t * t / 4) ** 0.5
        return 1 - 3 / 4 * u * (1 - u * u / 12)

    data = report.table(experiment, tmp_path)
    assert data["baseline"] == "add"
    assert data["significance"] == "Welch's t-test over seeds, two-sided"
    rows = {(r["system"], r["dataset"]): r["against_baseline"] for r in data["rows"]}
    assert rows[("add", "vtb")] is None and rows[("add", "average")] is None
    t = 0.8 / (0.09 / 3 * 2) ** 0.5  # vtb: s^2 = 0.09 on both sides
    assert rows[("conv", "vtb")]["difference"] == pytest.approx(0.8)
    assert rows[("conv", "vtb")]["t"] == pytest.approx(t)
    assert rows[("conv", "vtb")]["df"] == pytest.approx(4.0)
    assert rows[("conv", "vtb")]["p"] == pytest.approx(df4(t), rel=1e-6)  # 0.0309
    conv_vtb_p = pytest.approx(df4(t), rel=1e-6)
    t = 1 / (2 / 3) ** 0.5  # ewt: s^2 = 1 on both sides
    assert rows[("conv", "ewt")]["p"] == pytest.approx(df4(t), rel=1e-6)  # 0.288
    # the average: per seed the mean over the datasets, conv 85.4, 86.05, 86.7 against
    # add 84.5, 85.15, 85.8 (s^2 = 0.4225 each)
    t = 0.9 / (0.4225 / 3 * 2) ** 0.5
    assert rows[("conv", "average")]["difference"] == pytest.approx(0.9)
    assert rows[("conv", "average")]["p"] == pytest.approx(df4(t), rel=1e-6)  # 0.165
    t = 5 / (1 / 3) ** 0.5  # conv2d on ewt: 85 three times against s^2 = 1
    assert rows[("conv2d", "ewt")]["df"] == pytest.approx(2.0)
    assert rows[("conv2d", "ewt")]["p"] == pytest.approx(1 - t / (2 + t * t) ** 0.5)  # 0.013
    # one seed of conv2d on vtb (and so on the average): a difference, no test
    assert rows[("conv2d", "vtb")] == {"difference": pytest.approx(1.7), "t": None, "df": None,
                                       "p": None}  # fmt: skip
    assert rows[("conv2d", "average")]["difference"] == pytest.approx(88.5 - 85.15)
    assert rows[("conv2d", "average")]["p"] is None

    text = report.markdown(data)
    assert (
        "| system | dataset | acc mean ± std (n) | published | difference | vs add | p |\n"
        "|---|---|--:|--:|--:|--:|--:|\n"
        "| add | vtb | 90.30 ± 0.30 (n=3) |  |  |  |  |\n"
    ) in text
    assert "| conv | vtb | 91.10 ± 0.30 (n=3) | 91.00 | 0.10 | 0.80 | 0.031 |" in text
    assert "| conv | ewt | 81.00 ± 1.00 (n=3) |  |  | 1.00 | 0.288 |" in text
    assert "| conv2d | vtb | 92.00 (n=1) |  |  | 1.70 | – |" in text
    assert "| conv2d | ewt | 85.00 ± 0.00 (n=3) |  |  | 5.00 | 0.013 |" in text
    assert "| conv | average | 86.05 ± 0.65 (n=3) |  |  | 0.90 | 0.165 |" in text
    assert "| conv2d | average | 88.50 (n=1) |  |  | 3.35 | – |" in text
    assert (
        "vs add: the mean minus add's (on the same dataset, or the average); p: Welch's "
        "t-test over seeds, two-sided (unequal variances, Welch-Satterthwaite degrees of "
        "freedom; – with fewer than 2 seeds on either side, or no variance on both)."
    ) in text
    lines = report.csv_text(data).splitlines()
    assert lines[0].endswith(",difference,against_baseline.difference,against_baseline.p")
    by_row = {tuple(line.split(",")[:2]): line.split(",")[-2:] for line in lines[1:]}
    assert by_row[("add", "vtb")] == ["", ""] and by_row[("conv2d", "vtb")][1] == ""
    assert float(by_row[("conv2d", "vtb")][0]) == pytest.approx(1.7)
    assert [float(v) for v in by_row[("conv", "vtb")]] == [pytest.approx(0.8), conv_vtb_p]
    # without a baseline: no such columns, and no test named
    plain = report.table(spec.Experiment(**{**experiment.__dict__, "baseline": None}), tmp_path)
    assert all(r["against_baseline"] is None for r in plain["rows"])
    assert "vs add" not in report.markdown(plain) and "Welch" not in report.markdown(plain)
    assert "against_baseline" not in report.csv_text(plain)


def test_systems_are_compared_over_the_datasets_by_the_paired_t_test(tmp_path, run):
    """With a baseline (the file's, or `--baseline`), each other system's per-dataset means
    against the baseline's by the paired t-test, on the datasets where both have every
    seed. Hand values: conv - add on a, b, c is 1, 0.5, 2 (each a mean of 2 seeds), so t =
    sqrt 7 with df = 2 and p = 1 - sqrt(7) / 3; dataset d, where conv has 1 of its 2 seeds,
    is left out."""
    means = {
        ("add", "a"): 70.0, ("add", "b"): 80.0, ("add", "c"): 62.0, ("add", "d"): 50.0,
        ("conv", "a"): 71.0, ("conv", "b"): 80.5, ("conv", "c"): 64.0, ("conv", "d"): 90.0,
    }  # fmt: skip
    datasets = ["a", "b", "c", "d"]
    cells = [
        spec.Cell(system, dataset, seed, "", ())
        for system in ("add", "conv")
        for dataset in datasets
        for seed in (1, 2)
    ]
    experiment = spec.Experiment(
        tmp_path / "e.yaml", cells, ["add", "conv"], datasets, [1, 2], ["acc"]
    )
    for (system, dataset), mean in means.items():
        for seed, spread in ((1, -0.25), (2, 0.25)):
            if (system, dataset, seed) != ("conv", "d", 2):  # not finished
                fake_run(tmp_path, f"{system}.{dataset}.seed{seed}", {"acc": mean + spread})
    assert report.table(experiment, tmp_path)["paired"] == []  # no baseline, no ensembles
    data = report.table(experiment, tmp_path, baseline="add")
    assert data["baseline"] == "add"
    [paired] = data["paired"]
    assert {k: paired[k] for k in ("metric", "a", "b", "n", "higher", "lower", "df")} == {
        "metric": "acc", "a": "conv", "b": "add", "n": 3, "higher": 3, "lower": 0, "df": 2
    }  # fmt: skip
    assert paired["difference"] == pytest.approx(7 / 6)
    assert paired["t"] == pytest.approx(7**0.5) and paired["p"] == pytest.approx(1 - 7**0.5 / 3)
    assert paired["wilcoxon_p"] == pytest.approx(2 / 8)  # all 3 positive: 2 of 8 sign patterns
    text = report.markdown(data)
    assert (
        "Paired over the datasets (paired t-test, two-sided, and Wilcoxon's signed-rank test, "
        "exact, two-sided; a run row's number on a dataset is its mean over the seeds, an "
        "ensemble's its one score; only the datasets where both rows have every seed; higher "
        "and lower: the sign of the difference, whichever direction is better; p not "
        "corrected for the number of pairs):\n\n"
        "- acc, conv minus add: +1.17 on 3 datasets (higher on 3, lower on 0); t = 2.65, "
        "df = 2, p = 0.1181; Wilcoxon p = 0.2500\n"
    ) in text
    # --baseline overrides the file's
    named = dataclasses.replace(experiment, baseline="add")
    reverse = report.table(named, tmp_path, baseline="conv")["paired"]
    assert [(c["a"], c["b"], c["lower"]) for c in reverse] == [("add", "conv", 3)]
    with pytest.raises(TransduceError, match=r"--baseline: 'lstm' is not a system of the "):
        report.table(experiment, tmp_path, baseline="lstm")
    runner.write_state(tmp_path, runner.state(experiment, tmp_path, []))
    result = run("experiment", "report", tmp_path, "--baseline", "lstm")
    one_line_error(result, "--baseline: 'lstm' is not a system of")
    result = run("experiment", "report", tmp_path, "--baseline", "add")
    assert result.exit_code == 0 and "- acc, conv minus add: +1.17 on 3 datasets" in result.stderr


def test_ensembles_are_compared_with_the_baselines_ensemble_where_it_has_one():
    """With a baseline that has an ensemble, another system's ensemble is paired with it
    (the same kind of model on both sides), not with the baseline's runs; the systems'
    runs with the baseline's runs, and each ensemble with its own runs."""
    rows = []
    numbers = {
        "a": [70.0, 80.0, 62.0], "a (ensemble of 2)": [72.0, 81.0, 63.0],
        "b": [71.0, 80.5, 64.0], "b (ensemble of 2)": [74.0, 83.0, 66.5],
    }  # fmt: skip
    for system, values in numbers.items():
        ensemble = 2 if "ensemble" in system else None
        for dataset, value in zip(("x", "y", "z"), values):
            rows.append(
                {"system": system, "dataset": dataset, "metric": "acc", "ensemble": ensemble,
                 "n": 1 if ensemble else 2, "mean": value}
            )  # fmt: skip
    data = {"rows": rows, "metrics": ["acc"], "seeds": 2, "baseline": "a"}
    ensemble_of = {"a (ensemble of 2)": "a", "b (ensemble of 2)": "b"}
    paired = report.paired_over_datasets(data, ensemble_of)
    assert [(c["a"], c["b"]) for c in paired] == [
        ("b", "a"),
        ("a (ensemble of 2)", "a"),
        ("b (ensemble of 2)", "b"),
        ("b (ensemble of 2)", "a (ensemble of 2)"),
    ]
    assert paired[-1]["difference"] == pytest.approx((2 + 2 + 3.5) / 3)
    without = report.paired_over_datasets(data, {"b (ensemble of 2)": "b"})  # a has none
    assert [(c["a"], c["b"]) for c in without][-1] == ("b (ensemble of 2)", "a")


def test_the_baseline_is_a_system_of_the_experiment(grid, tmp_path):
    """baseline: SYSTEM loads; an unknown name, or a search's (not a row of the table: name
    one of its trials), is one error naming the key."""
    import re

    data = yaml.safe_load(grid.read_text())
    path = grid.parent / f"baseline-{tmp_path.name}.yaml"
    for value, message in [
        ("tf", None),
        ("cnn", "baseline: 'cnn' is not a system of this experiment (valid: lstm, tf)"),
        (["tf"], "baseline: ['tf'] is not a system of this experiment"),
    ]:
        path.write_text(yaml.safe_dump({**data, "baseline": value}, sort_keys=False))
        if message is None:
            assert spec.load(path).baseline == "tf"
            continue
        with pytest.raises(spec.ConfigError, match=re.escape(f"{path}: {message}")):
            spec.load(path)
    data["systems"]["lstm"]["search"] = {"trials": 2, "seed": 1, "space": SPACE}
    data.pop("published")
    path.write_text(yaml.safe_dump({**data, "baseline": "lstm"}, sort_keys=False))
    with pytest.raises(spec.ConfigError, match="name one of its trials \\(lstm-t1, lstm-t2\\)"):
        spec.load(path)
    path.write_text(yaml.safe_dump({**data, "baseline": "lstm-t2"}, sort_keys=False))
    assert spec.load(path).baseline == "lstm-t2"


def test_the_baseline_comes_back_through_cells_json(grid, tmp_path):
    """The report reads the experiment from cells.json: the baseline must survive it."""
    path = grid.parent / "grid-with-a-baseline.yaml"
    path.write_text(grid.read_text(encoding="utf-8") + "baseline: lstm\n", encoding="utf-8")
    loaded = spec.load(path)
    runner.write_state(tmp_path, runner.state(loaded, tmp_path, []))
    assert loaded.baseline is not None
    assert runner.read_state(tmp_path).baseline == loaded.baseline


def test_a_metric_without_reference_numbers_has_a_plain_header_and_no_counts(tmp_path):
    """Two metrics, references for the first only: the second table's header is the usual
    one (no count leaks into it from the first) and it gets no empty counts heading."""
    experiment = spec.Experiment(
        tmp_path / "e.yaml",
        [spec.Cell("a", d, 1, "", ()) for d in ("x", "y")],
        ["a"],
        ["x", "y"],
        [1],
        ["acc", "lev"],
        references={"base": {"x": {"acc": 50.0}, "y": {"acc": 70.0}}},
    )
    for dataset, acc in (("x", 60.0), ("y", 65.0)):
        fake_run(tmp_path, f"a.{dataset}.seed1", {"acc": acc, "lev": 0.5})
    text = report.markdown(report.table(experiment, tmp_path))
    headers = [line for line in text.splitlines() if line.startswith("| system")]
    assert headers[1] == "| system | dataset | lev mean ± std (n) | base | published | difference |"
    assert text.count("Datasets where the mean is better") == 1
    assert "- a: above base on 1 of 2" in text


def test_a_grid_runs_through_the_library_without_the_cli(grid, tmp_path):
    """`run_experiment` with a `LocalExecutor` made from its options: the chosen cells
    finish, cells.json says so, the others are left; options of another executor, an
    unknown executor and a pattern that matches nothing are refused."""
    from transduce.errors import ConfigError
    from transduce.experiments.run import choose_cells, executor_class, run_experiment

    loaded = spec.load(grid)
    chosen = choose_cells(loaded, ["lstm.*.seed1"])
    assert [c.id for c in chosen] == ["lstm.copy.seed1", "lstm.reverse.seed1"]
    said: list[str] = []
    options = runner.ExecutorOptions(workers=2, threads=1)
    executor = executor_class("local").from_options(tmp_path, options, chosen, said.append)
    result = run_experiment(loaded, tmp_path, executor, chosen, said.append)
    assert not result.stopped and result.failed == [] and result.left == []
    assert sorted(o.cell.id for o in result.outcomes) == [c.id for c in chosen]
    assert all(runner.finished(tmp_path / "runs" / c.id) for c in chosen)
    assert not runner.finished(tmp_path / "runs" / "tf.copy.seed1")
    cells_json = json.loads((tmp_path / runner.STATE).read_text(encoding="utf-8"))
    states = {c["id"]: c["status"] for c in cells_json["cells"]}
    assert states["lstm.copy.seed1"] == runner.DONE and states["tf.copy.seed1"] == runner.PENDING
    assert said[0].startswith(f"8 cells in {tmp_path} (2 chosen by --cells): 0 finished before")
    again = run_experiment(loaded, tmp_path, executor, chosen, said.append)
    assert again.outcomes == [] and "2 finished before, 0 to run" in said[-1]
    with pytest.raises(ConfigError, match="options of --executor ray"):
        runner.LocalExecutor.from_options(tmp_path, runner.ExecutorOptions(cpus=2), chosen, print)
    with pytest.raises(ConfigError, match="unknown"):
        executor_class("slurm")
    with pytest.raises(ConfigError, match="no cell of grid.yaml matches"):
        choose_cells(loaded, ["nope.*"])
