"""`analyze-monotonicity`: how monotone a trained model's attention is, on a dataset.

Two readings of the attention (every mechanism: layers x heads, or one):

- forced: while the model reads the reference, teacher-forced, as Rios et al. (2021)
  measure it (Table 1);
- decoded: while it decodes freely. The model is run teacher-forced on its own output,
  which gives exactly the attention of each decoding step of that output.

For each, %mono and L_mono (`transduce.monotonicity`, the definitions of the loss) at
delta = 0, 0.5 and 1, per mechanism and overall (their mean); and crossing alignments
(Wu et al. 2018, Table 5): an output is non-monotonic for a mechanism when two alignment
edges with weight above `threshold` cross, i.e. output steps i < i' attend positions
j > j'. Only the counted source positions (right of a `<sep>`) take part, and the weights
are renormalized over them first, as in the loss. Outputs are counted as monotonic or not,
split by whether the decoded output equals the reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from transduce.config import DecodeConfig
from transduce.data.batching import collate, plan_batches
from transduce.decoding import decode_all
from transduce.inference import Transducer
from transduce.monotonicity import FLOOR, MonotonicityStats, counted_positions
from transduce.tasks.seq2seq import seq2seq_model

DELTAS = (0.0, 0.5, 1.0)


def crosses(attention: Tensor, positions: Tensor, threshold: float) -> Tensor:
    """Whether the edges above `threshold` cross, per mechanism: attention K x T x S of one
    output (its real steps), positions S (1-based counted positions, 0 elsewhere): K bool."""
    counted = positions > 0  # S
    weights = attention[..., counted]  # K x T x X
    weights = weights / weights.sum(dim=-1, keepdim=True).clamp(min=FLOOR)  # as in the loss
    edges = weights > threshold  # K x T x X
    index = torch.arange(1, weights.shape[-1] + 1)  # 1 .. X
    big = weights.shape[-1] + 1
    highest = torch.where(edges, index, 0).max(dim=-1).values  # K x T (0: no edge)
    lowest = torch.where(edges, index, big).min(dim=-1).values  # K x T (big: no edge)
    before = torch.cummax(highest, dim=-1).values  # K x T: highest edge up to step i
    # an edge at step i' below the highest edge of an earlier step
    return (lowest[:, 1:] < before[:, :-1]).any(dim=-1)


@dataclass
class Crossings:
    """Outputs that are monotonic or not, correct or not, for one mechanism."""

    monotonic_correct: int = 0
    monotonic_incorrect: int = 0
    crossing_correct: int = 0
    crossing_incorrect: int = 0

    def add(self, crossing: bool, correct: bool) -> None:
        name = ("crossing_" if crossing else "monotonic_") + ("correct" if correct else "incorrect")
        setattr(self, name, getattr(self, name) + 1)


def analyze(
    transducer: Transducer,
    pairs: Sequence[tuple[list[int], list[int]]],
    mode: str = "forced",
    threshold: float = 0.1,
    beam: int = 1,
    batch_size: int = 64,
) -> dict[str, Any]:
    """The report of `analyze-monotonicity` for encoded (source, reference) id pairs."""
    model, device = seq2seq_model(transducer.model), transducer.device
    sources = [s for s, _ in pairs]
    with transducer.autocast():
        hyps = decode_all(model, sources, DecodeConfig(beam=beam, batch_size=batch_size), device)
    outputs = [h[0].tokens for h in hyps]
    correct = [list(o) == list(r) for o, (_, r) in zip(outputs, pairs)]
    read = [r for _, r in pairs] if mode == "forced" else outputs
    names = model.attention_names
    stats = {delta: MonotonicityStats(names, delta) for delta in DELTAS}
    crossings = [Crossings() for _ in names]
    lengths = [(len(s), len(t)) for s, t in zip(sources, read)]
    with torch.inference_mode(), transducer.autocast():
        for chunk in plan_batches(lengths, batch_size, bucketing=True):
            batch = collate([sources[i] for i in chunk], [read[i] for i in chunk]).to(device)
            attention = model(batch).attention.float().cpu()  # B x K x T x S
            source, source_mask = batch.source.cpu(), batch.source_mask.cpu()
            target_mask = batch.target_mask.cpu()
            for delta in DELTAS:
                stats[delta].add(attention, source, source_mask, target_mask)
            positions = counted_positions(source, source_mask)  # B x S
            for row, index in enumerate(chunk):
                steps = int(target_mask[row].sum())
                crossing = crosses(attention[row, :, :steps], positions[row], threshold)
                for k in range(len(names)):
                    crossings[k].add(bool(crossing[k]), correct[index])
    per_delta = {str(delta): stats[delta].summary() for delta in DELTAS}
    return {
        "mode": mode,
        "examples": len(pairs),
        "accuracy": 100.0 * sum(correct) / max(len(pairs), 1),
        "mechanisms": names,
        "monotonicity": per_delta,
        "crossing_threshold": threshold,
        "crossings": {name: vars(c) for name, c in zip(names, crossings)},
    }
