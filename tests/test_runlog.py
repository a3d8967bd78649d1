"""The metrics log of a run (`train.log`): metrics.csv, kept in line with last.pt, and
TensorBoard event files when the extra is installed."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

from transduce import config as configuration
from transduce.errors import ConfigError
from transduce.runlog import CSV
from transduce.training import Trainer

from .toy import TINY_LSTM, recipe, write_task


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    return write_task(tmp_path_factory.mktemp("toy"), "copy")


def train(run: Path, data: dict, resume: bool = False) -> dict:
    return Trainer(configuration.parse(data), run, resume=resume).run()


def rows(run: Path) -> list[dict[str, str]]:
    with open(run / CSV, encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def test_every_validation_is_a_row_of_metrics_csv(copy, tmp_path):
    run = tmp_path / "run"
    report = train(run, recipe(copy, TINY_LSTM, max_updates=6, validate_every=2))
    table = rows(run)
    assert [int(r["update"]) for r in table] == [2, 4, 6]
    assert list(table[0])[:7] == [
        "update", "epoch", "train_loss", "dev_loss", "lr", "elapsed", "examples_per_s",
    ]  # fmt: skip
    for line, entry in zip(table, report["history"], strict=True):
        assert float(line["dev_acc"]) == pytest.approx(entry["dev_scores"]["acc"])
        assert float(line["dev_loss"]) == pytest.approx(entry["dev_loss"])
        assert float(line["dev_mono"]) == pytest.approx(
            entry["dev_monotonicity"]["overall"]["mono"]
        )
    assert not (run / "tensorboard").exists()


def test_a_resumed_run_rewrites_the_log_from_last_pt(copy, tmp_path):
    """A session killed after logging a validation it had not saved in last.pt: the
    resumed run logs each validation once, as its history has them."""
    run = tmp_path / "run"
    train(run, recipe(copy, TINY_LSTM, max_updates=4, validate_every=2))
    with open(run / CSV, "a", encoding="utf-8") as handle:
        handle.write("6,0.5,9,9,0.005,1,1,0,100,100,9,9,9,9\n")  # never in last.pt
    report = train(run, recipe(copy, TINY_LSTM, max_updates=8, validate_every=2), resume=True)
    assert [int(r["update"]) for r in rows(run)] == [h["update"] for h in report["history"]]
    assert [int(r["update"]) for r in rows(run)] == [2, 4, 6, 8]
    assert float(rows(run)[2]["train_loss"]) != 9


def test_a_run_resumed_without_the_csv_log_keeps_its_metrics_csv(copy, tmp_path):
    """N13: resuming with `train.log: []` deleted the run's metrics.csv."""
    run = tmp_path / "run"
    train(run, recipe(copy, TINY_LSTM, max_updates=4, validate_every=2))
    before = (run / CSV).read_bytes()
    train(run, recipe(copy, TINY_LSTM, max_updates=6, validate_every=2, log=[]), resume=True)
    assert (run / CSV).read_bytes() == before


def test_tensorboard_event_files(copy, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    train(run, recipe(copy, TINY_LSTM, max_updates=4, validate_every=2, log=["tensorboard"]))
    assert not (run / CSV).exists()
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert {"dev/acc", "dev/loss", "train/loss", "lr"} <= set(events.Tags()["scalars"])
    assert [e.step for e in events.Scalars("dev/acc")] == [2, 4]
    history = json.loads((run / "train.json").read_text())["history"]
    assert events.Scalars("dev/loss")[-1].value == pytest.approx(history[-1]["dev_loss"])


def test_tensorboard_without_the_extra_is_one_line(copy, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # not installed
    data = recipe(copy, TINY_LSTM, max_updates=2, log=["csv", "tensorboard"])
    with pytest.raises(ConfigError, match=r"^train.log: tensorboard needs the tensorboard"):
        train(tmp_path / "run", data)
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match="train.log"):
        configuration.parse({**data, "train": {**data["train"], "log": ["wandb"]}})
