"""BPE subwords through maintained libraries: subword-nmt or sentencepiece (BPE mode).

Both are optional (`pip install transduce[bpe]`). The number of merges is the option:
subword-nmt learns exactly that many merge operations (Rios et al. 2021 used 2000 for
Swiss German); for sentencepiece, whose option is a vocabulary size, the vocabulary is
set to the training alphabet plus that many merges, which is what the merges would give.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from transduce.data import tokens
from transduce.errors import ConfigError
from transduce.io import write_file

_MODULES = {tokens.SUBWORD_NMT: "subword_nmt", tokens.SENTENCEPIECE: "sentencepiece"}


def check_available(library: str) -> None:
    """Raise `ConfigError` with the install command when `library` is not installed."""
    module = _MODULES.get(library)
    if module is None:
        raise ConfigError(f"unknown subword library {library!r} (valid: {', '.join(_MODULES)})")
    if importlib.util.find_spec(module) is None:
        raise ConfigError(
            f"--subwords {library} needs the {library} package: pip install 'transduce[bpe]'"
        )


@dataclass(frozen=True)
class SubwordModel:
    """A learned model: its file name (inside the prepared directory) and its segmenter."""

    filename: str
    segment: Callable[[Sequence[str]], list[str]]


def learn(library: str, texts: Sequence[Sequence[str]], merges: int, prefix: Path) -> SubwordModel:
    """Learn BPE on tokenized sentences and write the model next to `prefix`.

    Args:
        library: "subword-nmt" or "sentencepiece".
        texts: Sentences as word lists (the training split).
        merges: Number of merge operations.
        prefix: Path without extension for the model file (`bpe` -> `bpe.codes`).

    Returns:
        The model; its `segment` maps a word list to a subword list.
    """
    check_available(library)
    if library == tokens.SUBWORD_NMT:
        return _learn_subword_nmt(texts, merges, prefix.with_suffix(prefix.suffix + ".codes"))
    return _learn_sentencepiece(texts, merges, prefix.with_suffix(prefix.suffix + ".model"))


def _learn_subword_nmt(texts: Sequence[Sequence[str]], merges: int, path: Path) -> SubwordModel:
    from subword_nmt.apply_bpe import BPE
    from subword_nmt.learn_bpe import learn_bpe

    codes = io.StringIO()
    with contextlib.redirect_stderr(io.StringIO()):  # its progress bar and notes, even with -q
        learn_bpe(io.StringIO("".join(" ".join(t) + "\n" for t in texts)), codes, merges)
    write_file(path, codes.getvalue().encode("utf-8"))
    codes.seek(0)
    bpe = BPE(codes, separator=tokens.SUBWORD_NMT_SEPARATOR)
    return SubwordModel(path.name, lambda words: bpe.segment_tokens(list(words)))


def _learn_sentencepiece(texts: Sequence[Sequence[str]], merges: int, path: Path) -> SubwordModel:
    import sentencepiece as spm

    sentences = [" ".join(t) for t in texts]
    alphabet = {c for s in sentences for c in s if not c.isspace()}
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        model_type="bpe",
        vocab_size=len(alphabet) + merges + 2,  # + <unk> and the word-start piece
        hard_vocab_limit=False,  # small data may allow fewer merges: take what there is
        character_coverage=1.0,
        normalization_rule_name="identity",  # keep the text as it is (no NFKC: "ﬁ" stays "ﬁ")
        bos_id=-1,
        eos_id=-1,
        num_threads=1,  # deterministic
        minloglevel=2,
    )
    write_file(path, model.getvalue())
    processor = spm.SentencePieceProcessor(model_proto=model.getvalue())
    return SubwordModel(path.name, lambda words: processor.encode(" ".join(words), out_type=str))
