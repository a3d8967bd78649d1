"""Bad input to every command: exit code 2, one line on stderr naming what is wrong, no
traceback, and nothing already written changed (the whole workspace is compared before and
after each case)."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml

import transduce
from transduce import checkpoint
from transduce import config as configuration
from transduce.locking import DirectoryLock
from transduce.runs import LOCK
from transduce.training import Trainer

from .conftest import transduce_env
from .test_cli import one_line_error
from .toy import TINY_LSTM, recipe, write_task


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    """A workspace: a prepared toy dataset, a trained run, recipes and files of every kind."""
    root = tmp_path_factory.mktemp("workspace")
    prepared = write_task(root, "copy", n=300)
    data = recipe(prepared, TINY_LSTM, max_updates=6, validate_every=3)
    (root / "recipe.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    Trainer(configuration.parse(data), root / "run").run()
    write = {
        "hyp.txt": "a b\nc d\n",
        "ref.txt": "a b\nc e\n",
        "three.txt": "a\nb\nc\n",
        "raw.tsv": "".join(f"{w}\t{w}\n" for w in ("abc", "bad", "cab", "dab")),
        "other.tsv": "".join(f"{w} {w}\t{w} {w}\n" for w in ("X", "Y", "Z")),
        "source.txt": "a b c\nb a\n",
        "test-no-target.tsv": "a b c\t\nb a\t\n",
        "one-column.tsv": "cat\tK AE T\ndog\n",
        "tab-inside.tsv": "".join(f"w{i}\tW {i}\n" for i in range(20)) + "cat\tK AE\tT\n",
        "mixed-test.tsv": "cat\tK AE T\ndog\n",
        "empty.tsv": "",
        "latin1.tsv": "",
        "long.txt": "a " * 6000 + "\n",
        "not-utf8.yaml": "",
        "bad.yaml": "train: [1, 2\n",
        "notes.txt": "the user's own notes\n",
    }
    for name, text in write.items():
        (root / name).write_text(text, encoding="utf-8")
    (root / "latin1.tsv").write_bytes("caf\xe9\tK AE F EY\n".encode("latin-1"))
    (root / "not-utf8.yaml").write_bytes(b"# caf\xe9\ntrain: {lr: 1}\n")
    (root / "pickle.pt").write_bytes(pickle.dumps({"model": [1, 2, 3]}))
    state = checkpoint.load(root / "run" / "best.pt")
    del state["sides"], state["path"]
    torch.save(state, root / "no-sides.pt")
    (root / "empty-dir").mkdir()
    (root / "user-dir").mkdir()
    (root / "user-dir" / "mine.txt").write_text("mine\n", encoding="utf-8")
    forged = root / "forged"
    forged.mkdir()
    (forged / "notes.txt").write_text("precious\n", encoding="utf-8")
    manifest = json.loads((prepared / "manifest.json").read_text(encoding="utf-8"))
    manifest["outputs"]["notes.txt"] = {"sha256": "0" * 64}
    (forged / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    os.symlink("loop", root / "loop")
    a_file = root / "a-file"
    a_file.write_text("x\n", encoding="utf-8")
    # an experiment directory: its state and a cell's log
    (root / "exp" / "logs").mkdir(parents=True)
    (root / "exp" / "cells.json").write_text('{"cells": []}\n', encoding="utf-8")
    (root / "exp" / "logs" / "c.log").write_text("a log\n", encoding="utf-8")
    # kept-checkpoint indexes that our trainer did not write
    for name, entry in {
        "no-update": {"score": 1.0, "file": "update-00000003.pt"},
        "string-score": {"update": 3, "score": "1.0", "file": "update-00000003.pt"},
        "string-update": {"update": "3", "score": 1.0, "file": "update-00000003.pt"},
    }.items():
        (root / name / "checkpoints").mkdir(parents=True)
        index = {"run_id": None, "kept": [entry]}
        (root / name / "checkpoints" / "index.json").write_text(json.dumps(index), "utf-8")
    # a run whose last.pt has a damaged history
    shutil.copytree(root / "run", root / "bad-history")
    state = torch.load(root / "run" / "last.pt", weights_only=True)
    state["training"]["progress"]["history"] = "not a list"
    torch.save(state, root / "bad-history" / "last.pt")
    return root


def snapshot(root: Path) -> dict[str, str]:
    """Every path under `root` (links not followed) and a digest of each file."""
    found = {}
    for directory, folders, files in os.walk(root):
        for name in folders + files:
            path = Path(directory) / name
            key = str(path.relative_to(root))
            if path.is_symlink() or path.is_dir():
                found[key] = "link" if path.is_symlink() else "dir"
            else:
                found[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@dataclass
class Case:
    id: str
    args: Callable[[Path], list[str]]
    fragments: tuple[str, ...]
    stdin: str | None = None


def C(id: str, args: Callable[[Path], list], *fragments: str, stdin: str | None = None) -> Case:
    return Case(id, args, fragments, stdin)


PREPARED = "copy-prepared"


def train_o(w: Path, *extra: str) -> list:
    """`train` of the workspace's recipe into a new run directory, with `extra`."""
    return ["train", "-c", w / "recipe.yaml", "-o", w / "o", *extra]


CASES = [
    # ------------------------------------------------------------------------ prepare
    C("prepare-missing-input", lambda w: ["prepare", "tsv", w / "nope.tsv", "-o", w / "o"],
      "nope.tsv", "No such file"),
    C("prepare-input-is-a-directory", lambda w: ["prepare", "tsv", w / "empty-dir", "-o", w / "o"],
      "is a directory"),
    C("prepare-input-symlink-loop", lambda w: ["prepare", "tsv", w / "loop", "-o", w / "o"],
      "loop", "symbolic links"),
    C("prepare-too-few-columns", lambda w: ["prepare", "tsv", w / "one-column.tsv", "-o", w / "o"],
      "one-column.tsv:2", "expected at least 2"),
    C("prepare-not-utf8", lambda w: ["prepare", "tsv", w / "latin1.tsv", "-o", w / "o"],
      "latin1.tsv:1", "invalid utf-8"),
    C("prepare-unknown-encoding",
      lambda w: ["prepare", "tsv", w / "raw.tsv", "-o", w / "o", "--encoding", "klingon"],
      "unknown encoding"),
    C("prepare-empty-input", lambda w: ["prepare", "tsv", w / "empty.tsv", "-o", w / "o"],
      "no entries"),
    C("prepare-out-not-empty", lambda w: ["prepare", "tsv", w / "raw.tsv", "-o", w / "user-dir"],
      "not empty", "--force"),
    C("prepare-force-not-prepared",
      lambda w: ["prepare", "tsv", w / "raw.tsv", "-o", w / "user-dir", "--force"],
      "no transduce manifest.json"),
    C("prepare-force-forged-manifest",
      lambda w: ["prepare", "tsv", w / "raw.tsv", "-o", w / "forged", "--force"],
      "notes.txt", "not the file prepare wrote"),
    C("prepare-out-is-a-file", lambda w: ["prepare", "tsv", w / "raw.tsv", "-o", w / "a-file"],
      "a-file", "not a directory"),
    C("prepare-out-is-a-link-loop", lambda w: ["prepare", "tsv", w / "raw.tsv", "-o", w / "loop"],
      "loop", "not a directory"),
    C("prepare-bad-dev-ratio",
      lambda w: ["prepare", "tsv", w / "raw.tsv", "-o", w / "o", "--dev-ratio", "1.5"],
      "ratio"),
    C("prepare-column-zero",
      lambda w: ["prepare", "tsv", w / "raw.tsv", "-o", w / "o", "--source-col", "0"],
      "source"),
    C("prepare-input-and-train",
      lambda w: ["prepare", "tsv", w / "raw.tsv", "--train", w / "raw.tsv", "-o", w / "o"],
      "not both"),
    C("prepare-unknown-format", lambda w: ["prepare", "csv", w / "raw.tsv", "-o", w / "o"],
      "'csv' is not one of"),
    C("prepare-other-formats-option",
      lambda w: ["prepare", "tsv", w / "raw.tsv", "-o", w / "o", "--keep-stress"],
      "--keep-stress", "not an option"),
    C("prepare-test-mixes-answers",
      lambda w: ["prepare", "tsv", w / "raw.tsv", "--test", w / "mixed-test.tsv", "-o", w / "o"],
      "mixed-test.tsv:2", "mixes entries"),
    C("prepare-input-inside-output",
      lambda w: ["prepare", "tsv", w / "user-dir" / "mine.txt", "-o", w / "user-dir", "--force"],
      "inside the output directory"),
    # -------------------------------------------------------------------------- train
    C("train-missing-recipe", lambda w: ["train", "-c", w / "nope.yaml", "-o", w / "o"],
      "nope.yaml"),
    C("train-recipe-not-utf8", lambda w: ["train", "-c", w / "not-utf8.yaml", "-o", w / "o"],
      "not-utf8.yaml", "not UTF-8"),
    C("train-recipe-bad-yaml", lambda w: ["train", "-c", w / "bad.yaml", "-o", w / "o"],
      "bad.yaml", "not valid YAML"),
    C("train-lr-nan",
      lambda w: train_o(w, "--set", "train.optimizer.lr=.nan"),
      "train.optimizer.lr", "finite"),
    C("train-lr-inf",
      lambda w: train_o(w, "--set", "train.optimizer.lr=.inf"),
      "train.optimizer.lr", "finite"),
    C("train-clip-norm-nan",
      lambda w: train_o(w, "--set", "train.clip_norm=.nan"),
      "train.clip_norm", "finite"),
    C("train-max-minutes-nan",
      lambda w: train_o(w, "--set", "train.max_minutes=.nan"),
      "train.max_minutes", "finite"),
    C("train-seed-beyond-64-bits",
      lambda w: train_o(w, "--set", "train.seed=18446744073709551616"),
      "train.seed", "18446744073709551616"),
    C("train-seed-negative",
      lambda w: train_o(w, "--set", "train.seed=-1"),
      "train.seed", "[0, 4294967295]"),
    C("train-batch-size-zero",
      lambda w: train_o(w, "--set", "train.batch_size=0"),
      "train.batch_size"),
    C("train-misspelt-key",
      lambda w: train_o(w, "--set", "train.batchsize=3"),
      "batchsize"),
    C("train-set-without-value",
      lambda w: train_o(w, "--set", "train.batch_size"),
      "KEY=VALUE"),
    C("train-unknown-model",
      lambda w: train_o(w, "--set", "model.name=lstmm"),
      "lstmm"),
    C("train-unknown-select-on",
      lambda w: train_o(w, "--set", "train.select_on=f1"),
      "f1"),
    C("train-resume-without-out", lambda w: ["train", "--resume"], "--out"),
    C("train-resume-nothing-there",
      lambda w: ["train", "-c", w / "recipe.yaml", "-o", w / "empty-dir", "--resume"],
      "last.pt", "without --resume"),
    C("train-resume-other-model",
      lambda w: ["train", "-o", w / "run", "--resume", "--set", "model.encoder_size=64"],
      "model.encoder_size"),
    C("train-resume-other-vocabulary-size",
      lambda w: ["train", "-o", w / "run", "--resume", "--set", "model.embedding_dim=8"],
      "model.embedding_dim"),
    C("train-over-a-run", lambda w: ["train", "-c", w / "recipe.yaml", "-o", w / "run"],
      "already holds a run"),
    C("train-prepared-missing",
      lambda w: ["train", "-c", w / "recipe.yaml", "-o", w / "o",
                 "--set", f"data.prepared={w / 'nope'}"],
      "nope"),
    C("train-device-cuda-without-cuda",
      lambda w: train_o(w, "--device", "cuda"),
      "cuda"),
    C("train-out-is-a-file", lambda w: ["train", "-c", w / "recipe.yaml", "-o", w / "a-file"],
      "a-file"),
    C("train-out-is-a-users-directory",
      lambda w: ["train", "-c", w / "recipe.yaml", "-o", w / "user-dir"],
      "user-dir", "not a transduce run directory", "mine.txt"),
    C("train-out-is-the-recipes-directory",
      lambda w: ["train", "-c", w / "recipe.yaml", "-o", w],
      "not a transduce run directory"),
    C("train-resume-history-not-a-list",
      lambda w: ["train", "-o", w / "bad-history", "--resume"],
      "bad-history", "training.progress.history"),
    # ------------------------------------------------------------------------- decode
    C("decode-missing-model", lambda w: ["decode", w / "nope.pt", w / "source.txt"],
      "nope.pt", "no such checkpoint"),
    C("decode-plain-pickle", lambda w: ["decode", w / "pickle.pt", w / "source.txt"],
      "pickle.pt", "not a transduce checkpoint"),
    C("decode-checkpoint-without-sides", lambda w: ["decode", w / "no-sides.pt", w / "source.txt"],
      "no-sides.pt", "sides"),
    C("decode-directory-without-checkpoint",
      lambda w: ["decode", w / "empty-dir", w / "source.txt"], "no best.pt or last.pt"),
    C("decode-missing-input", lambda w: ["decode", w / "run", w / "nope.txt"], "nope.txt"),
    C("decode-raw-tsv-as-prepared-split",  # `cat<TAB>...` for a model of characters
      lambda w: ["decode", w / "run", w / "copy.tsv", "--input-format", "tsv"],
      "copy.tsv:1:", "cut -f1 FILE | transduce decode RUN"),
    C("decode-input-not-utf8", lambda w: ["decode", w / "run", w / "latin1.tsv"],
      "latin1.tsv:1", "invalid utf-8"),
    C("decode-overlong-line", lambda w: ["decode", w / "run", w / "long.txt"],
      "long.txt:1", "--max-line-length"),
    C("decode-report-over-input",
      lambda w: ["decode", w / "run", w / "source.txt", "--report", w / "source.txt"],
      "is an input"),
    C("decode-report-over-best-pt",
      lambda w: ["decode", w / "run", w / "source.txt", "--report", w / "run" / "best.pt"],
      "best.pt"),
    C("decode-report-over-last-pt",
      lambda w: ["decode", w / "run", w / "source.txt", "--report", w / "run" / "last.pt"],
      "checkpoint"),
    C("decode-report-over-run-config",
      lambda w: ["decode", w / "run", w / "source.txt", "--report", w / "run" / "config.yaml"],
      "run directory"),
    C("decode-report-over-prepared",
      lambda w: ["decode", w / "run", w / "source.txt", "--report", w / PREPARED / "test.tsv"],
      "prepared dataset"),
    C("decode-report-is-a-directory",
      lambda w: ["decode", w / "run", w / "source.txt", "--report", w / "empty-dir"],
      "is a directory"),
    C("decode-report-over-metrics-csv",
      lambda w: ["decode", w / "run", w / "source.txt", "--report", w / "run" / "metrics.csv"],
      "metrics.csv", "run directory"),
    C("decode-report-over-cells-json",
      lambda w: ["decode", w / "run", w / "source.txt", "--report", w / "exp" / "cells.json"],
      "cells.json", "experiment directory"),
    C("decode-length-penalty-nan",
      lambda w: ["decode", w / "run", w / "source.txt", "--length-penalty", "nan"],
      "--length-penalty", "finite"),
    C("decode-beam-zero", lambda w: ["decode", w / "run", w / "source.txt", "--beam", "0"],
      "beam"),
    C("decode-cuda-without-cuda",
      lambda w: ["decode", w / "run", w / "source.txt", "--device", "cuda"], "CUDA"),
    C("decode-max-line-length-zero",
      lambda w: ["decode", w / "run", w / "source.txt", "--max-line-length", "0"],
      "--max-line-length"),
    # -------------------------------------------------------------------------- score
    C("score-line-counts-differ", lambda w: ["score", w / "hyp.txt", w / "three.txt"],
      "line counts differ"),
    C("score-missing-hyp", lambda w: ["score", w / "nope.txt", w / "ref.txt"], "nope.txt"),
    C("score-report-over-hyp",
      lambda w: ["score", w / "hyp.txt", w / "ref.txt", "--report", w / "hyp.txt"], "is an input"),
    C("score-report-over-ref",
      lambda w: ["score", w / "hyp.txt", w / "ref.txt", "--report", w / "ref.txt"], "is an input"),
    C("score-per-item-over-checkpoint",
      lambda w: ["score", w / "hyp.txt", w / "ref.txt", "--per-item", w / "run" / "best.pt"],
      "checkpoint"),
    C("score-report-over-manifest",
      lambda w: ["score", w / "hyp.txt", w / "ref.txt", "--report", w / PREPARED / "manifest.json"],
      "prepared dataset"),
    C("score-per-item-over-metrics-csv",
      lambda w: ["score", w / "hyp.txt", w / "ref.txt", "--per-item", w / "run" / "metrics.csv"],
      "metrics.csv", "run directory"),
    C("score-report-over-kept-index",
      lambda w: ["score", w / "hyp.txt", w / "ref.txt", "--report",
                 w / "run" / "checkpoints" / "index.json"],
      "index.json", "run directory"),
    C("score-overlong-lines", lambda w: ["score", w / "long.txt", w / "long.txt"],
      "long.txt:1", "--max-line-length"),
    C("score-unknown-metric", lambda w: ["score", w / "hyp.txt", w / "ref.txt", "-m", "f1"],
      "'f1' is not one of"),
    C("score-bootstrap-too-small",
      lambda w: ["score", w / "hyp.txt", w / "ref.txt", "--bootstrap", "10"], "--bootstrap"),
    C("score-ref-col-zero",
      lambda w: ["score", w / "hyp.txt", w / "raw.tsv", "--ref-col", "0"], "1-based"),
    C("score-not-utf8", lambda w: ["score", w / "latin1.tsv", w / "latin1.tsv"],
      "latin1.tsv:1", "invalid utf-8"),
    C("score-stdin-twice", lambda w: ["score", "-", "-"], "only once", stdin="a\n"),
    # ----------------------------------------------------------- analyze-monotonicity
    C("analyze-unknown-split",
      lambda w: ["analyze-monotonicity", w / "run", w / PREPARED, "--split", "foo"],
      "--split", "'foo'"),
    C("analyze-raw-tsv", lambda w: ["analyze-monotonicity", w / "run", w / "raw.tsv"],
      "raw.tsv", "unknown to the model"),
    C("analyze-other-tasks-data", lambda w: ["analyze-monotonicity", w / "run", w / "other.tsv"],
      "other.tsv", "unknown to the model"),
    C("analyze-report-over-data",
      lambda w: ["analyze-monotonicity", w / "run", w / PREPARED / "dev.tsv",
                 "--report", w / PREPARED / "dev.tsv"],
      "is an input"),
    C("analyze-report-over-best-pt",
      lambda w: ["analyze-monotonicity", w / "run", w / PREPARED / "dev.tsv",
                 "--report", w / "run" / "best.pt"],
      "best.pt"),
    C("analyze-report-over-train-json",
      lambda w: ["analyze-monotonicity", w / "run", w / PREPARED / "dev.tsv",
                 "--report", w / "run" / "train.json"],
      "run directory"),
    C("analyze-report-over-metrics-csv",
      lambda w: ["analyze-monotonicity", w / "run", w / PREPARED / "dev.tsv",
                 "--report", w / "run" / "metrics.csv"],
      "metrics.csv", "run directory"),
    C("analyze-threshold-out-of-range",
      lambda w: ["analyze-monotonicity", w / "run", w / PREPARED, "--threshold", "1.5"],
      "--threshold"),
    C("analyze-beam-zero",
      lambda w: ["analyze-monotonicity", w / "run", w / PREPARED, "--beam", "0"], "--beam"),
    C("analyze-no-references",
      lambda w: ["analyze-monotonicity", w / "run", w / "test-no-target.tsv"],
      "test-no-target.tsv:1", "without a reference"),
    C("analyze-missing-model", lambda w: ["analyze-monotonicity", w / "nope", w / PREPARED],
      "nope"),
    C("analyze-empty-data", lambda w: ["analyze-monotonicity", w / "run", w / "empty.tsv"],
      "empty.tsv", "no lines"),
    C("analyze-plot-line-out-of-range",
      lambda w: ["analyze-monotonicity", w / "run", w / PREPARED / "dev.tsv", "--plot",
                 w / "plots", "--lines", "9999"],
      "--lines"),
    # ------------------------------------------------------------------------ average
    C("average-best-entry-without-update",
      lambda w: ["average", w / "no-update", "--best", "1", "-o", w / "avg.pt"],
      "index.json", "has no 'update'"),
    C("average-best-string-score",
      lambda w: ["average", w / "string-score", "--best", "1", "-o", w / "avg.pt"],
      "index.json", "'score' '1.0'"),
    C("average-best-string-update",
      lambda w: ["average", w / "string-update", "--last", "1", "-o", w / "avg.pt"],
      "index.json", "'update' '3'"),
    C("average-out-in-a-run-directory",
      lambda w: ["average", w / "run" / "best.pt", w / "run" / "last.pt", "-o",
                 w / "run" / "checkpoints" / "update-00000001.pt"],
      "run directory"),
    # ---------------------------------------------------------------- experiment report
    C("experiment-report-json-over-cells-json",
      lambda w: ["experiment", "report", w / "exp", "--json", w / "exp" / "cells.json"],
      "cells.json", "experiment directory"),
    C("experiment-report-csv-over-metrics-csv",
      lambda w: ["experiment", "report", w / "exp", "--csv", w / "run" / "metrics.csv"],
      "metrics.csv", "run directory"),
    C("experiment-report-markdown-over-a-log",
      lambda w: ["experiment", "report", w / "exp", "--markdown", w / "exp" / "logs" / "c.log"],
      "c.log", "experiment directory"),
]  # fmt: skip


def test_the_suite_covers_every_command_with_at_least_60_cases():
    commands = {str(case.args(Path("w"))[0]) for case in CASES}
    assert commands == {
        "prepare", "train", "decode", "score", "analyze-monotonicity", "average", "experiment"
    }  # fmt: skip
    assert len(CASES) >= 60
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(run, ws: Path, case: Case):
    before = snapshot(ws)
    result = run(*case.args(ws), input=case.stdin)
    one_line_error(result, *case.fragments)
    assert snapshot(ws) == before


def test_a_locked_run_directory_is_refused_with_the_holders_pid(run, ws: Path):
    before = snapshot(ws)
    with DirectoryLock(ws / "run" / LOCK, ws / "run"):
        result = run("train", "-o", ws / "run", "--resume")
        one_line_error(result, "in use by another transduce process", f"PID {os.getpid()}")
        during = snapshot(ws)
    assert {k: v for k, v in during.items() if not k.endswith(LOCK)} == before
    assert snapshot(ws) == before


def test_quoted_user_text_is_not_read_as_markup_or_emoji(run, ws: Path):
    result = run("prepare", "tsv", ws / ":x: [bold]nope[/bold].tsv", "-o", ws / "o")
    one_line_error(result, ":x: [bold]nope[/bold].tsv")


def test_a_plain_pickle_gives_no_torch_warning(run, ws: Path):
    result = run("decode", ws / "pickle.pt", ws / "source.txt")
    assert "weights_only" not in result.stderr and "Warning" not in result.stderr


# Bad calls of the Python API: (id, the call on the workspace, the exception, its text). N14
API_CASES = [
    ("score-one-string", lambda w: transduce.score("abc", "abd"), TypeError,
     "hypotheses: a list of lines, not one string"),
    ("score-references-one-string", lambda w: transduce.score(["abc"], "abd"), TypeError,
     "references: a list of lines"),
    ("score-metrics-one-string", lambda w: transduce.score(["a"], ["a"], metrics="wer"),
     TypeError, "metrics: a list of metric names"),
    ("load-cuda-0-without-cuda", lambda w: transduce.load(w / "run", device="cuda:7"),
     ValueError, "device: 'cuda:7', but this PyTorch sees"),
    ("load-tpu", lambda w: transduce.load(w / "run", device="tpu"), ValueError,
     "device: 'tpu' is not one of cpu, cuda, cuda:N or auto"),
    ("load-device-not-a-string", lambda w: transduce.load(w / "run", device=0), TypeError,
     "device: a string"),
    ("transduce-input-format-json",
     lambda w: transduce.load(w / "run").transduce(["a b"], input_format="json"), ValueError,
     "input_format: 'raw' or 'tsv', not 'json'"),
]  # fmt: skip


@pytest.mark.parametrize(
    "call,kind,text", [c[1:] for c in API_CASES], ids=[c[0] for c in API_CASES]
)
def test_bad_api_calls_raise_one_clear_sentence(ws: Path, call, kind, text):
    with pytest.raises(kind) as caught:
        call(ws)
    assert type(caught.value) is kind and text in str(caught.value)
    assert "\n" not in str(caught.value)


def test_yaml_1e_3_is_a_number(ws: Path, tmp_path: Path):
    text = (ws / "recipe.yaml").read_text(encoding="utf-8").replace("lr: 0.005", "lr: 1e-3")
    assert "lr: 1e-3" in text
    (tmp_path / "r.yaml").write_text(text, encoding="utf-8")
    config, _ = configuration.load(str(tmp_path / "r.yaml"), ["train.clip_norm=5e0"])
    assert config.train.optimizer.lr == 0.001 and config.train.clip_norm == 5.0


# ------------------------------------------------------------- real processes


def cli(*args, stdout=None, memory: int | None = None, **kwargs) -> subprocess.CompletedProcess:
    def limit() -> None:
        if memory is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    return subprocess.run(
        [sys.executable, "-m", "transduce", *map(str, args)],
        env=transduce_env(),
        stdout=stdout if stdout is not None else subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=limit if memory is not None else None,
        timeout=300,
        **kwargs,
    )


def assert_one_line(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
@pytest.mark.parametrize("command", ["score", "decode", "recipes", "experiment list"])
def test_stdout_on_a_full_disk_is_one_line(ws: Path, command: str):
    """N16 for the listings: `error: No space left on device`, without `<stdout>:`."""
    args = {
        "score": ["score", ws / "hyp.txt", ws / "ref.txt", "--json"],
        "decode": ["decode", ws / "run", ws / PREPARED / "test.tsv", "--input-format", "tsv"],
    }.get(command, command.split())
    with open("/dev/full", "w") as full:
        result = cli(*args, stdout=full)
    assert_one_line(result, "<stdout>", "No space left on device")


@pytest.mark.skipif(not Path("/proc/version").is_file(), reason="no /proc")
def test_an_output_where_no_file_can_be_made_is_not_a_missing_file(ws: Path):
    """N16: `score --report /proc/version` said "No such file or directory" of a file that
    exists (/proc takes no new files, and says ENOENT)."""
    before = snapshot(ws)
    result = cli("score", ws / "hyp.txt", ws / "ref.txt", "--report", "/proc/version")
    assert_one_line(result, "/proc/version: cannot create a file in /proc")
    assert "No such file" not in result.stderr
    assert snapshot(ws) == before


@pytest.mark.parametrize("closed", ["stdin", "stdout"])
def test_decode_with_a_closed_standard_stream_is_one_line(ws: Path, closed: str):
    """N15: `decode RUN - <&-` (as under cron) or `>&-`: AttributeError tracebacks."""
    fd = 0 if closed == "stdin" else 1
    args = ["decode", ws / "run", "-" if closed == "stdin" else ws / "source.txt"]
    before = snapshot(ws)
    result = subprocess.run(
        [sys.executable, "-m", "transduce", *map(str, args)],
        env=transduce_env(),
        stdin=subprocess.DEVNULL if closed == "stdout" else None,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: os.close(fd),
        timeout=300,
    )
    assert_one_line(result, f"<{closed}>", "closed")
    assert snapshot(ws) == before


def test_a_report_on_a_full_disk_is_one_line(ws: Path):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    before = snapshot(ws)
    result = cli("score", ws / "hyp.txt", ws / "ref.txt", "--report", "/dev/full")
    assert_one_line(result, "/dev/full", "No space left on device")
    assert snapshot(ws) == before


def test_a_closed_pipe_is_quiet(ws: Path):
    lines = "".join(f"{w}\n" for w in ["a b c"] * 20000)
    reader = subprocess.Popen(
        [sys.executable, "-m", "transduce", "decode", str(ws / "run"), "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=transduce_env(),
        text=True,
    )
    assert reader.stdout is not None and reader.stdin is not None
    reader.stdin.write(lines)
    reader.stdin.close()
    reader.stdout.readline()
    reader.stdout.close()  # as `| head -1` does
    reader.wait(timeout=300)
    stderr = reader.stderr.read() if reader.stderr else ""
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS")
@pytest.mark.skipif(torch.version.cuda is not None, reason="a CUDA build needs more address space")
def test_a_checkpoint_too_big_to_build_is_out_of_memory(ws: Path, tmp_path: Path):
    """N16: a crafted checkpoint whose model cannot be allocated was "does not fit this
    version of transduce" with torch's enforce text."""
    from transduce import checkpoint

    payload = checkpoint.load(ws / "run" / "best.pt")
    payload["config"]["model"]["encoder_size"] = 200_000
    crafted = tmp_path / "crafted.pt"
    torch.save({k: v for k, v in payload.items() if k != "path"}, crafted)
    result = cli("decode", crafted, ws / "source.txt", memory=3 << 30)
    assert_one_line(result, "out of memory building the model of", "asked for", "more memory")
    assert "enforce" not in result.stderr and "does not fit" not in result.stderr


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS")
@pytest.mark.skipif(torch.version.cuda is not None, reason="a CUDA build needs more address space")
def test_out_of_memory_names_the_size_and_the_option(ws: Path, tmp_path: Path):
    """Item 6: a huge model and a 300k-symbol training line under a 3 GB address space."""
    limit = 3 << 30
    huge = cli(
        "train", "-c", ws / "recipe.yaml", "-o", tmp_path / "huge",
        "--set", "model.encoder_size=200000", memory=limit,
    )  # fmt: skip
    assert_one_line(huge, "out of memory building the model", "asked for", "model")
    long = tmp_path / "long.tsv"
    words = [f"{a}{b}{c}" for a in "abcdefg" for b in "abcdefg" for c in "abcdefg"]
    long.write_text(
        "".join(f"{w}\t{' '.join(w)}\n" for w in words)
        + "a" * 300_000 + "\t" + "a " * 1000 + "\n",
        encoding="utf-8",
    )  # fmt: skip
    data = {
        "data": {"format": "tsv", "train": [str(long)]},
        "model": {"name": "lstm", "embedding_dim": 8, "encoder_size": 8, "decoder_size": 8},
        "train": {"max_updates": 20, "batch_size": 400, "threads": 1},
    }
    config = tmp_path / "long.yaml"
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    result = cli("train", "-q", "-c", config, "-o", tmp_path / "long", memory=limit)
    assert_one_line(result, "out of memory in update", "asked for", "max_source_length")


def test_analyze_warns_about_some_unknown_symbols(run, ws: Path, tmp_path: Path):
    lines = (ws / PREPARED / "dev.tsv").read_text(encoding="utf-8").splitlines()
    source, target = lines[0].split("\t")[:2]
    data = tmp_path / "dev.tsv"
    data.write_text("\n".join([f"{source} Q\t{target}", *lines[1:]]) + "\n", encoding="utf-8")
    result = run("analyze-monotonicity", ws / "run", data)
    assert result.exit_code == 0, result.output
    assert "1 source symbol of" in result.stderr and "unknown to the model" in result.stderr


def test_a_tab_inside_a_field_is_recorded_and_warned_about(run, ws, tmp_path):
    """Item 9: the rest of a field after a tab was dropped without a word. Extra columns are
    real data in some files (Phonetisaurus' CMUdict references list alternatives in them),
    so such a line is read as before, but counted in the manifest and warned about."""
    out = tmp_path / "out"
    result = run("prepare", "tsv", ws / "tab-inside.tsv", "-o", out)
    assert result.exit_code == 0, result.output
    assert "1 line with more columns than the rest" in result.stderr
    assert "tab-inside.tsv:21" in result.stderr
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["ignored_columns"]["total"] == 1
    assert "columns past 2 ignored" in manifest["ignored_columns"]["examples"][0]
    assert manifest["skipped"]["total"] == 0


def test_a_trailing_tab_is_not_a_tab_inside_a_field(run, tmp_path: Path):
    source = tmp_path / "words.tsv"
    lines = [f"w{i}\tW {i}" for i in range(60)]
    lines[5] += "\t"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run("prepare", "tsv", source, "-o", tmp_path / "out")
    assert result.exit_code == 0, result.output


def test_prepare_never_touches_a_users_own_backups_beside_the_output(run, ws, tmp_path):
    """The temporaries prepare cleans up carry its mark; a user's ".out.20240101.old" with
    a "dir" inside, or ".out.backup_1.tmp", look alike but are not ours."""
    (tmp_path / ".out.20240101.old" / "dir").mkdir(parents=True)
    (tmp_path / ".out.20240101.old" / "dir" / "photo").write_text("mine\n", encoding="utf-8")
    (tmp_path / ".out.backup_1.tmp").write_text("mine\n", encoding="utf-8")
    before = snapshot(tmp_path)
    result = run("prepare", "tsv", ws / "raw.tsv", "-o", tmp_path / "out", "--dev-ratio", "0.25",
                 "--test-ratio", "0.25")  # fmt: skip
    assert result.exit_code == 0, result.output
    after = snapshot(tmp_path)
    assert {k: v for k, v in after.items() if not k.startswith("out")} == before
