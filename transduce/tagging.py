"""Training and running taggers (`model.task == "tagging"`): one tag per source word.

The data is a prepared split whose source is words and whose target is as many tags
(`transduce prepare conllu`). Training is the seq2seq loop of `transduce.training` with
other batches (the words' characters, the tags aligned to the words) and another
evaluation: tagging accuracy over all, out-of-vocabulary and ambiguous dev tokens
(`tagacc`, Dufter et al. 2020 §2.6), recorded at every validation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from transduce.data.batching import Batch, collate, pad, plan_batches
from transduce.data.dataset import EvalSet, Pair
from transduce.data.vocab import Vocab
from transduce.errors import ConfigError, DataError
from transduce.metrics.corpus import Corpus
from transduce.metrics.tagging import SUBSETS, Lexicon, TaggingAccuracy
from transduce.models import Model
from transduce.special import PAD_ID
from transduce.training import Data, Trainer, encode_pairs

TAG_METRICS = tuple("tagacc" if s == "all" else f"tagacc_{s}" for s in SUBSETS)


def char_vocab(words: Sequence[Sequence[str]]) -> Vocab:
    """The characters of the training words."""
    return Vocab.build(list(word) for sentence in words for word in sentence)


def encode_chars(sentence: Sequence[str], chars: Vocab, longest: int) -> list[list[int]]:
    """Character ids of each word, its first `longest` characters."""
    return [chars.encode(list(word[:longest])) for word in sentence]


def tag_batch(
    words: Sequence[Sequence[int]],
    chars: Sequence[Sequence[Sequence[int]]],
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
    model: Model,
    words: Sequence[Sequence[int]],
    chars: Sequence[Sequence[Sequence[int]]],
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
            predicted = model.tag(batch).tolist()  # type: ignore[attr-defined]
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
class TaggingData(Data):
    chars: Vocab  # the characters of the training words
    lexicon: Lexicon  # the tags of each training word (OOV and ambiguous tokens)
    train_chars: list[list[list[int]]]
    dev_chars: list[list[list[int]]]


def _check_aligned(pairs: Sequence[Pair], split: str, directory: Any) -> None:
    for pair in pairs:
        if pair.target is not None and len(pair.target) != len(pair.source):
            raise DataError(
                f"a tagger needs one tag per word: a sentence has {len(pair.source)} words "
                f"and {len(pair.target)} tags (prepare the data with the conllu format)",
                directory / f"{split}.tsv",
                value=" ".join(pair.source)[:80],
            )


class TaggingTrainer(Trainer):
    """The training loop for taggers: selection on dev tagging accuracy."""

    task = "tagging"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        c = self.config
        if c.train.select_on != "tagacc":
            raise ConfigError(
                f"train.select_on: a tagger is selected on tagacc, not {c.train.select_on}"
            )
        if c.loss.monotonicity.weight > 0:
            raise ConfigError("loss.monotonicity: a tagger has no cross-attention to make monotone")
        self.metrics = list(TAG_METRICS)

    def load_data(  # type: ignore[override]
        self, vocabs: tuple[Vocab, Vocab] | None = None, chars: Vocab | None = None
    ) -> TaggingData:
        prepared, kept, too_long, dev_pairs, test_pairs = self.read_splits()
        for split, pairs in (("train", kept), ("dev", dev_pairs), ("test", test_pairs)):
            _check_aligned(pairs, split, prepared.directory)
        limit = self.config.model.length_limit()
        lexicon = Lexicon.build(((p.source, p.target) for p in kept), "train")  # type: ignore[misc]
        dev_eval = EvalSet([p.source for p in dev_pairs], [[p.target] for p in dev_pairs])  # type: ignore[misc]
        kept, dev_pairs = split_pairs(kept, limit), split_pairs(dev_pairs, limit)
        source_vocab, target_vocab = vocabs or self.vocabularies(kept)
        chars = chars or char_vocab([p.source for p in kept])
        longest = self.config.model.max_word_length
        test = (
            EvalSet([p.source for p in test_pairs], [[p.target] for p in test_pairs])  # type: ignore[misc]
            if test_pairs and all(p.target is not None for p in test_pairs)
            else None
        )
        return TaggingData(
            prepared,
            source_vocab,
            target_vocab,
            encode_pairs(kept, source_vocab, target_vocab),
            encode_pairs(dev_pairs, source_vocab, target_vocab),
            dev_eval,
            test,
            too_long,
            chars,
            lexicon,
            [encode_chars(p.source, chars, longest) for p in kept],
            [encode_chars(p.source, chars, longest) for p in dev_pairs],
        )

    def load_data_for(self, state: dict[str, Any] | None) -> TaggingData:
        if state is None:
            return self.load_data()
        vocab = state["vocab"]
        return self.load_data(
            (Vocab(vocab["source"]), Vocab(vocab["target"])), Vocab(vocab["chars"])
        )

    def build(self, data: Data) -> Model:
        from transduce.models import build_model

        c = self.config
        try:
            return build_model(
                c.model_name,
                c.model,
                len(data.source_vocab),
                len(data.target_vocab),
                chars=len(data.chars),  # type: ignore[attr-defined]
            )
        except ValueError as error:
            raise ConfigError(f"model: {error}") from None

    def _model(self, data: Data) -> Model:  # type: ignore[override]
        model = self.build(data)
        self.check_lengths(model, data)
        vectors = self.config.model.word_vectors
        if vectors and not self.resume:
            found = model.load_word_vectors(vectors, data.source_vocab.symbols)  # type: ignore[attr-defined]
            self.reporter.message(
                f"word vectors: {found:,} of {len(data.source_vocab) - 5:,} words from {vectors}"
            )
        self.mechanisms = []
        return model.to(self.device)

    def check_lengths(self, model: Model, data: Data) -> None:
        """Nothing to check: sentences longer than the tagger takes are cut into pieces."""

    def _batches(self, data: Data, epoch: int) -> list[list[int]]:
        import random

        t = self.config.train
        rng = random.Random(t.seed * 1_000_003 + epoch)  # the same order when resumed
        lengths = [(len(s), 0) for s, _ in data.train]
        return plan_batches(lengths, t.batch_size, t.batch_by, t.bucketing, rng)

    def _payload(
        self, model: Model, optimizer: Any, schedule: Any, data: Data, progress: Any
    ) -> dict[str, Any]:
        payload = super()._payload(model, optimizer, schedule, data, progress)
        payload["vocab"]["chars"] = data.chars.symbols  # type: ignore[attr-defined]
        return payload

    def update(
        self,
        model: Model,
        optimizer: Any,
        schedule: Any,
        data: Data,
        indices: list[int],
        number: int,
    ) -> float:
        batch = tag_batch(
            [data.train[i][0] for i in indices],
            [data.train_chars[i] for i in indices],  # type: ignore[attr-defined]
            [data.train[i][1] for i in indices],
        ).to(self.device)
        schedule.before_update(number)
        with self._autocast():
            losses = model.loss(batch, model(batch), self.config.loss.label_smoothing)
        return self.step(model, optimizer, losses["loss"])

    def dev_loss(
        self, model: Model, pairs: list[tuple[list[int], list[int]]]
    ) -> tuple[float, dict[str, Any]]:  # type: ignore[override]
        """Cross-entropy per dev token (no monotonicity: a tagger has no cross-attention)."""
        model.eval()
        total, count = 0.0, 0
        chars = self.data.dev_chars  # type: ignore[union-attr]  (pairs is data.dev)
        lengths = [(len(s), 0) for s, _ in pairs]
        with torch.inference_mode(), self._autocast():
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
        self, model: Model, data: Data, evalset: EvalSet
    ) -> tuple[dict[str, float], list[list[str]]]:  # type: ignore[override]
        longest = self.config.model.max_word_length
        chars = [encode_chars(s, data.chars, longest) for s in evalset.sources]  # type: ignore[attr-defined]
        words = [data.source_vocab.encode(s) for s in evalset.sources]
        with self._autocast():
            ids = tag_sentences(model, words, chars, self.device, self.config.train.dev_batch_size)
        outputs = [data.target_vocab.decode(i) for i in ids]
        refs = [alts[0] for alts in evalset.references]
        return tag_scores(outputs, refs, evalset.sources, data.lexicon), outputs  # type: ignore[attr-defined]
