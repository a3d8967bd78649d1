"""A trained model ready to transduce text: what `transduce decode` runs.

`Transducer.from_checkpoint` rebuilds the model, its vocabularies and the side specs of
its data. Input lines are tokenized the way the training data was (characters, symbols,
words, BPE subwords with the embedded model, or `lemma<TAB>tags` for inflection), and the
output symbols are turned back into the target's own text.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

import torch

from transduce import config as configuration
from transduce.config import DecodeConfig
from transduce.data import tokens
from transduce.data.dataset import parse_split_line
from transduce.data.sides import Sides
from transduce.data.vocab import Vocab
from transduce.errors import CheckpointError, ConfigError, DataError, out_of_memory
from transduce.models import Model
from transduce.precision import decoding, resolve_device
from transduce.special import SPACE, UNK_ID
from transduce.tasks import Task, make_task


@dataclass
class Prediction:
    """The outputs for one input line (empty for an empty line), best first."""

    texts: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)  # none where the task ranks none
    symbols: list[list[str]] = field(default_factory=list)  # each output's symbols
    source: list[str] = field(default_factory=list)  # the input symbols, as the model read them


@dataclass
class Explanation:
    """What a sequence-to-sequence model says of one output of one input (`explain`): the
    probability of each output symbol given the input and the symbols before it, the end
    of the sequence last; their product, as a log-probability (no length penalty); and,
    for each output symbol, the input position its attention weighs most (soft attention:
    the attention's argmax, averaged over heads and layers; hard attention: the argmax of
    the alignment posterior p(a_i = j | y, x), or of its prior with input feeding), as
    Pharaoh `i-j` pairs (input i, output j, both from 0; never a source end symbol)."""

    symbol_probs: list[float]
    log_prob: float
    alignment: list[tuple[int, int]]
    # with `explain(posterior=True)` (hard attention): p(a_j = i | y, x) for each output
    # symbol j (a row) over the input symbols i; a row sums to 1, less any mass on a source
    # end symbol (`data.source_eos`)
    posterior: list[list[float]] | None = None

    def pharaoh(self, threshold: float | None = None) -> str:
        """`i-j` pairs; with `threshold` and a posterior, `i-j:p` for every pair whose
        posterior probability p is at least `threshold` (4 decimals)."""
        if threshold is None or self.posterior is None:
            return " ".join(f"{i}-{j}" for i, j in self.alignment)
        return " ".join(
            f"{i}-{j}:{p:.4f}"
            for j, row in enumerate(self.posterior)
            for i, p in enumerate(row)
            if p >= threshold
        )


RAW_SAMPLE = 10  # lines that decide whether raw input is really a prepared split
_SPACED = re.compile(r"^\S( \S)+$")  # "c a t": single characters, each after one space


def _decidable(sample: list[tuple[int, str]], filled: list[tuple[int, str]]) -> bool:
    """Add the first of `filled` (numbered non-empty lines) to `sample`, up to RAW_SAMPLE
    lines gathered over calls when the input comes in pieces; whether it now has the 3
    lines that a guess at the input's format is decided on, once: neither the batch size
    nor one odd line typed at a terminal decides."""
    sample.extend(filled[: RAW_SAMPLE - len(sample)])
    return len(sample) >= 3


DEVICE = re.compile(r"^(cpu|auto|cuda(:[0-9]+)?)$")


def check_device(device: object) -> None:
    """Refuse a device the toolkit does not decode on, in one sentence: `TypeError` for
    what is not a string, `ValueError` for any other than cpu, auto, cuda and cuda:N (N a
    CUDA device this PyTorch sees)."""
    if not isinstance(device, str):
        raise TypeError(f"device: a string (cpu, cuda, cuda:N or auto), not {device!r}")
    if not DEVICE.match(device):
        raise ValueError(f"device: {device!r} is not one of cpu, cuda, cuda:N or auto")
    if device.startswith("cuda"):
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        number = int(device.partition(":")[2] or 0)
        if number >= count:
            raise ValueError(
                f"device: {device!r}, but this PyTorch sees "
                f"{'no CUDA device' if not count else f'{count} CUDA devices'}; use 'cpu'"
            )


class Transducer:
    """A model with its task, vocabularies and data specs (`from_checkpoint` makes one).

    `from_checkpoint(payload, device, bf16)`: bf16 decodes under bfloat16 autocast; None:
    as the model was trained (bf16 if it trained in bf16, else float32). Where the device
    cannot run bfloat16, float32, and `precision_warning` says so.
    """

    def __init__(
        self, model: Model, payload: dict[str, Any], task: Task, precision_warning: str | None
    ) -> None:
        self.model, self.payload, self.task = model, payload, task
        self.device, self.bf16, self.precision_warning = task.device, task.bf16, precision_warning
        self.vocabs = {name: Vocab(symbols) for name, symbols in payload["vocab"].items()}
        self.source_vocab = self.vocabs["source"]
        self.source_vocab.end = task.config.data.source_eos  # as in training
        self.target_vocab = self.vocabs["target"]
        self.sides = Sides.from_manifest(payload["sides"])
        self._segmenter = self._subword_segmenter()
        self.unknown = 0  # input symbols not in the vocabulary, so far
        self._raw_sample: list[tuple[int, str]] = []  # the first lines of raw input
        self._raw_decided = False  # whether they were seen to be raw text
        self._tsv_sample: list[tuple[int, str]] = []  # the first lines of `tsv` input
        self._tsv_decided = False  # whether they were seen to be a prepared split
        self.members: list[str | None] = [payload.get("path")]  # the checkpoints decoded
        self.alone: list[Transducer] = [self]  # each member, decoding alone

    @classmethod
    def from_checkpoint(
        cls,
        payload: dict[str, Any] | str | PathLike[str],
        device: str = "cpu",
        bf16: bool | None = None,
    ) -> Transducer:
        """The model of a checkpoint: a loaded one (`checkpoint.load`), or the path of a
        checkpoint file or of a run directory (its final.pt or best.pt)."""
        if not isinstance(payload, dict):
            from transduce import checkpoint

            payload = checkpoint.load(Path(payload))
        if device not in ("auto", "cuda"):  # these two: resolve_device's own refusal
            check_device(device)  # its kind, its form, and cuda:N of the GPUs there are
        resolved = resolve_device(device, "--device")
        try:
            config = configuration.parse(payload["config"], payload.get("path", "checkpoint"))
            trained = payload.get("precision") or config.train.precision
            used, warning = decoding(trained, bf16, resolved)
            task = make_task(config, resolved, used)
            model = task.build_model(payload["vocab"])
            model.load_state_dict(payload["model"])
        except (KeyError, RuntimeError, ValueError) as error:
            oom = out_of_memory(
                error,
                f"building the model of {payload.get('path')}",
                "its configuration asks for more memory than this machine has",
            )
            if oom is not None:
                raise oom from None
            raise CheckpointError(
                f"{payload.get('path')}: does not fit this version of transduce ({error})"
            ) from None
        return cls(model.to(resolved).eval(), payload, task, warning)

    @classmethod
    def ensemble(
        cls,
        payloads: Sequence[dict[str, Any] | str | PathLike[str]],
        device: str = "cpu",
        bf16: bool | None = None,
        mean: str = "probability",
    ) -> Transducer:
        """Several trained models decoded as one (`transduce.ensemble.Ensemble`): each a
        loaded checkpoint or a path, all of one vocabulary and one tokenization (trained on
        the same prepared data). Decoding runs in the first model's precision unless `bf16`
        says otherwise. One model gives that model itself."""
        from transduce import checkpoint
        from transduce.ensemble import Ensemble
        from transduce.models import Seq2SeqModel

        if not payloads:
            raise ConfigError("an ensemble needs at least one model")
        members = [cls.from_checkpoint(p, device, bf16) for p in payloads]
        if len(members) == 1:
            return members[0]
        first = members[0]
        models = []
        for member in members:
            if not isinstance(member.model, Seq2SeqModel):
                raise ConfigError(
                    f"{member.payload.get('path')}: a {member.model.name} model; an ensemble is "
                    "of sequence-to-sequence models"
                )
            models.append(member.model)
        checkpoint.check_compatible(
            [m.payload for m in members],
            checkpoint.DECODING_FIELDS,
            "an ensemble needs models trained on the same prepared data",
        )
        model = Ensemble(models, mean)
        ensemble = cls(model.eval(), first.payload, first.task, first.precision_warning)
        ensemble.members = [m.payload.get("path") for m in members]
        ensemble.alone = members  # the same models, each decoding by itself
        return ensemble

    @property
    def copies(self) -> bool:
        """Whether the model copies input symbols unknown to it as they are
        (`transduce.models.copy`): it has the copy mechanism; an ensemble, where a member
        has it and the mean is of probabilities, or where every member has it (the
        `log-probability` mean gives a copy probability 0 if one member does)."""
        from transduce.ensemble import Ensemble
        from transduce.models.copy import copies

        if not isinstance(self.model, Ensemble):
            return copies(self.model)
        found = [copies(m) for m in self.model.models]
        return any(found) if self.model.mean == "probability" else all(found)

    def autocast(self) -> Any:
        """The precision context decoding runs in."""
        return self.task.autocast()

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
        return self.sides.read_input(line, number, path, self._segmenter)

    def _check_raw(self, lines: Sequence[str], path: str, first: int = 1) -> None:
        """Stop with a hint where raw input is a prepared split's text: lines with a tab
        for a model whose input has none, or characters separated by spaces for a model of
        characters that never saw a space (`cut -f1 test.tsv | transduce decode RUN`)."""
        if self.sides.tabbed_input:
            return  # lemma<TAB>tags, text<TAB>features: tabs belong to the input
        filled = [(n, line) for n, line in enumerate(lines, first) if line.strip()]
        if not filled:
            return
        tabbed = [(n, line) for n, line in filled if "\t" in line]
        hint = "a prepared split? decode it with --input-format tsv"
        if tabbed:
            number, line = tabbed[0]
            raise DataError(f"a tab in a line of raw text ({hint})", path, number, line)
        if self.sides.source.unit != tokens.CHAR or SPACE in self.source_vocab.index:
            return
        if self._raw_decided or not _decidable(self._raw_sample, filled):
            return
        sample = self._raw_sample
        self._raw_decided = True
        spaced = [(n, line) for n, line in sample if _SPACED.match(line.strip())]
        if len(spaced) * 2 > len(sample):
            number, line = spaced[0]
            raise DataError(
                "symbols separated by spaces, but the model reads characters and has never "
                f"seen a space (the source column of {hint})",
                path,
                number,
                line,
            )

    def _check_tsv(self, lines: Sequence[str], path: str, first: int = 1) -> None:
        """Stop with a hint where `tsv` input is a raw TSV, not a prepared split: for a
        model of characters, a source field of several characters with no space between
        them, which the model does not know as one symbol (a prepared split spaces them:
        `c a t<TAB>...`; `cat<TAB>...` is a raw file's, which would be read as one unknown
        symbol and decoded into nonsense). Decided once, as `_check_raw` decides, on most
        of the first 3 to RAW_SAMPLE non-empty lines."""
        if self._tsv_decided or self.sides.source.unit != tokens.CHAR:
            return
        filled = [(n, line) for n, line in enumerate(lines, first) if line.strip()]
        if not _decidable(self._tsv_sample, filled):
            return
        sample = self._tsv_sample
        self._tsv_decided = True
        joined = []
        for number, line in sample:
            source = line.split("\t", 1)[0]
            if len(source) > 1 and " " not in source and source not in self.source_vocab.index:
                joined.append((number, line))
        if len(joined) * 2 > len(sample):
            number, line = joined[0]
            raise DataError(
                "a source of several characters with no spaces between them, but a prepared "
                "split (--input-format tsv) has the characters of a model of characters "
                "separated by spaces: a raw TSV? decode its source as raw text "
                "(cut -f1 FILE | transduce decode RUN)",
                path,
                number,
                line,
            )

    # ----------------------------------------------------------------- decoding

    def transduce(
        self,
        lines: Sequence[str],
        path: str = "-",
        input_format: str = "raw",
        *,
        options: DecodeConfig | None = None,
        first_line: int = 1,
        **search: Any,
    ) -> list[Prediction]:
        """Predict the outputs of input lines; an empty (blank) line gives an empty
        prediction. Each line is one input of the task (a tagger: the words of a sentence,
        its output their tags). `options`, or the `DecodeConfig` fields as keywords (`beam`,
        `nbest`, `length_penalty`, `batch_size`, `max_output_length`): greedy by default.
        `first_line`: the number of `lines[0]` in `path` (for messages), when lines come in
        pieces of a stream.

            >>> model = transduce.load("runs/g2p")
            >>> model.transduce(["cat"], beam=5, nbest=2)[0].texts
            ['K AE T', 'K AA T']
        """
        if options is None:
            options = configuration.from_flags(DecodeConfig, search)
        elif search:
            raise TypeError("give the search options as `options` or as keywords, not both")
        if isinstance(lines, str):
            raise TypeError("lines: a list of strings, not one string")
        if input_format not in ("raw", "tsv"):
            raise ValueError(f"input_format: 'raw' or 'tsv', not {input_format!r}")
        lines = list(lines)  # an iterator (an open file) is read once, here
        self.task.check_decode(options)
        if input_format == "raw":
            self._check_raw(lines, path, first_line)
        else:
            self._check_tsv(lines, path, first_line)
        limit = self.task.input_limit(self.model)
        sources: list[tuple[str, ...]] = []
        where: list[int] = []
        for number, line in enumerate(lines, first_line):
            if not line.strip():
                continue
            symbols = self.tokenize(line, number, path, input_format)
            if not symbols:  # e.g. only a features column: nothing to transduce
                continue
            if limit is not None and len(symbols) > limit:
                raise DataError(
                    f"{len(symbols)} input symbols, more than the model takes ({limit})",
                    path,
                    number,
                    line,
                )
            self.unknown += self.source_vocab.unknown(symbols)
            sources.append(symbols)
            where.append(number - first_line)
        predictions = [Prediction() for _ in lines]
        outputs = self.task.predict(self.model, self.vocabs, sources, options)
        side = self.sides.target
        for index, candidates, source in zip(where, outputs, sources):
            predictions[index] = Prediction(
                [side.detokenize(c.symbols) for c in candidates],
                [c.score for c in candidates if c.score is not None],
                [list(c.symbols) for c in candidates],
                list(source),
            )
        return predictions

    def check_explain(self, posterior: bool = False) -> None:
        """A `ConfigError` unless `explain` can explain this model's outputs (with
        `posterior`: give the exact alignment posterior, which only a hard-attention model
        without input feeding has)."""
        from transduce.models import Seq2SeqModel

        if not isinstance(self.model, Seq2SeqModel) or len(self.members) > 1:
            raise ConfigError(
                f"a {getattr(self.model, 'name', 'tagging')} model: symbol probabilities and "
                "alignments are of one sequence-to-sequence model (not a tagger, not an ensemble)"
            )
        if not posterior:
            return
        if self.model.name != "hard":
            raise ConfigError(
                f"--alignment-posterior: a {self.model.name} model has attention, not a latent "
                "alignment with a posterior (hard attention has one); use --alignment"
            )
        if getattr(self.model.config, "input_feeding", False):
            raise ConfigError(
                "--alignment-posterior: with input feeding the alignments of a hard-attention "
                "model depend on each other and their posterior is intractable (Wu et al. "
                "2018, §5.1); use --alignment (the argmax of its prior)"
            )

    def explain(
        self, predictions: Sequence[Prediction], batch_size: int = 64, posterior: bool = False
    ) -> list[list[Explanation]]:
        """For each output of each prediction (of `transduce`), its symbol probabilities
        and alignment (`Explanation`), from one pass of the model reading the input and
        that output (teacher-forced: the distributions the search stepped through); with
        `posterior`, the whole alignment posterior too (hard attention, exact).

        Raises:
            ConfigError: a tagger (no output sequence) or an ensemble (several models);
                with `posterior`, a model without an alignment posterior.
        """
        from transduce.data.batching import collate, mark_unknown
        from transduce.models.copy import copy_targets

        self.check_explain(posterior)
        pairs = [(p.source, o) for p in predictions for o in p.symbols]
        found: list[Explanation] = []
        size, copies = len(self.target_vocab), self.copies
        for start in range(0, len(pairs), batch_size):
            chunk = pairs[start : start + batch_size]
            sources = [self.source_vocab.encode(s) for s, _ in chunk]
            outputs: list[list[int]] = []
            unknown: list[list[int]] = []
            index = self.target_vocab.index
            for (read, written), ids in zip(chunk, sources):
                # a symbol that neither vocabulary has, which a copying model wrote: its
                # extended id, as decoding gave it (`transduce.models.copy`)
                names, numbers = copy_targets(read, self.source_vocab, index, size, len(ids))
                unknown.append(numbers)
                extended = {name: size + k for k, name in enumerate(names)} if copies else {}
                outputs.append([index.get(o, extended.get(o, UNK_ID)) for o in written])
            batch = collate(sources, outputs)
            if copies:
                mark_unknown(batch, unknown, size)
            batch = batch.to(self.device)
            with torch.inference_mode(), self.autocast():
                result = self.model(batch)
            latent = None
            exact = getattr(self.model, "alignment_posterior", None)  # hard attention
            if callable(exact):  # (it needs autograd: no inference mode)
                with torch.no_grad(), self.autocast():
                    try:
                        latent = exact(batch)
                    except ValueError:  # with input feeding: intractable, the prior then
                        latent = None
            assert batch.target_out is not None  # collated with outputs
            log_probs = result.log_probs.float().gather(-1, batch.target_out.unsqueeze(-1))
            weighed = result.attention if latent is None else latent
            attention = weighed.float().mean(dim=1)  # B x T x S
            for row, ((symbols, _), output) in enumerate(zip(chunk, outputs)):
                steps = log_probs[row, : len(output) + 1, 0].cpu()  # the end last
                weights = attention[row, : len(output), : len(symbols)]  # not a source </s>
                found.append(
                    Explanation(
                        steps.exp().tolist(),
                        float(steps.double().sum()),
                        [(int(i), j) for j, i in enumerate(weights.argmax(dim=-1).tolist())],
                        weights.cpu().tolist() if posterior else None,
                    )
                )
        out: list[list[Explanation]] = []
        for prediction in predictions:
            out.append(found[: len(prediction.symbols)])
            found = found[len(prediction.symbols) :]
        return out
