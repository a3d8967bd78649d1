"""The metric module against values computed by hand and by brute force."""

from __future__ import annotations

import pytest
import sacrebleu
from hypothesis import given, settings
from hypothesis import strategies as st

from transduce.errors import ConfigError, DataError
from transduce.metrics import Corpus, get_metric, lcs_length

from .reference import lcs_dp, levenshtein


def score(name: str, hyps, refs, **options) -> float:
    return get_metric(name, **options).corpus_score(hyps, refs).value


# Four lines, computed by hand (symbols):
#   hyp        refs                     closest  ED |c| |r| LCS=(c+r-ED)/2  F=2LCS/(c+r)
#   K AE T     K AE T                   0        0  3   3   3              1
#   K AA T     K AE T                   0        1  3   3   2.5            5/6
#   (empty)    D AO G Z                 0        4  0   4   0              0
#   D AO G Z   D AA G | D AO G          1        1  4   3   3              6/7
HYPS = ["K AE T", "K AA T", "", "D AO G Z"]
REFS = [["K AE T"], ["K AE T"], ["D AO G Z"], ["D AA G", "D AO G"]]
HAND = {
    "acc": 25.0,
    "wer": 75.0,
    "per": 100 * 6 / 13,  # (0 + 1 + 4 + 1) / (3 + 3 + 4 + 3)
    "lev": 6 / 4,
    "mfs": 100 * (1 + 5 / 6 + 0 + 6 / 7) / 4,
}


@pytest.mark.parametrize(("name", "expected"), HAND.items())
def test_hand_computed_table(name, expected):
    assert score(name, HYPS, REFS, unit="symbol") == pytest.approx(expected, abs=1e-9)


def test_per_word_average_is_the_mean_of_line_ratios():
    # (0/3 + 1/3 + 4/4 + 1/3) / 4, as Wu et al. (2018) average it
    assert score("per", HYPS, REFS, unit="symbol", average="word") == pytest.approx(
        100 * (0 + 1 / 3 + 1 + 1 / 3) / 4
    )


def test_closest_reference_ties_go_to_the_first():
    # "A B" is 1 edit from both references; the first (length 1) is the one used for PER.
    assert score("per", ["A B"], [["A", "A B C"]], unit="symbol") == pytest.approx(100.0)
    assert score("per", ["A B"], [["A B C", "A"]], unit="symbol") == pytest.approx(100 / 3)
    corpus = Corpus(["A B"], [["A C", "A D"]], "symbol")
    assert corpus.edit.best == [0]


def test_empty_hypothesis_is_wrong_not_an_error():
    assert score("acc", [""], [["a"]], unit="char") == 0.0
    assert score("mfs", [""], [["abc"]], unit="char") == 0.0  # LCS = 0: F = 0, no division
    assert score("per", [""], [["abc"]], unit="char") == 100.0


def test_devanagari_characters_are_code_points():
    # नमस्ते = न म स ् त े (6 code points); नमस्कार = न म स ् क ा र (7).
    # ED = 3 (त->क, े->ा, +र); LCS by A.1 = (6 + 7 - 3) / 2 = 5, F = 10/13;
    # the true LCS is न म स ् = 4, F = 8/13.
    hyp, ref = ["नमस्ते"], [["नमस्कार"]]
    assert score("lev", hyp, ref, unit="char") == 3
    assert score("mfs", hyp, ref, unit="char") == pytest.approx(100 * 10 / 13)
    assert score("mfs", hyp, ref, unit="char", lcs="exact") == pytest.approx(100 * 8 / 13)
    assert score("acc", ["नमस्ते"], [["नमस्कार", "नमस्ते"]], unit="char") == 100.0


def test_hangul_syllables():
    # 안녕 vs 안녕하세요: ED 3, LCS (2 + 5 - 3) / 2 = 2 (also the true LCS), F = 4/7
    assert score("lev", ["안녕"], [["안녕하세요"]], unit="char") == 3
    assert score("mfs", ["안녕"], [["안녕하세요"]], unit="char") == pytest.approx(100 * 4 / 7)
    assert score("per", ["안녕"], [["안녕하세요"]], unit="char") == pytest.approx(60.0)


def test_char_unit_counts_a_space_and_symbol_unit_splits_on_it():
    assert score("acc", ["w a l k e d"], [["walked"]], unit="char-nospace") == 100.0
    assert score("acc", ["w a l k e d"], [["walked"]], unit="char") == 0.0
    assert score("acc", ["w a l k e d"], [["walked"]], unit="symbol") == 0.0
    # "Aagemacht" for "Aa gemacht": one deletion of the space (SIGMORPHON 2017 evalm.py)
    assert score("lev", ["Aagemacht"], [["Aa gemacht"]], unit="char") == 1
    assert score("acc", ["Aagemacht"], [["Aa gemacht"]], unit="char") == 0.0
    assert score("per", ["Aagemacht"], [["Aa gemacht"]], unit="char") == pytest.approx(10.0)
    assert score("lev", ["Aagemacht"], [["Aa gemacht"]], unit="char-nospace") == 0
    assert score("acc", ["a\u00a0b"], [["a b"]], unit="char") == 0.0  # another space
    assert score("acc", ["a\u00a0b"], [["a b"]], unit="char-nospace") == 100.0


def test_auto_unit_follows_the_references():
    assert Corpus(["K AE T"], ["K AE T"]).unit == "symbol"
    assert Corpus(["walked"], ["walked"]).unit == "char"
    # one multiword reference among many single words stays char
    assert Corpus(["a", "b", "c"], ["walked", "Aa gemacht", "ran"]).unit == "char"


def test_mfs_follows_appendix_a1_literally():
    # P = LCS/|c|, R = LCS/|r|, F = 2PR/(P+R): the closed form 2 LCS / (|c| + |r|) must agree.
    hyp, ref = "abcdef", "abxdefgh"
    ed = levenshtein(hyp, ref)
    lcs = (len(hyp) + len(ref) - ed) / 2
    p, r = lcs / len(hyp), lcs / len(ref)
    assert score("mfs", [hyp], [[ref]], unit="char") == pytest.approx(100 * 2 * p * r / (p + r))


def test_bleu_equals_sacrebleu():
    hyps = ["the cat sat on the mat .", "a dog barked loudly", "hello world"]
    refs = [["the cat sat on a mat ."], ["the dog barked loudly"], ["hello there world"]]
    expected = sacrebleu.corpus_bleu(hyps, [[r[0] for r in refs]])
    result = get_metric("bleu").corpus_score(hyps, refs)
    assert result.value == pytest.approx(expected.score, abs=1e-9)
    assert result.signature.startswith("bleu|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")


def test_bleu_variable_number_of_references_and_options():
    hyps = ["the cat sat on the mat .", "a dog barked"]
    refs = [["the cat sat on a mat .", "a cat sat on the mat ."], ["the dog barked"]]
    expected = sacrebleu.metrics.BLEU(lowercase=True, tokenize="none").corpus_score(
        hyps, [[refs[0][0], refs[1][0]], [refs[0][1], None]]
    )
    result = get_metric("bleu", lowercase=True, tokenize="none").corpus_score(hyps, refs)
    assert result.value == pytest.approx(expected.score, abs=1e-9)
    assert "nrefs:var" in result.signature and "tok:none" in result.signature


def test_bleu_statistics_reaggregate_to_the_corpus_score():
    metric = get_metric("bleu")
    corpus = Corpus(
        ["the cat sat", "on the mat today", "x"], [["the cat sat"], ["on a mat today"], ["y z"]]
    )
    columns = metric.item_stats(corpus)
    assert metric.aggregate([sum(c) for c in columns], len(corpus)) == pytest.approx(
        metric.score(corpus).value
    )


def test_signatures_name_unit_references_options_and_version():
    result = get_metric("per", unit="char", average="word").corpus_score(["ab"], [["ab", "abc"]])
    assert result.signature.startswith(
        "per|nrefs:2|unit:char|average:word|ties:first|version:transduce-"
    )


def test_bootstrap_interval_contains_the_value_and_is_reproducible():
    hyps = [f"{i % 7} {i % 3}" for i in range(300)]
    refs = [[f"{i % 7} {i % 5}"] for i in range(300)]
    a = get_metric("per").corpus_score(hyps, refs, bootstrap=200, seed=1)
    b = get_metric("per").corpus_score(hyps, refs, bootstrap=200, seed=1)
    assert a.ci == b.ci
    assert a.ci[0] < a.value < a.ci[1]
    assert a.to_dict()["bootstrap"]["samples"] == 200


def test_bad_inputs_are_clear_errors():
    with pytest.raises(DataError, match="2 hypotheses but 1 references"):
        Corpus(["a", "b"], ["a"])
    with pytest.raises(DataError, match="empty reference"):
        Corpus(["a"], [[" "]], "char")
    with pytest.raises(DataError, match="no lines"):
        Corpus([], [])
    with pytest.raises(
        ConfigError, match="unknown metric 'xyz' .valid: acc, wer, per, lev, mfs, bleu"
    ):
        get_metric("xyz")
    with pytest.raises(ConfigError, match="average must be one of corpus, word"):
        get_metric("per", average="sentence")
    with pytest.raises(ConfigError, match="unknown option"):
        get_metric("wer", average="word")


symbols = st.lists(st.sampled_from(["a", "b", "c", "AE", "ड", "한"]), max_size=8)


@settings(max_examples=200, deadline=None)
@given(symbols, symbols)
def test_lcs_length_equals_dynamic_programming(a, b):
    assert lcs_length(a, b) == lcs_dp(a, b)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(symbols, st.lists(symbols.filter(bool), min_size=1, max_size=3)),
        min_size=1,
        max_size=12,
    )
)
def test_metrics_against_brute_force(lines):
    hyps = [h for h, _ in lines]
    refs = [r for _, r in lines]
    closest = []
    for h, alts in lines:
        dists = [levenshtein(h, r) for r in alts]
        k = dists.index(min(dists))
        closest.append((dists[k], len(h), len(alts[k])))
    n = len(lines)
    acc = 100 * sum(any(h == r for r in alts) for h, alts in lines) / n
    per = 100 * sum(d for d, _, _ in closest) / sum(r for _, _, r in closest)
    f = [0 if (c + r - d) == 0 else (c + r - d) / (c + r) for d, c, r in closest]
    assert score("acc", hyps, refs) == pytest.approx(acc)
    assert score("wer", hyps, refs) == pytest.approx(100 - acc)
    assert score("per", hyps, refs) == pytest.approx(per)
    assert score("lev", hyps, refs) == pytest.approx(sum(d for d, _, _ in closest) / n)
    assert score("mfs", hyps, refs) == pytest.approx(100 * sum(f) / n)
    exact = []
    for h, alts in lines:
        indels = [len(h) + len(r) - 2 * lcs_dp(h, r) for r in alts]
        k = indels.index(min(indels))
        common = lcs_dp(h, alts[k])
        exact.append(0 if common == 0 else 2 * common / (len(h) + len(alts[k])))
    assert score("mfs", hyps, refs, lcs="exact") == pytest.approx(100 * sum(exact) / n)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(symbols, symbols.filter(bool)), min_size=1, max_size=10))
def test_bounds_and_identity(lines):
    hyps = [h for h, _ in lines]
    refs = [[r] for _, r in lines]
    assert 0 <= score("acc", hyps, refs) <= 100
    assert score("per", hyps, refs) >= 0 and score("lev", hyps, refs) >= 0
    assert 0 <= score("mfs", hyps, refs, lcs="exact") <= score("mfs", hyps, refs) <= 100
    same = [r[0] for r in refs]
    assert score("wer", same, refs) == 0
    assert score("per", same, refs) == 0
    assert score("lev", same, refs) == 0
    assert score("mfs", same, refs) == 100
    assert score("mfs", same, refs, lcs="exact") == 100


def test_parallel_edit_statistics_equal_the_serial_ones(monkeypatch):
    from transduce import defaults
    from transduce.metrics import corpus as corpus_module

    hyps = [f"{i % 7} {i % 3} x" for i in range(500)]
    refs = [f"{i % 5} {i % 3}" for i in range(500)]
    serial = Corpus(hyps, refs, "symbol").edit
    monkeypatch.setattr(defaults, "PARALLEL_MIN_LINES", 10)
    monkeypatch.setattr(corpus_module, "_workers", lambda: 3)
    parallel_stats = corpus_module.parallel_edit_stats(hyps, refs, "symbol")
    assert parallel_stats is not None and parallel_stats == serial
    assert Corpus(hyps, refs, "symbol", parallel=True).edit == serial


def test_strings_and_symbol_sequences_are_not_mixed():
    tokens = ["K", "AE", "T"]
    assert score("acc", [tokens], [[tokens]]) == 100.0
    assert score("acc", [tokens], [[tokens, ["K", "AA", "T"]]]) == 100.0
    assert score("acc", ["K AE T"], [["K AA T", "K AE T"]]) == 100.0
    for hyps, refs in (([tokens], [tokens]), ([tokens], [["K AE T"]]), (["K AE T"], [[tokens]])):
        with pytest.raises(ConfigError, match="both as strings or both as symbol sequences"):
            score("acc", hyps, refs)
