"""The model contract: every model of the zoo exposes its cross-attention in one shape.

    forward(batch) -> Seq2SeqOutput       teacher-forced, parallel where possible
    loss(batch, output) -> {"loss", "nll"} token-level, masked, optionally label-smoothed
    init_state(batch) -> State             encode once
    step(state, previous) -> Step          one decoder step: log-probs B x V, attention B x K x S

`attention` is B x K x T x S in `forward` and B x K x S in `step`, K = the model's
attention mechanisms (layers x heads, or 1), named by `attention_names`. One decoder,
one monotonicity loss and one analyzer serve every model through it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from transduce.data.batching import Batch

State = dict[str, Tensor]  # every tensor batch-first, so that beams can be selected


@dataclass
class Seq2SeqOutput:
    log_probs: Tensor  # B x T x V
    attention: Tensor  # B x K x T x S
    attention_names: list[str]  # K names
    source_mask: Tensor  # B x S, True on real tokens
    target_mask: Tensor  # B x T, True on real tokens


@dataclass
class Step:
    log_probs: Tensor  # B x V
    attention: Tensor  # B x K x S
    state: State


def select_state(state: State, index: Tensor) -> State:
    """Keep (or repeat) the batch rows `index` of every tensor of a decoder state."""
    return {key: value.index_select(0, index) for key, value in state.items()}


class Model(nn.Module, ABC):
    """Base of the zoo. Subclasses set `name` and `Config` and implement the four methods."""

    name: ClassVar[str]
    Config: ClassVar[type]
    # "seq2seq" (this contract) or "tagging" (one label per source token:
    # `transduce.models.tagger`, trained by `transduce.tagging`)
    task: ClassVar[str] = "seq2seq"

    def __init__(self, config: Any, source_vocab: int, target_vocab: int) -> None:
        super().__init__()
        self.config = config
        self.source_vocab = source_vocab
        self.target_vocab = target_vocab

    @property
    @abstractmethod
    def attention_names(self) -> list[str]:
        """The K attention mechanisms, e.g. ["decoder.1.head.1", ...] or ["attention"]."""

    @property
    def max_length(self) -> int | None:
        """How many positions a source, or a decoder input (BOS and the output), can have.

        None: no limit. Decoding stops outputs at `max_length - 1` symbols.
        """
        return None

    @abstractmethod
    def forward(self, batch: Batch) -> Seq2SeqOutput:
        """Teacher-forced log-probabilities and cross-attention."""

    @abstractmethod
    def init_state(self, batch: Batch) -> State:
        """Encode the source once; the state every `step` starts from."""

    @abstractmethod
    def step(self, state: State, previous: Tensor) -> Step:
        """One decoder step from the previous output ids (B)."""

    def loss(
        self, batch: Batch, output: Seq2SeqOutput, label_smoothing: float = 0.0
    ) -> dict[str, Tensor]:
        """Mean over target tokens (EOS included, padding excluded).

        Returns:
            "nll": the negative log-likelihood per token; "loss": what is minimized, with
            label smoothing eps: (1 - eps) * nll + eps * mean over the vocabulary of -log p.
        """
        log_probs = output.log_probs  # B x T x V
        target = batch.target_out  # B x T
        mask = output.target_mask  # B x T
        tokens = mask.sum().clamp(min=1)
        nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # B x T
        nll = (nll * mask).sum() / tokens
        if label_smoothing == 0:
            return {"loss": nll, "nll": nll}
        uniform = -log_probs.mean(dim=-1)  # B x T
        smooth = (uniform * mask).sum() / tokens
        return {"loss": (1 - label_smoothing) * nll + label_smoothing * smooth, "nll": nll}

    def alignment_posterior(self, batch: Batch) -> Tensor | None:
        """p(a_i = j | y, x) of the reference targets, B x K x T x S, for models whose
        alignment is a latent variable (hard attention); None for the others."""
        return None

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())


MODELS: dict[str, type[Model]] = {}


def register(cls: type[Model]) -> type[Model]:
    """Class decorator: add a model to `MODELS` under its `name`."""
    MODELS[cls.name] = cls
    return cls


def wide(x: Tensor) -> Tensor:
    """float32, or float64 when it already is (a lower precision is widened to float32)."""
    return x if x.dtype == torch.float64 else x.float()


def masked_softmax(scores: Tensor, mask: Tensor) -> Tensor:
    """Softmax over the last axis where `mask` is True (it broadcasts against scores)."""
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
