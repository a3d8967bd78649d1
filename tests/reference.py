"""Independent reference implementations of the metrics, for the tests.

Plain dynamic programs and textbook formulas: no editdistance, no shortcut.
"""

from __future__ import annotations

from collections.abc import Sequence


def levenshtein(a: Sequence[str], b: Sequence[str]) -> int:
    """Levenshtein distance by the textbook dynamic program."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def lcs_dp(a: Sequence[str], b: Sequence[str]) -> int:
    """Longest common subsequence length by the textbook dynamic program."""
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, x in enumerate(a, 1):
        for j, y in enumerate(b, 1):
            table[i][j] = (
                table[i - 1][j - 1] + 1 if x == y else max(table[i - 1][j], table[i][j - 1])
            )
    return table[-1][-1]


def scores(hyps: list[Sequence[str]], refs: list[list[Sequence[str]]]) -> dict[str, float]:
    """acc, wer, per (corpus and word), lev and mfs (Appendix A.1 and exact), from scratch."""
    n = len(hyps)
    correct = edits = ref_total = 0
    word_ratios = f_a1 = f_exact = 0.0
    for hyp, alts in zip(hyps, refs):
        correct += any(list(hyp) == list(r) for r in alts)
        dists = [levenshtein(hyp, r) for r in alts]
        best = alts[dists.index(min(dists))]
        d = min(dists)
        edits += d
        ref_total += len(best)
        word_ratios += d / len(best)
        lcs = (len(hyp) + len(best) - d) / 2
        if lcs > 0:
            p, r = lcs / len(hyp), lcs / len(best)
            f_a1 += 2 * p * r / (p + r)
        common = [lcs_dp(hyp, r) for r in alts]
        indels = [len(hyp) + len(r) - 2 * c for r, c in zip(alts, common)]
        k = indels.index(min(indels))
        if common[k] > 0:
            p, r = common[k] / len(hyp), common[k] / len(alts[k])
            f_exact += 2 * p * r / (p + r)
    acc = 100 * correct / n
    return {
        "acc": acc,
        "wer": 100 - acc,
        "per": 100 * edits / ref_total,
        "per_word": 100 * word_ratios / n,
        "lev": edits / n,
        "mfs": 100 * f_a1 / n,
        "mfs_exact": 100 * f_exact / n,
    }
