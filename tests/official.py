"""The official shared-task scorers' definitions, rewritten from their published source.

Each function follows what the organisers' script does, step by step, including how it
reads its input; the tests compare `transduce score` against them (`test_official.py`).
The scripts themselves are not copied: these are independent rewrites for the tests.

- SIGMORPHON 2017 task 1, `evaluation/evalm.py` (github.com/sigmorphon/conll2017):
  every line stripped and split on tabs into lemma, form, tag; gold and guess kept as
  lemma -> tag -> form (a repeated lemma and tag keeps its last form); for every gold
  slot, exact string match (a missing guess is the empty string) and the Levenshtein
  distance between the two strings, a space being a character like any other; accuracy
  = 100 * correct / total, and the mean distance (printed rounded to 2 decimals).
- SIGMORPHON 2021 task 1, `evaluation/evaluate.py` and `evallib.py`
  (github.com/sigmorphon/2021-task1): each line of a gold<TAB>hypothesis TSV is split at
  its first tab, the hypothesis right-stripped, and both split on whitespace; a line is
  correct when the two symbol lists are equal; WER = 100 * incorrect / lines.
- SIGMORPHON 2020 task 1, `evaluation/evaluate.py` (github.com/sigmorphon/2020): the same
  WER, plus LER = 100 * sum of edit distances / sum of gold lengths, over symbols. Its
  `evallib.edit_distance` starts the first row and column of its table at 1 rather than
  at 0, 1, 2, ...; see `evallib2020_edit_distance`.
- NEWS 2015/2018 `news_evaluation.py`: names stripped of quotes and spaces at both ends
  and upper-cased; ACC: the first candidate equals a reference; F-score on characters
  against the reference with the smallest len(ref) - 2 LCS (the first such), with the true
  longest common subsequence, P = LCS / len(candidate), R = LCS / len(ref),
  F = 2PR / (P + R), and 0 when LCS = 0; both averaged over the source names.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def levenshtein(a: Sequence[str], b: Sequence[str]) -> int:
    """The full (len(b) + 1) x (len(a) + 1) table, as `evalm.distance` builds it."""
    table = [[0] * (len(a) + 1) for _ in range(len(b) + 1)]
    for x in range(1, len(b) + 1):
        table[x][0] = x
    for y in range(1, len(a) + 1):
        table[0][y] = y
    for x in range(1, len(b) + 1):
        for y in range(1, len(a) + 1):
            same = 0 if a[y - 1] == b[x - 1] else 1
            table[x][y] = min(table[x - 1][y] + 1, table[x][y - 1] + 1, table[x - 1][y - 1] + same)
    return table[len(b)][len(a)]


# ----------------------------------------------------------------- SIGMORPHON 2017


def evalm_read(lines: Iterable[str]) -> dict[str, dict[str, str]]:
    """lemma -> tag -> form, from lines lemma<TAB>form<TAB>tag (each line stripped)."""
    table: dict[str, dict[str, str]] = {}
    for line in lines:
        lemma, form, tag = line.strip().split("\t")
        table.setdefault(lemma, {})[tag] = form
    return table


def evalm_eval_form(
    gold: dict[str, dict[str, str]], guess: dict[str, dict[str, str]]
) -> tuple[float, float]:
    """(accuracy in percent, mean Levenshtein distance), not rounded."""
    correct = distance = total = 0
    for lemma, slots in gold.items():
        for tag, answer in slots.items():
            attempt = guess.get(lemma, {}).get(tag, "")
            correct += answer == attempt
            distance += levenshtein(answer, attempt)
            total += 1
    return 100 * correct / total, distance / total


# ----------------------------------------------------------------- SIGMORPHON 2020/2021


def tsv_pairs(lines: Iterable[str]) -> list[tuple[list[str], list[str]]]:
    """`evallib.tsv_reader`: gold and hypothesis symbols of each gold<TAB>hypo line."""
    pairs = []
    for line in lines:
        gold, hypo = line.split("\t", 1)
        pairs.append((gold.split(), hypo.rstrip().split()))
    return pairs


def sigmorphon2021_wer(pairs: Sequence[tuple[list[str], list[str]]]) -> float:
    incorrect = sum(gold != hypo for gold, hypo in pairs)
    return 100 * incorrect / len(pairs)


def sigmorphon2020_ler(pairs: Sequence[tuple[list[str], list[str]]], distance=levenshtein) -> float:
    """100 * sum of distances / sum of gold lengths (`distance` defaults to Levenshtein)."""
    edits = sum(distance(gold, hypo) for gold, hypo in pairs)
    return 100 * edits / sum(len(gold) for gold, _ in pairs)


def evallib2020_edit_distance(x: Sequence[str], y: Sequence[str]) -> int:
    """The 2020 `evallib.edit_distance` as published: row 0 and column 0 are all 1 (0 at
    the corner), so leading insertions or deletions past the first cost nothing; its
    table is also uint8, which this rewrite leaves out (no G2P word is that long)."""
    table = [[0] * (len(y) + 1) for _ in range(len(x) + 1)]
    for i in range(1, len(x) + 1):
        table[i][0] = 1
    for j in range(1, len(y) + 1):
        table[0][j] = 1
    for i in range(1, len(x) + 1):
        for j in range(1, len(y) + 1):
            if x[i - 1] == y[j - 1]:
                table[i][j] = table[i - 1][j - 1]
            else:
                table[i][j] = min(table[i - 1][j], table[i][j - 1], table[i - 1][j - 1]) + 1
    return table[-1][-1]


# ----------------------------------------------------------------- NEWS


def news_name(text: str) -> str:
    """How the NEWS script reads a name: quotes and spaces stripped at both ends, upper-cased."""
    return text.strip('" ').upper()


def lcs(a: Sequence[str], b: Sequence[str]) -> int:
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            if a[i - 1] == b[j - 1]:
                table[i][j] = table[i - 1][j - 1] + 1
            else:
                table[i][j] = max(table[i][j - 1], table[i - 1][j])
    return table[len(a)][len(b)]


def news_f_score(candidate: str, references: Sequence[str]) -> float:
    best, best_lcs = references[0], lcs(candidate, references[0])
    for reference in references[1:]:
        common = lcs(candidate, reference)
        if len(reference) - 2 * common < len(best) - 2 * best_lcs:
            best, best_lcs = reference, common
    if not best_lcs:
        return 0.0  # the script divides by len(candidate) first: an empty one would crash
    precision, recall = best_lcs / len(candidate), best_lcs / len(best)
    return 2 * precision * recall / (precision + recall)


def news_scores(candidates: Sequence[str], references: Sequence[Sequence[str]]) -> dict[str, float]:
    """ACC and mean F-score (fractions, as the script prints them) over the names."""
    acc = f = 0.0
    for candidate, refs in zip(candidates, references):
        candidate, refs = news_name(candidate), [news_name(r) for r in refs]
        acc += max(int(candidate == r) for r in refs)
        f += news_f_score(candidate, refs)
    return {"acc": acc / len(candidates), "mfs": f / len(candidates)}
