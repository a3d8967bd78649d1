"""Data hallucination (Anastasopoulos & Neubig 2019, §3): the algorithm and `prepare`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from transduce.config import DataConfig
from transduce.data.formats import Example, get_format
from transduce.data.hallucinate import (
    alphabet,
    hallucinate,
    reference_choice,
    replace,
    stretches,
)
from transduce.data.prepare import PrepareRequest, prepare
from transduce.errors import ConfigError, DataError

from .test_cli import one_line_error

TAGS = ("[V]", "[PST]", "<sep>")


def pair(lemma: str, form: str, tags: tuple[str, ...] = TAGS) -> Example:
    return Example((*tags, *lemma), tuple(form), None, 1)


# ----------------------------------------------------------------------------- algorithm


def test_walk_walked_gets_one_random_stem_in_both():
    assert stretches("walk", "walked") == [(0, 0, 4)]
    lemma, form = replace("walk", "walked", stretches("walk", "walked"), iter("XYZW").__next__)
    assert "".join(lemma) == "XYZW" and "".join(form) == "XYZWed"


def test_stretches_of_two_are_kept_and_yield_nothing():
    assert stretches("go", "goes") == []  # "go": only 2 aligned identical characters
    assert stretches("sing", "sang") == []  # s|i/a|ng: 1 and 2
    with pytest.raises(DataError, match="no training pair"):
        hallucinate([pair("go", "goes"), pair("sing", "sang")], 3, seed=1)


def test_two_stretches_are_both_replaced():
    spans = stretches("abcxdef", "abcydefz")
    assert spans == [(0, 0, 3), (4, 4, 3)]
    lemma, form = replace("abcxdef", "abcydefz", spans, iter("123456").__next__)
    assert "".join(lemma) == "123x456" and "".join(form) == "123y456z"


def test_a_space_cuts_a_stretch_and_is_never_drawn():
    lemma = ["a", "b", "<space>", "c", "d", "e"]
    assert stretches(lemma, [*lemma, "s"]) == [(3, 3, 3)]  # "ab" is too short
    example = Example(("<sep>", *lemma), (*lemma, "s"), None, 1)
    assert alphabet([example]) == ["a", "b", "c", "d", "e", "s"]  # sorted, no tags or <space>
    new, _ = hallucinate([example], 20, seed=3)
    for e in new:
        assert e.source[:4] == ("<sep>", "a", "b", "<space>") and e.target[6] == "s"
        assert e.source[1:] == e.target[:6]


def test_tags_are_kept_and_the_same_string_goes_into_lemma_and_form():
    real = [pair("walk", "walked"), pair("go", "went")]  # "go/went" has no stretch
    new, counts = hallucinate(real, 50, seed=7)
    assert len(new) == 50 and counts == {"eligible_pairs": 1, "alphabet_size": 10}  # walkedgont
    for e in new:
        assert e.source[:3] == TAGS and len(e.source) == 7
        assert e.target == (*e.source[3:], "e", "d")
        assert set(e.source[3:]) <= set("walkedgont")
    assert len({e.source for e in new}) > 40  # 10**4 stems: random, not copies


def test_deterministic_for_a_seed_and_different_for_another():
    real = [pair("walk", "walked"), pair("talk", "talked"), pair("jump", "jumping")]
    first, _ = hallucinate(real, 30, seed=5)
    assert first == hallucinate(list(real), 30, seed=5)[0]
    assert first != hallucinate(real, 30, seed=6)[0]
    assert hallucinate(real, 0, seed=5)[0] == []


def test_reference_choice_by_hand():
    coins = iter([0.1, 0.9, 0.2, 0.7, 0.5, 0.49]).__next__
    assert reference_choice(8, coins) == [1, 3, 6]  # offsets 1..6 tossed: below 0.5 replaced
    assert reference_choice(5, iter([0.0, 0.6, 0.6, 0.6, 0.3]).__next__) == [0, 4]  # ends too
    assert reference_choice(6, iter([0.0] * 4).__next__) == [1, 2, 3, 4]  # 6 > 5: ends kept
    assert replace("jumping", "jumped", [(0, 0, 4)], iter("XY").__next__, lambda n: [0, 2]) == (
        tuple("XuYping"),
        tuple("XuYped"),
    )


def changed(new: list[Example], real: Example, start: int = 3) -> list[float]:
    """Per position of the lemma: the fraction of `new` pairs whose symbol differs."""
    lemma = real.source[start:]
    return [sum(e.source[start + k] != lemma[k] for e in new) / len(new) for k in range(len(lemma))]


def test_reference_style_keeps_the_ends_of_a_long_stem_and_replaces_half_the_rest():
    real = [pair("abcdefgh", "abcdefghen")]  # one stretch of 8; alphabet: a-h, n (9)
    paper, _ = hallucinate(real, 600, seed=11)
    reference, counts = hallucinate(real, 600, seed=11, style="reference")
    assert counts == {"eligible_pairs": 1, "alphabet_size": 9}
    for e in reference:  # the same symbols in lemma and form; the ending untouched
        assert e.target == (*e.source[3:], "e", "n")
    by_position = changed(reference, real[0])
    assert by_position[0] == by_position[-1] == 0.0  # the first and last letters kept
    # each inner letter: replaced with probability 0.5, by another letter 8 times in 9 (0.44)
    assert all(0.34 < f < 0.55 for f in by_position[1:-1]), by_position
    assert all(f > 0.8 for f in changed(paper, real[0])), changed(paper, real[0])  # 8/9
    short = [pair("walk", "walked")]  # a stretch of 5 or fewer: its ends are tossed too
    walks, _ = hallucinate(short, 600, seed=2, style="reference")
    assert all(0.3 < f < 0.55 for f in changed(walks, short[0])), changed(walks, short[0])
    again, _ = hallucinate(list(real), 600, seed=11, style="reference")
    assert again == reference != hallucinate(real, 600, seed=12, style="reference")[0]
    with pytest.raises(ValueError, match="not one of paper, reference"):
        hallucinate(real, 5, seed=1, style="half")


# ------------------------------------------------------------------------------- prepare

LEMMAS = ["walk", "talk", "jump", "play", "climb", "paint", "kick", "look", "cook", "laugh"]


def sigmorphon_files(tmp_path: Path) -> dict[str, list[Path]]:
    files = {}
    for split, words in (("train", LEMMAS), ("dev", ["hunt", "yell"]), ("test", ["rest"])):
        path = tmp_path / f"{split}.txt"
        path.write_text("".join(f"{w}\t{w}ed\tV;PST\n" for w in words), encoding="utf-8")
        files[split] = [path]
    return files


def prepared(out: Path, split: str) -> list[str]:
    return (out / f"{split}.tsv").read_text(encoding="utf-8").splitlines()


def test_prepare_adds_n_pairs_to_train_only_and_records_them(tmp_path: Path):
    files = sigmorphon_files(tmp_path)
    plain = prepare(PrepareRequest("sigmorphon", tmp_path / "plain", inputs=files))
    options = {"hallucinate": 25}
    manifest = prepare(
        PrepareRequest("sigmorphon", tmp_path / "hal", inputs=files, options=options)
    )
    assert plain["hallucination"] == {"pairs": 0}
    assert manifest["options"] == {  # the split seed; every character replaced
        "hallucinate": 25,
        "hallucinate_seed": 1,
        "hallucinate_style": "paper",
    }
    record = manifest["hallucination"]
    assert record["pairs"] == 25 and record["real_pairs"] == 10 and record["seed"] == 1
    assert manifest["lines"] == {"train": 35, "dev": 2, "test": 1}
    train = prepared(tmp_path / "hal", "train")
    assert len(train) == 35 and train[:10] == prepared(tmp_path / "plain", "train")
    for line in train[10:]:  # the hallucinated pairs come after the real ones
        source, target = line.split("\t")
        assert source.startswith("[V] [PST] <sep> ") and target == source[16:] + " e d"
    for split in ("dev", "test"):
        assert (tmp_path / "hal" / f"{split}.tsv").read_bytes() == (
            tmp_path / "plain" / f"{split}.tsv"
        ).read_bytes()
    again = prepare(PrepareRequest("sigmorphon", tmp_path / "again", inputs=files, options=options))
    assert prepared(tmp_path / "again", "train") == train  # reproducible from the manifest
    options = {"hallucinate": 25, "hallucinate_seed": 2}
    prepare(PrepareRequest("sigmorphon", tmp_path / "seed2", inputs=files, options=options))
    assert prepared(tmp_path / "seed2", "train") != train and again["options"]["hallucinate"] == 25


def test_prepare_reference_style_reaches_the_pairs_and_the_manifest(tmp_path: Path):
    files = {}
    for split, words in (("train", ["playing", "painting", "laughing"]), ("dev", ["yell"]),
                         ("test", ["rest"])):  # fmt: skip
        path = tmp_path / f"{split}.txt"
        path.write_text("".join(f"{w}\t{w}s\tN;PL\n" for w in words), encoding="utf-8")
        files[split] = [path]
    manifests = {}
    for style in ("paper", "reference"):
        options = {"hallucinate": 300, "hallucinate_style": style}
        request = PrepareRequest("sigmorphon", tmp_path / style, inputs=files, options=options)
        manifests[style] = prepare(request)
    assert manifests["reference"]["options"]["hallucinate_style"] == "reference"
    assert manifests["reference"]["hallucination"]["style"] == "reference"
    assert "probability 0.5" in manifests["reference"]["hallucination"]["method"]
    assert manifests["paper"]["hallucination"]["style"] == "paper"
    ends = {}
    for style in ("paper", "reference"):
        kept = 0
        for line in prepared(tmp_path / style, "train")[3:]:
            source, target = line.split("\t")
            lemma = source.split(" <sep> ")[1].split()
            assert target.split() == [*lemma, "s"]
            kept += (lemma[0], lemma[-1]) in {("p", "g"), ("l", "g")}  # the real stems' ends
        ends[style] = kept
    assert ends["reference"] == 300 and ends["paper"] < 30  # 2 in 121 by chance for paper


def test_prepare_carves_dev_and_test_before_hallucinating(tmp_path: Path):
    files = {"train": sigmorphon_files(tmp_path)["train"]}
    ratios = {"dev_ratio": 0.2, "test_ratio": 0.2}
    plain = prepare(PrepareRequest("sigmorphon", tmp_path / "a", inputs=files, **ratios))
    options = {"hallucinate": 9}
    hal = prepare(
        PrepareRequest("sigmorphon", tmp_path / "b", inputs=files, options=options, **ratios)
    )
    assert hal["lines"]["train"] == plain["lines"]["train"] + 9
    assert hal["lines"]["dev"] == plain["lines"]["dev"] == 2
    for split in ("dev", "test"):
        assert prepared(tmp_path / "a", split) == prepared(tmp_path / "b", split)


def test_prepare_tsv_with_symbol_units(tmp_path: Path):
    path = tmp_path / "words.tsv"
    path.write_text("k a t\tk a t s\nd o g\td o g s\nb i r d\tb i r d s\n", encoding="utf-8")
    request = PrepareRequest(
        "tsv", tmp_path / "out", inputs={"train": [path], "dev": [path], "test": [path]}
    )
    request.options = {"hallucinate": 6, "hallucinate_seed": 4}
    manifest = prepare(request)
    assert manifest["sides"]["source"]["unit"] == "symbol" and manifest["lines"]["train"] == 9
    for line in prepared(tmp_path / "out", "train")[3:]:
        source, target = line.split("\t")
        assert target == source + " s"


def test_tsv_with_different_units_or_no_shared_stretch_is_refused(tmp_path: Path):
    path = tmp_path / "g2p.tsv"
    path.write_text("cat\tK AE T\ndog\tD AO G\n", encoding="utf-8")
    files = {"train": [path], "dev": [path], "test": [path]}
    with pytest.raises(ConfigError, match="same units"):
        prepare(PrepareRequest("tsv", tmp_path / "a", inputs=files, options={"hallucinate": 2}))
    options = {"hallucinate": 2, "target_unit": "char"}
    with pytest.raises(DataError, match="share an alphabet"):
        prepare(PrepareRequest("tsv", tmp_path / "b", inputs=files, options=options))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_formats_without_a_shared_alphabet_refuse():
    for name in ("cmudict", "conllu", "parallel"):
        with pytest.raises(ConfigError, match="works with tsv and sigmorphon"):
            get_format(name, hallucinate=10)
    for bad in (-1, 2.5, "10", True):
        with pytest.raises(ConfigError, match="--hallucinate must be a whole number"):
            get_format("sigmorphon", hallucinate=bad)
    with pytest.raises(ConfigError, match="--hallucinate-seed"):
        get_format("tsv", hallucinate=1, hallucinate_seed="x")
    with pytest.raises(ConfigError, match="--hallucinate-style must be paper or reference"):
        get_format("sigmorphon", hallucinate=1, hallucinate_style="half")


def test_a_recipe_sets_it_in_data_options():
    assert DataConfig(format="sigmorphon", options={"hallucinate": 2000}).check() == []
    (problem,) = DataConfig(format="cmudict", options={"hallucinate": 2000}).check()
    assert problem.startswith("options: --hallucinate: the cmudict format")


def test_cli_hallucinate(run, tmp_path: Path):
    files = sigmorphon_files(tmp_path)
    args = ["--dev", files["dev"][0], "--test", files["test"][0]]
    result = run("prepare", "sigmorphon", files["train"][0], "-o", tmp_path / "o", *args,
                 "--hallucinate", "5", "--hallucinate-seed", "3")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "10 real pairs, then 5 hallucinated" in result.stderr
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["hallucination"]["pairs"] == 5 and manifest["hallucination"]["seed"] == 3
    assert len(prepared(tmp_path / "o", "train")) == 15
    assert manifest["hallucination"]["style"] == "paper"
    result = run("prepare", "sigmorphon", files["train"][0], "-o", tmp_path / "r", *args,
                 "--hallucinate", "5", "--hallucinate-style", "reference")  # fmt: skip
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["hallucination"]["style"] == "reference"
    result = run("prepare", "sigmorphon", files["train"][0], "-o", tmp_path / "h", *args,
                 "--hallucinate", "5", "--hallucinate-style", "half")  # fmt: skip
    assert result.exit_code == 2 and "half" in result.output and not (tmp_path / "h").exists()
    one_line_error(
        run(
            "prepare", "sigmorphon", files["train"][0], "-o", tmp_path / "x", "--hallucinate", "-2"
        ),
        "--hallucinate must be a whole number",
    )
    one_line_error(
        run("prepare", "cmudict", "-o", tmp_path / "y", "--hallucinate", "2"),
        "cmudict",
        "tsv and sigmorphon",
    )
