"""Data hallucination for low-resource inflection (Anastasopoulos & Neubig 2019, §3).

"Pushing the limits of low-resource morphological inflection" (EMNLP 2019), §3 "Data
hallucination": a lemma and its inflected form share a stem; replacing the shared stem by
the same random string on both sides gives a new, plausible-looking pair that teaches the
model to copy and to attend to the affixes (the SIGMORPHON 2020 and 2022 inflection
baselines ship it). Here:

* **Alignment.** A pair is aligned by the matching blocks of Python's
  `difflib.SequenceMatcher(autojunk=False)`: the longest common contiguous run first, then
  the same on the parts left and right of it (Ratcliff/Obershelp). Every block matches
  identical symbols one to one, so a block of 3 or more symbols *is* a stretch. It is
  deterministic, needs no training, and puts the longest shared run (the stem) into one
  block, where a minimum-edit-distance alignment may, among equally cheap alignments,
  pick scattered one-symbol matches that cut a stem into pieces shorter than 3.
  Anastasopoulos & Neubig align with the SIGMORPHON 2016 baseline's aligner (Cotterell et
  al. 2016), a Monte Carlo aligner learned over the whole training set; its alignments
  depend on the corpus and on its sampler, and on most lemma/form pairs find the same
  stem as the longest-common-run matching.
* **Stretches.** Each matching block, cut at whitespace symbols (`<space>`, `<U+hhhh>`:
  the space of a multiword form stays a space, as the reference code's mask does), yields
  its pieces of `MIN_STRETCH` (3) or more symbols; stretches of 1 or 2 are kept as they
  are, and a pair without a stretch yields nothing.
* **Replacement.** Every symbol of every stretch is replaced by a symbol drawn uniformly
  from the alphabet (the distinct symbols of the training lemmas and forms, whitespace
  symbols left out), the same symbols in lemma and form. The reference code replaces
  each symbol of a stretch with probability 0.5 only, and keeps the first and last
  symbols of a stretch longer than 5; here the whole stretch is replaced.
* **Sampling.** N pairs are made, each from a real pair drawn uniformly, with
  replacement, among those with a stretch. Only `random.Random(seed).random()` is used
  (its sequence is guaranteed across Python versions and platforms, unlike `choice`), and
  the alphabet is sorted, so the result depends only on the seed and the data.

For inflection the "lemma" is the part of the source after the `<sep>` symbol (the tags
before it are kept); without one, the whole source.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from difflib import SequenceMatcher

from transduce.data.formats import Example
from transduce.errors import DataError
from transduce.special import SEP, unescape

MIN_STRETCH = 3  # Anastasopoulos & Neubig §3: "3 or more characters"
ALIGNMENT = "difflib.SequenceMatcher(autojunk=False) matching blocks"

Span = tuple[int, int, int]  # start in the lemma, start in the form, length


def is_blank(symbol: str) -> bool:
    """Whether `symbol` is an escaped whitespace character (`<space>`, `<U+00A0>`)."""
    return unescape(symbol).isspace()


def stretches(
    lemma: Sequence[str], form: Sequence[str], min_length: int = MIN_STRETCH
) -> list[Span]:
    """The aligned runs of identical symbols of at least `min_length`, left to right.

    >>> stretches("walk", "walked")
    [(0, 0, 4)]
    """
    matcher = SequenceMatcher(None, list(lemma), list(form), autojunk=False)
    spans = []
    for i, j, size in matcher.get_matching_blocks():
        start = 0
        for k in range(size + 1):  # cut the block at whitespace symbols
            if k == size or is_blank(lemma[i + k]):
                if k - start >= min_length:
                    spans.append((i + start, j + start, k - start))
                start = k + 1
    return spans


def replace(
    lemma: Sequence[str], form: Sequence[str], spans: Sequence[Span], draw: Callable[[], str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Replace each span by symbols from `draw`, the same ones in lemma and form.

    >>> replace("walk", "walked", [(0, 0, 4)], iter("XYZW").__next__)
    (('X', 'Y', 'Z', 'W'), ('X', 'Y', 'Z', 'W', 'e', 'd'))
    """
    new_lemma, new_form = list(lemma), list(form)
    for i, j, size in spans:
        for k in range(size):
            new_lemma[i + k] = new_form[j + k] = draw()
    return tuple(new_lemma), tuple(new_form)


def _below(rng: random.Random, n: int) -> int:
    """A uniform index in range(n) from `random()` alone (stable across Python versions)."""
    return min(int(rng.random() * n), n - 1)


def lemma_start(source: Sequence[str]) -> int:
    """Where the lemma begins in a source: after its last `<sep>`, else at 0."""
    for index in range(len(source) - 1, -1, -1):
        if source[index] == SEP:
            return index + 1
    return 0


def alphabet(examples: Sequence[Example]) -> list[str]:
    """The sorted distinct symbols of the lemmas and forms, whitespace symbols left out."""
    symbols: set[str] = set()
    for example in examples:
        symbols.update(example.source[lemma_start(example.source) :])
        symbols.update(example.target or ())
    return sorted(s for s in symbols if not is_blank(s))


def hallucinate(
    examples: Sequence[Example], n: int, seed: int, name: str = ""
) -> tuple[list[Example], dict[str, int]]:
    """Make `n` hallucinated pairs out of the training `examples`.

    Args:
        examples: The real training pairs (each with a target).
        n: How many pairs to make.
        seed: The seed of the draws.
        name: The training file's name, for the error when no pair has a stretch.

    Returns:
        The new examples (tags, features and line number of the pair each came from), and
        counts for the manifest: `eligible_pairs` (real pairs with a stretch) and
        `alphabet_size`.

    Raises:
        DataError: `n` > 0 and no pair has a stretch (source and target share no runs).
    """
    eligible: list[tuple[Example, int, list[Span]]] = []
    for example in examples:
        start = lemma_start(example.source)
        spans = stretches(example.source[start:], example.target or ())
        if spans:
            eligible.append((example, start, spans))
    symbols = alphabet(examples)
    counts = {"eligible_pairs": len(eligible), "alphabet_size": len(symbols)}
    if n <= 0:
        return [], counts
    if not eligible:
        raise DataError(
            f"no training pair has a run of {MIN_STRETCH} or more identical aligned symbols "
            "in source and target to hallucinate from (do they share an alphabet?)",
            name,
        )
    rng = random.Random(seed)

    def draw() -> str:
        return symbols[_below(rng, len(symbols))]

    new = []
    for _ in range(n):
        example, start, spans = eligible[_below(rng, len(eligible))]
        lemma, form = replace(example.source[start:], example.target or (), spans, draw)
        new.append(Example(example.source[:start] + lemma, form, example.features, example.line))
    return new, counts
