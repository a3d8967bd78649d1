"""Ensembles of sequence-to-sequence models at decode time (`transduce decode A B ...`).

An `Ensemble` is itself a `Seq2SeqModel`: greedy and beam search (`transduce.decoding`)
run it as they run one model. At every step each member reads the same output prefix from
its own state, and the members' next-symbol distributions are combined:

- `probability` (the default): the mean of the members' probabilities,
  log p(y) = log (1/M) sum_m p_m(y), as fairseq's `EnsembleModel` and OpenNMT-py's
  ensemble decoder combine them;
- `log-probability`: the mean of the members' log-probabilities, renormalized,
  log p(y) = (1/M) sum_m log p_m(y) - log sum_y' exp((1/M) sum_m log p_m(y'))
  (a product of experts; the renormalization keeps the scores of hypotheses of different
  lengths comparable).

A hard-attention member contributes its output distribution with the alignment summed out
(its `step` gives that marginal), so every family of the zoo can take part. The members
must share the vocabularies (the same prepared data); `Transducer.ensemble` checks that.
The cross-attention of an ensemble is its members' mechanisms side by side, named
"m1.decoder.1.head.1", ... ("m1.attention" for a single one).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import ClassVar

import torch
from torch import Tensor, nn

from transduce import defaults
from transduce.data.batching import Batch
from transduce.errors import ConfigError
from transduce.models.base import ModelConfig, Seq2SeqModel, Seq2SeqOutput, State, Step
from transduce.models.copy import copies, in_vocabulary

MEANS = defaults.ENSEMBLE_MEANS


def combine(log_probs: Sequence[Tensor], mean: str = "probability") -> Tensor:
    """The ensemble's log-probabilities from the members' (each ... x V, log-normalized).
    A member that copies may add K extended ids (unknown source symbols,
    `transduce.models.copy`); the others give them probability 0 (so under the
    `log-probability` mean, one member that does not copy rules the copies out)."""
    width = max(lp.shape[-1] for lp in log_probs)
    stacked = torch.stack(
        [
            nn.functional.pad(lp.float(), (0, width - lp.shape[-1]), value=float("-inf"))
            for lp in log_probs
        ]
    )  # M x ... x (V + K)
    if mean == "probability":
        return torch.logsumexp(stacked, dim=0) - math.log(len(log_probs))
    if mean == "log-probability":
        return torch.log_softmax(stacked.mean(dim=0), dim=-1)
    raise ConfigError(f"ensemble mean {mean!r}: one of {', '.join(MEANS)}")


class Ensemble(Seq2SeqModel):
    """Models of one vocabulary decoded as one (see the module docstring)."""

    name: ClassVar[str] = "ensemble"
    Config: ClassVar[type[ModelConfig]] = ModelConfig

    def __init__(self, members: Sequence[Seq2SeqModel], mean: str = "probability") -> None:
        if not members:
            raise ConfigError("an ensemble needs at least one model")
        if mean not in MEANS:
            raise ConfigError(f"ensemble mean {mean!r}: one of {', '.join(MEANS)}")
        first = members[0]
        super().__init__(first.config, first.source_vocab, first.target_vocab)
        self.members = nn.ModuleList(members)
        self.mean = mean

    @property
    def max_length(self) -> int | None:
        limits = [m.max_length for m in self.models if m.max_length is not None]
        return min(limits) if limits else None

    @property
    def models(self) -> list[Seq2SeqModel]:
        return [m for m in self.members if isinstance(m, Seq2SeqModel)]  # all of them

    @property
    def attention_names(self) -> list[str]:
        return [f"m{i}.{name}" for i, m in enumerate(self.models, 1) for name in m.attention_names]

    def forward(self, batch: Batch) -> Seq2SeqOutput:
        plain = batch  # for a member that does not copy: an extended id read as <unk>
        if batch.target_in is not None and batch.copy_slots is not None:
            plain = replace(batch, target_in=in_vocabulary(batch.target_in, self.target_vocab))
        outputs = [m(batch if copies(m) else plain) for m in self.models]
        return Seq2SeqOutput(
            log_probs=combine([o.log_probs for o in outputs], self.mean),
            attention=torch.cat([o.attention.float() for o in outputs], dim=1),
            attention_names=self.attention_names,
            source_mask=outputs[0].source_mask,
            target_mask=outputs[0].target_mask,
        )

    def init_state(self, batch: Batch) -> State:
        """The members' states in one dict, each key prefixed with its member's number (so
        that selecting beam rows selects them in every member)."""
        return {
            f"{i}/{key}": value
            for i, m in enumerate(self.models)
            for key, value in m.init_state(batch).items()
        }

    def step(self, state: State, previous: Tensor) -> Step:
        parts: list[State] = [{} for _ in self.models]
        for key, value in state.items():
            index, _, name = key.partition("/")
            parts[int(index)][name] = value
        steps = [  # an extended id (a copied unknown symbol) is <unk> to a model that does not copy
            m.step(part, previous if copies(m) else in_vocabulary(previous, m.target_vocab))
            for m, part in zip(self.models, parts)
        ]
        return Step(
            log_probs=combine([s.log_probs for s in steps], self.mean),
            attention=torch.cat([s.attention.float() for s in steps], dim=1),
            state={f"{i}/{k}": v for i, s in enumerate(steps) for k, v in s.state.items()},
        )
