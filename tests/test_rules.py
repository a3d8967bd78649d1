"""Suffix rules (`transduce.rules`) on hand-worked pairs, the tie-break, and `decode
--tie-break-rules` against the same combination computed from the models' own outputs."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from transduce.cli import app
from transduce.data.prepare import PrepareRequest, prepare
from transduce.errors import DataError
from transduce.rules import SuffixRules, changes, tie_break

from .toy import TINY_LSTM, recipe


def test_a_pair_gives_its_prefix_change_and_its_suffix_change():
    # the longest common substring "spiel" is the stem: "" -> "ge" before it; after it,
    # the common prefix "spiel" of the rests, then "en" -> "t"
    assert changes("spielen", "gespielt") == (("", "ge"), "spielen", ("en", "t"))
    assert changes("walk", "walked") == (("", ""), "walk", ("", "ed"))
    # sing -> sang: the longest block is "ng" (2), so "si" -> "sa" is the prefix change
    assert changes("sing", "sang") == (("si", "sa"), "ng", ("", ""))
    assert changes("go", "went") == (("", ""), "go", ("go", "went"))  # nothing in common


def test_the_rules_of_the_bundle_whose_lemmas_end_most_alike_apply():
    rules = SuffixRules(
        [
            ("spielen", "gespielt", "V.PTCP;PST"),
            ("machen", "gemacht", "PST;V.PTCP"),  # the same bundle, tags in another order
            ("cat", "cats", "N;PL"),
            ("dog", "dogs", "N;PL"),
            ("ox", "oxen", "N;PL"),
            ("box", "boxes", "N;PL"),
        ]
    )
    # both pairs prefix "ge"; "machen" shares "chen" with "kochen", "spielen" only "en"
    assert rules("kochen", "V.PTCP;PST") == "gekocht"
    # "fox" ends as "ox" and "box" do (2 letters): one vote each for "" -> "en" and
    # "" -> "es", once each in the bundle: the greater change, ("", "es"), wins
    assert rules("fox", "N;PL") == "foxes"
    # "cow" shares no final letter with any: all four pairs vote, "" -> "s" twice
    assert rules("cow", "PL;N") == "cows"
    assert rules("cow", "N;SG") == "cow"  # a bundle never seen: the lemma
    votes = SuffixRules(
        [("ox", "oxes", "N;PL"), ("box", "boxen", "N;PL"), ("lox", "loxen", "N;PL")]
    )
    assert votes("fox", "N;PL") == "foxen"  # two votes against one, not the greater change
    counts = SuffixRules(
        [("ox", "oxen", "N;PL"), ("box", "boxes", "N;PL"), ("cat", "caten", "N;PL")]
    )
    assert counts("fox", "N;PL") == "foxen"  # one vote each: "" -> "en" is twice in the bundle
    mutated = SuffixRules([("lamp", "mlamp", "X"), ("late", "mlate", "X"), ("sun", "tsun", "X")])
    # the bundle's most frequent prefix change ("" -> "m", twice) is tried first
    assert mutated("lid", "X") == "mlid"
    # a suffix change that does not fit what remains does not apply: the lemma
    assert SuffixRules([("ab", "ac", "X")])("zz", "X") == "zz"


def test_one_pair_of_a_bundle_reproduces_its_own_form():
    for lemma, form in [("spielen", "gespielt"), ("sing", "sang"), ("go", "went"), ("ab", "x")]:
        assert SuffixRules([(lemma, form, "X")])(lemma, "X") == form


def test_the_tie_break_takes_the_rules_only_where_the_members_disagree_and_one_wrote_it():
    assert tie_break(["a", "b", "a"], "a", "b") == "b"
    assert tie_break(["a", "b", "a"], "a", "c") == "a"  # the rules wrote what no member did
    assert tie_break(["a", "a", "a"], "x", "b") == "x"  # agreed: the ensemble's
    assert tie_break(["a", "b"], "c", "b") == "b"


def test_a_bad_training_line_is_named(tmp_path: Path):
    train = tmp_path / "train"
    train.write_text("walk\twalked\tV;PST\n\nsing\tV;PST\n", encoding="utf-8")
    with pytest.raises(DataError) as caught:
        SuffixRules.from_file(train)
    assert (
        str(caught.value)
        == f"{train}:3: expected lemma<TAB>form<TAB>tags (the training file): 'sing\\tV;PST'"
    )
    train.write_text("\n", encoding="utf-8")
    with pytest.raises(DataError, match="no lemma<TAB>form<TAB>tags lines"):
        SuffixRules.from_file(train)


# ------------------------------------------------------------------------- the command

SUFFIX = {"PL": "s", "PST": "ed", "PRS": "", "DIM": "ie"}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Two tiny inflection models (seeds 1 and 2, a few updates: they disagree often)."""
    root = tmp_path_factory.mktemp("rules")
    rng = random.Random(0)
    lemmas = sorted(
        {"".join(rng.choice("abcdefg") for _ in range(rng.randint(2, 5))) for _ in range(200)}
    )
    raw = root / "train"
    raw.write_text(
        "".join(f"{w}\t{w}{SUFFIX[t]}\tV;{t}\n" for w in lemmas for t in SUFFIX), encoding="utf-8"
    )
    prepared = root / "prepared"
    prepare(
        PrepareRequest(
            "sigmorphon", prepared, inputs={"train": [raw]}, dev_ratio=0.1, test_ratio=0.1
        )
    )
    made = []
    for seed in (1, 2):
        config = root / f"{seed}.yaml"
        settings = recipe(prepared, TINY_LSTM, max_updates=20, validate_every=10, seed=seed)
        config.write_text(yaml.safe_dump(settings), encoding="utf-8")
        out = root / f"seed{seed}"
        result = CliRunner().invoke(
            app, ["train", "-q", "--config", str(config), "--out", str(out), "--no-test"]
        )
        assert result.exit_code == 0, result.output
        made.append(out)
    return made, raw


def test_decode_with_the_tie_break_is_the_combination_of_the_models_own_outputs(
    run, models, tmp_path: Path
):
    """The rules are learned from a file written for the test, one pair per input line
    with the line's own tag bundle, so that they give, line by line, a chosen output (a
    pair alone in its bundle gives its own form back). Where the two models disagree: the
    output of the one that did not write the ensemble's (the tie-break must take it), or on
    every third such line a form neither wrote (it must not). Where they agree: a form
    neither wrote."""
    (a, b), _ = models
    words = tmp_path / "input"
    lemmas = ["abc", "gfed", "bad", "cafe", "dfg", "eg", "abcdef", "fa", "gbe", "ccd"] * 3
    # the line-number tag is unknown to the models (read as <unk>): it gives each line its
    # own bundle for the rules
    lines = [f"{w}\tV;{t};L{i}" for i, w in enumerate(lemmas) for t in ("PST", "PL")]
    words.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    alone = [run("decode", m, words).stdout.splitlines() for m in (a, b)]
    together = run("decode", a, b, words).stdout.splitlines()
    assert len(together) == len(lines) == len(alone[0]) == len(alone[1])
    pairs, expected, disagreements = [], [], 0
    for line, first, second, ensemble in zip(lines, *alone, together, strict=True):
        lemma, _, tags = line.partition("\t")
        chosen = "zzzz"  # no model writes z: not a letter of the data
        if first != second:
            disagreements += 1
            if disagreements % 3:
                chosen = first if second == ensemble else second
        pairs.append(f"{lemma}\t{chosen}\t{tags}\n")
        expected.append(ensemble if chosen == "zzzz" else chosen)
    assert disagreements >= 3, "two models of 20 updates agreed on nearly every line"
    train = tmp_path / "rules-train"
    train.write_text("".join(pairs), encoding="utf-8")
    report = tmp_path / "report.json"
    broken = run("decode", a, b, words, "--tie-break-rules", train, "--report", report)
    assert broken.exit_code == 0, broken.output
    assert broken.stdout.splitlines() == expected
    # in batches of 16 lines (line numbers from the second on), with blank lines between
    blank = tmp_path / "with-blank-lines"
    blank.write_text(
        "".join(f"{line}\n" + ("\n" if i % 7 == 3 else "") for i, line in enumerate(lines))
    )
    pieces = run("decode", a, b, blank, "--tie-break-rules", train, "--batch-size", "1")
    assert pieces.exit_code == 0, pieces.output
    assert pieces.stdout.splitlines() == [
        part for i, e in enumerate(expected) for part in ([e, ""] if i % 7 == 3 else [e])
    ]
    changed = sum(e != t for e, t in zip(expected, together, strict=True))
    assert changed >= 2  # at least two of every three disagreements
    written = json.loads(report.read_text(encoding="utf-8"))
    assert written["tie_broken"] == changed and written["options"]["tie_break_rules"] == str(train)


def test_the_tie_break_refuses_what_it_cannot_do(run, models, tmp_path: Path):
    (a, b), train = models
    words = tmp_path / "input"
    words.write_text("abc\tV;PST\n", encoding="utf-8")
    refusals = {
        ("decode", a, words): "give several models (an ensemble)",
        ("decode", a, b, words, "--nbest", "2", "--beam", "2"): "one output per line",
        ("decode", a, b, words, "--input-format", "tsv"): "not --input-format tsv",
        ("decode", a, b, words, "--scores"): "one output per line",
        ("decode", a, b, words, "--alignment"): "one output per line",
    }
    for arguments, message in refusals.items():
        result = run(*arguments, "--tie-break-rules", train)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.exit_code == 2 and len(lines) == 1 and message in lines[0], result.output
    result = run("decode", a, b, words, "--tie-break-rules", "-", input="walk\twalked\tV;PST\n")
    assert (
        result.exit_code == 2 and "--tie-break-rules: a file, not standard input" in result.stderr
    )
    kept = train.read_bytes()
    result = run("decode", a, b, words, "--tie-break-rules", train, "--report", train)
    assert result.exit_code == 2 and train.read_bytes() == kept  # an input is never written
    bad = tmp_path / "bad"
    bad.write_text("walk\twalked\tV;PST\nsing\n", encoding="utf-8")
    result = run("decode", a, b, words, "--tie-break-rules", bad)
    assert result.exit_code == 2 and f"{bad}:2: expected lemma<TAB>form<TAB>tags" in result.stderr
    assert result.stdout == ""


# ------------------------------------------------------------- in an experiment file


def test_an_experiment_decodes_each_ensemble_also_tie_broken(tmp_path: Path, monkeypatch):
    """`ensemble: {tie_break_rules: true}`: beside SYSTEM.DATASET, SYSTEM.DATASET.tie-break
    whose test.predictions is the tie-break of the members' and the ensemble's own
    test.predictions with rules learned from the raw training file, scored as a run scores
    its test split, with its own row in the report."""
    import subprocess
    import sys

    from transduce.experiments import ensembles, report, runner

    from .conftest import transduce_env

    rng = random.Random(1)
    lemmas = sorted(
        {"".join(rng.choice("abcdefg") for _ in range(rng.randint(2, 5))) for _ in range(150)}
    )
    lines = [f"{w}\t{w}{SUFFIX[t]}\tV;{t}\n" for w in lemmas for t in SUFFIX]
    rng.shuffle(lines)
    # each test line with a tag of its own (<unk> to the models): a bundle of its own
    test_lines = [f"{line.rstrip()};L{i}\n" for i, line in enumerate(lines[480:560])]
    files = {"train": lines[:400], "dev": lines[400:480], "test": test_lines}
    for name, part in files.items():
        (tmp_path / name).write_text("".join(part), encoding="utf-8")
    settings = recipe(tmp_path / "unused", TINY_LSTM, max_updates=30, validate_every=15)
    settings["data"] = {
        "format": "sigmorphon",
        **{name: [str(tmp_path / name)] for name in files},
    }
    (tmp_path / "lstm.yaml").write_text(yaml.safe_dump(settings), encoding="utf-8")
    experiment = {
        "systems": {"lstm": {"recipe": "lstm.yaml"}},
        "seeds": [1, 2],
        "metrics": ["acc"],
        "ensemble": {"systems": "all", "tie_break_rules": True},
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment, sort_keys=False), encoding="utf-8")
    out = tmp_path / "out"
    ran = subprocess.run(
        [sys.executable, "-m", "transduce", "experiment", "run", str(path), "--out", str(out)],
        capture_output=True, text=True, env=transduce_env(), cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    test = [line.rstrip("\n").split("\t") for line in files["test"]]
    seeds = [(out / f"runs/lstm.seed{s}/test.predictions").read_text().splitlines() for s in (1, 2)]
    plain = (out / "ensembles/lstm/test.predictions").read_text().splitlines()
    rules = SuffixRules.from_file(tmp_path / "train")
    want = [
        tie_break([s[i] for s in seeds], plain[i], rules(lemma, tags))
        for i, (lemma, _, tags) in enumerate(test)
    ]
    folder = out / "ensembles/lstm.tie-break"
    assert (folder / "test.predictions").read_text().splitlines() == want
    record = json.loads((folder / "ensemble.json").read_text())
    accuracy = 100 * sum(w == form for w, (_, form, _) in zip(want, test, strict=True)) / len(test)
    assert record["test"]["acc"] == pytest.approx(accuracy)
    changed = sum(w != p for w, p in zip(want, plain, strict=True))
    assert record["tie_break_rules"]["pairs"] == 400  # the training pairs, no dev or test
    assert record["tie_break_rules"]["changed"]["test"] == changed
    states = json.loads((out / "cells.json").read_text())["ensembles"]
    assert [(s["id"], s["status"]) for s in states] == [
        ("lstm", "done"),
        ("lstm.tie-break", "done"),
    ]
    rows = report.table(runner.read_state(out), out)["rows"]
    labels = [r["system"] for r in rows]
    assert labels == ["lstm", "lstm (ensemble of 2)", "lstm (ensemble of 2, rule tie-break)"]
    assert rows[-1]["mean"] == pytest.approx(accuracy)
    # rules made to write, on each test line where the seeds disagree, the seed's output
    # that is not the ensemble's, and on every other line (dev too) a form no model
    # writes: decoded again (in this process), every such test line changes, nothing else
    disagree = [i for i in range(len(test)) if seeds[0][i] != seeds[1][i]]
    assert len(disagree) >= 2, "two models of 30 updates agreed on nearly every test line"
    crafted = {}
    for i in disagree:
        lemma, _, tags = test[i]
        crafted[(lemma, tags)] = seeds[0][i] if seeds[1][i] == plain[i] else seeds[1][i]
    monkeypatch.setattr(
        SuffixRules, "__call__", lambda self, lemma, tags: crafted.get((lemma, tags), "zzzz")
    )
    group = ensembles.Group("lstm", None, ("lstm.seed1", "lstm.seed2"), "probability", True)
    record = ensembles.build(out, group)
    assert record["tie_break_rules"]["changed"] == {"test": len(disagree), "dev": 0}
    again = (folder / "test.predictions").read_text().splitlines()
    assert [i for i in range(len(test)) if again[i] != plain[i]] == disagree
    assert all(again[i] == crafted[(test[i][0], test[i][2])] for i in disagree)


def test_a_tie_broken_ensemble_is_paired_with_its_plain_one_and_the_baselines_of_its_kind():
    from transduce.experiments import report

    rows = []
    numbers = {
        "a": [70.0, 80.0, 62.0], "a (e)": [72.0, 81.0, 63.0], "a (e, t)": [73.0, 81.0, 65.0],
        "b": [71.0, 80.5, 64.0], "b (e)": [74.0, 83.0, 66.5], "b (e, t)": [75.0, 84.0, 66.0],
    }  # fmt: skip
    for system, values in numbers.items():
        ensemble = 2 if "(" in system else None
        for dataset, value in zip(("x", "y", "z"), values, strict=True):
            rows.append(
                {"system": system, "dataset": dataset, "metric": "acc", "ensemble": ensemble,
                 "n": 1 if ensemble else 2, "mean": value}
            )  # fmt: skip
    data = {"rows": rows, "metrics": ["acc"], "seeds": 2, "baseline": "a"}
    ensemble_of = {"a (e)": "a", "a (e, t)": "a", "b (e)": "b", "b (e, t)": "b"}
    paired = report.paired_over_datasets(
        data, ensemble_of, {"a (e, t)": "a (e)", "b (e, t)": "b (e)"}
    )
    assert [(c["a"], c["b"]) for c in paired] == [
        ("b", "a"),
        ("a (e)", "a"),
        ("a (e, t)", "a"),
        ("b (e)", "b"),
        ("b (e, t)", "b"),
        ("a (e, t)", "a (e)"),
        ("b (e, t)", "b (e)"),
        ("b (e)", "a (e)"),
        ("b (e, t)", "a (e, t)"),
    ]
    assert paired[5]["difference"] == pytest.approx((1 + 0 + 2) / 3)


def test_tie_break_rules_in_an_experiment_file_is_true_or_false(tmp_path: Path):
    from transduce.errors import ConfigError
    from transduce.experiments import spec

    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe(tmp_path, TINY_LSTM)), encoding="utf-8")
    path = tmp_path / "exp.yaml"
    base = {"systems": {"lstm": {"recipe": "r.yaml"}}, "seeds": [1, 2]}
    path.write_text(yaml.safe_dump({**base, "ensemble": {"tie_break_rules": "yes"}}))
    with pytest.raises(ConfigError, match="ensemble.tie_break_rules: true or false, not 'yes'"):
        spec.load(path)
    path.write_text(yaml.safe_dump({**base, "ensemble": {"tie_break_rules": True}}))
    (tmp_path / "manifest.json").write_text('{"format": "tsv"}')  # prepared from tsv
    with pytest.raises(ConfigError, match="lstm: tsv data; the rules learn from sigmorphon"):
        spec.load(path)
    settings = recipe(tmp_path, TINY_LSTM)
    settings["data"] = {"format": "tsv", "train": [str(tmp_path / "words.tsv")]}
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(settings), encoding="utf-8")
    with pytest.raises(ConfigError, match="ensemble.tie_break_rules: lstm: tsv data"):
        spec.load(path)
    settings["data"]["format"] = "sigmorphon"
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(settings), encoding="utf-8")
    assert spec.load(path).ensemble.tie_break_rules
