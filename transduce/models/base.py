"""The model contract, in two layers.

`Model` is every model of the zoo: teacher-forced `forward(batch)` and `loss(batch,
output)`, which reads the output's `log_probs` (B x T x V) and `target_mask` (B x T).
`Seq2SeqModel` adds what free decoding, the monotonicity loss and the analyzer need:

    forward(batch) -> Seq2SeqOutput       teacher-forced, parallel where possible
    init_state(batch) -> State             encode once
    step(state, previous) -> Step          one decoder step: log-probs B x V, attention B x K x S

`attention` is B x K x T x S in `forward` and B x K x S in `step`, K = the model's
cross-attention mechanisms (layers x heads, or 1), named by `attention_names`. One decoder,
one monotonicity loss and one analyzer serve every sequence-to-sequence model through it.

`Tagger` is a `Model` that labels each source token (`tag`); its self-attention is
`self_attention` / `self_attention_names`. Which kind of work trains a model is its
`task`, a key of `transduce.tasks.TASKS`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol, TypeVar

import torch
from torch import Tensor, nn

from transduce.data.batching import Batch

State = dict[str, Tensor]  # every tensor batch-first, so that beams can be selected


class ModelConfig:
    """Base of every model's config dataclass: what the rest of the toolkit may ask of
    any model's options without knowing the family."""

    # the option that bounds sequence lengths (named in length errors), if any
    length_option: ClassVar[str | None] = None

    @property
    def shared_vocabulary(self) -> bool:
        """One vocabulary for source and target (e.g. all embeddings tied)."""
        return False

    @property
    def cross_attention_dropout(self) -> float:
        """Dropout on the cross-attention weights (Rios et al. 2021 warn against it with
        the monotonicity loss)."""
        return 0.0

    def check(self) -> list[str]:
        """Problems with the values (types are checked by the config loader)."""
        return []


class TaggerConfig(ModelConfig):
    """What the tagging task reads of a tagger's options before the model exists."""

    max_word_length: int  # characters read per word
    word_vectors: str | None  # a text file of word vectors for the embeddings, if any

    def length_limit(self) -> int | None:
        """The longest sentence the tagger takes (longer ones are cut); None: any."""
        return None


class Output(Protocol):
    """What `Model.loss` reads from a forward pass."""

    log_probs: Tensor  # B x T x V
    target_mask: Tensor  # B x T, True on real tokens


@dataclass
class Seq2SeqOutput:
    log_probs: Tensor  # B x T x V
    attention: Tensor  # B x K x T x S
    attention_names: list[str]  # K names
    source_mask: Tensor  # B x S, True on real tokens
    target_mask: Tensor  # B x T, True on real tokens
    # the attention as it mixed the states in training, after dropout on its weights and
    # DropHead (a dropped head all 0); None: the same as `attention` (no such dropout)
    attention_after_dropout: Tensor | None = None


@dataclass
class Step:
    log_probs: Tensor  # B x V
    attention: Tensor  # B x K x S
    state: State


def select_state(state: State, index: Tensor) -> State:
    """Keep (or repeat) the batch rows `index` of every tensor of a decoder state."""
    return {key: value.index_select(0, index) for key, value in state.items()}


class Model(nn.Module, ABC):
    """Base of the zoo. A family derives from `Seq2SeqModel` or `Tagger` (which set `task`),
    sets `name` and `Config` and implements the abstract methods."""

    name: ClassVar[str]
    Config: ClassVar[type[ModelConfig]]
    task: ClassVar[str]  # the key of its kind of work in `transduce.tasks.TASKS`

    def __init__(self, config: ModelConfig, source_vocab: int, target_vocab: int) -> None:
        super().__init__()
        self.config = config
        self.source_vocab = source_vocab
        self.target_vocab = target_vocab

    @property
    def max_length(self) -> int | None:
        """How many positions a source, or a decoder input (BOS and the output), can have.

        None: no limit. Decoding stops outputs at `max_length - 1` symbols.
        """
        return None

    @abstractmethod
    def forward(self, batch: Batch) -> Output:
        """Teacher-forced log-probabilities of `batch.target_out`."""

    def loss(self, batch: Batch, output: Output, label_smoothing: float = 0.0) -> dict[str, Tensor]:
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

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())


class Seq2SeqModel(Model):
    """A model that writes an output sequence step by step, attending to the source."""

    task = "seq2seq"

    @property
    @abstractmethod
    def attention_names(self) -> list[str]:
        """The K cross-attention mechanisms, e.g. ["decoder.1.head.1", ...] or ["attention"]."""

    @abstractmethod
    def forward(self, batch: Batch) -> Seq2SeqOutput:
        """Teacher-forced log-probabilities and cross-attention."""

    @abstractmethod
    def init_state(self, batch: Batch) -> State:
        """Encode the source once; the state every `step` starts from."""

    @abstractmethod
    def step(self, state: State, previous: Tensor) -> Step:
        """One decoder step from the previous output ids (B)."""

    def read_vocabularies(self, source: list[str], target: list[str]) -> None:
        """Take what the model needs to know of its symbols (the task calls it once the
        model is built, before any weights are loaded); most models need nothing."""

    def alignment_posterior(self, batch: Batch) -> Tensor | None:
        """p(a_i = j | y, x) of the reference targets, B x K x T x S, for models whose
        alignment is a latent variable (hard attention); None for the others."""
        return None


class Tagger(Model):
    """A model that gives each source token one label, all at once (no decoder steps)."""

    task = "tagging"

    config: TaggerConfig

    @abstractmethod
    def tag(self, batch: Batch) -> Tensor:
        """The most probable label id of each token: B x S (PAD_ID on padding)."""

    @property
    @abstractmethod
    def self_attention_names(self) -> list[str]:
        """The self-attention mechanisms, in the order of `self_attention`."""

    @abstractmethod
    def self_attention(self, batch: Batch) -> Tensor:
        """Every self-attention mechanism's weights: B x K x S x S."""

    @abstractmethod
    def load_word_vectors(self, path: str | Path, symbols: list[str]) -> int:
        """Initialize the embeddings of the words `symbols` (the source vocabulary) from
        a file of word vectors (`TaggerConfig.word_vectors`); returns how many were found."""


MODELS: dict[str, type[Model]] = {}
M = TypeVar("M", bound=Model)


def expect(model: Model, kind: type[M]) -> M:
    """`model` as the kind of model the caller works with. The task registry pairs each
    model with the task of its kind, so a mismatch is a bug (TypeError), not a user's."""
    if not isinstance(model, kind):
        raise TypeError(f"model {model.name} is not a {kind.__name__}")
    return model


def register(cls: type[M]) -> type[M]:
    """Class decorator: add a model to `MODELS` under its `name`."""
    MODELS[cls.name] = cls
    return cls


def wide(x: Tensor) -> Tensor:
    """float32, or float64 when it already is (a lower precision is widened to float32)."""
    return x if x.dtype == torch.float64 else x.float()


def masked_softmax(scores: Tensor, mask: Tensor) -> Tensor:
    """Softmax over the last axis where `mask` is True (it broadcasts against scores)."""
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
