"""Slow tests on the real datasets (../shared/data or $TRANSDUCE_SHARED_DATA).

    python -m pytest -m slow

Every SIGMORPHON 2017 language, every UD treebank, the Swiss German parallel data and the
G2P lexicons are prepared; `score` is checked against the independent implementations of
`tests/reference.py` to 1e-6, and BLEU against sacrebleu's own API to 1e-9.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
import sacrebleu

from transduce.data.prepare import PrepareRequest, prepare
from transduce.scoring import ScoreRequest, score_request

from .conftest import shared_data
from .reference import scores as reference_scores

pytestmark = pytest.mark.slow

ROOT = shared_data()
SIGMORPHON = ROOT / "sigmorphon2017-task1" if ROOT else None
LANGUAGES = (
    sorted(p.name.removesuffix("-dev") for p in SIGMORPHON.glob("all/*-dev")) if SIGMORPHON else []
)
TREEBANKS = sorted(p.name for p in (ROOT / "ud").glob("UD_*")) if ROOT else []


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


@pytest.mark.parametrize("language", LANGUAGES or ["none"])
def test_prepare_every_sigmorphon_language(shared: Path, tmp_path: Path, language: str):
    root = shared / "sigmorphon2017-task1"
    train = root / "all" / f"{language}-train-high"
    if not train.exists():
        train = root / "all" / f"{language}-train-medium"  # Scottish Gaelic has no high
    dev, gold = root / "all" / f"{language}-dev", root / "answers" / f"{language}-uncovered-test"
    inputs = {"train": [train], "dev": [dev], "test": [gold]}
    manifest = prepare(PrepareRequest("sigmorphon", tmp_path / "gold", inputs=inputs))
    assert manifest["lines"] == {s: len(lines(p[0])) for s, p in inputs.items()}
    assert manifest["test_has_targets"] and manifest["skipped"]["total"] == 0
    covered = {**inputs, "test": [root / "all" / f"{language}-covered-test"]}
    manifest = prepare(PrepareRequest("sigmorphon", tmp_path / "covered", inputs=covered))
    assert not manifest["test_has_targets"]
    # the gold forms score 100% against the prepared test split, read back as text
    forms = [line.split("\t")[1] for line in lines(gold)]
    hyp = tmp_path / "hyp"
    hyp.write_text("\n".join(forms) + "\n", encoding="utf-8")
    report, _, _ = score_request(
        ScoreRequest(
            str(hyp), [str(tmp_path / "gold" / "test.tsv")], ["acc"], ref_col=2, unit="char"
        )
    )
    assert report["scores"]["acc"]["value"] == 100.0


@pytest.mark.parametrize("treebank", TREEBANKS or ["none"])
def test_prepare_every_treebank(shared: Path, tmp_path: Path, treebank: str):
    folder = shared / "ud" / treebank
    files = {
        split: sorted(folder.glob(f"*-ud-{split}.conllu")) for split in ("train", "dev", "test")
    }
    manifest = prepare(PrepareRequest("conllu", tmp_path / "out", inputs=files))
    provenance = (folder / "PROVENANCE.md").read_text(encoding="utf-8")
    for split, paths in files.items():
        sentences = paths[0].read_text(encoding="utf-8").count("\n\n")
        assert manifest["lines"][split] == sentences, (split, provenance[:80])
    rows = lines(tmp_path / "out" / "train.tsv")
    assert all(len(s.split(" ")) == len(t.split(" ")) for s, t in (r.split("\t") for r in rows))


def test_ewt_word_count_matches_the_provenance(shared: Path, tmp_path: Path):
    folder = shared / "ud" / "UD_English-EWT"
    inputs = {"train": [folder / "en_ewt-ud-train.conllu"]}
    prepare(
        PrepareRequest("conllu", tmp_path / "out", inputs=inputs, dev_ratio=0.0, test_ratio=0.01)
    )
    words = sum(
        len(r.split("\t")[0].split(" "))
        for s in ("train", "test")
        for r in lines(tmp_path / "out" / f"{s}.tsv")
    )
    assert words == 204_577  # integer-ID word lines in PROVENANCE.md


def test_prepare_swiss_german(shared: Path, tmp_path: Path):
    pytest.importorskip("subword_nmt")
    folder = shared / "dialect-normalization-gsw"
    inputs = {
        "train": [folder / "train_gsw.tok", folder / "train_de.tok"],
        "dev": [folder / "dev_gsw.tok", folder / "dev_de.tok"],
        "test": [folder / "test_gsw.tok", folder / "test_de1.tok"],
    }
    words = prepare(PrepareRequest("parallel", tmp_path / "words", inputs=inputs))
    assert words["lines"] == {"train": 21183, "dev": 2354, "test": 461}
    bpe = prepare(
        PrepareRequest(
            "parallel", tmp_path / "bpe", inputs=inputs, options={"subwords": "subword-nmt"}
        )
    )
    assert bpe["sides"]["source"]["merges"] == 2000
    codes = lines(tmp_path / "bpe" / "bpe.codes")
    assert len(codes) == 2001  # version header + 2000 merges
    # subwords merge back into the original words
    report, _, _ = score_request(
        ScoreRequest(
            str(folder / "test_de1.tok"), [str(tmp_path / "bpe" / "test.tsv")], ["bleu"], ref_col=2
        )
    )
    assert report["scores"]["bleu"]["value"] == pytest.approx(100.0)


def test_prepare_g2p_lexicons(shared: Path, tmp_path: Path):
    cntk = shared / "g2p-cmudict-cntk-yao-zweig2015"
    manifest = prepare(
        PrepareRequest(
            "cmudict",
            tmp_path / "cntk",
            inputs={
                "train": [cntk / "cmudict-0.7b.train-dev-20-21"],
                "dev": [cntk / "cmudict-0.7b.train-dev-1-21"],
                "test": [cntk / "cmudict-0.7b.test"],
            },
        )
    )
    assert manifest["lines"] == {"train": 108952, "dev": 5447, "test": 12855}  # CRLF files
    pho = shared / "g2p-cmudict-phonetisaurus-g014b2b"
    manifest = prepare(
        PrepareRequest(
            "cmudict",
            tmp_path / "pho",
            inputs={"train": [pho / "g014b2b.train"], "test": [pho / "g014b2b.ref"]},
        )
    )
    assert manifest["lines"]["test"] == 12000 and manifest["overlap"]["train-test"] == 0
    wu = shared / "g2p-wu2018-cmudict-nettalk"
    inputs = {s: [wu / f"CMUDict.{s}"] for s in ("train", "dev", "test")}
    manifest = prepare(PrepareRequest("tsv", tmp_path / "wu", inputs=inputs))
    assert (
        manifest["sides"]["source"]["unit"] == "symbol"
        and manifest["sides"]["target"]["unit"] == "symbol"
    )
    assert manifest["overlap"]["train-test"] == 1133  # the known leak of this split (PROVENANCE.md)
    ours = prepare(
        PrepareRequest("tsv", tmp_path / "ours", inputs={"train": [wu / "CMUDict.train"]})
    )
    assert ours["overlap"] == {"train-dev": 0, "train-test": 0, "dev-test": 0}
    nettalk = prepare(
        PrepareRequest("tsv", tmp_path / "nettalk", inputs={"train": [wu / "NETtalk.train"]})
    )
    assert "#" in nettalk["inventory"]["target"]  # NETtalk's phone '#' is not a comment in TSV


def test_score_agrees_with_independent_computation_on_inflection(shared: Path, tmp_path: Path):
    dev = shared / "sigmorphon2017-task1" / "all" / "english-dev"
    rows = [line.split("\t") for line in lines(dev)]
    hyp, ref = tmp_path / "hyp", tmp_path / "ref"
    hyp.write_text("".join(r[0] + "\n" for r in rows), encoding="utf-8")  # copy the lemma
    ref.write_text("".join(r[1] + "\n" for r in rows), encoding="utf-8")
    names = ["acc", "wer", "per", "lev", "mfs"]
    report, _, _ = score_request(ScoreRequest(str(hyp), [str(ref)], names, unit="char"))
    expected = reference_scores(
        [list(r[0]) for r in rows],
        [[list(r[1])] for r in rows],  # a space is a character
    )
    for name in names:
        assert report["scores"][name]["value"] == pytest.approx(expected[name], abs=1e-6), name
    options = {"mfs": {"lcs": "exact"}, "per": {"average": "word"}}
    request = ScoreRequest(
        str(hyp), [str(ref)], ["mfs", "per"], unit="char", metric_options=options
    )
    exact, _, _ = score_request(request)
    assert exact["scores"]["mfs"]["value"] == pytest.approx(expected["mfs_exact"], abs=1e-6)
    assert exact["scores"]["per"]["value"] == pytest.approx(expected["per_word"], abs=1e-6)


def test_score_agrees_with_independent_computation_on_g2p_with_variants(
    shared: Path, tmp_path: Path
):
    cntk = shared / "g2p-cmudict-cntk-yao-zweig2015" / "cmudict-0.7b.test"
    prons: dict[str, list[str]] = defaultdict(list)
    for line in cntk.read_text(encoding="utf-8").splitlines():
        word, pron = line.strip().split("  ", 1)
        prons[word].append(pron)
    words = sorted(prons)[:3000]
    # hypothesis: the last variant with its first phone dropped for every fourth word
    hyps = [
        " ".join(prons[w][-1].split()[1:] if i % 4 == 0 else prons[w][-1].split())
        for i, w in enumerate(words)
    ]
    hyp, ref = tmp_path / "hyp", tmp_path / "ref"
    hyp.write_text("\n".join(hyps) + "\n", encoding="utf-8")
    ref.write_text("\n".join("|".join(prons[w]) for w in words) + "\n", encoding="utf-8")
    names = ["acc", "wer", "per", "lev", "mfs"]
    report, loaded, _ = score_request(ScoreRequest(str(hyp), [str(ref)], names, ref_sep="|"))
    assert loaded.corpus.nrefs == "var" and loaded.corpus.unit == "symbol"
    expected = reference_scores(
        [h.split() for h in hyps], [[p.split() for p in prons[w]] for w in words]
    )
    for name in names:
        assert report["scores"][name]["value"] == pytest.approx(expected[name], abs=1e-6), name


def test_bleu_agrees_with_sacrebleu_on_swiss_german(shared: Path, tmp_path: Path):
    folder = shared / "dialect-normalization-gsw"
    hyps, refs = lines(folder / "dev_gsw.tok"), lines(folder / "dev_de.tok")
    report, _, _ = score_request(
        ScoreRequest(str(folder / "dev_gsw.tok"), [str(folder / "dev_de.tok")], ["bleu"])
    )
    expected = sacrebleu.corpus_bleu([h.strip() for h in hyps], [[r.strip() for r in refs]])
    assert report["scores"]["bleu"]["value"] == pytest.approx(expected.score, abs=1e-9)


def test_cli_report_on_transliteration(shared: Path, tmp_path: Path, run):
    data = shared / "transliteration" / "wikidata-ne-merhav-ash2018" / "wd_russian_16"
    rows = [line.split("\t") for line in lines(data)][:2000]
    hyp, ref = tmp_path / "hyp", tmp_path / "ref"
    hyp.write_text("".join(r[1].replace(" ", "")[::-1] + "\n" for r in rows), encoding="utf-8")
    ref.write_text("".join(r[1].replace(" ", "") + "\n" for r in rows), encoding="utf-8")
    result = run("score", hyp, ref, "-m", "acc", "-m", "mfs", "--unit", "char", "--json")
    report = json.loads(result.stdout)
    expected = reference_scores(
        [list(r[1].replace(" ", "")[::-1]) for r in rows],
        [[list(r[1].replace(" ", ""))] for r in rows],
    )
    assert report["scores"]["mfs"]["value"] == pytest.approx(expected["mfs"], abs=1e-6)
    assert report["scores"]["acc"]["value"] == pytest.approx(expected["acc"], abs=1e-6)
