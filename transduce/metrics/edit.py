"""Edit-distance metrics: acc, wer, per, lev, mfs.

All of them start from the closest reference of each line: the reference with the fewest
edits (Levenshtein distance over symbols, computed by `editdistance`), the first one on
ties. For a line with hypothesis c and closest reference r at ED(c, r) edits:

    acc  = 100 * (lines where c equals one of its references) / N
    wer  = 100 - acc                                          (G2P word error rate)
    per  = 100 * sum ED / sum |r|          (average "corpus", the default)
         = 100 * mean(ED / |r|)            (average "word", as Wu et al. 2018 compute it)
    lev  = mean ED                         (SIGMORPHON 2017 mean Levenshtein distance)
    mfs  = 100 * mean F, with (Rios et al. 2021, Appendix A.1; NEWS 2015)
           LCS = (|c| + |r| - ED) / 2,  P = LCS / |c|,  R = LCS / |r|,
           F = 2PR / (P + R) = 2 LCS / (|c| + |r|),  and F = 0 when LCS = 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import add, sub, truediv
from typing import ClassVar

from transduce.metrics.base import Metric, Option
from transduce.metrics.corpus import Corpus


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Exact longest-common-subsequence length, bit-parallel (Allison & Dix 1986).

    Row i of the LCS table is kept as the bits of one Python integer, so each symbol of
    `b` costs a handful of big-integer operations instead of a loop over `a`.
    """
    if not a or not b:
        return 0
    masks: dict[str, int] = {}
    for i, symbol in enumerate(a):
        masks[symbol] = masks.get(symbol, 0) | (1 << i)
    full = (1 << len(a)) - 1
    row = full
    for symbol in b:
        matches = row & masks.get(symbol, 0)
        row = ((row + matches) | (row - matches)) & full
    return len(a) - row.bit_count()


class Accuracy(Metric):
    name = "acc"
    title = "accuracy"
    higher_is_better = True
    definition = "% of lines whose hypothesis equals one of its references (as symbol sequences)"

    def item_stats(self, corpus: Corpus) -> list[list[float]]:
        return [list(map(float, map((0).__eq__, corpus.edit.edits)))]  # 1.0 where ED = 0

    def aggregate(self, sums: Sequence[float], n: int) -> float:
        return 100.0 * sums[0] / n


class WordErrorRate(Accuracy):
    name = "wer"
    title = "word error rate"
    higher_is_better = False
    definition = "100 - acc: % of lines whose hypothesis equals none of its references"

    def aggregate(self, sums: Sequence[float], n: int) -> float:
        return 100.0 - super().aggregate(sums, n)


class PhonemeErrorRate(Metric):
    name = "per"
    title = "phoneme error rate"
    higher_is_better = False
    definition = (
        "edit distance to the closest reference as a % of its length: corpus = 100 * sum ED / "
        "sum |r| (default); word = 100 * mean(ED / |r|)"
    )
    options: ClassVar[dict[str, Option]] = {
        "average": Option(
            "corpus", ("corpus", "word"), "corpus (sum ED / sum |r|) or word (mean of ED / |r|)"
        ),
        "ties": Option("first", ("first",), "the closest reference on ties", cli=False),
    }

    def item_stats(self, corpus: Corpus) -> list[list[float]]:
        edit = corpus.edit
        if self.values["average"] == "corpus":
            return [list(map(float, edit.edits)), list(map(float, edit.ref_len))]
        return [[e / r for e, r in zip(edit.edits, edit.ref_len)]]

    def aggregate(self, sums: Sequence[float], n: int) -> float:
        if self.values["average"] == "corpus":
            return 100.0 * sums[0] / sums[1]
        return 100.0 * sums[0] / n


class MeanLevenshtein(Metric):
    name = "lev"
    title = "mean Levenshtein distance"
    higher_is_better = False
    definition = "mean edit distance to the closest reference (SIGMORPHON 2017)"

    def item_stats(self, corpus: Corpus) -> list[list[float]]:
        return [list(map(float, corpus.edit.edits))]

    def aggregate(self, sums: Sequence[float], n: int) -> float:
        return sums[0] / n


class MeanFScore(Metric):
    """NEWS 2015 mean F-score (Rios et al. 2021, Appendix A.1).

    With `lcs="levenshtein"` (the default) it is exactly Appendix A.1: the closest reference
    by Levenshtein distance and LCS = (|c| + |r| - ED) / 2. With unit-cost substitutions
    that quantity can exceed the true LCS length (for c = "ab", r = "cd": 1, not 0).
    With `lcs="exact"` it is the official NEWS evaluation script: the true LCS length
    (bit-parallel, `lcs_length`), and the closest reference is the one with the fewest
    insertions and deletions, |c| + |r| - 2 LCS (the first one on ties).
    """

    name = "mfs"
    title = "mean F-score"
    higher_is_better = True
    definition = (
        "100 * mean F over lines, closest reference r by ED: LCS = (|c|+|r|-ED)/2, P = LCS/|c|, "
        "R = LCS/|r|, F = 2PR/(P+R), F = 0 when LCS = 0"
    )
    options: ClassVar[dict[str, Option]] = {
        "lcs": Option(
            "levenshtein",
            ("levenshtein", "exact"),
            "levenshtein (LCS = (|c|+|r|-ED)/2, Rios et al. A.1) "
            "or exact (true LCS, the NEWS script)",
        ),
    }

    def item_stats(self, corpus: Corpus) -> list[list[float]]:
        if self.values["lcs"] == "exact":
            return [[f for f, _, _ in self.details(corpus)]]
        # F = 2 LCS / (c + r) = (c + r - ED) / (c + r); it is 0 exactly when LCS = 0, and
        # c + r >= |r| >= 1, so the division is safe. map() keeps the loop in C.
        edit = corpus.edit
        total = list(map(add, edit.hyp_len, edit.ref_len))
        return [list(map(truediv, map(sub, total, edit.edits), total))]

    def details(self, corpus: Corpus) -> list[tuple[float, float, int]]:
        """Per line: (F, LCS, index of the reference used)."""
        if self.values["lcs"] == "exact":
            return [self._exact(hyp, alts) for hyp, alts in zip(corpus.hyps, corpus.refs)]
        edit = corpus.edit
        rows = []
        for c, r, ed, best in zip(edit.hyp_len, edit.ref_len, edit.edits, edit.best):
            lcs = (c + r - ed) / 2
            rows.append((2 * lcs / (c + r) if lcs > 0 else 0.0, lcs, best))
        return rows

    def item_columns(self, corpus: Corpus) -> list[tuple[str, list[str]]]:
        """The reference used, LCS, precision, recall and F of every line."""
        rows = self.details(corpus)
        lengths = [
            (len(h), len(alts[best]))
            for h, alts, (_, _, best) in zip(corpus.hyps, corpus.refs, rows)
        ]
        return [
            ("mfs_ref_index", [str(best) for _, _, best in rows]),
            ("lcs", [f"{lcs:g}" for _, lcs, _ in rows]),
            (
                "precision",
                [f"{lcs / c:.6f}" if c else "0" for (_, lcs, _), (c, _) in zip(rows, lengths)],
            ),
            ("recall", [f"{lcs / r:.6f}" for (_, lcs, _), (_, r) in zip(rows, lengths)]),
            ("f", [f"{f:.6f}" for f, _, _ in rows]),
        ]

    @staticmethod
    def _exact(hyp: Sequence[str], alts: Sequence[Sequence[str]]) -> tuple[float, float, int]:
        best = lcs = -1
        fewest = None
        for index, ref in enumerate(alts):
            common = lcs_length(hyp, ref)
            indels = len(hyp) + len(ref) - 2 * common
            if fewest is None or indels < fewest:
                fewest, best, lcs = indels, index, common
        c, r = len(hyp), len(alts[best])
        return (2 * lcs / (c + r) if lcs > 0 else 0.0, float(lcs), best)

    def aggregate(self, sums: Sequence[float], n: int) -> float:
        return 100.0 * sums[0] / n


EDIT_METRICS: tuple[type[Metric], ...] = (
    Accuracy,
    WordErrorRate,
    PhonemeErrorRate,
    MeanLevenshtein,
    MeanFScore,
)
