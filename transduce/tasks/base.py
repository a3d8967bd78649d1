"""The task contract: what differs between kinds of work, so the trainer is one loop.

A task owns its data (reading the prepared splits, vocabularies, encoding), its batches
and training loss, how it evaluates on dev data, how it predicts (test output, `decode`)
and what it adds to a checkpoint. The trainer (`transduce.training`) and the decoder
(`transduce.inference`) only call these methods; neither knows which task it runs.

Adding a kind of work means writing a `Task` subclass and registering it in
`transduce.tasks.TASKS` under the `task` name its models declare.
"""

from __future__ import annotations

import dataclasses
import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import torch

from transduce import config as configuration
from transduce import runs
from transduce.data import tokens
from transduce.data.dataset import EvalSet, Pair, Prepared, load_prepared
from transduce.data.prepare import MANIFEST, PrepareRequest, prepare
from transduce.data.vocab import Vocab
from transduce.errors import ConfigError, DataError
from transduce.models import MODELS, Model
from transduce.precision import autocast


def dev_subset(pairs: list[Pair], count: int, seed: int) -> list[Pair]:
    """The lines of `count` distinct dev sources drawn with `seed` (all the lines of each:
    every reference of a chosen word), in their file order; all lines if there are fewer."""
    sources = list(dict.fromkeys(p.source for p in pairs))
    if count >= len(sources):
        return pairs
    chosen = set(random.Random(f"dev_subset:{seed}").sample(sources, count))
    return [p for p in pairs if p.source in chosen]


@dataclass
class TaskData:
    """A run's data, encoded with its vocabularies (a task may add fields).

    Attributes:
        train: (source ids, target ids) of the kept training examples.
        dev: the same for the dev examples (teacher-forced dev loss).
        dev_eval: the distinct dev sources with all their references (free decoding).
        test_eval: the same for the test split, if it has targets.
        skipped_long: training examples left out for data.max_*_length.
    """

    prepared: Prepared
    vocabs: dict[str, Vocab]  # "source", "target", and any the task adds
    train: list[tuple[list[int], list[int]]]
    dev: list[tuple[list[int], list[int]]]
    dev_eval: EvalSet
    test_eval: EvalSet | None
    skipped_long: int

    @property
    def source_vocab(self) -> Vocab:
        return self.vocabs["source"]

    @property
    def target_vocab(self) -> Vocab:
        return self.vocabs["target"]


D = TypeVar("D", bound=TaskData)
M = TypeVar("M", bound=Model)  # the kind of model the task trains and runs


@dataclass
class Candidate:
    """One output of `Task.predict`: the output symbols and their score (None: the task
    ranks no alternatives)."""

    symbols: list[str]
    score: float | None = None


@dataclass
class Splits:
    """The prepared data as a task reads it, before encoding."""

    prepared: Prepared
    train: list[Pair]  # kept: within data.max_source_length / max_target_length
    skipped_long: int
    dev: list[Pair]  # with targets
    test: list[Pair]


def encode_pairs(
    pairs: Sequence[Pair], source: Vocab, target: Vocab
) -> list[tuple[list[int], list[int]]]:
    """(source ids, target ids) of the pairs that have a target."""
    return [
        (source.encode(p.source), target.encode(p.target)) for p in pairs if p.target is not None
    ]


class Task(ABC, Generic[D, M]):
    """One kind of work: sequence-to-sequence transduction, tagging, ...

    Args:
        config: The validated configuration of the run (or of the checkpoint).
        device: Where batches and the model go.
        precision: fp32, bf16 or fp16: the autocast of forward passes (what
            `transduce.precision.choose` gave).
    """

    name: ClassVar[str]

    def __init__(
        self, config: configuration.Config, device: torch.device, precision: str = "fp32"
    ) -> None:
        self.config, self.device, self.precision = config, device, precision

    @property
    def bf16(self) -> bool:
        """Whether forward passes run under bfloat16 autocast."""
        return self.precision == "bf16"

    @classmethod
    def check(cls, config: configuration.Config) -> list[str]:
        """Problems of a configuration for this task (e.g. a selection metric it cannot
        compute), each "section.key: message"."""
        return []

    def autocast(self) -> Any:
        """The precision context of forward passes."""
        return autocast(self.device, self.precision)

    # ----------------------------------------------------------------- data

    @property
    @abstractmethod
    def metrics(self) -> list[str]:
        """The metrics scored at each validation and on the test set."""

    def prepared_dir(self, run_dir: Path) -> Path:
        """The prepared data: `data.prepared`, or raw data prepared into RUN_DIR/data."""
        data = self.config.data
        if data.prepared is not None:
            return Path(data.prepared)
        target = run_dir / runs.DATA
        if (target / MANIFEST).is_file():
            return target  # prepared by an earlier start of this run
        if data.format is None:  # config.DataConfig.check requires one of the two
            raise ConfigError("data.prepared: give `prepared` or `format`")
        inputs = {
            split: [Path(p) for p in paths]
            for split, paths in (("train", data.train), ("dev", data.dev), ("test", data.test))
            if paths
        }
        prepare(
            PrepareRequest(
                data.format,
                target,
                inputs=inputs,
                options=dict(data.options),
                dev_ratio=data.dev_ratio,
                test_ratio=data.test_ratio,
                seed=data.split_seed,
            )
        )
        return target

    def read_splits(self, directory: Path) -> Splits:
        """The prepared splits: kept training pairs, dev pairs with targets, test pairs."""
        prepared = load_prepared(directory)
        c = self.config.data
        train = [p for p in prepared.splits["train"] if p.target is not None]
        kept = [
            p
            for p in train
            if p.target is not None
            and (c.max_source_length is None or len(p.source) <= c.max_source_length)
            and (c.max_target_length is None or len(p.target) <= c.max_target_length)
        ]
        if not kept:
            raise DataError(
                "no training example left (check data.max_source_length)", prepared.directory
            )
        prepared.splits["train"] = []  # encoded next: the symbol tuples would only take memory
        dev = [p for p in prepared.splits["dev"] if p.target is not None]
        if not dev:
            raise DataError(
                "the dev split has no examples with targets: nothing to validate on",
                prepared.directory,
            )
        t = self.config.train
        if t.dev_subset is not None:
            seed = t.seed if t.dev_subset_seed is None else t.dev_subset_seed
            dev = dev_subset(dev, t.dev_subset, seed)
        test = prepared.splits["test"] if t.test else []
        return Splits(prepared, kept, len(train) - len(kept), dev, test)

    @abstractmethod
    def load_data(self, directory: Path, vocabs: dict[str, list[str]] | None = None) -> D:
        """Read and encode the prepared data in `directory`, with the vocabularies of a
        checkpoint (`vocabs`, a resumed run) or new ones built from the training data."""

    # ---------------------------------------------------------------- model

    @abstractmethod
    def build_model(self, vocabs: dict[str, list[str]]) -> M:
        """The configured model for these vocabularies (symbol lists by name)."""

    def construct(self, vocabs: dict[str, list[str]], **sizes: int) -> Model:
        """The configured model family with the sizes of these vocabularies (and `sizes`);
        a model's own objection to its options is a `ConfigError`."""
        c = self.config
        try:
            return MODELS[c.model_name](
                c.model, len(vocabs["source"]), len(vocabs["target"]), **sizes
            )
        except ValueError as error:
            raise ConfigError(f"model: {error}") from None

    def check_model(self, model: M, data: D) -> None:
        """Raise a `ConfigError` if the data holds what the model cannot take."""

    def warnings(self) -> list[str]:
        """Settings that work but that the papers advise against."""
        return []

    def initialize(self, model: M, data: D) -> str | None:
        """Initialize a new (not resumed) model from outside data; a message if it did."""
        return None

    # -------------------------------------------------------------- training

    @abstractmethod
    def lengths(self, data: D) -> list[tuple[int, int]]:
        """(source, target) length of each training example, for batch planning."""

    @abstractmethod
    def loss_tokens(self, data: D, indices: list[int]) -> int:
        """The tokens of the training examples `indices` that the loss is a mean over."""

    @abstractmethod
    def training_loss(
        self, model: M, data: D, indices: list[int], update: int, share: float = 1.0
    ) -> torch.Tensor:
        """The loss to minimize on the training examples `indices` at update `update`.

        When an update's batch is split (into micro-batches, or between processes), each
        part passes its `share` of the batch's `loss_tokens`: its per-token means are
        weighted by it, so that the parts' losses add up to the whole batch's loss, and
        their gradients to its gradient."""

    @abstractmethod
    def dev_loss(self, model: M, data: D) -> tuple[float, dict[str, Any]]:
        """Teacher-forced loss per dev token, and the task's dev statistics for the
        history (e.g. monotonicity)."""

    def test_statistics(self, model: M, data: D) -> dict[str, Any] | None:
        """The task's statistics of the test split, as `dev_loss` gives them for the dev
        split (None: the task has none, or the test split has no targets)."""
        return None

    def evaluation_options(self) -> configuration.DecodeConfig:
        """How dev and test sources are predicted: the `decode` section, one output each,
        in batches of `train.dev_batch_size`."""
        return dataclasses.replace(
            self.config.decode, nbest=1, batch_size=self.config.train.dev_batch_size
        )

    def best_outputs(
        self, model: M, vocabs: dict[str, Vocab], sources: Sequence[Sequence[str]]
    ) -> list[list[str]]:
        """The best output symbols of each source, as `evaluate` scores them."""
        predicted = self.predict(model, vocabs, sources, self.evaluation_options())
        return [candidates[0].symbols for candidates in predicted]

    @abstractmethod
    def evaluate(
        self, model: M, data: D, evalset: EvalSet
    ) -> tuple[dict[str, float], list[list[str]]]:
        """Predict the sources of `evalset` and score them: (scores, output symbols)."""

    def test_lines(self, data: D, outputs: list[list[str]]) -> list[str]:
        """The lines of `test.predictions`: one per test line, in the target's own text."""
        assert data.test_eval is not None
        by_source = dict(zip(data.test_eval.sources, outputs))
        side = data.prepared.sides.target
        return [side.detokenize(by_source[p.source]) for p in data.prepared.splits["test"]]

    def checkpoint_extras(self, data: D) -> dict[str, Any]:
        """What a checkpoint needs besides weights and training state to decode alone:
        vocabularies, side specs, embedded subword models."""
        return {
            "vocab": {name: vocab.symbols for name, vocab in data.vocabs.items()},
            "sides": data.prepared.manifest["sides"],
            "subwords": subword_models(data.prepared),
        }

    # ------------------------------------------------------------- predicting

    def check_decode(self, options: configuration.DecodeConfig) -> None:
        """Raise a `ConfigError` for decoding options the task cannot honour."""

    def input_limit(self, model: M) -> int | None:
        """The most input symbols `predict` takes (None: any number): the model's length,
        less the source end symbol where the data has one (`data.source_eos`)."""
        if model.max_length is None:
            return None
        return model.max_length - int(self.config.data.source_eos)

    @abstractmethod
    def predict(
        self,
        model: M,
        vocabs: dict[str, Vocab],
        sources: Sequence[Sequence[str]],
        options: configuration.DecodeConfig,
    ) -> list[list[Candidate]]:
        """The best outputs of each source (up to `options.nbest`), best first."""


def subword_models(prepared: Prepared) -> dict[str, Any]:
    """The BPE model files of the data, embedded so a checkpoint decodes raw text alone."""
    models = {}
    for side in ("source", "target"):
        spec = prepared.manifest["sides"].get(side, {})
        if spec.get("unit") == tokens.SUBWORD and spec.get("model"):
            path = prepared.directory / spec["model"]
            models[side] = {
                "library": spec["library"],
                "name": spec["model"],
                "data": path.read_bytes(),
            }
    return models
