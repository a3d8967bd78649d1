"""Vocabularies: symbols <-> ids, with the reserved symbols at their fixed ids."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

from transduce.special import EOS_ID, SPECIALS, UNK_ID


class Vocab:
    """An ordered symbol inventory; ids 0..4 are PAD, BOS, EOS, UNK, SEP.

    Args:
        symbols: Every symbol, the reserved ones first, in id order (what `symbols` and
            checkpoints hold).
    """

    def __init__(self, symbols: Sequence[str], end: bool = False) -> None:
        if tuple(symbols[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"a vocabulary starts with {SPECIALS}, not {tuple(symbols[:5])}")
        self.symbols = list(symbols)
        self.index = {s: i for i, s in enumerate(self.symbols)}
        if len(self.index) != len(self.symbols):
            raise ValueError("a vocabulary has each symbol once")
        self.end = end  # `encode` appends </s> (a source vocabulary with data.source_eos)

    @classmethod
    def build(
        cls, sequences: Iterable[Sequence[str]], min_count: int = 1, fraction: float = 1.0
    ) -> Vocab:
        """The symbols of `sequences` seen at least `min_count` times, most frequent first
        (ties: alphabetical), at most the first `fraction` of all distinct symbols (rounded
        up); the others are left out, so they read as `<unk>`."""
        counts = Counter(s for seq in sequences for s in seq)
        for special in SPECIALS:
            counts.pop(special, None)
        kept = [s for s in counts if counts[s] >= min_count]
        ordered = sorted(kept, key=lambda s: (-counts[s], s))
        if fraction < 1:
            ordered = ordered[: math.ceil(fraction * len(counts))]
        return cls([*SPECIALS, *ordered])

    def __len__(self) -> int:
        return len(self.symbols)

    def __contains__(self, symbol: object) -> bool:
        return symbol in self.index

    def encode(self, symbols: Sequence[str]) -> list[int]:
        """Ids of `symbols`; unknown symbols get the `<unk>` id; then `</s>` where `end`."""
        index = self.index
        ids = [index.get(s, UNK_ID) for s in symbols]
        return [*ids, EOS_ID] if self.end else ids

    def unknown(self, symbols: Sequence[str]) -> int:
        """How many of `symbols` are not in the vocabulary."""
        return sum(1 for s in symbols if s not in self.index)

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.symbols[i] for i in ids]
