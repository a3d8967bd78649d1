"""The committed results (`results/EXPERIMENT/`) score again to their recorded numbers with
the official scorers' definitions (`tests/official.py`): SIGMORPHON 2017 task 1's
`evalm.py` (accuracy and mean Levenshtein distance per lemma and tag) and SIGMORPHON
2020 task 1's `evaluate.py` (WER per line; LER with Levenshtein's distance, which our PER
is: the 2020 script's own edit distance undercounts leading edits,
`test_official.py::test_the_2020_scorer_undercounts_leading_edits`).

Each check takes one finished run of each committed experiment on that data (the first
by name) and its ensembles; the test files come from the shared data (skipped without).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from . import official
from .conftest import REPO, shared_data

RESULTS = REPO / "results"
SIGMORPHON2017 = (
    "small-data-sigmorphon2017-medium",
    "small-data-sigmorphon2017-low",
    "small-data-search-inflection",
)
SIGMORPHON2020 = (
    "small-data-sigmorphon2020-g2p",
    "small-data-search-g2p",
    "small-data-probe-g2p-average",
    "small-data-probe-g2p-cap",
    "small-data-probe-g2p-average-split",
)


def outputs(experiment: str) -> list[tuple[str, Path, dict]]:
    """(name, test.predictions, recorded test scores) of the first finished run and of every
    ensemble of a committed experiment."""
    directory = RESULTS / experiment
    if not directory.is_dir():
        pytest.skip(f"results/{experiment} is not committed")
    found = []
    for report in sorted((directory / "runs").glob("*/train.json")):
        test = json.loads(report.read_text(encoding="utf-8")).get("test")
        if test:
            found.append((report.parent.name, report.parent / "test.predictions", test))
            break
    for ensemble in sorted((directory / "ensembles").glob("*/ensemble.json")):
        scores = json.loads(ensemble.read_text(encoding="utf-8")).get("test")
        found.append((ensemble.parent.name, ensemble.parent / "test.predictions", scores))
    assert found, f"results/{experiment} has no finished run"
    return found


def raw_test_file(config: dict, data: Path) -> Path:
    """The run's raw test file, under the shared data: the path after `/shared/data/`, or
    for a run that read a copy of the data elsewhere (a lent GPU machine's `.gpudata/`),
    the longest tail of its path that names a file under the shared data."""
    path = config["data"]["test"][0]
    marker = "/shared/data/"
    if marker in path:
        return data / path.split(marker, 1)[1]
    parts = Path(path).parts
    first = 1 if Path(path).is_absolute() else 0
    tails = (data.joinpath(*parts[i:]) for i in range(first, len(parts) - 1))  # a folder too
    return next((tail for tail in tails if tail.is_file()), Path(path))


def run_config(predictions: Path) -> dict:
    directory = predictions.parent
    report = directory / "train.json"
    if report.is_file():
        return json.loads(report.read_text(encoding="utf-8"))["config"]
    members = json.loads((directory / "ensemble.json").read_text(encoding="utf-8"))["members"]
    first = directory.parent.parent / "runs" / members[0]["cell"] / "train.json"
    return json.loads(first.read_text(encoding="utf-8"))["config"]


def scored(experiment: str) -> list[tuple[str, list[list[str]], list[str], dict]]:
    """(name, the raw test file's rows, the output lines, recorded scores) of each output
    of `outputs`, checked to have a line per test line."""
    data = shared_data()
    if data is None:
        pytest.skip("no shared data")
    found = []
    for name, predictions, recorded in outputs(experiment):
        gold = raw_test_file(run_config(predictions), data).read_text(encoding="utf-8")
        rows = [line.split("\t") for line in gold.splitlines()]
        guesses = predictions.read_text(encoding="utf-8").splitlines()
        assert len(guesses) == len(rows), name
        found.append((name, rows, guesses, recorded))
    return found


@pytest.mark.parametrize("experiment", SIGMORPHON2017)
def test_sigmorphon2017_results_score_as_evalm(experiment: str):
    for name, rows, guesses, recorded in scored(experiment):
        gold = official.evalm_read("\t".join(r) for r in rows)
        guess = official.evalm_read(f"{r[0]}\t{g}\t{r[2]}" for r, g in zip(rows, guesses))
        accuracy, distance = official.evalm_eval_form(gold, guess)
        assert accuracy == pytest.approx(recorded["acc"], abs=1e-9), name
        assert distance == pytest.approx(recorded["lev"], abs=1e-9), name


@pytest.mark.parametrize("experiment", SIGMORPHON2020)
def test_sigmorphon2020_results_score_as_the_official_scorer(experiment: str):
    for name, rows, guesses, recorded in scored(experiment):
        pairs = official.tsv_pairs(f"{r[1]}\t{h}" for r, h in zip(rows, guesses))
        wer, ler = official.sigmorphon2021_wer(pairs), official.sigmorphon2020_ler(pairs)
        assert wer == pytest.approx(recorded["wer"], abs=1e-9), name
        assert ler == pytest.approx(recorded["per"], abs=1e-9), name


def test_ud22_results_score_as_upos_accuracy_over_all_words():
    """Dufter et al. on UD 2.2: a run's test.predictions (a line of tags per sentence)
    against the UPOS column of the CoNLL-U test file, over every syntactic word (integer
    ids: no multiword-token ranges, no empty nodes), as the CoNLL 2018 evaluation counts
    UPOS on gold tokenization; the recorded tagacc to 1e-9."""
    data = shared_data()
    if data is None:
        pytest.skip("no shared data")
    for name, predictions, recorded in outputs("dufter2020-pos-ud22"):
        path = raw_test_file(run_config(predictions), data)
        gold: list[list[str]] = [[]]
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                if gold[-1]:
                    gold.append([])
            elif not line.startswith("#") and line.split("\t")[0].isdigit():
                gold[-1].append(line.split("\t")[3])
        gold = [s for s in gold if s]
        guesses = [line.split(" ") for line in predictions.read_text("utf-8").splitlines()]
        assert len(guesses) == len(gold) and all(len(g) == len(t) for g, t in zip(guesses, gold))
        right = sum(a == b for g, t in zip(guesses, gold) for a, b in zip(g, t))
        total = sum(len(t) for t in gold)
        assert 100 * right / total == pytest.approx(recorded["tagacc"], abs=1e-9), name
