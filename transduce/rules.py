"""Suffix rules for inflection, and the tie-break that lets them settle an ensemble's
disagreements (`transduce decode MODELS... --tie-break-rules TRAIN`).

`SuffixRules` is a non-neural inflector learned from `lemma<TAB>form<TAB>tags` pairs, in
the spirit of the SIGMORPHON 2017 shared task's baseline (Cotterell et al. 2017: a prefix
change and a suffix change per pair, applied by the tag bundle); it is not that baseline's
code and does not reproduce its numbers. For each training pair:

1. the prefix change: the lemma and form up to their longest common substring (difflib's
   longest matching block; the first of equal ones), e.g. `spielen -> gespielt` has
   `"" -> "ge"`;
2. the suffix change: after the prefix, what follows the longest common prefix of the
   rests, e.g. `spielen -> spielt` has `"en" -> "t"`.

For a lemma and a tag bundle (its tags sorted: `V;PST` and `PST;V` are one) seen in
training: take the bundle's most frequent prefix change whose left side starts the lemma
(the first seen of equal counts) and strip it; among the bundle's suffix changes whose left
side ends what remains, keep those of the training pairs whose lemma, its own prefix change
stripped, shares the longest final substring with it; the change most of those pairs made
wins, then the one most frequent in the bundle, then the greatest (left, right) in
code-point order. An unseen bundle, or no change that applies,
gives the lemma unchanged.

`tie_break` is the combination tested on the SIGMORPHON 2017 medium dev sets (RESULTS.md):
where the members' own outputs are not all equal and the rules' output is one of them, the
rules' output; else the ensemble's.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from difflib import SequenceMatcher
from pathlib import Path

from transduce.data.sides import split_tags
from transduce.errors import DataError
from transduce.lines import decode_lines, read_bytes

Change = tuple[str, str]  # (what the lemma has, what the form has instead)


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _common_suffix(a: str, b: str) -> int:
    return _common_prefix(a[::-1], b[::-1])


def bundle(tags: str) -> tuple[str, ...]:
    """`V;PST;3` and `3;V;PST` are one bundle: the sorted tags."""
    return tuple(sorted(split_tags(tags)))


def changes(lemma: str, form: str) -> tuple[Change, str, Change]:
    """(prefix change, the lemma after it, suffix change) of one training pair."""
    blocks = [
        b
        for b in SequenceMatcher(None, lemma, form, autojunk=False).get_matching_blocks()
        if b.size
    ]
    if blocks:
        stem = max(blocks, key=lambda b: b.size)  # the first of equal sizes
        prefix, lemma, form = (lemma[: stem.a], form[: stem.b]), lemma[stem.a :], form[stem.b :]
    else:
        prefix = ("", "")
    k = _common_prefix(lemma, form)
    return prefix, lemma, (lemma[k:], form[k:])


class SuffixRules:
    """Prefix and suffix changes per tag bundle (the module's docstring says how)."""

    def __init__(self, pairs: Iterable[tuple[str, str, str]]) -> None:
        """`pairs`: (lemma, form, tags) triples, tags as in `V;PST;3`."""
        self.suffixes: dict[tuple[str, ...], list[tuple[str, Change]]] = defaultdict(list)
        self.suffix_counts: dict[tuple[str, ...], Counter[Change]] = defaultdict(Counter)
        self.prefix_counts: dict[tuple[str, ...], Counter[Change]] = defaultdict(Counter)
        for lemma, form, tags in pairs:
            key = bundle(tags)
            prefix, rest, suffix = changes(lemma, form)
            self.suffixes[key].append((rest, suffix))
            self.suffix_counts[key][suffix] += 1
            self.prefix_counts[key][prefix] += 1

    @classmethod
    def from_file(cls, path: str | Path) -> SuffixRules:
        """Learned from a `lemma<TAB>form<TAB>tags` file (`read_pairs`)."""
        return cls(read_pairs(path))

    def __call__(self, lemma: str, tags: str) -> str:
        key = bundle(tags)
        if key not in self.suffixes:
            return lemma
        rest, added = lemma, ""
        for (before, after), _ in self.prefix_counts[key].most_common():  # stable: first seen
            if lemma.startswith(before):
                rest, added = lemma[len(before) :], after
                break
        longest, candidates = -1, []
        for trained, (left, right) in self.suffixes[key]:
            if not rest.endswith(left):
                continue
            shared = _common_suffix(trained, rest)
            if shared > longest:
                longest, candidates = shared, [(left, right)]
            elif shared == longest:
                candidates.append((left, right))
        if not candidates:
            return lemma
        votes = Counter(candidates)
        counts = self.suffix_counts[key]
        left, right = max(votes, key=lambda change: (votes[change], counts[change], change))
        return added + rest[: len(rest) - len(left)] + right


def read_pairs(path: str | Path) -> list[tuple[str, str, str]]:
    """The (lemma, form, tags) of a `lemma<TAB>form<TAB>tags` file (blank lines skipped);
    a line that is not one is a `DataError` naming the file, the line and its text."""
    lines, _ = decode_lines(read_bytes(path), path)
    pairs = []
    for number, line in enumerate(lines, 1):
        assert line is not None  # keep_bad=False: a bad line has raised
        if not line.strip():
            continue
        columns = line.split("\t")
        if len(columns) != 3 or not all(c.strip() for c in columns):
            raise DataError(
                "expected lemma<TAB>form<TAB>tags (the training file)", path, number, line
            )
        lemma, form, tags = (c.strip() for c in columns)
        pairs.append((lemma, form, tags))
    if not pairs:
        raise DataError("no lemma<TAB>form<TAB>tags lines to learn rules from", path)
    return pairs


def tie_break(members: Sequence[str], ensemble: str, rules: str) -> str:
    """The rules' output where the members disagree and one of them wrote it; else the
    ensemble's."""
    if len(set(members)) > 1 and rules in members:
        return rules
    return ensemble
