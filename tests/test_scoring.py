"""Scoring files: columns, alternatives, several reference files, prepared splits; the
flags and data files that the metrics declare."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest
import typer

from transduce.cli import app
from transduce.data.prepare import PrepareRequest, prepare
from transduce.errors import ConfigError, DataError
from transduce.metrics import METRICS, Metric, Option
from transduce.metrics.base import DataFile
from transduce.scoring import ScoreRequest, flag_values, metric_flags, per_item_rows, score_request

from .conftest import transduce_env


def write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def prepare_sample(out: Path, data: Path) -> Path:
    """The English SIGMORPHON sample, 20% test; returns the test split."""
    inputs = {"train": [data / "english-train-sample"]}
    prepare(PrepareRequest("sigmorphon", out, inputs=inputs, dev_ratio=0.2, test_ratio=0.2))
    return out / "test.tsv"


def value(report: dict, metric: str) -> float:
    return report["scores"][metric]["value"]


def test_alternatives_from_separator_and_from_several_files(tmp_path: Path):
    hyp = write(tmp_path / "hyp", "T AH M EY T OW\nR IY D\n")
    one = write(tmp_path / "one", "T AH M AA T OW|T AH M EY T OW\nR EH D\n")
    report, loaded, _ = score_request(ScoreRequest(hyp, [one], ["acc"], ref_sep="|"))
    assert value(report, "acc") == 50.0 and loaded.corpus.nrefs == "var"
    a = write(tmp_path / "a", "T AH M AA T OW\nR EH D\n")
    b = write(tmp_path / "b", "T AH M EY T OW\nR IY D\n")
    report, loaded, _ = score_request(ScoreRequest(hyp, [a, b], ["acc", "per"]))
    assert value(report, "acc") == 100.0 and loaded.corpus.nrefs == "2"


def test_hypothesis_and_reference_columns(tmp_path: Path):
    hyp = write(tmp_path / "nbest.tsv", "K AE T\t-0.1\nD AO G\t-0.5\n")
    ref = write(tmp_path / "ref.tsv", "c a t\tK AE T\nd o g\tD AA G\n")
    report, _, _ = score_request(ScoreRequest(hyp, [ref], ["wer"], hyp_col=1, ref_col=2))
    assert value(report, "wer") == 50.0


def test_prepared_character_targets_are_joined_back(tmp_path: Path, data: Path):
    test = prepare_sample(tmp_path / "p", data)
    forms = [
        line.split("\t")[1].replace(" ", "")
        for line in test.read_text(encoding="utf-8").splitlines()
    ]
    hyp = write(tmp_path / "hyp", "\n".join(forms) + "\n")  # what decode prints: "walked"
    report, loaded, _ = score_request(ScoreRequest(hyp, [str(test)], ["acc", "lev"], ref_col=2))
    assert loaded.corpus.unit == "char" and value(report, "acc") == 100.0


def test_prepared_escapes_become_spaces_again(tmp_path: Path):
    train = write(tmp_path / "train", "".join(f"l{i}\tf{i}\tV;PST\n" for i in range(30)))
    test = write(tmp_path / "test", "Aa machen\tAa gemacht\tV.PTCP;PST\n")
    prepare(
        PrepareRequest(
            "sigmorphon", tmp_path / "p", inputs={"train": [train], "dev": [test], "test": [test]}
        )
    )
    hyp = write(tmp_path / "hyp", "Aa gemacht\n")
    ref = str(tmp_path / "p" / "test.tsv")
    report, loaded, _ = score_request(ScoreRequest(hyp, [ref], ["acc", "bleu"], ref_col=2))
    assert loaded.corpus.ref_texts == [["Aa gemacht"]] and value(report, "acc") == 100.0


def test_prepared_subwords_are_merged_back(tmp_path: Path, data: Path):
    pytest.importorskip("subword_nmt")
    out = tmp_path / "p"
    inputs = {"train": [data / "gsw_sample.txt", data / "de_sample.txt"]}
    options = {"subwords": "subword-nmt", "bpe_merges": 10}
    prepare(
        PrepareRequest(
            "parallel", out, inputs=inputs, options=options, dev_ratio=0.15, test_ratio=0.15
        )
    )
    test = out / "test.tsv"
    assert "@@" in test.read_text(encoding="utf-8")
    words = {
        line.strip() for line in (data / "de_sample.txt").read_text(encoding="utf-8").splitlines()
    }
    report, loaded, _ = score_request(
        ScoreRequest(str(test), [str(test)], ["bleu"], hyp_col=2, ref_col=2)
    )
    assert all(r[0] in words for r in loaded.corpus.ref_texts)
    assert loaded.corpus.unit == "symbol" and value(report, "bleu") == pytest.approx(100.0)


def test_an_edited_prepared_file_is_read_as_plain_tsv(tmp_path: Path, data: Path):
    test = prepare_sample(tmp_path / "p", data)
    with open(test, "a", encoding="utf-8") as handle:
        handle.write("[V] <sep> x\tx\n")
    lines = len(test.read_text(encoding="utf-8").splitlines())
    hyp = write(tmp_path / "hyp", "x\n" * lines)
    _, loaded, _ = score_request(ScoreRequest(hyp, [str(test)], ["acc"], ref_col=2))
    assert (
        " " in loaded.corpus.ref_texts[0][0]
    )  # not joined: the hash no longer matches the manifest


def test_per_item_rows_line_up(tmp_path: Path):
    hyp = write(tmp_path / "hyp", "K AE T\n\n")
    ref = write(tmp_path / "ref", "K AA T\nD AO G\n")
    _, loaded, metrics = score_request(ScoreRequest(hyp, [ref], ["per", "mfs"]))
    rows = per_item_rows(loaded, metrics)
    header = rows[0]
    assert len(rows) == 3 and all(len(r) == len(header) for r in rows)
    first = dict(zip(header, rows[1]))
    assert first["edits"] == "1" and first["lcs"] == "2.5" and first["f"] == "0.833333"
    assert dict(zip(header, rows[2]))["precision"] == "0"


def test_request_errors(tmp_path: Path):
    hyp = write(tmp_path / "hyp", "a\n")
    with pytest.raises(ConfigError, match="standard input"):
        score_request(ScoreRequest("-", ["-"]))
    with pytest.raises(ConfigError, match="unknown metric"):
        score_request(ScoreRequest(hyp, [hyp], ["f1"]))
    with pytest.raises(ConfigError, match="--ref-sep must not be empty"):
        score_request(ScoreRequest(hyp, [hyp], ref_sep=""))
    empty = write(tmp_path / "empty", "")
    with pytest.raises(DataError, match="nothing to score"):
        score_request(ScoreRequest(empty, [empty]))
    with pytest.raises(DataError, match="ref:1: empty reference"):
        score_request(ScoreRequest(hyp, [write(tmp_path / "ref", "a||b\n")], ref_sep="|"))


def test_merge_variants_scores_each_source_once(tmp_path: Path):
    ref = write(tmp_path / "ref.tsv", "r e a d\tR EH D\nr e a d\tR IY D\nc a t\tK AE T\n")
    hyp = write(tmp_path / "hyp", "R IY D\nR IY D\nK AA T\n")  # decode repeats a source's answer
    report, loaded, _ = score_request(ScoreRequest(hyp, [ref], ["acc"], ref_col=2))
    assert value(report, "acc") == pytest.approx(100 / 3)  # line by line: "read" is half wrong
    assert not any("--merge-variants" in w for w in report["warnings"])  # not a prepared split
    report, loaded, _ = score_request(
        ScoreRequest(hyp, [ref], ["acc"], ref_col=2, merge_variants=True)
    )
    assert value(report, "acc") == 50.0 and loaded.lines == [1, 3]
    assert loaded.corpus.ref_texts[0] == ["R EH D", "R IY D"] and not report["warnings"]
    assert report["notes"] == ["merged 3 lines into 2 sources"]
    odd = write(tmp_path / "odd", "R IY D\nR EH D\nK AA T\n")
    report, _, _ = score_request(ScoreRequest(odd, [ref], ["acc"], ref_col=2, merge_variants=True))
    assert "1 source with variants got different hypotheses" in report["notes"][1]
    assert report["input_lines"] == 3 and report["lines"] == 2
    with pytest.raises(ConfigError, match="--merge-variants reads the sources"):
        score_request(ScoreRequest(hyp, [ref], merge_variants=True))
    with pytest.raises(ConfigError, match="--source-col goes with --merge-variants"):
        score_request(ScoreRequest(hyp, [ref], ref_col=2, source_col=3))


def test_a_prepared_split_with_variants_is_merged_by_default(tmp_path: Path, data: Path):
    inputs = {"train": [data / "cmudict-sample.dict"], "test": [data / "cmudict-07b-style.dict"]}
    prepare(PrepareRequest("cmudict", tmp_path / "p", inputs=inputs, dev_ratio=0.2))
    test = tmp_path / "p" / "test.tsv"
    rows = [line.split("\t") for line in test.read_text(encoding="utf-8").splitlines()]
    sources = [source for source, _ in rows]
    assert len(set(sources)) < len(sources)  # the test file has variants
    # what decode prints: one answer per source, on each of its lines (the first variant)
    first = {}
    for source, target in rows:
        first.setdefault(source, target)
    hyp = write(tmp_path / "hyp", "".join(first[s] + "\n" for s in sources))
    report, loaded, _ = score_request(ScoreRequest(hyp, [str(test)], ["wer"], ref_col=2))
    assert value(report, "wer") == 0.0 and report["options"]["merge_variants"] is True
    assert report["lines"] == len(set(sources)) and loaded.merged
    assert "--no-merge-variants scores every line" in report["notes"][0]
    report, _, _ = score_request(
        ScoreRequest(hyp, [str(test)], ["wer"], ref_col=2, merge_variants=False)
    )
    assert report["lines"] == len(sources) and report["options"]["merge_variants"] is False
    assert value(report, "wer") > 0  # each second variant now counts as an error
    # a TSV that is not a prepared split is scored line by line unless asked
    plain = write(tmp_path / "plain.tsv", test.read_text(encoding="utf-8"))
    report, _, _ = score_request(ScoreRequest(hyp, [plain], ["wer"], ref_col=2))
    assert report["lines"] == len(sources) and not report["options"]["merge_variants"]


def test_a_tagging_split_is_not_merged_by_default(tmp_path: Path, data: Path):
    """A tagger's test set counts each sentence, repeated ones too (as training scores it)."""
    sentence = "1\tHi\thi\tINTJ\t_\t_\t0\troot\t_\t_\n2\t.\t.\tPUNCT\t_\t_\t1\tpunct\t_\t_\n"
    test = tmp_path / "test.conllu"
    test.write_text((sentence + "\n") * 3, encoding="utf-8")
    inputs = {"train": [data / "ewt_sample.conllu"], "test": [test]}
    prepare(PrepareRequest("conllu", tmp_path / "p", inputs=inputs, dev_ratio=0.2))
    split = tmp_path / "p" / "test.tsv"
    hyp = write(tmp_path / "hyp", "INTJ PUNCT\nINTJ PUNCT\nNOUN PUNCT\n")
    report, _, _ = score_request(ScoreRequest(hyp, [str(split)], ["tagacc"], ref_col=2))
    assert report["lines"] == 3 and report["options"]["merge_variants"] is False
    assert value(report, "tagacc") == pytest.approx(500 / 6)


def test_merge_variants_with_references_on_stdin(tmp_path: Path, monkeypatch):
    import io
    import sys

    ref = "r e a d\tR EH D\nr e a d\tR IY D\nc a t\tK AE T\n"
    hyp = write(tmp_path / "hyp", "R IY D\nR IY D\nK AE T\n")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(ref.encode())))
    report, _, _ = score_request(ScoreRequest(hyp, ["-"], ["acc"], ref_col=2, merge_variants=True))
    assert value(report, "acc") == 100.0 and report["lines"] == 2


def test_tab_as_reference_separator_is_not_a_misread(tmp_path: Path):
    hyp = write(tmp_path / "hyp", "a\nb\n")
    ref = write(tmp_path / "ref", "a\tx\ny\tb\n")
    report, _, _ = score_request(ScoreRequest(hyp, [ref], ["acc"], ref_sep="\t"))
    assert value(report, "acc") == 100.0 and not report["warnings"]
    report, _, _ = score_request(ScoreRequest(hyp, [ref], ["acc"]))
    assert "did you mean --ref-col N?" in report["warnings"][0]


# ------------------------------------------------- what a metric declares drives `score`


class Known(Metric):
    """% of hypothesis symbols that a lexicon file knows: a metric that only these tests
    register, to show that an option and a data file need nothing but their declaration."""

    name = "known"
    title = "known symbols"
    higher_is_better = True
    definition = "scale * known symbols / symbols"
    options: ClassVar[dict[str, Option]] = {"scale": Option(100, (1, 100), "1 or 100", int)}
    data_files: ClassVar[dict[str, DataFile]] = {
        "lexicon": DataFile("words<TAB>tags whose words are known", reads="tagged")
    }

    def __init__(self, unit: str = "auto", words: frozenset[str] = frozenset(), **options):
        super().__init__(unit, **options)
        self.words = words

    @classmethod
    def create(cls, unit, options, files):
        lexicon = files.get("lexicon")
        words = frozenset(w for ws, _ in lexicon.content for w in ws) if lexicon else frozenset()
        return [cls(unit, words, **options)]

    def item_stats(self, corpus):
        known = [float(sum(s in self.words for s in hyp)) for hyp in corpus.hyps]
        return [known, [float(len(hyp)) for hyp in corpus.hyps]]

    def aggregate(self, sums, n):
        return self.values["scale"] * sums[0] / sums[1]


def test_score_flags_are_the_declared_options_and_files():
    flags = {flag.flag: flag for flag in metric_flags()}
    assert {"--train", "--per-average", "--mfs-lcs", "--bleu-option"} <= set(flags)
    assert "--per-ties" not in flags and "--tagacc-subset" not in flags  # cli=False
    assert flags["--train"].file and flags["--bleu-option"].pairs
    assert flags["--mfs-lcs"].option is METRICS["mfs"].options["lcs"]
    command = typer.main.get_command(app).commands["score"]
    offered = {name for param in command.params for name in param.opts}
    assert set(flags) <= offered


def test_a_declared_option_and_file_need_no_other_code(tmp_path: Path, monkeypatch):
    monkeypatch.setitem(METRICS, "known", Known)
    hyp = write(tmp_path / "hyp", "a b\nc d\n")
    lexicon = write(tmp_path / "lexicon.tsv", "a c\tX Y\n")
    options, files = flag_values(["known"], {"known_scale": "1", "lexicon": lexicon})
    assert options == {"known": {"scale": 1}} and files == {"lexicon": lexicon}
    request = ScoreRequest(hyp, [hyp], ["known"], metric_options=options, data_files=files)
    report, _, _ = score_request(request)
    assert value(report, "known") == 0.5
    assert report["options"]["lexicon"] == lexicon and report["options"]["train"] is None
    with pytest.raises(ConfigError, match="--known-scale applies to --metric known"):
        flag_values(["wer"], {"known_scale": "1"})
    with pytest.raises(ConfigError, match="--lexicon applies to --metric known, which is not"):
        score_request(ScoreRequest(hyp, [hyp], ["wer"], data_files=files))
    with pytest.raises(ConfigError, match="--nope: no metric reads such a file"):
        score_request(ScoreRequest(hyp, [hyp], ["wer"], data_files={"nope": lexicon}))


def test_metrics_read_no_files():
    code = (
        "import sys, transduce.metrics; "
        "print(sorted(m for m in sys.modules if m.startswith('transduce.')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=transduce_env()
    )
    loaded = set(ast.literal_eval(result.stdout))
    assert loaded, result.stderr
    assert not loaded & {"transduce.io", "transduce.lines", "transduce.scoring"}
    assert "transduce.data.formats" not in loaded
