"""Experiments: grids of runs (`transduce experiment run`), resumable after Ctrl-C, their
tables (`transduce experiment report`), and bad experiment files refused before any run."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from transduce.experiments import report, runner, spec

from .conftest import transduce_env
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


def fake_run(directory: Path, cell: str, test: dict, monotonicity: dict | None = None) -> None:
    run = directory / "runs" / cell
    run.mkdir(parents=True)
    report = {"stop": "reached max_updates (1)", "test": test, "config": {"train": {}}}
    report["training_seconds"] = 60.0 * (1 + len(cell))  # minutes: 1 + the id's length
    report["test_monotonicity"] = monotonicity
    (run / "train.json").write_text(json.dumps(report))


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
    ],
    ids=[
        *("unknown-recipe", "empty-pattern", "unknown-setting", "unknown-key", "seeds"),
        *("published", "published-shape", "published-dataset", "published-number"),
        *("metric", "seed-bool", "score-option", "score-shape", "score-not-shown"),
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
    if change == {"set": {"train.bogus": 1}}:
        assert "train.bogus: unknown key" in lines[0]
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
    assert "--workers and --threads are of --executor local" in result.output
    assert not (tmp_path / "x").exists()


def test_shipped_experiments_are_found_by_name():
    assert "wu2018-g2p-nettalk-small" in spec.shipped_experiments()
    path = spec.experiment_path("wu2018-g2p-nettalk-small")
    assert path.is_file() and path.parent == spec.SHIPPED
    listed = "not a shipped experiment .shipped: .*wu2018-g2p-nettalk-small"
    with pytest.raises(spec.ConfigError, match=listed):
        spec.experiment_path("no-such-experiment")


NO_PUBLISHED_NUMBERS = {"wu2018-inflection-medium-small", "dufter2020-pos-ewt"}


@pytest.mark.slow
def test_shipped_experiments_load_with_the_real_data():
    from .conftest import shared_data

    root = shared_data()
    if root is None:
        pytest.skip("the shared datasets are not here")
    for name in spec.shipped_experiments():
        loaded = spec.load(name, root)
        assert loaded.cells
        # every paper experiment carries the paper's numbers, except where the paper has
        # none for that data (the file says so)
        assert loaded.published or name in NO_PUBLISHED_NUMBERS, name


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
