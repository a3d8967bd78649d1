"""`transduce score` against the official shared-task scorers' definitions (`official.py`).

The default tests use a small set of forms with spaces written here; the slow ones
(`-m slow`) use the real data in ../shared/data: every SIGMORPHON 2017 language (Finnish:
323 of its 1,000 dev forms contain a space), the SIGMORPHON 2020 G2P dev sets and the
Wikidata transliteration pairs, with hypotheses perturbed by a seeded generator (spaces
dropped, added and substituted among the edits). Agreement is to 1e-9.
"""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

import pytest

from transduce.scoring import ScoreRequest, score_request

from . import official
from .conftest import shared_data

ROOT = shared_data()
LANGUAGES = (
    sorted(p.name.removesuffix("-dev") for p in (ROOT / "sigmorphon2017-task1").glob("all/*-dev"))
    if ROOT
    else []
)
G2P_DEV = sorted((ROOT / "sigmorphon2020-task1-g2p" / "dev").glob("*.tsv")) if ROOT else []

FORMS = [  # lemma, form, tag: multiword forms as in SIGMORPHON 2017 Finnish and German
    ("aa machen", "Aa gemacht", "V.PTCP;PST"),
    ("olla", "ei ole ollut", "V;IND;PRS;PRF;NEG;3;SG"),
    ("kirja", "kirjojen", "N;GEN;PL"),
    ("haluta", "ei olisi haluttu", "V;COND;PST;PASS;NEG"),
    ("talo", "taloissa", "N;IN+ESS;PL"),
    ("mennä", "en mene", "V;IND;PRS;NEG;1;SG"),
]
GUESSES = ["Aagemacht", "ei ole ollut", "kirjojen ", "ei olisihaluttu", "talossa", "en  mene"]


def perturb(text: str, rng: random.Random, symbols: bool = False) -> str:
    """Copy `text` or make one to three edits to it, spaces included among the units.

    With `symbols`, the units are its whitespace-separated symbols.
    """
    units: list[str] = text.split() if symbols else list(text)
    if rng.random() < 0.4:
        return text
    pool = sorted(set(units)) + ([] if symbols else [" "])
    for _ in range(rng.randint(1, 3)):
        where = rng.randint(0, len(units))
        kind = rng.choice(["delete", "insert", "substitute", "space"])
        if kind == "space" and not symbols:
            units = (
                [u for u in units if u != " "]
                if " " in units
                else [*units[:where], " ", *units[where:]]
            )
        elif kind == "delete" and units:
            del units[min(where, len(units) - 1)]
        elif kind == "substitute" and units:
            units[min(where, len(units) - 1)] = rng.choice(pool)
        else:
            units.insert(where, rng.choice(pool))
    return " ".join(units) if symbols else "".join(units)


def ours(hyp: Path, ref: Path, names: list[str], **options) -> dict[str, float]:
    report, _, _ = score_request(ScoreRequest(str(hyp), [str(ref)], names, **options))
    return {name: report["scores"][name]["value"] for name in names}


def check_evalm(rows: list[tuple[str, str, str]], guesses: list[str], tmp_path: Path) -> None:
    gold_lines = ["\t".join(row) for row in rows]
    guess_lines = [f"{lemma}\t{guess}\t{tag}" for (lemma, _, tag), guess in zip(rows, guesses)]
    gold, guess = tmp_path / "gold.tsv", tmp_path / "guess.tsv"
    gold.write_text("".join(line + "\n" for line in gold_lines), encoding="utf-8")
    guess.write_text("".join(line + "\n" for line in guess_lines), encoding="utf-8")
    accuracy, distance = official.evalm_eval_form(
        official.evalm_read(gold_lines), official.evalm_read(guess_lines)
    )
    got = ours(guess, gold, ["acc", "lev"], unit="char", hyp_col=2, ref_col=2)
    assert got["acc"] == pytest.approx(accuracy, abs=1e-9)
    assert got["lev"] == pytest.approx(distance, abs=1e-9)


def check_news(candidates: list[str], references: list[list[str]], tmp_path: Path) -> None:
    """The NEWS script upper-cases and strips names; ours scores the files as they are, so
    it is given them read as the script reads them (`official.news_name`)."""
    hyp, ref = tmp_path / "hyp", tmp_path / "ref"
    hyp.write_text("".join(official.news_name(c) + "\n" for c in candidates), encoding="utf-8")
    ref.write_text(
        "".join("|".join(official.news_name(r) for r in refs) + "\n" for refs in references),
        encoding="utf-8",
    )
    expected = official.news_scores(candidates, references)
    got = ours(
        hyp, ref, ["acc", "mfs"], unit="char", ref_sep="|", metric_options={"mfs": {"lcs": "exact"}}
    )
    assert got["acc"] == pytest.approx(100 * expected["acc"], abs=1e-9)
    assert got["mfs"] == pytest.approx(100 * expected["mfs"], abs=1e-9)


def check_sigmorphon2021(pairs_text: list[tuple[str, str]], tmp_path: Path) -> None:
    lines = [f"{gold}\t{hypo}\n" for gold, hypo in pairs_text]
    pairs = official.tsv_pairs(lines)
    hyp, ref = tmp_path / "hyp", tmp_path / "ref"
    hyp.write_text("".join(hypo + "\n" for _, hypo in pairs_text), encoding="utf-8")
    ref.write_text("".join(gold + "\n" for gold, _ in pairs_text), encoding="utf-8")
    got = ours(hyp, ref, ["wer", "per"], unit="symbol")
    assert got["wer"] == pytest.approx(official.sigmorphon2021_wer(pairs), abs=1e-9)
    assert got["per"] == pytest.approx(official.sigmorphon2020_ler(pairs), abs=1e-9)


def test_multiword_forms_score_as_evalm_scores_them(tmp_path: Path):
    check_evalm(FORMS, GUESSES, tmp_path)
    got = ours(
        tmp_path / "guess.tsv",
        tmp_path / "gold.tsv",
        ["acc", "lev"],
        unit="char",
        hyp_col=2,
        ref_col=2,
    )
    assert got == {"acc": pytest.approx(100 / 6), "lev": pytest.approx(5 / 6)}  # 1+0+1+1+1+1
    nospace = ours(
        tmp_path / "guess.tsv",
        tmp_path / "gold.tsv",
        ["acc"],
        unit="char-nospace",
        hyp_col=2,
        ref_col=2,
    )
    assert nospace["acc"] == pytest.approx(500 / 6)  # four differed only in their spaces


def test_news_f_score_with_spaces_and_several_references(tmp_path: Path):
    candidates = ["Aa gemacht", "ei ole", '"kirjojen"', "x"]
    references = [["Aagemacht", "aa gemacht"], ["ei  ole", "eiole"], ["kirjojen"], ["y"]]
    check_news(candidates, references, tmp_path)
    # by hand, upper-cased and stripped: "AA GEMACHT" is its second reference (F 1);
    # "EI OLE" ties on len(ref) - 2 LCS (7 - 12 = 5 - 10): the first, "EI  OLE", is kept,
    # P = 6/6, R = 6/7; '"kirjojen"' loses its quotes (F 1); "X" vs "Y" has no LCS (F 0)
    expected = official.news_scores(candidates, references)
    assert expected["mfs"] == pytest.approx((1 + 12 / 13 + 1 + 0) / 4)
    assert expected["acc"] == pytest.approx(2 / 4)


def test_sigmorphon2021_wer_and_2020_ler(tmp_path: Path):
    pairs = [("k æ t", "k æ t"), ("d ɔ ɡ", "d ɑ ɡ"), ("ʃ ɪ p", "ʃ ɪp"), ("b ɪ ɡ", "b ɪ ɡ  ")]
    check_sigmorphon2021(pairs, tmp_path)
    assert official.sigmorphon2021_wer(official.tsv_pairs(f"{g}\t{h}\n" for g, h in pairs)) == 50.0


def test_the_2020_scorer_undercounts_leading_edits():
    """Why our PER is the Levenshtein-based LER and not the 2020 script's number: its
    table starts at 1 on the first row and column (see `official.py`)."""
    assert official.evallib2020_edit_distance(list("aab"), list("b")) == 1
    assert official.levenshtein(list("aab"), list("b")) == 2
    assert official.evallib2020_edit_distance(list("kat"), list("kæt")) == 1  # agrees elsewhere


# ----------------------------------------------------------------- real data (slow)


@pytest.mark.slow
@pytest.mark.parametrize("language", LANGUAGES or ["none"])
def test_sigmorphon2017_every_language_as_evalm(shared: Path, tmp_path: Path, language: str):
    root = shared / "sigmorphon2017-task1"
    rng = random.Random(f"evalm-{language}")
    for split in (
        root / "all" / f"{language}-dev",
        root / "answers" / f"{language}-uncovered-test",
    ):
        rows = [tuple(line.split("\t")) for line in split.read_text(encoding="utf-8").splitlines()]
        guesses = [perturb(form, rng) for _, form, _ in rows]
        check_evalm(rows, guesses, tmp_path)  # type: ignore[arg-type]


@pytest.mark.slow
def test_finnish_scores_differ_with_and_without_spaces(shared: Path, tmp_path: Path):
    """The case of the issue: Finnish multiword forms, where dropping whitespace changed
    the accuracy; `char` now gives evalm's number and `char-nospace` the old one."""
    dev = shared / "sigmorphon2017-task1" / "all" / "finnish-dev"
    rows = [tuple(line.split("\t")) for line in dev.read_text(encoding="utf-8").splitlines()]
    assert sum(" " in form for _, form, _ in rows) == 323
    rng = random.Random("finnish")
    guesses = [perturb(form, rng) for _, form, _ in rows]
    check_evalm(rows, guesses, tmp_path)  # type: ignore[arg-type]
    args = (tmp_path / "guess.tsv", tmp_path / "gold.tsv", ["acc"])
    with_space = ours(*args, unit="char", hyp_col=2, ref_col=2)["acc"]
    without = ours(*args, unit="char-nospace", hyp_col=2, ref_col=2)["acc"]
    assert without > with_space  # forms that differ only in their spaces count as right


@pytest.mark.slow
@pytest.mark.parametrize("path", G2P_DEV or ["none"], ids=lambda p: getattr(p, "stem", p))
def test_sigmorphon2020_g2p_as_the_2021_and_2020_scorers(shared: Path, tmp_path: Path, path):
    rng = random.Random(f"g2p-{path.stem}")
    rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()]
    check_sigmorphon2021([(pron, perturb(pron, rng, symbols=True)) for _, pron in rows], tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("language", ["arabic", "hebrew", "katakana", "russian"])
def test_transliteration_as_the_news_script(shared: Path, tmp_path: Path, language: str):
    data = shared / "transliteration" / "wikidata-ne-merhav-ash2018" / f"wd_{language}_16"
    targets: dict[str, list[str]] = defaultdict(list)
    for line in data.read_text(encoding="utf-8").splitlines():
        source, target, _ = line.split("\t")
        targets[source].append(target.replace(" ", ""))
    sources = sorted(targets)[:3000]
    # each source has one target here: every third name gets the target of the next
    # source in alphabetical order as a second reference (a real, often close, spelling)
    references = [
        targets[s] + (targets[sources[i + 1]] if i % 3 == 0 and i + 1 < len(sources) else [])
        for i, s in enumerate(sources)
    ]
    rng = random.Random(f"news-{language}")
    candidates = [perturb(refs[-1], rng) for refs in references]  # spaces inserted among edits
    check_news(candidates, references, tmp_path)
