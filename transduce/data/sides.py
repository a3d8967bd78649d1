"""The sides of a prepared dataset: how raw text becomes the symbols a model reads, and
symbols become text again, in one place.

A format says what its sides are (`Format.sides` makes a `Sides`); `prepare` writes them
into the manifest (`Sides.to_manifest`: a JSON object per side, the "side spec", e.g.
`{"unit": "char", "lowercase": true}`), and training, `decode`, `score` and `export` read
them back (`Sides.from_manifest`) and ask them, instead of probing the spec's keys:

- `Sides.read_input(line)`: a line of raw input (decode's) as the model's source symbols:
  the text cut by the source's unit (lower-cased or Unicode-normalized where the format
  did), a lemma and its tags (`lemma<TAB>V;PST`, inflection), or text and its features
  (`text<TAB>f1;f2`);
- `Side.detokenize(symbols)`: output symbols as the target's own text;
- `Side.score_unit`: the unit `score` compares that text in.

A format with a new kind of source writes its side here and in its own file; `decode`,
`score` and `export` take it as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from transduce.data import tokens
from transduce.errors import DataError
from transduce.special import SEP

FEATURES_SEPARATOR = ";"  # inside a features column, where the manifest says none


def tag_symbol(tag: str) -> str:
    """A morphological tag as a source symbol, bracketed: "V" -> "[V]".

    The brackets keep the tag V and the letter V apart (they would otherwise share one
    embedding); a bracketed tag has at least three characters, so it can never equal a
    character symbol.
    """
    return f"[{tag}]"


def split_tags(bundle: str) -> list[str]:
    """`V;SG;3;PRS` -> ["V", "SG", "3", "PRS"]; surrounding spaces are dropped ("ABL; PL")."""
    return [t.strip() for t in bundle.split(";")]


def inflection_source(lemma: str, tags: Sequence[str]) -> list[str]:
    """Tags, `<sep>`, then the lemma's characters (Rios et al. 2021 §4.1, Figure 2)."""
    return [*(tag_symbol(t) for t in tags), SEP, *tokens.chars(lemma)]


def model_source(source: Sequence[str], features: Sequence[str] | None) -> tuple[str, ...]:
    """Features (bracketed) and `<sep>` before the source symbols, if there are features."""
    if not features:
        return tuple(source)
    return (*(tag_symbol(f) for f in features), SEP, *source)


@dataclass(frozen=True)
class Side:
    """One side (source, target or features) as the manifest describes it: `spec` is the
    JSON object written there, kept as it is so that a manifest read and written again is
    the same; the properties below are what the rest of the toolkit asks of it."""

    spec: dict[str, Any]

    @classmethod
    def of(cls, unit: str, **more: Any) -> Side:
        """A side of `unit` (char, symbol, word, subword) with the format's other keys."""
        return cls({"unit": unit, **more})

    @property
    def unit(self) -> str | None:
        return self.spec.get("unit")

    @property
    def lowercase(self) -> bool:
        """The format lower-cased this side's text (cmudict's words)."""
        return bool(self.spec.get("lowercase"))

    @property
    def normal_form(self) -> str | None:
        """The Unicode normal form the format put this side's text in (tsv's
        `source_normalize`: nfd, ...), or None: the text as it was."""
        form = self.spec.get("normalize")
        return None if form is None else str(form)

    @property
    def tagged(self) -> bool:
        """A lemma with its tags (`lemma<TAB>tags` in raw input): inflection's source."""
        return "tags" in self.spec

    @property
    def tag_column(self) -> str | None:
        """The CoNLL-U column a tagger's target is (upos, xpos); None for other sides."""
        return self.spec.get("tag")

    @property
    def separator(self) -> str:
        """Between the features of a features column."""
        return str(self.spec.get("separator", FEATURES_SEPARATOR))

    @property
    def score_unit(self) -> str:
        """The unit `score` compares this side's text in: characters or symbols."""
        return tokens.CHAR if self.unit == tokens.CHAR else tokens.SYMBOL

    def detokenize(self, symbols: Sequence[str]) -> str:
        """Symbols of this side as its own text (`tokens.detokenize`)."""
        return tokens.detokenize(symbols, self.spec)

    def cut(self, text: str, segment: Callable[[list[str]], list[str]] | None = None) -> list[str]:
        """Raw text as this side's symbols: lower-cased where the format did, cut into
        characters, symbols or words, or into subwords by `segment` (the data's BPE); put
        first in the side's Unicode normal form where it has one."""
        if self.normal_form is not None:
            text = tokens.normalize(text, self.normal_form)
        if self.lowercase:
            text = text.lower()
        if self.unit == tokens.CHAR:
            return tokens.chars(text)
        if self.unit == tokens.SUBWORD:
            if segment is None:
                raise ValueError("a subword side needs its segmenter")
            return segment(text.split())
        return text.split()


@dataclass(frozen=True)
class Sides:
    """The sides of a prepared dataset: source, target, and features where the format
    reads a features column."""

    source: Side
    target: Side
    features: Side | None = None

    @classmethod
    def from_manifest(cls, sides: dict[str, Any]) -> Sides:
        """The sides of a manifest's (or a checkpoint's) "sides" object."""
        features = sides.get("features")
        return cls(
            Side(sides["source"]),
            Side(sides["target"]),
            None if features is None else Side(features),
        )

    def to_manifest(self) -> dict[str, Any]:
        """The "sides" object of the manifest."""
        sides = {"source": self.source.spec, "target": self.target.spec}
        if self.features is not None:
            sides["features"] = self.features.spec
        return sides

    def get(self, name: str) -> Side | None:
        """The side called `name` (source, target, features), or None."""
        return {"source": self.source, "target": self.target, "features": self.features}.get(name)

    @property
    def tabbed_input(self) -> bool:
        """Raw input lines hold a tab of their own: `lemma<TAB>tags` or `text<TAB>features`."""
        return self.source.tagged or self.features is not None

    def read_input(
        self,
        line: str,
        number: int,
        path: str,
        segment: Callable[[list[str]], list[str]] | None = None,
    ) -> tuple[str, ...]:
        """The model's source symbols of one non-empty line of raw input (line `number` of
        `path`, named in a `DataError`); `segment`: the data's BPE, for subword sources."""
        if self.source.tagged:  # inflection: lemma<TAB>tags
            lemma, tab, bundle = line.partition("\t")
            if not tab or not bundle.strip():
                raise DataError("expected lemma<TAB>tags, e.g. walk<TAB>V;PST", path, number, line)
            return tuple(inflection_source(lemma.strip(), split_tags(bundle.strip())))
        features = None
        if self.features is not None:
            line, _, raw = line.partition("\t")
            features = [f.strip() for f in raw.split(self.features.separator) if f.strip()]
        return model_source(self.source.cut(line.strip(), segment), features)
