"""A trained model ready to transduce text: what `transduce decode` runs.

`Transducer.from_checkpoint` rebuilds the model, its vocabularies and the side specs of
its data. Input lines are tokenized the way the training data was (characters, symbols,
words, BPE subwords with the embedded model, or `lemma<TAB>tags` for inflection), and the
output symbols are turned back into the target's own text.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from transduce import config as configuration
from transduce.data import tokens
from transduce.data.dataset import model_source, parse_split_line
from transduce.data.formats import inflection_source, split_tags
from transduce.data.vocab import Vocab
from transduce.decoding import Hypothesis, decode_all
from transduce.errors import CheckpointError, ConfigError, DataError
from transduce.models import Model, build_model
from transduce.precision import autocast, use_bf16


@dataclass
class Prediction:
    """The outputs for one input line (empty for an empty line), best first."""

    texts: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)


class Transducer:
    """A model with its vocabularies and data specs.

    Args:
        bf16: Decode under bfloat16 autocast; None: as the model was trained (`train.bf16`).
            Where the device cannot run bfloat16, float32, and `precision_warning` says so.
    """

    def __init__(
        self, model: Model, payload: dict[str, Any], device: torch.device, bf16: bool | None = None
    ) -> None:
        self.model, self.payload, self.device = model, payload, device
        requested = payload["config"]["train"].get("bf16", False) if bf16 is None else bf16
        self.bf16, self.precision_warning = use_bf16(requested, device)
        self.source_vocab = Vocab(payload["vocab"]["source"])
        self.target_vocab = Vocab(payload["vocab"]["target"])
        self.sides = payload["sides"]
        self._segmenter = self._subword_segmenter()
        self.unknown = 0  # input symbols not in the vocabulary, so far

    @classmethod
    def from_checkpoint(
        cls, payload: dict[str, Any], device: str = "cpu", bf16: bool | None = None
    ) -> Transducer:
        try:
            config = configuration.parse(payload["config"], payload.get("path", "checkpoint"))
            sizes = {"chars": len(payload["vocab"]["chars"])} if "chars" in payload["vocab"] else {}
            model = build_model(
                config.model_name,
                config.model,
                len(payload["vocab"]["source"]),
                len(payload["vocab"]["target"]),
                **sizes,
            )
            model.load_state_dict(payload["model"])
        except (KeyError, RuntimeError) as error:
            raise CheckpointError(
                f"{payload.get('path')}: does not fit this version of transduce ({error})"
            ) from None
        resolved = torch.device(
            "cuda"
            if device == "auto" and torch.cuda.is_available()
            else "cpu"
            if device == "auto"
            else device
        )
        return cls(model.to(resolved).eval(), payload, resolved, bf16)

    def autocast(self) -> Any:
        """The precision context decoding runs in."""
        return autocast(self.device, self.bf16)

    # --------------------------------------------------------------- tokenizing

    def _subword_segmenter(self) -> Any:
        spec = self.payload.get("subwords", {}).get("source")
        if not spec:
            return None
        from transduce.data import subwords

        subwords.check_available(spec["library"])
        if spec["library"] == tokens.SUBWORD_NMT:
            from subword_nmt.apply_bpe import BPE

            bpe = BPE(
                io.StringIO(spec["data"].decode("utf-8")), separator=tokens.SUBWORD_NMT_SEPARATOR
            )
            return lambda words: bpe.segment_tokens(list(words))
        import sentencepiece as spm

        processor = spm.SentencePieceProcessor(model_proto=spec["data"])
        return lambda words: processor.encode(" ".join(words), out_type=str)

    def tokenize(
        self, line: str, number: int, path: str, input_format: str = "raw"
    ) -> tuple[str, ...]:
        """The model input symbols of one (non-empty) input line."""
        if input_format == "tsv":
            return parse_split_line(line if "\t" in line else line + "\t", path, number).source
        source = self.sides["source"]
        features = None
        if "tags" in source:  # inflection: lemma<TAB>tags
            lemma, sep, bundle = line.partition("\t")
            if not sep or not bundle.strip():
                raise DataError("expected lemma<TAB>tags, e.g. walk<TAB>V;PST", path, number, line)
            return tuple(inflection_source(lemma.strip(), split_tags(bundle.strip())))
        if "features" in self.sides:
            line, _, raw = line.partition("\t")
            separator = self.sides["features"].get("separator", ";")
            features = [f.strip() for f in raw.split(separator) if f.strip()]
        text = line.strip()
        if source.get("lowercase"):
            text = text.lower()
        unit = source.get("unit")
        if unit == tokens.CHAR:
            symbols = tokens.chars(text)
        elif unit == tokens.SUBWORD:
            symbols = self._segmenter(text.split())
        else:
            symbols = text.split()
        return model_source(symbols, features)

    # ----------------------------------------------------------------- decoding

    def transduce(
        self,
        lines: Sequence[str],
        path: str = "-",
        input_format: str = "raw",
        batch_size: int = 256,
        beam: int = 1,
        length_penalty: float = 0.0,
        nbest: int = 1,
        max_output_length: int | None = None,
    ) -> list[Prediction]:
        """Decode input lines; an empty (blank) line gives an empty prediction. A tagger
        gives each line's tags, one per word (its most probable; no beam, one output)."""
        tagging = self.model.task == "tagging"
        if tagging and (beam > 1 or nbest > 1):
            raise ConfigError(
                "a tagger outputs the most probable tag of each word: --beam and --nbest "
                "do not apply"
            )
        sources: list[list[int]] = []
        symbol_lists: list[tuple[str, ...]] = []
        where: list[int] = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            symbols = self.tokenize(line, number, path, input_format)
            if not symbols:  # e.g. only a features column: nothing to transduce
                continue
            limit = None if tagging else self.model.max_length  # a tagger cuts long lines
            if limit is not None and len(symbols) > limit:
                raise DataError(
                    f"{len(symbols)} input symbols, more than the model takes ({limit})",
                    path,
                    number,
                    line,
                )
            self.unknown += self.source_vocab.unknown(symbols)
            sources.append(self.source_vocab.encode(symbols))
            symbol_lists.append(symbols)
            where.append(number - 1)
        predictions = [Prediction() for _ in lines]
        if tagging:
            for index, tags in zip(where, self._tag(sources, symbol_lists, batch_size)):
                predictions[index] = Prediction([" ".join(tags)])
            return predictions
        with self.autocast():
            decoded = decode_all(
                self.model,
                sources,
                self.device,
                batch_size,
                beam,
                length_penalty,
                nbest,
                max_output_length,
            )
        for index, hyps in zip(where, decoded):
            predictions[index] = self._prediction(hyps)
        return predictions

    def _tag(
        self, sources: list[list[int]], symbols: list[tuple[str, ...]], batch_size: int
    ) -> list[list[str]]:
        from transduce.tagging import encode_chars, tag_sentences

        chars = Vocab(self.payload["vocab"]["chars"])
        longest = self.model.config.max_word_length
        char_ids = [encode_chars(s, chars, longest) for s in symbols]
        with self.autocast():
            ids = tag_sentences(self.model, sources, char_ids, self.device, batch_size)
        return [self.target_vocab.decode(i) for i in ids]

    def _prediction(self, hyps: list[Hypothesis]) -> Prediction:
        side = self.sides["target"]
        texts = [tokens.detokenize(self.target_vocab.decode(h.tokens), side) for h in hyps]
        return Prediction(texts, [h.normalized for h in hyps])
