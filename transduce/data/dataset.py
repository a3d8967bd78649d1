"""Prepared splits as model input: reading them, vocabularies, encoding, evaluation sets.

A model reads the source symbols of a prepared split, with any feature symbols put in
front as bracketed symbols and a `<sep>` (the layout the sigmorphon format uses for tags),
and predicts the target symbols.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transduce.data.prepare import MANIFEST, SPLITS
from transduce.data.sides import Sides, model_source
from transduce.data.vocab import Vocab
from transduce.errors import ConfigError, DataError
from transduce.io import sha256_bytes
from transduce.lines import decode_lines, read_bytes


@dataclass(frozen=True)
class Pair:
    source: tuple[str, ...]  # model input symbols (features, <sep>, source)
    target: tuple[str, ...] | None


@dataclass
class Prepared:
    """The splits of a prepared directory."""

    directory: Path
    manifest: dict[str, Any]
    splits: dict[str, list[Pair]] = field(default_factory=dict)

    @property
    def sides(self) -> Sides:
        return Sides.from_manifest(self.manifest["sides"])


def parse_split_line(line: str, path: str, number: int) -> Pair:
    """One canonical line `source<TAB>target[<TAB>features]`."""
    fields = line.split("\t")
    if len(fields) not in (2, 3) or not fields[0]:
        raise DataError(
            "not a prepared line (source<TAB>target[<TAB>features])", path, number, line
        )
    source = fields[0].split(" ")
    target = tuple(fields[1].split(" ")) if fields[1] else None
    features = fields[2].split(" ") if len(fields) == 3 and fields[2] else None
    return Pair(model_source(source, features), target)


def load_prepared(directory: str | Path) -> Prepared:
    """Read `manifest.json` and the three splits, checking their SHA-256 against it."""
    directory = Path(directory)
    try:
        manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError("not a prepared dataset directory (no manifest.json)", directory) from None
    except ValueError as error:
        raise DataError(f"unreadable manifest.json: {error}", directory) from None
    prepared = Prepared(directory, manifest)
    for split in SPLITS:
        path = directory / f"{split}.tsv"
        data = read_bytes(path)
        expected = manifest.get("outputs", {}).get(path.name, {}).get("sha256")
        if expected is not None and expected != sha256_bytes(data):
            raise DataError(
                "changed since it was prepared (sha256 differs from manifest.json)", path
            )
        lines, _ = decode_lines(data, path)
        prepared.splits[split] = [
            parse_split_line(line, str(path), n) for n, line in enumerate(lines, 1)
        ]
    return prepared


def build_vocabs(
    pairs: Sequence[Pair],
    shared: bool = False,
    min_count: int = 1,
    fraction: float = 1.0,
    copy: bool = False,
) -> tuple[Vocab, Vocab]:
    """Source and target vocabularies of the training pairs (one joint one if `shared`), of
    the symbols seen at least `min_count` times; the source keeps the most frequent
    `fraction` of its distinct symbols (rounded up). With `copy` (a model that copies source
    symbols, `transduce.models.copy`) the target vocabulary is followed by every source
    symbol it lacks, in the source vocabulary's order."""
    sources = [p.source for p in pairs]
    targets = [p.target for p in pairs if p.target is not None]
    if shared:
        if fraction < 1:
            raise ConfigError(
                "data.vocab_fraction cuts the source vocabulary: not possible with one "
                "vocabulary for both sides (model.tie_embeddings: all)"
            )
        joint = Vocab.build([*sources, *targets], min_count)
        return joint, joint
    source, target = Vocab.build(sources, min_count, fraction), Vocab.build(targets, min_count)
    if copy:
        target = Vocab([*target.symbols, *(s for s in source.symbols if s not in target)])
    return source, target


@dataclass
class EvalSet:
    """Distinct sources with every target given for them (the references of scoring)."""

    sources: list[tuple[str, ...]]
    references: list[list[tuple[str, ...]]]


def eval_set(pairs: Sequence[Pair]) -> EvalSet:
    """Group a split by source: G2P words with several pronunciations are scored once,
    against all of them (what `score --merge-variants` does)."""
    groups: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    for pair in pairs:
        refs = groups.setdefault(pair.source, [])
        if pair.target is not None and pair.target not in refs:
            refs.append(pair.target)
    return EvalSet(list(groups), list(groups.values()))
