"""Tagging: one label per source word (`Tagger` models, e.g. the `san_tagger`).

The data is a prepared split whose source is words and whose target is as many tags
(`transduce prepare conllu`). Batches carry the words' characters besides the words, the
tags aligned to the words; evaluation is tagging accuracy over all, out-of-vocabulary and
ambiguous dev tokens (`tagacc`, Dufter et al. 2020 §2.6), recorded at every validation.
A sentence longer than the tagger takes is cut into pieces (`windows`), in training and
when tagging.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from transduce import config as configuration
from transduce.data.batching import Batch, collate, pad, plan_batches
from transduce.data.dataset import EvalSet, Pair, build_vocabs
from transduce.data.vocab import Vocab
from transduce.errors import ConfigError, DataError
from transduce.metrics import METRICS
from transduce.metrics.corpus import Corpus
from transduce.metrics.tagging import SUBSETS, Lexicon, TaggingAccuracy
from transduce.models import Tagger, expect
from transduce.models.base import TaggerConfig
from transduce.special import PAD_ID
from transduce.tasks.base import Candidate, Task, TaskData, encode_pairs

TAG_METRICS = tuple("tagacc" if s == "all" else f"tagacc_{s}" for s in SUBSETS)


def char_vocab(words: Sequence[Sequence[str]]) -> Vocab:
    """The characters of the training words."""
    return Vocab.build(list(word) for sentence in words for word in sentence)


def encode_chars(sentence: Sequence[str], chars: Vocab, longest: int) -> list[list[int]]:
    """Character ids of each word, its first `longest` characters."""
    return [chars.encode(list(word[:longest])) for word in sentence]


def tag_batch(
    words: Sequence[Sequence[int]],
    chars: Sequence[Sequence[list[int]]],
    tags: Sequence[Sequence[int]] | None = None,
) -> Batch:
    """A tagging batch: words B x S, their characters B x S x C, tags B x S (target_out)."""
    batch = collate(words)
    width = max(1, max((len(w) for sentence in chars for w in sentence), default=1))
    size = batch.source.shape[1]
    empty = [PAD_ID] * width
    rows = [  # padded as plain lists, made a tensor once (per-word copies cost 15% of an update)
        [word + [PAD_ID] * (width - len(word)) for word in sentence]
        + [empty] * (size - len(sentence))
        for sentence in chars
    ]
    batch.chars = torch.tensor(rows, dtype=torch.long)  # B x S x C
    if tags is not None:
        batch.target_out = pad(tags)  # B x S
        batch.target_mask = batch.source_mask
    return batch


def windows(size: int, limit: int | None) -> list[tuple[int, int]]:
    """[start, end) of the consecutive pieces of at most `limit` words that a sentence of
    `size` words is cut into (one piece when there is no limit). Dufter et al.'s code does
    the same with sentences longer than t, in training and at test time."""
    if limit is None or size <= limit:
        return [(0, size)]
    return [(start, min(start + limit, size)) for start in range(0, size, limit)]


def split_pairs(pairs: Sequence[Pair], limit: int | None) -> list[Pair]:
    """Training or dev sentences cut into pieces the tagger takes."""
    return [
        Pair(p.source[a:b], None if p.target is None else p.target[a:b])
        for p in pairs
        for a, b in windows(len(p.source), limit)
    ]


def tag_sentences(
    model: Tagger,
    words: Sequence[Sequence[int]],
    chars: Sequence[Sequence[list[int]]],
    device: torch.device,
    batch_size: int,
) -> list[list[int]]:
    """The model's tag ids for each sentence (in order), batched by length; a sentence
    longer than the model takes is tagged in consecutive pieces (`windows`)."""
    pieces = [(n, a, b) for n, w in enumerate(words) for a, b in windows(len(w), model.max_length)]
    lengths = [(b - a, 0) for _, a, b in pieces]
    out: list[list[int]] = [[] for _ in words]
    tagged: list[list[int]] = [[] for _ in pieces]
    was_training = model.training
    model.eval()
    with torch.inference_mode():
        for chunk in plan_batches(lengths, batch_size, bucketing=True):
            batch = tag_batch(
                [words[pieces[i][0]][pieces[i][1] : pieces[i][2]] for i in chunk],
                [chars[pieces[i][0]][pieces[i][1] : pieces[i][2]] for i in chunk],
            ).to(device)
            predicted = model.tag(batch).tolist()
            for row, i in enumerate(chunk):
                tagged[i] = predicted[row][: lengths[i][0]]
    for (n, _, _), tags in zip(pieces, tagged):  # pieces are in sentence order
        out[n].extend(tags)
    model.train(was_training)
    return out


def tag_scores(
    hyps: Sequence[Sequence[str]],
    refs: Sequence[Sequence[str]],
    words: Sequence[Sequence[str]],
    lexicon: Lexicon,
) -> dict[str, float]:
    """tagacc, tagacc_oov and tagacc_ambiguous of tag sequences."""
    corpus = Corpus(list(hyps), [[list(r)] for r in refs], "symbol", sources=words)
    return {
        name: TaggingAccuracy(lexicon=lexicon, subset=subset).score(corpus).value
        for name, subset in zip(TAG_METRICS, SUBSETS)
    }


@dataclass
class TaggingData(TaskData):
    lexicon: Lexicon  # the tags of each training word (OOV and ambiguous tokens)
    train_chars: list[list[list[int]]]
    dev_chars: list[list[list[int]]]

    @property
    def chars(self) -> Vocab:
        """The characters of the training words."""
        return self.vocabs["chars"]


def _check_aligned(pairs: Sequence[Pair], split: str, directory: Path) -> None:
    for pair in pairs:
        if pair.target is not None and len(pair.target) != len(pair.source):
            raise DataError(
                f"a tagger needs one tag per word: a sentence has {len(pair.source)} words "
                f"and {len(pair.target)} tags (prepare the data with the conllu format)",
                directory / f"{split}.tsv",
                value=" ".join(pair.source)[:80],
            )


def references(pairs: Sequence[Pair]) -> EvalSet:
    """Every sentence with its one tag sequence (sentences are not merged: a repeated
    sentence is scored each time, as a tagger's accuracy counts tokens)."""
    tags = [p.target for p in pairs if p.target is not None]
    if len(tags) != len(pairs):
        raise ValueError("references: every sentence needs its tags")  # callers check
    return EvalSet([p.source for p in pairs], [[t] for t in tags])


class TaggingTask(Task[TaggingData, Tagger]):
    """Label every source word (`Tagger`s); selection on dev tagging accuracy."""

    name = "tagging"

    @classmethod
    def check(cls, config: configuration.Config) -> list[str]:
        problems = []
        if not issubclass(METRICS[config.train.select_on], TaggingAccuracy):
            problems.append(
                f"train.select_on: a tagger is selected on tagacc, not {config.train.select_on}"
            )
        if config.train.select_also:
            problems.append("train.select_also: a tagger is selected on tagacc alone")
        if config.loss.monotonicity.weight > 0:
            problems.append("loss.monotonicity: a tagger has no cross-attention to make monotone")
        if config.data.source_eos:
            problems.append("data.source_eos: a tagger tags each word; there is no source end")
        return problems

    @property
    def metrics(self) -> list[str]:
        return list(TAG_METRICS)

    @property
    def tagger_config(self) -> TaggerConfig:
        """The tagger's options (every model of this task is a `Tagger`)."""
        model = self.config.model
        if not isinstance(model, TaggerConfig):
            raise TypeError(f"model {self.config.model_name} has no tagger options")
        return model

    # ----------------------------------------------------------------- data

    def load_data(self, directory: Path, vocabs: dict[str, list[str]] | None = None) -> TaggingData:
        c = self.config
        splits = self.read_splits(directory)
        kept, dev_pairs, test_pairs = splits.train, splits.dev, splits.test
        for split, pairs in (("train", kept), ("dev", dev_pairs), ("test", test_pairs)):
            _check_aligned(pairs, split, splits.prepared.directory)
        limit = self.tagger_config.length_limit()
        lexicon = Lexicon.build(
            ((p.source, p.target) for p in kept if p.target is not None), "train"
        )
        dev_eval = references(dev_pairs)
        kept, dev_pairs = split_pairs(kept, limit), split_pairs(dev_pairs, limit)
        if vocabs is None:
            source, target = build_vocabs(
                kept, c.model.shared_vocabulary, c.data.min_count, c.data.vocab_fraction
            )
            chars = char_vocab([p.source for p in kept])
        else:
            source, target = Vocab(vocabs["source"]), Vocab(vocabs["target"])
            chars = Vocab(vocabs["chars"])
        longest = self.tagger_config.max_word_length
        test = (
            references(test_pairs)
            if test_pairs and all(p.target is not None for p in test_pairs)
            else None
        )
        return TaggingData(
            splits.prepared,
            {"source": source, "target": target, "chars": chars},
            encode_pairs(kept, source, target),
            encode_pairs(dev_pairs, source, target),
            dev_eval,
            test,
            splits.skipped_long,
            lexicon,
            [encode_chars(p.source, chars, longest) for p in kept],
            [encode_chars(p.source, chars, longest) for p in dev_pairs],
        )

    # ---------------------------------------------------------------- model

    def build_model(self, vocabs: dict[str, list[str]]) -> Tagger:
        model = self.construct(vocabs, chars=len(vocabs["chars"]))
        return expect(model, Tagger)  # the registry pairs them

    def initialize(self, model: Tagger, data: TaggingData) -> str | None:
        """Word vectors from `model.word_vectors`, if given."""
        vectors = self.tagger_config.word_vectors
        if not vectors:
            return None
        found = model.load_word_vectors(vectors, data.source_vocab.symbols)
        return f"word vectors: {found:,} of {len(data.source_vocab) - 5:,} words from {vectors}"

    # -------------------------------------------------------------- training

    def lengths(self, data: TaggingData) -> list[tuple[int, int]]:
        return [(len(s), 0) for s, _ in data.train]

    def loss_tokens(self, data: TaggingData, indices: list[int]) -> int:
        return sum(len(data.train[i][0]) for i in indices)  # one tag per word

    def training_loss(
        self, model: Tagger, data: TaggingData, indices: list[int], update: int, share: float = 1.0
    ) -> torch.Tensor:
        batch = tag_batch(
            [data.train[i][0] for i in indices],
            [data.train_chars[i] for i in indices],
            [data.train[i][1] for i in indices],
        ).to(self.device)
        with self.autocast():
            losses = model.loss(batch, model(batch), self.config.loss.label_smoothing)
        return losses["loss"] * share  # a mean over the words

    def dev_loss(self, model: Tagger, data: TaggingData) -> tuple[float, dict[str, Any]]:
        """Cross-entropy per dev token (no monotonicity: a tagger has no cross-attention)."""
        model.eval()
        total, count = 0.0, 0
        pairs, chars = data.dev, data.dev_chars
        lengths = [(len(s), 0) for s, _ in pairs]
        with torch.inference_mode(), self.autocast():
            for chunk in plan_batches(lengths, self.config.train.dev_batch_size, bucketing=True):
                batch = tag_batch(
                    [pairs[i][0] for i in chunk],
                    [chars[i] for i in chunk],
                    [pairs[i][1] for i in chunk],
                ).to(self.device)
                tokens = int(batch.source_mask.sum())
                total += float(model.loss(batch, model(batch))["nll"]) * tokens
                count += tokens
        model.train()
        return total / max(count, 1), {}

    def evaluate(
        self, model: Tagger, data: TaggingData, evalset: EvalSet
    ) -> tuple[dict[str, float], list[list[str]]]:
        outputs = self.best_outputs(model, data.vocabs, evalset.sources)
        refs = [alts[0] for alts in evalset.references]
        return tag_scores(outputs, refs, evalset.sources, data.lexicon), outputs

    # ------------------------------------------------------------- predicting

    def check_decode(self, options: configuration.DecodeConfig) -> None:
        if options.beam > 1 or options.nbest > 1:
            raise ConfigError(
                "a tagger outputs the most probable tag of each word: --beam and --nbest "
                "do not apply"
            )

    def input_limit(self, model: Tagger) -> int | None:
        return None  # a longer sentence is tagged in pieces

    def predict(
        self,
        model: Tagger,
        vocabs: dict[str, Vocab],
        sources: Sequence[Sequence[str]],
        options: configuration.DecodeConfig,
    ) -> list[list[Candidate]]:
        longest = self.tagger_config.max_word_length
        chars = [encode_chars(s, vocabs["chars"], longest) for s in sources]
        words = [vocabs["source"].encode(s) for s in sources]
        with self.autocast():
            ids = tag_sentences(model, words, chars, self.device, options.batch_size)
        return [[Candidate(vocabs["target"].decode(i))] for i in ids]
