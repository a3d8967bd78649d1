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
* **Replacement**, by `style`. The new symbols are drawn uniformly from the alphabet (the
  distinct symbols of the training lemmas and forms, whitespace symbols left out), the
  same symbols in lemma and form.
  - `paper` (the default): every symbol of every stretch is replaced, as §3 describes
    it ("replace the stem with random characters").
  - `reference`: as the authors' code does it (`augment.py` of
    github.com/antonisa/inflection, `augment`): in a stretch longer than 5 the first and
    last symbols are kept, and each other symbol is replaced with probability 0.5. The
    ends of a long stem, the letter before the ending among them, stay as they were, so a
    hallucinated pair keeps the stem-final letter that often decides the ending.
  `reference` is the authors' replacement rule only: their code draws its alphabet from
  the dev set too (here from training alone), aligns with its own aligner, and goes
  through the eligible pairs in order, pass after pass (here drawn as below).
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
STYLES = ("paper", "reference")  # how a stretch is replaced (module docstring)
KEEP_ENDS_ABOVE = 5  # reference: a stretch longer than this keeps its first and last symbols
REPLACE_PROBABILITY = 0.5  # reference: each other symbol of a stretch is replaced with this
METHODS = {
    "paper": "Anastasopoulos & Neubig 2019, sec. 3: each aligned stretch of identical "
    "symbols replaced by the same uniform random symbols in source and target",
    "reference": "Anastasopoulos & Neubig 2019, as their augment.py: in each aligned stretch "
    "of identical symbols, each symbol (but the first and last of a stretch longer than 5) "
    "replaced with probability 0.5 by the same uniform random symbol in source and target",
}
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
    lemma: Sequence[str],
    form: Sequence[str],
    spans: Sequence[Span],
    draw: Callable[[], str],
    chosen: Callable[[int], Sequence[int]] | None = None,
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Replace symbols of each span by symbols from `draw`, the same ones in lemma and form.

    `chosen(size)` gives the offsets within a span of that size to replace (None: all of
    them, the `paper` style).

    >>> replace("walk", "walked", [(0, 0, 4)], iter("XYZW").__next__)
    (('X', 'Y', 'Z', 'W'), ('X', 'Y', 'Z', 'W', 'e', 'd'))
    >>> replace("walk", "walked", [(0, 0, 4)], iter("XY").__next__, lambda size: [1, 3])
    (('w', 'X', 'l', 'Y'), ('w', 'X', 'l', 'Y', 'e', 'd'))
    """
    new_lemma, new_form = list(lemma), list(form)
    for i, j, size in spans:
        for k in range(size) if chosen is None else chosen(size):
            new_lemma[i + k] = new_form[j + k] = draw()
    return tuple(new_lemma), tuple(new_form)


def reference_choice(size: int, coin: Callable[[], float]) -> list[int]:
    """The offsets the reference code replaces in a stretch of `size`, one `coin` each.

    A stretch longer than `KEEP_ENDS_ABOVE` keeps its first and last symbols; each other
    offset is replaced when `coin()` (uniform in [0, 1)) is below `REPLACE_PROBABILITY`.

    >>> reference_choice(6, iter([0.1, 0.9, 0.2, 0.7]).__next__)  # ends kept: 1..4 tossed
    [1, 3]
    >>> reference_choice(3, iter([0.9, 0.1, 0.4]).__next__)  # 5 or shorter: all tossed
    [1, 2]
    """
    first, last = (1, size - 1) if size > KEEP_ENDS_ABOVE else (0, size)
    return [k for k in range(first, last) if coin() < REPLACE_PROBABILITY]


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
    examples: Sequence[Example], n: int, seed: int, name: str = "", style: str = "paper"
) -> tuple[list[Example], dict[str, int]]:
    """Make `n` hallucinated pairs out of the training `examples`.

    Args:
        examples: The real training pairs (each with a target).
        n: How many pairs to make.
        seed: The seed of the draws.
        name: The training file's name, for the error when no pair has a stretch.
        style: `paper` (every symbol of a stretch replaced) or `reference` (the authors'
            code: each with probability 0.5, the ends of a stretch longer than 5 kept).

    Returns:
        The new examples (tags, features and line number of the pair each came from), and
        counts for the manifest: `eligible_pairs` (real pairs with a stretch) and
        `alphabet_size`.

    Raises:
        DataError: `n` > 0 and no pair has a stretch (source and target share no runs).
    """
    if style not in STYLES:
        raise ValueError(f"hallucination style {style!r} is not one of {', '.join(STYLES)}")
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

    def chosen(size: int) -> list[int]:
        return reference_choice(size, rng.random)

    new = []
    for _ in range(n):
        example, start, spans = eligible[_below(rng, len(eligible))]
        lemma, form = replace(
            example.source[start:],
            example.target or (),
            spans,
            draw,
            chosen if style == "reference" else None,
        )
        new.append(Example(example.source[:start] + lemma, form, example.features, example.line))
    return new, counts
