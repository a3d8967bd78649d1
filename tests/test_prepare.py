"""Preparing datasets: splits, manifests, atomic output, given splits."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transduce.data.formats import Example
from transduce.data.prepare import PrepareRequest, prepare
from transduce.data.splits import split_examples
from transduce.errors import ConfigError, DataError, TransduceError
from transduce.io import sha256_file


def read_split(directory: Path, split: str) -> list[list[str]]:
    lines = (directory / f"{split}.tsv").read_text(encoding="utf-8").split("\n")[:-1]
    return [line.split("\t") for line in lines]


def examples(words: list[str]) -> list[Example]:
    return [Example(tuple(w), tuple(w.upper()), None, i) for i, w in enumerate(words, 1)]


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.text("abcde", min_size=1, max_size=4), min_size=4, max_size=60), st.integers(0, 99)
)
def test_no_source_in_two_splits_and_order_does_not_matter(words, seed):
    distinct = len(set(words))
    if distinct < 4:
        return
    parts = split_examples(examples(words), {"test": 0.2, "dev": 0.1}, seed, "x")
    keys = {split: {e.source for e in part} for split, part in parts.items()}
    assert not keys["train"] & keys["dev"] and not keys["train"] & keys["test"]
    assert not keys["dev"] & keys["test"]
    assert sum(len(p) for p in parts.values()) == len(words)
    shuffled = list(words)
    random.Random(seed).shuffle(shuffled)
    again = split_examples(examples(shuffled), {"test": 0.2, "dev": 0.1}, seed, "x")
    assert {s: {e.source for e in p} for s, p in again.items()} == keys


def test_split_sizes_follow_the_ratios_of_distinct_sources():
    words = [f"w{i}" for i in range(1000)] * 2  # every source twice
    parts = split_examples(examples(words), {"test": 0.1, "dev": 0.05}, 7, "x")
    assert len({e.source for e in parts["test"]}) == 100
    assert len({e.source for e in parts["dev"]}) == 50
    assert len(parts["train"]) == 1700


def test_too_few_sources_is_an_error():
    with pytest.raises(DataError, match="too few distinct sources"):
        split_examples(examples(["a", "b"]), {"test": 0.1, "dev": 0.05}, 1, "x")


def test_prepare_embedded_cmudict(tmp_path: Path):
    out = tmp_path / "cmudict"
    manifest = prepare(PrepareRequest("cmudict", out))
    splits = {s: read_split(out, s) for s in ("train", "dev", "test")}
    words = {s: {row[0] for row in rows} for s, rows in splits.items()}
    assert not words["train"] & words["test"] and not words["train"] & words["dev"]
    assert not words["dev"] & words["test"]
    total = sum(manifest["lines"].values())
    assert total > 130_000
    assert manifest["lines"]["test"] / total == pytest.approx(0.10, abs=0.01)
    assert manifest["overlap"] == {"train-dev": 0, "train-test": 0, "dev-test": 0}
    assert manifest["sides"]["source"]["unit"] == "char"
    assert all(not any(c.isdigit() for c in row[1]) for row in splits["train"][:1000])
    for name, entry in manifest["outputs"].items():
        assert sha256_file(out / name) == entry["sha256"]
    assert manifest["inputs"][0]["name"].startswith("cmudict-")
    # the same request gives the same files
    again = prepare(PrepareRequest("cmudict", tmp_path / "again"))
    assert {k: v["sha256"] for k, v in again["outputs"].items()} == {
        k: v["sha256"] for k, v in manifest["outputs"].items()
    }
    other = prepare(PrepareRequest("cmudict", tmp_path / "other", seed=2))
    assert other["outputs"]["test.tsv"]["sha256"] != manifest["outputs"]["test.tsv"]["sha256"]


def test_given_splits_are_kept_and_overlaps_reported(tmp_path: Path, data: Path):
    manifest = prepare(
        PrepareRequest(
            "sigmorphon",
            tmp_path / "out",
            inputs={
                "train": [data / "english-train-sample"],
                "dev": [data / "english-dev-sample"],
                "test": [data / "english-covered-test-sample"],
            },
        )
    )
    assert manifest["split"]["carved"] == []
    assert manifest["lines"] == {"train": 25, "dev": 12, "test": 10}
    assert manifest["test_has_targets"] is False
    test = read_split(tmp_path / "out", "test")
    assert test[0][1] == "" and test[0][0].startswith("[V] ")
    dev = read_split(tmp_path / "out", "dev")
    assert len(dev) == 12 and all(row[1] for row in dev)


def test_missing_dev_is_carved_from_train_only(tmp_path: Path, data: Path):
    manifest = prepare(
        PrepareRequest(
            "cmudict",
            tmp_path / "out",
            inputs={"train": [data / "cmudict-sample.dict"], "test": [data / "words-only.txt"]},
            dev_ratio=0.2,
        )
    )
    assert manifest["split"]["carved"] == ["dev"]
    assert manifest["lines"]["test"] == 3


@pytest.mark.parametrize(
    ("library", "module", "model", "marker"),
    [
        ("subword-nmt", "subword_nmt", "bpe.codes", "@@"),
        ("sentencepiece", "sentencepiece", "bpe.model", "\u2581"),
    ],
)
def test_parallel_with_subwords(tmp_path: Path, data: Path, library, module, model, marker):
    pytest.importorskip(module)
    manifest = prepare(
        PrepareRequest(
            "parallel",
            tmp_path / "out",
            inputs={"train": [data / "gsw_sample.txt", data / "de_sample.txt"]},
            options={"subwords": library, "bpe_merges": 20},
            dev_ratio=0.15,
            test_ratio=0.15,
        )
    )
    assert (tmp_path / "out" / model).is_file() and model in manifest["outputs"]
    assert manifest["sides"]["target"]["library"] == library
    assert any(marker in row[0] for row in read_split(tmp_path / "out", "train"))


def test_failure_leaves_no_directory_and_keeps_an_existing_one(tmp_path: Path, data: Path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("cat\tK AE T\ndog\n", encoding="utf-8")
    out = tmp_path / "out"
    with pytest.raises(DataError, match="bad.tsv:2: expected at least 2"):
        prepare(PrepareRequest("tsv", out, inputs={"train": [bad]}))
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["bad.tsv"]  # no temporary left behind

    sample = {"train": [data / "cmudict-sample.dict"]}
    manifest = prepare(PrepareRequest("cmudict", out, inputs=sample))
    with pytest.raises(TransduceError, match="exists and is not empty .use --force"):
        prepare(PrepareRequest("cmudict", out, inputs=sample))
    with pytest.raises(DataError):  # a failed --force run leaves the old dataset as it was
        prepare(PrepareRequest("tsv", out, inputs={"train": [bad]}, force=True))
    for name, entry in manifest["outputs"].items():
        assert sha256_file(out / name) == entry["sha256"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.tsv", "out"]


def test_force_replaces_a_prepared_dataset_only(tmp_path: Path, data: Path):
    sample = {"train": [data / "cmudict-sample.dict"]}
    out = tmp_path / "out"
    prepare(PrepareRequest("cmudict", out, inputs=sample))
    prepare(PrepareRequest("cmudict", out, inputs=sample, seed=2, force=True))
    (out / "hyp.txt").write_text("the user's", encoding="utf-8")
    with pytest.raises(ConfigError, match="would delete files that prepare did not write: hyp.txt"):
        prepare(PrepareRequest("cmudict", out, inputs=sample, force=True))
    (out / "hyp.txt").unlink()
    assert sorted(p.name for p in out.iterdir()) == [
        "dev.tsv",
        "manifest.json",
        "test.tsv",
        "train.tsv",
    ]

    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("precious", encoding="utf-8")
    with pytest.raises(ConfigError, match="--force replaces only a prepared dataset directory"):
        prepare(PrepareRequest("cmudict", home, inputs=sample, force=True))
    lexicon = home / "lexicon.dict"
    lexicon.write_text((data / "cmudict-sample.dict").read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(ConfigError, match="an input file is inside the output directory"):
        prepare(PrepareRequest("cmudict", home, inputs={"train": [lexicon]}, force=True))
    assert (home / "thesis.tex").read_text(encoding="utf-8") == "precious" and lexicon.exists()


def test_the_working_directory_is_never_replaced(tmp_path: Path, data: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="contains the working directory"):
        prepare(
            PrepareRequest("cmudict", Path("."), inputs={"train": [data / "cmudict-sample.dict"]})
        )


def test_skip_invalid_counts_in_the_manifest(tmp_path: Path):
    raw = tmp_path / "raw.tsv"
    good = "".join(f"w{i}\tW {i}\n" for i in range(40))
    raw.write_text(good + "bad line\n" + "x\t\n", encoding="utf-8")
    manifest = prepare(
        PrepareRequest("tsv", tmp_path / "out", inputs={"train": [raw]}, skip_invalid=True)
    )
    assert manifest["skipped"]["total"] == 2
    assert sum(manifest["lines"].values()) == 40
    assert json.loads((tmp_path / "out" / "manifest.json").read_text(encoding="utf-8")) == manifest


def test_empty_input_and_bad_requests(tmp_path: Path):
    empty = tmp_path / "empty.tsv"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(DataError, match="no entries in the train data"):
        prepare(PrepareRequest("tsv", tmp_path / "out", inputs={"train": [empty]}))
    with pytest.raises(ConfigError, match="takes 2 files .source, then target. per split"):
        prepare(PrepareRequest("parallel", tmp_path / "out", inputs={"train": [empty]}))
    with pytest.raises(ConfigError, match="needs training data"):
        prepare(PrepareRequest("tsv", tmp_path / "out"))
    with pytest.raises(ConfigError, match="--dev-ratio"):
        prepare(PrepareRequest("cmudict", tmp_path / "out", dev_ratio=1.5))
    assert not (tmp_path / "out").exists()


def test_mixed_labelled_and_unlabelled_test_lines(tmp_path: Path, data: Path):
    test = tmp_path / "test.txt"
    test.write_text("walk\twalked\tV;PST\nrun\tV;PRS\n", encoding="utf-8")
    with pytest.raises(DataError, match="test.txt:2: test data mixes entries with and without"):
        prepare(
            PrepareRequest(
                "sigmorphon",
                tmp_path / "out",
                inputs={"train": [data / "english-train-sample"], "test": [test]},
            )
        )


def test_embedded_cmudict_trains_when_only_a_test_file_is_given(tmp_path: Path, data: Path):
    manifest = prepare(
        PrepareRequest("cmudict", tmp_path / "out", inputs={"test": [data / "words-only.txt"]})
    )
    assert manifest["split"]["carved"] == ["dev"] and manifest["lines"]["test"] == 3
    assert manifest["inputs"][0]["name"].startswith("cmudict-")


def test_every_format_option_is_a_prepare_flag_declared_once(monkeypatch):
    """`prepare`'s format flags come from the formats' Options fields: each option of each
    registered format is a parameter of the command, in its format's panel, with the
    choices declared on the field; a field added to a format becomes a flag with no other
    code (the command is built again here with one more option)."""
    import dataclasses
    import inspect
    import typing

    from transduce.cli import prepare as command
    from transduce.data import formats

    parameters = inspect.signature(command.prepare_command).parameters
    for fmt in formats.FORMATS.values():
        for f in dataclasses.fields(fmt.Options):
            assert f.name in parameters, (fmt.name, f.name)
            assert f.metadata["help"], f.name
    flags = {flag.name: flag for flag in formats.format_flags()}
    assert flags["tag"].choices == ("upos", "xpos") and flags["tag"].panel == "conllu format"
    assert flags["hallucinate"].panel == "Hallucination (tsv, sigmorphon)"

    @dataclasses.dataclass
    class Wider(formats.TsvOptions):
        delimiter: str = formats.option("\t", "Column delimiter.", shown="tab")

    monkeypatch.setattr(formats.Tsv, "Options", Wider)
    added = {flag.name: flag for flag in formats.format_flags()}["delimiter"]
    assert (added.kind, added.panel, added.shown) == (str, "tsv format", "tab")
    parameter = command._parameter(added)
    assert (parameter.name, parameter.default) == ("delimiter", None)
    assert typing.get_args(parameter.annotation)[0] == str | None
