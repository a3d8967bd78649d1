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
    }
    for arguments, message in refusals.items():
        result = run(*arguments, "--tie-break-rules", train)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.exit_code == 2 and len(lines) == 1 and message in lines[0], result.output
    bad = tmp_path / "bad"
    bad.write_text("walk\twalked\tV;PST\nsing\n", encoding="utf-8")
    result = run("decode", a, b, words, "--tie-break-rules", bad)
    assert result.exit_code == 2 and f"{bad}:2: expected lemma<TAB>form<TAB>tags" in result.stderr
    assert result.stdout == ""
