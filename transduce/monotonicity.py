"""The monotonicity loss and %mono of Rios, Amrhein, Aepli and Sennrich (2021), §3 and §4.2,
for any model of the zoo through its attention B x K x T x S (K mechanisms).

Definitions, shared by the training loss, the dev statistics in train.json and
`transduce analyze-monotonicity`:

- The **counted source positions** are the real source tokens, the end symbol `</s>`
  included where the data has one (`data.source_eos`, as Sockeye appends it in the
  authors' runs: |X| = |x| + 1); when a source has a `<sep>` (inflection, §4.1), only the
  positions right of its first `<sep>`: the tags and `<sep>` itself are left out.
  |X| is their number and j = 1 .. |X| their 1-based positions.
- |Y| is the number of output steps, **end-of-sequence included** (every step attends).
- The attention is renormalized over the counted positions, alpha'_ij = alpha_ij / sum over
  counted k of alpha_ik (the identity without `<sep>`; with it, the mass on the tags is set
  aside, so a_i is a position in the lemma). The sum is floored at 1e-6. The training
  loss can instead read a `<sep>` source as the authors' runs did (`sep_positions:
  absolute`, `absolute_positions`): the lemma keeps its positions in the whole source,
  the tags and `<sep>` are position 0, nothing is renormalized.
- Mean attended position, eq. (3): a_i = sum_j alpha'_ij * j.
- Pairwise cost, eq. (4): c_i = max((a_i - a_{i+1} + delta |X| / |Y|) / |X|, 0) for
  i = 1 .. |Y| - 1; with `reverse` (footnote 2), a_{i+1} and a_i swap places.
- **L_mono** of a batch: the sum of c_i over every pair of every sequence, divided by the
  number of target tokens (EOS included), like the cross-entropy; for several mechanisms,
  the mean over the selected ones. The training loss can instead divide each sentence's
  sum by its own |Y| and sum over the batch, as the authors' runs did
  (`monotonicity_loss(normalize="sentences_summed")`); the dev statistics stay per token.
- **%mono**: 100 x the share of pairs with c_i = 0, i.e. whose mean position rises by at
  least delta |X| / |Y| (up to 1e-6 |X|, for rounding). The denominator is the number of
  pairs, so a perfectly monotone output reaches 100.

Beside them, the measures on the scale of the paper's tables (the authors' own scorer, as
the issue that calibrated them describes it), per sentence and then averaged over
sentences (mean over the mechanisms, as ours):

- **mono_authors**: 100 x the pairs whose term strictly falls, d_i = a_i - a_{i+1} +
  delta |X| / |Y| < 0, over |Y| (not |Y| - 1): a perfectly diagonal output of |Y| = 5
  steps scores 80, attention that stays on one position 0 (ours: 100 for both). Over
  the CMUdict test words its ceiling is 85.3 (mean (|Y| - 1) / |Y|, EOS counted).
- **loss_authors**: the sum of max(d_i, 0) over the sentence's pairs, without eq. 4's
  division by |X|, over |Y|.

With a `<sep>` they read positions as the authors' runs did (`sep_positions: absolute`):
the lemma keeps its 1-based positions in the whole source, the tags and `<sep>` are
position 0, and the attention is not renormalized; |X| is the lemma's length.
"""

from __future__ import annotations

import re

import torch
from torch import Tensor

from transduce.errors import ConfigError
from transduce.special import SEP_ID

TOLERANCE = 1e-6  # a pair whose cost before the max is at most this is monotone
FLOOR = 1e-6  # the renormalizing mass over the counted positions is at least this


def layer_and_head(name: str) -> tuple[int, int]:
    """(layer, head), 1-based, of a mechanism named like "decoder.2.head.3"; (1, 1) for a
    model with a single attention ("attention")."""
    found = re.fullmatch(r"[a-z]+\.(\d+)\.head\.(\d+)", name)
    return (int(found.group(1)), int(found.group(2))) if found else (1, 1)


def select_mechanisms(
    names: list[str], layers: str | list[int], heads: str | list[int]
) -> list[int]:
    """Indices into `names` of the mechanisms in `layers` and `heads` (`all` or 1-based
    lists); a `ConfigError` names a layer or head the model does not have."""
    places = [layer_and_head(n) for n in names]
    for what, wanted, have in (
        ("layers", layers, {layer for layer, _ in places}),
        ("heads", heads, {head for _, head in places}),
    ):
        if wanted != "all" and not set(wanted) <= have:
            missing = sorted(set(wanted) - have)
            raise ConfigError(
                f"loss.monotonicity.{what}: the model has no {what[:-1]} {missing[0]} "
                f"(it has {', '.join(map(str, sorted(have)))})"
            )
    return [
        k
        for k, (layer, head) in enumerate(places)
        if (layers == "all" or layer in layers) and (heads == "all" or head in heads)
    ]


def counted_positions(source: Tensor, source_mask: Tensor) -> Tensor:
    """1-based positions of the counted source tokens, 0 elsewhere: B x S (long)."""
    sep = source == SEP_ID  # B x S
    after = (sep.long().cumsum(dim=1) > 0) & ~sep  # right of the first <sep>
    has_sep = sep.any(dim=1, keepdim=True)  # B x 1
    counted = source_mask & torch.where(has_sep, after, torch.ones_like(after))  # B x S
    return counted.long().cumsum(dim=1) * counted


def absolute_positions(source: Tensor, source_mask: Tensor) -> Tensor:
    """The authors' convention (`sep_positions: absolute`): each counted token keeps its
    1-based position in the whole source (the lemma right of a `<sep>` starts after the
    tags), the tags and `<sep>` count as position 0: B x S (long)."""
    counted = counted_positions(source, source_mask) > 0
    index = torch.arange(1, source.shape[1] + 1, device=source.device).expand_as(source)
    return index * counted


def mean_positions(attention: Tensor, positions: Tensor, renormalize: bool = True) -> Tensor:
    """Eq. (3) over the counted positions: B x K x T from attention B x K x T x S; without
    `renormalize`, the weight on uncounted positions (tags) stays in, at position 0."""
    weights = positions.to(attention.dtype)[:, None, None, :]  # B x 1 x 1 x S
    if not renormalize:
        return (attention * weights).sum(dim=-1)
    counted = (positions > 0).to(attention.dtype)[:, None, None, :]
    mass = (attention * counted).sum(dim=-1).clamp(min=FLOOR)  # B x K x T
    return (attention * weights).sum(dim=-1) / mass


SEP_POSITIONS = ("lemma", "absolute")


def pairwise_costs(
    attention: Tensor,
    source: Tensor,
    source_mask: Tensor,
    target_mask: Tensor,
    delta: float,
    reverse: bool = False,
    sep_positions: str = "lemma",
) -> tuple[Tensor, Tensor]:
    """The terms of eq. (4) before the max, B x K x (T - 1), and the mask of real pairs
    B x (T - 1) (both steps real, and at least one counted source position).

    `sep_positions` (only a source with a `<sep>` tells them apart): `lemma`, the lemma's
    positions renumbered from 1 and the attention renormalized over them (the mass on the
    tags set aside); `absolute`, as the authors' runs: the lemma keeps its positions in the
    whole source, the tags and `<sep>` are position 0, nothing is renormalized. |X| is
    the number of counted (lemma) tokens either way.
    """
    if sep_positions not in SEP_POSITIONS:
        raise ValueError(f"sep_positions: one of {', '.join(SEP_POSITIONS)}, not {sep_positions!r}")
    absolute = sep_positions == "absolute"
    find = absolute_positions if absolute else counted_positions
    positions = find(source, source_mask)  # B x S
    terms, pairs, _ = _terms(attention, positions, target_mask, delta, reverse, not absolute)
    return terms, pairs


def _terms(
    attention: Tensor,
    positions: Tensor,
    target_mask: Tensor,
    delta: float,
    reverse: bool,
    renormalize: bool = True,
) -> tuple[Tensor, Tensor, Tensor]:
    """`pairwise_costs` from the counted positions B x S (0: not counted), and |X| (B)."""
    x = (positions > 0).sum(dim=1).to(attention.dtype)  # |X|, B
    y = target_mask.sum(dim=1).to(attention.dtype)  # |Y|, B
    a = mean_positions(attention, positions, renormalize)  # B x K x T
    step = a[..., :-1] - a[..., 1:] if not reverse else a[..., 1:] - a[..., :-1]
    margin = (delta * x / y.clamp(min=1))[:, None, None]  # B x 1 x 1
    terms = (step + margin) / x.clamp(min=1)[:, None, None]  # B x K x (T-1)
    pairs = target_mask[:, :-1] & target_mask[:, 1:] & (x > 0).unsqueeze(1)  # B x (T-1)
    return terms, pairs, x


NORMALIZATIONS = ("tokens", "sentences_summed")


def monotonicity_loss(
    attention: Tensor,
    source: Tensor,
    source_mask: Tensor,
    target_mask: Tensor,
    delta: float,
    mechanisms: list[int],
    reverse: bool = False,
    normalize: str = "tokens",
    sep_positions: str = "lemma",
) -> Tensor:
    """L_mono of a batch (eq. 4), averaged over `mechanisms` (indices into K): a scalar
    with gradients.

    `normalize` says how the costs c_i of the batch become one number:
    - `tokens` (§3 of the paper: "we normalize the cost by the number of tokens in a
      batch"): the sum of every c_i of the batch / the batch's target tokens;
    - `sentences_summed` (the authors' Sockeye runs: each sentence's sum of c_i / its own
      |Y|, and these summed over the batch, since Sockeye's MakeLoss leaves the vector
      unnormalized): B times `tokens` when every sentence has the same |Y|, so a weight
      lambda means about B times more here.
    """
    terms, pairs = pairwise_costs(
        attention[:, mechanisms], source, source_mask, target_mask, delta, reverse, sep_positions
    )
    costs = terms.clamp(min=0) * pairs.unsqueeze(1)  # B x K' x (T-1)
    if normalize == "sentences_summed":
        lengths = target_mask.sum(dim=1).clamp(min=1).to(costs.dtype)  # |Y| per sentence
        return (costs.sum(dim=2) / lengths[:, None]).sum(dim=0).mean()
    if normalize != "tokens":
        raise ValueError(f"normalize: one of {', '.join(NORMALIZATIONS)}, not {normalize!r}")
    tokens = target_mask.sum().clamp(min=1)
    return costs.sum(dim=(0, 2)).mean() / tokens


class MonotonicityStats:
    """Running sums over batches, per mechanism: the loss and %mono of a dataset.

    The sums stay on the attention's device as one float64 vector (K sums of c_i, K counts
    of pairs with c_i = 0, K sums of the authors' rising pairs / |Y| and of their
    max(d_i, 0) / |Y|, then the pairs, tokens and sentences counted) and are read to the
    host once, when a measure is asked for: a validation on a GPU waits for the device at
    the end, not after every batch (issue 32)."""

    def __init__(self, names: list[str], delta: float, reverse: bool = False) -> None:
        self.names, self.delta, self.reverse = names, delta, reverse
        self._sums: Tensor | None = None  # 4K + 3, on the device; None before any batch
        self._host: list[float] | None = None  # the sums as read, until the next batch

    def _read(self) -> list[float]:
        if self._host is None:
            k = len(self.names)
            self._host = [0.0] * (4 * k + 3) if self._sums is None else self._sums.tolist()
        return self._host

    @property
    def cost(self) -> list[float]:  # sum of c_i, per mechanism
        return self._read()[: len(self.names)]

    @property
    def monotone(self) -> list[int]:  # pairs with c_i = 0, per mechanism
        k = len(self.names)
        return [round(v) for v in self._read()[k : 2 * k]]

    @property
    def rising(self) -> list[float]:  # the authors' scale: pairs with d_i < 0, / |Y|
        k = len(self.names)
        return self._read()[2 * k : 3 * k]

    @property
    def cost_authors(self) -> list[float]:  # the authors' scale: sum of max(d_i, 0), / |Y|
        k = len(self.names)
        return self._read()[3 * k : 4 * k]

    @property
    def pairs(self) -> int:
        return round(self._read()[-3])

    @property
    def tokens(self) -> int:
        return round(self._read()[-2])

    @property
    def sentences(self) -> int:
        return round(self._read()[-1])

    def add(self, attention: Tensor, source: Tensor, source_mask: Tensor, target_mask: Tensor):
        """Add a batch (attention B x K x T x S of the K mechanisms of `names`)."""
        positions = counted_positions(source, source_mask)  # B x S
        terms, pairs, x = _terms(
            attention.double(), positions, target_mask, self.delta, self.reverse
        )
        mask = pairs.unsqueeze(1)  # B x 1 x (T-1)
        costs = (terms.clamp(min=0) * mask).sum(dim=(0, 2))  # K
        flat = (terms <= TOLERANCE / x.clamp(min=1)[:, None, None]) & mask
        # the authors' scale: their positions (absolute with a <sep>, not renormalized;
        # without one, the same positions as ours), d_i = |X| c_i before the max; per
        # sentence / |Y|
        theirs = terms
        if bool((source == SEP_ID).any()):
            theirs, _, _ = _terms(
                attention.double(),
                absolute_positions(source, source_mask),
                target_mask,
                self.delta,
                self.reverse,
                renormalize=False,
            )
        steps = target_mask.sum(dim=1).clamp(min=1).to(terms.dtype)[:, None]  # B x 1
        scaled = theirs * x.clamp(min=1)[:, None, None]  # B x K x (T-1)
        rising = ((scaled < 0) & mask).sum(dim=2) / steps  # B x K
        cost_authors = (scaled.clamp(min=0) * mask).sum(dim=2) / steps  # B x K
        kept = (x > 0)[:, None]  # B x 1: a sentence with no counted position is left out
        batch = torch.cat(
            [
                costs,
                flat.sum(dim=(0, 2)).to(terms.dtype),
                torch.where(kept, rising, 0.0).sum(dim=0),
                torch.where(kept, cost_authors, 0.0).sum(dim=0),
                torch.stack([pairs.sum(), target_mask.sum(), kept.sum()]).to(terms.dtype),
            ]
        )
        self._sums = batch if self._sums is None else self._sums + batch
        self._host = None

    def loss(self, k: int) -> float:
        return self.cost[k] / max(self.tokens, 1)

    def percent(self, k: int) -> float:
        return 100.0 * self.monotone[k] / max(self.pairs, 1)

    def percent_authors(self, k: int) -> float:
        return 100.0 * self.rising[k] / max(self.sentences, 1)

    def loss_authors(self, k: int) -> float:
        return self.cost_authors[k] / max(self.sentences, 1)

    def summary(self) -> dict:
        """{"delta", "overall": MEASURES, "mechanisms": {name: MEASURES}} with MEASURES
        {"mono", "loss", "mono_authors", "loss_authors"}; overall is the mean over the
        mechanisms (as the loss averages them)."""
        per = {
            name: {
                "mono": self.percent(k),
                "loss": self.loss(k),
                "mono_authors": self.percent_authors(k),
                "loss_authors": self.loss_authors(k),
            }
            for k, name in enumerate(self.names)
        }
        n = max(len(self.names), 1)
        measures = ("mono", "loss", "mono_authors", "loss_authors")
        overall = {m: sum(p[m] for p in per.values()) / n for m in measures}
        return {"delta": self.delta, "overall": overall, "mechanisms": per}
