"""The run directory that `train` writes, and its report: every file name of a run
directory is defined here, once (`RunDir`), and `train.json` is read and written through
`RunReport`, so that the trainer, `experiment run` and `report`, ensembles, `analyze` and
`train --resume` read one report the same way.

No torch here: the CLI's light paths (completion, `score`) import it through `outputs`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The files and folders of a run directory
LAST, BEST = "last.pt", "best.pt"  # the checkpoint to resume from; the best one
# train.average_best_last: the mean of best.pt's and last.pt's weights, written at the end
# of training; where it is, it is the run's model (tested, decoded, exported)
FINAL = "final.pt"
CONFIG = "config.yaml"  # the resolved recipe
REPORT = "train.json"  # what the run did (`RunReport`)
PREDICTIONS = "test.predictions"  # the run's model's outputs on the test split
METRICS = "metrics.csv"  # a row per validation, as they happen
MARKER = "transduce-run.json"  # written as the run starts: the folder is ours to write in
LOCK = ".lock"  # held by the process that writes the run directory
KEPT = "checkpoints"  # train.keep_best / keep_last: the kept checkpoints
KEPT_INDEX = "index.json"  # in KEPT: what each kept checkpoint holds
TENSORBOARD = "tensorboard"
DATA = "data"  # the raw data, prepared by `train` for the run

# what `train` writes that marks a folder as a run directory (the first two, its training's
# checkpoints, mark it by themselves: `outputs.is_run_dir`)
FILES = (LAST, BEST, FINAL, CONFIG, REPORT, PREDICTIONS)
# every name `train` writes in a run directory, files and folders
OWNED = (*FILES, MARKER, LOCK, METRICS, KEPT, TENSORBOARD, DATA)

INTERRUPTED = "interrupted"  # the `stop` of a run stopped by Ctrl-C (SIGINT)
MARKER_TEXT = json.dumps(  # what the marker holds
    {"schema": "transduce.run/1", "note": "a run directory: transduce train writes here"}
)


@dataclass(frozen=True)
class RunDir:
    """A run directory: the path of each of its files."""

    path: Path

    def __init__(self, path: str | Path) -> None:
        object.__setattr__(self, "path", Path(path))

    @property
    def last(self) -> Path:
        return self.path / LAST

    @property
    def best(self) -> Path:
        return self.path / BEST

    @property
    def final(self) -> Path:
        return self.path / FINAL

    @property
    def model(self) -> Path:
        """The run's model: final.pt where the run averaged (`train.average_best_last`),
        else best.pt."""
        return self.final if self.final.is_file() else self.best

    @property
    def config(self) -> Path:
        return self.path / CONFIG

    @property
    def report(self) -> Path:
        return self.path / REPORT

    @property
    def predictions(self) -> Path:
        return self.path / PREDICTIONS

    @property
    def metrics(self) -> Path:
        return self.path / METRICS

    @property
    def marker(self) -> Path:
        return self.path / MARKER

    @property
    def lock(self) -> Path:
        return self.path / LOCK

    @property
    def kept(self) -> Path:
        return self.path / KEPT

    @property
    def tensorboard(self) -> Path:
        return self.path / TENSORBOARD

    @property
    def data(self) -> Path:
        return self.path / DATA

    def resumable(self) -> bool:
        """Whether it has a checkpoint to resume from."""
        return self.last.is_file()

    def read_report(self) -> RunReport | None:
        """Its train.json, if it has one of the shape `train` writes; None if there is
        none, or it is unreadable or damaged."""
        return RunReport.read(self.report)


def training_on(run_dir: Path) -> None:
    """A resumed session trains past where an earlier one stopped: that session's
    train.json, if it says the run stopped (finished, with its test scores and averaged
    model, or interrupted), is rewritten as a run not stopped yet: `stop`, `test`,
    `test_monotonicity`, `final` and the predictions' hash set to None, the rest as it was.
    So a session killed before it ends (kill -9, a crash) leaves no report of a finished
    run whose test scores are another model's (`experiment run` does not take it for
    finished; its test.predictions, untouched, are no longer vouched for). Called before
    a new last.pt.
    """
    path = Path(run_dir) / REPORT
    report = RunReport.read(path) if path.exists() else None
    if report is None or report.stop is None:
        return
    data = {**(report.get("data") or {}), "test_predictions_sha256": None}
    gone = {"stop": None, "test": None, "test_monotonicity": None, "final": None, "data": data}
    RunReport({**report.fields, **gone}).to_json(path)


# the shape of what is read from a train.json: key -> the kinds it may be
SHAPE: dict[str, tuple[type, ...]] = {
    "stop": (str, type(None)),
    "test": (dict, type(None)),
    "best": (dict, type(None)),
    "final": (dict, type(None)),
    "history": (list,),
    "config": (dict,),
    "data": (dict, type(None)),
    "test_monotonicity": (dict, type(None)),
    "training_seconds": (int, float, type(None)),
    "cpu_seconds": (int, float, type(None)),
    "machine": (dict, type(None)),
}


def problem(report: Any) -> str | None:
    """What in a train.json's contents is not of the shape `train` writes (None: nothing):
    a key and its value, said for a message."""
    if not isinstance(report, dict):
        return f"is {type(report).__name__}, not a run's report (a JSON object)"
    for key, kinds in SHAPE.items():
        value = report.get(key)
        if key in report and (isinstance(value, bool) or not isinstance(value, kinds)):
            return f"its {key!r} is {value!r:.60}, not what train writes"
    for key, value in (report.get("test") or {}).items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"its test score {key!r} is {value!r:.60}, not a number"
    if any(not isinstance(entry, dict) for entry in report.get("history") or []):
        return "its 'history' holds an entry that is not a JSON object"
    return None


@dataclass
class RunReport:
    """A run's train.json: `fields` as written (the README lists them), read through the
    properties below."""

    fields: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, path: str | Path) -> RunReport:
        """The report in `path`.

        Raises:
            OSError: it cannot be read.
            ValueError: it is not JSON, or not of the shape `train` writes.
        """
        fields = json.loads(Path(path).read_text(encoding="utf-8"))
        found = problem(fields)
        if found:
            raise ValueError(found)
        return cls(fields)

    @classmethod
    def read(cls, path: str | Path) -> RunReport | None:
        """`from_json`, or None where it cannot be read or is damaged."""
        try:
            return cls.from_json(path)
        except (OSError, ValueError):
            return None

    def to_json(self, path: str | Path) -> None:
        """Write it, atomically (`transduce.reporting.write_json`)."""
        from transduce.reporting import write_json

        write_json(Path(path), self.fields)

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)

    @property
    def stop(self) -> str | None:
        """Why the run stopped (None: no session has stopped yet)."""
        return self.fields.get("stop")

    @property
    def interrupted(self) -> bool:
        return self.stop == INTERRUPTED

    @property
    def test_scores(self) -> dict[str, float] | None:
        return self.fields.get("test")

    @property
    def config(self) -> dict[str, Any]:
        return self.fields.get("config") or {}

    @property
    def data(self) -> dict[str, Any]:
        return self.fields.get("data") or {}

    @property
    def best(self) -> dict[str, Any]:
        best = self.fields.get("best")
        return best if isinstance(best, dict) else {}

    @property
    def final(self) -> dict[str, Any]:
        """What `train.average_best_last` made: the updates averaged and the averaged
        model's dev scores ({}: the run's model is best.pt)."""
        final = self.fields.get("final")
        return final if isinstance(final, dict) else {}

    def model_dev(self) -> dict[str, Any]:
        """The dev validation of the run's model, as a `history` entry holds it
        (`dev_scores`, `dev_monotonicity`): the averaged model's where there is one, else
        the best validation's ({}: not found)."""
        if self.final:
            return self.final
        for entry in self.history:
            if isinstance(entry, dict) and entry.get("update") == self.best.get("update"):
                return entry
        return {}

    @property
    def history(self) -> list[dict[str, Any]]:
        history = self.fields.get("history")
        return history if isinstance(history, list) else []

    @property
    def updates(self) -> int | None:
        return self.fields.get("updates")

    @property
    def training_seconds(self) -> float | None:
        seconds = self.fields.get("training_seconds")
        return float(seconds) if isinstance(seconds, int | float) else None

    @property
    def cpu_seconds(self) -> float | None:
        """The CPU seconds of the training process (the main one, where there are several)
        in training and validation up to the last validation, as `training_seconds`, over all
        sessions (None: not counted: a train.json of an earlier version, or a run resumed
        from an earlier version's checkpoint)."""
        seconds = self.fields.get("cpu_seconds")
        return float(seconds) if isinstance(seconds, int | float) else None

    @property
    def on_cpu(self) -> bool:
        """Trained on the CPU (train.json's `device`; an earlier version's, without one, too)."""
        return str(self.fields.get("device") or "cpu").startswith("cpu")

    @property
    def machine(self) -> str | None:
        """What trained the run's last session, in words (`transduce.reporting.machine`:
        the CPU, its family and model numbers, torch's kernels, the CPUs, the GPU), or None
        where train.json does not say (an earlier version's)."""
        facts = self.fields.get("machine")
        if not isinstance(facts, dict):
            return None
        cpu = f"{facts.get('cpu') or 'unknown CPU'}"
        numbers = ", ".join(
            f"{name} {facts[key]}"
            for name, key in (("family", "cpu_family"), ("model", "cpu_model"))
            if facts.get(key) is not None
        )
        if numbers:
            cpu += f" ({numbers})"
        words = [cpu]
        if facts.get("cpu_capability"):
            words.append(f"{facts['cpu_capability']} kernels")
        if facts.get("cpus"):
            words.append(f"{facts['cpus']} CPUs")
        if facts.get("gpu"):
            words.append(str(facts["gpu"]))
        return ", ".join(words)

    @property
    def finished(self) -> bool:
        """Stopped at a limit (not interrupted), with the test scores when it was to test
        (`train.test`) and had a test split."""
        testing = (self.config.get("train") or {}).get("test", True)
        no_test = self.data.get("test_sources") is None  # nothing to test
        return self.stop not in (None, INTERRUPTED) and (
            self.test_scores is not None or not testing or no_test
        )

    def reusable_test(
        self, files: RunDir, manifest: Path, config: dict[str, Any], best: int | None, updates: int
    ) -> dict[str, float] | None:
        """This report's test scores, when a resumed session that trained nothing would
        decode the test set exactly as the session that wrote it did: the same `best`
        update and number of `updates`, the same data (`manifest`: the prepared data's),
        the same decode and data settings (`config`: the resolved one), and its
        test.predictions unchanged since, and the same model (averaged or best.pt,
        `train.average_best_last`). None otherwise."""
        from transduce.io import sha256_file

        predictions = files.predictions
        same = (
            predictions.is_file()
            and self.data.get("test_predictions_sha256") == sha256_file(predictions)
            and self.data.get("manifest_sha256") == sha256_file(manifest)
            and self.best.get("update") == best
            and self.updates == updates
            and self.config.get("decode") == config["decode"]
            and self.config.get("data") == config["data"]
            and bool(self.final) == bool((config.get("train") or {}).get("average_best_last"))
            and (config.get("train") or {}).get("test", True)
        )
        return self.test_scores if same and self.test_scores else None
