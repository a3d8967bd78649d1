"""Batches: padding, masks, and batch plans (by sentences or tokens, with length bucketing).

Shapes use one vocabulary of letters: B batch, S source length, T target length.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from transduce.special import BOS_ID, EOS_ID, PAD_ID


@dataclass
class Batch:
    """Padded id tensors and their masks (True on real tokens).

    `target_in` is BOS y1 .. yn and `target_out` is y1 .. yn EOS (teacher forcing);
    both are None when the batch is decoded without references.
    """

    source: Tensor  # B x S
    source_mask: Tensor  # B x S
    target_in: Tensor | None = None  # B x T
    target_out: Tensor | None = None  # B x T
    target_mask: Tensor | None = None  # B x T
    index: Tensor | None = None  # B: positions of the examples in their dataset
    chars: Tensor | None = None  # B x S x C: the characters of each source word (taggers)
    # with copy (`transduce.models.copy`, `mark_unknown`): 0 where the copy map applies,
    # else the position's output id + 1; and True at the extended ids a row does not use
    copy_oov: Tensor | None = None  # B x S
    copy_slots: Tensor | None = None  # B x K

    def __len__(self) -> int:
        return self.source.shape[0]

    def to(self, device: torch.device | str) -> Batch:
        """The batch on `device`: built on the host, copied to a GPU from pinned memory
        without waiting for the copy (the next kernels on the stream wait for it)."""
        pin = torch.device(device).type == "cuda"

        def to(t: Tensor) -> Tensor:
            return (t.pin_memory() if pin else t).to(device, non_blocking=True)

        def move(t: Tensor | None) -> Tensor | None:
            return None if t is None else to(t)

        return Batch(
            to(self.source),
            to(self.source_mask),
            move(self.target_in),
            move(self.target_out),
            move(self.target_mask),
            self.index,
            move(self.chars),
            move(self.copy_oov),
            move(self.copy_slots),
        )


def pad(
    sequences: Sequence[Sequence[int]], before: int | None = None, after: int | None = None
) -> Tensor:
    """Right-pad id sequences into a B x L tensor, optionally adding a first/last id."""
    extra = (before is not None) + (after is not None)
    width = max((len(s) for s in sequences), default=0) + extra
    out = torch.full((len(sequences), max(width, 1)), PAD_ID, dtype=torch.long)  # B x L
    for row, seq in enumerate(sequences):
        ids = (
            ([before] if before is not None else [])
            + list(seq)
            + ([after] if after is not None else [])
        )
        if ids:
            out[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return out


def collate(
    sources: Sequence[Sequence[int]],
    targets: Sequence[Sequence[int]] | None = None,
    index: Sequence[int] | None = None,
) -> Batch:
    """A `Batch` from id sequences (targets without BOS/EOS; they are added here)."""
    source = pad(sources)  # B x S
    batch = Batch(source, source != PAD_ID)
    if targets is not None:
        batch.target_in = pad(targets, before=BOS_ID)  # B x T
        batch.target_out = pad(targets, after=EOS_ID)  # B x T
        batch.target_mask = batch.target_out != PAD_ID  # B x T
    if index is not None:
        batch.index = torch.tensor(list(index), dtype=torch.long)
    return batch


def mark_unknown(batch: Batch, unknown: Sequence[Sequence[int]], size: int) -> Batch:
    """Give a batch where its source symbols that the source vocabulary lacks copy to
    (`transduce.models.copy.copy_targets`): `copy_oov` from `unknown` (one list per row: 0,
    or the position's output id + 1) and `copy_slots` (B x K, K the most extended ids a row
    has, True at those a row does not use); left as they are when no row has such a
    symbol. `size`: V, the target vocabulary's size."""
    if not any(any(row) for row in unknown):
        return batch
    used = [max(0, max(row, default=0) - size) for row in unknown]  # extended ids per row
    batch.copy_oov = pad(unknown)[:, : batch.source.shape[1]]  # B x S
    extra = max(used)
    batch.copy_slots = torch.arange(extra).unsqueeze(0) >= torch.tensor(used).unsqueeze(1)
    return batch


def plan_batches(
    lengths: Sequence[tuple[int, int]],
    size: int,
    by: str = "sentences",
    bucketing: bool = True,
    rng: random.Random | None = None,
) -> list[list[int]]:
    """Split example indices into batches.

    Args:
        lengths: (source length, target length) of each example.
        size: Examples per batch (`by="sentences"`), or padded tokens per batch, counting
            B x max(source, target + 1) (`by="tokens"`).
        by: "sentences" or "tokens".
        bucketing: Sort by length inside pools of about 50 batches before cutting, so that a
            batch holds examples of similar lengths (less padding); batches are then shuffled.
        rng: Shuffles the examples and the batches; None keeps the input order (evaluation).

    Returns:
        Lists of example indices.
    """
    order = list(range(len(lengths)))
    if rng is not None:
        rng.shuffle(order)

    def width(i: int) -> int:
        return max(lengths[i][0], lengths[i][1] + 1)

    if bucketing:
        pool = 50 * (size if by == "sentences" else max(1, size // 16))
        order = [
            i
            for start in range(0, len(order), pool)
            for i in sorted(order[start : start + pool], key=width)
        ]
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        if current:
            full = (
                len(current) >= size
                if by == "sentences"
                else (len(current) + 1) * max(longest, width(i)) > size
            )
            if full:
                batches.append(current)
                current, longest = [], 0
        current.append(i)
        longest = max(longest, width(i))
    if current:
        batches.append(current)
    if rng is not None and bucketing:
        rng.shuffle(batches)
    return batches
