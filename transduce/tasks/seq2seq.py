"""Sequence-to-sequence transduction: G2P, inflection, transliteration, normalization.

Training minimizes the token-level NLL, plus the monotonicity loss of Rios et al. (2021)
(eq. 4: NLL + lambda * L_mono over the selected cross-attention mechanisms) when its
weight is positive. Dev evaluation decodes every distinct dev source once (greedy by
default, `decode` options otherwise) and scores it with the metric module against all of
its references, as `transduce score` would score the printed text.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from transduce import config as configuration
from transduce.data.batching import collate, plan_batches
from transduce.data.dataset import EvalSet, build_vocabs, eval_set
from transduce.data.sides import Side
from transduce.data.vocab import Vocab
from transduce.decoding import decode_all
from transduce.errors import ConfigError
from transduce.metrics import METRICS, get_metric
from transduce.metrics.corpus import Corpus
from transduce.metrics.tagging import TaggingAccuracy
from transduce.models import Seq2SeqModel, expect
from transduce.models.copy import copies, copy_targets
from transduce.monotonicity import MonotonicityStats, monotonicity_loss, select_mechanisms
from transduce.schedules import MonotonicityWeight
from transduce.tasks.base import Candidate, Task, TaskData, encode_pairs

EVAL_METRICS = ("acc", "wer", "per", "lev")


class Seq2SeqTask(Task[TaskData, Seq2SeqModel]):
    """Transduce a source sequence into a target sequence (`Seq2SeqModel`s)."""

    name = "seq2seq"

    def __init__(
        self, config: configuration.Config, device: torch.device, precision: str = "fp32"
    ) -> None:
        super().__init__(config, device, precision)
        self.weight = MonotonicityWeight(config.loss.monotonicity)

    @classmethod
    def check(cls, config: configuration.Config) -> list[str]:
        t = config.train
        for key, name in [("select_on", t.select_on)] + [("select_also", n) for n in t.select_also]:
            if name in METRICS and issubclass(METRICS[name], TaggingAccuracy):
                return [f"train.{key}: {name} scores taggers; choose another metric"]
        return []

    @property
    def metrics(self) -> list[str]:
        t = self.config.train
        return list(dict.fromkeys([t.select_on, *t.select_also, *EVAL_METRICS]))

    # ----------------------------------------------------------------- data

    def load_data(self, directory: Path, vocabs: dict[str, list[str]] | None = None) -> TaskData:
        c = self.config
        splits = self.read_splits(directory)
        if vocabs is None:
            shared = c.model.shared_vocabulary
            copy = bool(getattr(c.model, "copy", False))
            source, target = build_vocabs(
                splits.train, shared, c.data.min_count, c.data.vocab_fraction, copy
            )
        else:
            source, target = Vocab(vocabs["source"]), Vocab(vocabs["target"])
        if c.data.source_eos:  # Sockeye's source </s>, in |X| (its own object: a shared
            source = Vocab(source.symbols, end=True)  # vocabulary's targets have none)
        test = splits.test
        return TaskData(
            splits.prepared,
            {"source": source, "target": target},
            encode_pairs(splits.train, source, target),
            encode_pairs(splits.dev, source, target),
            eval_set(splits.dev),
            eval_set(test) if test and all(p.target is not None for p in test) else None,
            splits.skipped_long,
        )

    # ---------------------------------------------------------------- model

    def build_model(self, vocabs: dict[str, list[str]]) -> Seq2SeqModel:
        seq2seq = expect(self.construct(vocabs), Seq2SeqModel)  # the registry pairs them
        self.mechanisms(seq2seq)  # layers and heads it has, or say so
        seq2seq.read_vocabularies(vocabs["source"], vocabs["target"])
        return seq2seq

    def mechanisms(self, model: Seq2SeqModel) -> list[int]:
        """The attention mechanisms (indices into K) of the monotonicity loss and of the
        dev %mono: `loss.monotonicity.layers` x `heads`."""
        m = self.config.loss.monotonicity
        return select_mechanisms(model.attention_names, m.layers, m.heads)

    def check_model(self, model: Seq2SeqModel, data: TaskData) -> None:
        """A sequence the model cannot take: say so before training."""
        limit = model.max_length
        if limit is None:
            return
        longest = {
            "train": max(max(len(s), len(g) + 1) for s, g in data.train),  # + BOS
            "dev": max(len(s) for s, _ in data.dev),
            "test": (
                max(map(len, data.test_eval.sources)) + int(data.vocabs["source"].end)
                if data.test_eval
                else 0
            ),
        }
        for split, length in longest.items():
            if length > limit:
                hint = (
                    "leave long training examples out with data.max_source_length "
                    "and data.max_target_length"
                    if split == "train"
                    else f"shorten the {split} split"
                )
                option = self.config.model.length_option
                fix = f"raise model.{option}, or {hint}" if option else hint
                raise ConfigError(
                    f"model: the {split} split has a sequence of {length} positions, more "
                    f"than the model takes ({limit}): {fix}"
                )

    def warnings(self) -> list[str]:
        c = self.config
        if c.loss.monotonicity.weight > 0 and c.model.cross_attention_dropout > 0:
            return [
                "loss.monotonicity.weight > 0 with dropout on the cross-attention weights: "
                "Rios et al. (2021) found this combination reaches a degenerate optimum"
            ]
        return []

    # -------------------------------------------------------------- training

    def lengths(self, data: TaskData) -> list[tuple[int, int]]:
        return [(len(s), len(g)) for s, g in data.train]

    def loss_tokens(self, data: TaskData, indices: list[int]) -> int:
        return sum(len(data.train[i][1]) + 1 for i in indices)  # EOS included

    def training_loss(
        self,
        model: Seq2SeqModel,
        data: TaskData,
        indices: list[int],
        update: int,
        share: float = 1.0,
    ) -> torch.Tensor:
        batch = collate(
            [data.train[i][0] for i in indices], [data.train[i][1] for i in indices]
        ).to(self.device)
        m = self.config.loss.monotonicity
        weight = self.weight.at(update)
        s2s = model
        with self.autocast():
            output = s2s(batch)
            losses = model.loss(batch, output, self.config.loss.label_smoothing)
            losses["loss"] = losses["loss"] * share  # a mean over the target tokens
            if weight > 0:  # Rios et al. (2021): NLL + lambda * L_mono, eq. (4)
                attention = output.attention
                if (
                    m.reads == "attention_after_dropout"
                    and output.attention_after_dropout is not None
                ):
                    attention = output.attention_after_dropout
                assert batch.target_mask is not None  # collated with targets
                mono = monotonicity_loss(
                    attention.float(),
                    batch.source,
                    batch.source_mask,
                    batch.target_mask,
                    m.margin,
                    self.mechanisms(s2s),
                    m.reverse,
                    m.normalize,
                    m.sep_positions,
                )
                if m.normalize == "tokens":  # a mean over the tokens, not a sum of sentences
                    mono = mono * share
                losses["loss"] = losses["loss"] + weight * mono
        return losses["loss"]

    def dev_loss(self, model: Seq2SeqModel, data: TaskData) -> tuple[float, dict[str, Any]]:
        """Teacher-forced negative log-likelihood per target token, and the monotonicity
        (L_mono and %mono at the configured margin) of the selected attention mechanisms."""
        return self.forced(model, data.dev)

    def test_statistics(self, model: Seq2SeqModel, data: TaskData) -> dict[str, Any] | None:
        """The monotonicity of the selected attention on every test line (each reference
        read teacher-forced, as on the dev split and as Rios et al. 2021 measure it; with
        learned positions, the lines longer than the model can read are left out)."""
        test = data.prepared.splits["test"]
        if not test or any(p.target is None for p in test):
            return None
        pairs = encode_pairs(test, data.source_vocab, data.target_vocab)
        limit = model.max_length  # learned positions: a longer reference cannot be read
        if limit is not None:
            pairs = [(s, t) for s, t in pairs if len(s) <= limit and len(t) + 1 <= limit]
        if not pairs:
            return None
        statistics = self.forced(model, pairs)[1]
        return statistics if statistics.get("mechanisms") else None

    def forced(
        self, model: Seq2SeqModel, pairs: list[tuple[list[int], list[int]]]
    ) -> tuple[float, dict[str, Any]]:
        """`dev_loss` of these (source ids, target ids) pairs."""
        s2s = model
        mechanisms = self.mechanisms(s2s)
        model.eval()
        # running sums on the device, read once at the end (no wait for the device per batch)
        total, count = torch.zeros((), dtype=torch.float64, device=self.device), 0
        m = self.config.loss.monotonicity
        names = [s2s.attention_names[k] for k in mechanisms]
        stats = MonotonicityStats(names, m.margin, m.reverse)
        lengths = [(len(s), len(t)) for s, t in pairs]
        with torch.inference_mode(), self.autocast():
            for chunk in plan_batches(lengths, self.config.train.dev_batch_size, bucketing=True):
                batch = collate([pairs[i][0] for i in chunk], [pairs[i][1] for i in chunk]).to(
                    self.device
                )
                assert batch.target_mask is not None  # collated with targets
                tokens_ = sum(lengths[i][1] for i in chunk) + len(chunk)  # with each end symbol
                output = s2s(batch)
                total += model.loss(batch, output)["nll"].double() * tokens_
                count += tokens_
                stats.add(
                    output.attention[:, mechanisms],
                    batch.source,
                    batch.source_mask,
                    batch.target_mask,
                )
        model.train()
        return float(total) / max(count, 1), stats.summary()

    def evaluate(
        self, model: Seq2SeqModel, data: TaskData, evalset: EvalSet
    ) -> tuple[dict[str, float], list[list[str]]]:
        """Decode the distinct sources and score them: (scores, output symbols)."""
        outputs = self.best_outputs(model, data.vocabs, evalset.sources)
        scores = score_outputs(
            outputs, evalset.references, data.prepared.sides.target, self.metrics
        )
        return scores, outputs

    # ------------------------------------------------------------- predicting

    def predict(
        self,
        model: Seq2SeqModel,
        vocabs: dict[str, Vocab],
        sources: Sequence[Sequence[str]],
        options: configuration.DecodeConfig,
    ) -> list[list[Candidate]]:
        source_vocab, target = vocabs["source"], vocabs["target"]
        ids = [source_vocab.encode(s) for s in sources]
        # where the symbols the source vocabulary lacks copy to, for a model with copy: their
        # target ids, or ids after the target vocabulary's (`transduce.models.copy`)
        size = len(target)
        spelled: list[list[str]] = [[] for _ in sources]
        unknown = None
        if copies(model):
            unknown = []
            for k, (symbols, encoded) in enumerate(zip(sources, ids)):
                spelled[k], row = copy_targets(
                    symbols, source_vocab, target.index, size, len(encoded)
                )
                unknown.append(row)
        with self.autocast():
            decoded = decode_all(model, ids, options, self.device, unknown)

        def spell(tokens: list[int], names: list[str]) -> list[str]:
            return [target.symbols[t] if t < size else names[t - size] for t in tokens]

        return [
            [Candidate(spell(h.tokens, names), h.normalized) for h in hyps]
            for hyps, names in zip(decoded, spelled)
        ]


def score_outputs(
    outputs: Sequence[Sequence[str]],
    references: Sequence[Sequence[Sequence[str]]],
    side: Side,
    metrics: Sequence[str],
) -> dict[str, float]:
    """Score output symbols against reference symbols as `transduce score` would score the
    printed text: both turned into the target's own text, then cut by its unit."""
    hyps = [side.detokenize(o) for o in outputs]
    refs = [[side.detokenize(r) for r in alts] for alts in references]
    unit = side.score_unit
    corpus = Corpus(hyps, refs, unit)
    return {name: get_metric(name, unit=unit).score(corpus).value for name in metrics}
