"""Tagging accuracy (Dufter et al. 2020, §2.6): over all tokens, out-of-vocabulary tokens
and ambiguous tokens.

A token is ambiguous when its word has more than one distinct tag in the training data
(§2.6), and out of vocabulary (OOV) when its word never occurs in the training data. The
paper does not define OOV further; its authors' evaluation code counts the words outside
the model's vocabulary (the most frequent 50% of the training words for UD) and leaves
those out of the ambiguous ones, so its OOV and ambiguous numbers are not comparable with
these, which depend on the data only, not on a model. Words are compared exactly as written
(case-sensitive). Each line is a sentence: the hypothesis and the reference are its tags
separated by whitespace, one per word, always compared as whole tags whatever the corpus
unit, and the corpus carries the words (`Corpus.sources`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from transduce.errors import ConfigError, DataError
from transduce.metrics.base import DataFile, FileContent, Metric, Option
from transduce.metrics.corpus import Corpus
from transduce.version import __version__

SUBSETS = ("all", "oov", "ambiguous")


@dataclass
class Lexicon:
    """The tags seen with each word of the training data."""

    tags: dict[str, set[str]] = field(default_factory=dict)
    name: str = "train"  # where it came from (in the signature)

    @classmethod
    def build(
        cls, sentences: Iterable[tuple[Sequence[str], Sequence[str]]], name: str = "train"
    ) -> Lexicon:
        """From (words, tags) pairs of training sentences."""
        lexicon = cls(name=name)
        for words, tags in sentences:
            for word, tag in zip(words, tags, strict=True):
                lexicon.tags.setdefault(word, set()).add(tag)
        return lexicon

    def is_oov(self, word: str) -> bool:
        return word not in self.tags

    def is_ambiguous(self, word: str) -> bool:
        return len(self.tags.get(word, ())) > 1


def token_stats(
    hyps: Sequence[Sequence[str]],
    refs: Sequence[Sequence[str]],
    words: Sequence[Sequence[str]] | None,
    lexicon: Lexicon | None,
) -> list[list[float]]:
    """Per line: correct and tokens over all, OOV and ambiguous tokens (6 columns).

    Raises:
        DataError: a line whose hypothesis, reference and words differ in length.
    """
    columns: list[list[float]] = [[] for _ in range(6)]
    for number, (hyp, ref) in enumerate(zip(hyps, refs), 1):
        sentence = words[number - 1] if words is not None else None
        if len(hyp) != len(ref) or (sentence is not None and len(sentence) != len(ref)):
            counts = f"{len(hyp)} tags in the hypothesis, {len(ref)} in the reference"
            if sentence is not None:
                counts += f", {len(sentence)} words"
            raise DataError(f"a tag per word is needed: {counts}", line=number)
        right = [h == r for h, r in zip(hyp, ref)]
        oov = amb = [False] * len(ref)
        if sentence is not None and lexicon is not None:
            oov = [lexicon.is_oov(w) for w in sentence]
            amb = [lexicon.is_ambiguous(w) for w in sentence]
        for column, value in enumerate(
            (
                sum(right),
                len(ref),
                sum(r and o for r, o in zip(right, oov)),
                sum(oov),
                sum(r and a for r, a in zip(right, amb)),
                sum(amb),
            )
        ):
            columns[column].append(float(value))
    return columns


class TaggingAccuracy(Metric):
    """Tagging accuracy; given the training data (`score --train`), over OOV and ambiguous
    tokens too, each subset a score of its own (`tagacc_oov`, `tagacc_ambiguous`)."""

    name = "tagacc"
    title = "tagging accuracy"
    higher_is_better = True
    definition = (
        "100 x correct tags / tokens, over all tokens (subset all), over tokens whose word is "
        "not in the training data (oov) or has more than one tag in it (ambiguous) "
        "(Dufter et al. 2020 §2.6); 0 when the subset has no token"
    )
    options: ClassVar[dict[str, Option]] = {
        "subset": Option("all", SUBSETS, "all, oov or ambiguous tokens", cli=False),
    }
    data_files: ClassVar[dict[str, DataFile]] = {
        "train": DataFile(
            "the training data (CoNLL-U, or words<TAB>tags), to score OOV and ambiguous words too",
            reads="tagged",
            needs_sources="tagacc over OOV and ambiguous words needs the words: give a "
            "CoNLL-U reference, or a TSV words<TAB>tags with --ref-col 2",
        ),
    }
    uses_unit = False  # tags are whole symbols

    def __init__(self, unit: str = "auto", lexicon: Lexicon | None = None, **options: Any):
        super().__init__("symbol" if unit == "auto" else unit, **options)
        if unit not in ("auto", "symbol"):
            raise ConfigError(f"tagacc compares whole tags: --unit symbol, not {unit}")
        self.unit = "symbol"  # whatever unit the corpus guessed: tags are whole symbols
        if self.values["subset"] != "all" and lexicon is None:
            raise ConfigError(
                f"tagacc over {self.values['subset']} tokens needs the training data (--train)"
            )
        self.lexicon = lexicon

    @property
    def label(self) -> str:
        subset = self.values["subset"]
        return self.name if subset == "all" else f"{self.name}_{subset}"

    @classmethod
    def create(
        cls, unit: str, options: dict[str, Any], files: dict[str, FileContent]
    ) -> list[Metric]:
        """All tokens; with the training data, OOV and ambiguous tokens too."""
        train = files.get("train")
        lexicon = None if train is None else Lexicon.build(train.content, train.name)
        subsets = SUBSETS if lexicon is not None else ("all",)
        return [cls(unit, lexicon, **{**options, "subset": s}) for s in subsets]

    def item_stats(self, corpus: Corpus) -> list[list[float]]:
        subset = self.values["subset"]
        if subset != "all" and corpus.sources is None:
            raise DataError(f"tagacc over {subset} tokens needs the words of every line")
        key = ("tagacc", id(self.lexicon))  # all, oov and ambiguous share one count
        if key not in corpus.memo:
            hyps = [h.split() for h in corpus.hyp_texts]
            refs = [alts[0].split() for alts in corpus.ref_texts]
            corpus.memo[key] = (self.lexicon, token_stats(hyps, refs, corpus.sources, self.lexicon))
        columns = corpus.memo[key][1]  # the lexicon is kept with them, so its id stays its own
        first = SUBSETS.index(subset) * 2
        return columns[first : first + 2]

    def aggregate(self, sums: Sequence[float], n: int) -> float:
        return 100.0 * sums[0] / sums[1] if sums[1] else 0.0

    def signature(self, corpus: Corpus) -> str:
        parts = [self.name, f"nrefs:{corpus.nrefs}", "unit:symbol"]
        parts += [f"{key}:{value}" for key, value in self.values.items()]
        if self.lexicon is not None:
            parts.append(f"train:{self.lexicon.name}")
        return "|".join([*parts, f"version:transduce-{__version__}"])
