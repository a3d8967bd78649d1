"""`transduce export`: a trained model as one self-contained TorchScript file.

The file holds the model, its vocabularies and its tokenization, and runs greedy decoding
with nothing but `torch` installed:

    m = torch.jit.load("g2p.pt")
    m.transduce(["cat", "dog"])  # -> ["K AE T", "D AO G"], what `transduce decode` prints

How it is built. A sequence-to-sequence model is traced in two pieces through the step API
of `transduce.models.base`: `init_state` (the encoder, source ids and mask -> the decoder
state, a dict of tensors) and `step` (state and previous ids -> log-probabilities and the
next state). Tracing records the operations of one call; the model's Python branches on
its options are fixed by then, and none of `step`'s operations depends on the batch size
or the lengths (the tests decode other sizes than the traced ones and compare). Around
the two pieces, `Seq2SeqExport` (compiled by `torch.jit.script`) does what `transduce
decode` does: it cuts each line into the model's symbols (characters, symbols or words;
`lemma<TAB>tags` for inflection; a features column), maps them to ids (`<unk>` for the
unknown ones, numbered for a model with copy, which copies them as `transduce decode` does:
`transduce.models.copy`; `</s>` after the source where the model was trained with it), decodes
greedily in batches of similar lengths exactly as `transduce.decoding.greedy` does (the
same order, the same batches, the same rows leaving the batch as they finish, so the
outputs are the same), and writes the output symbols back as the target's text. A tagger
(`TaggerExport`) is traced whole (`tag`), with its word and character ids and its sentence
pieces of at most `max_length` words, batched as `transduce.tasks.tagging.tag_sentences`
batches them.

TorchScript strings are bytes (UTF-8): characters are cut by their UTF-8 lead byte, and
whitespace, stripping and lower-casing use tables of Python's own answers for every code
point (`str.isspace`, `str.lower`; for a source in NFD or NFKD, `unicodedata.normalize`
of each character and `unicodedata.combining`, and for hangul the syllables'
decompositions), written into the file, so a line is cut as Python cuts it. One
difference is left: Python lower-cases a capital sigma to final ς by looking past
case-ignorable characters (apostrophes, combining marks); the export looks at the
neighbouring characters only. (And a copied unknown *word* whose text holds
an escape's spelling, such as `a<space>b` typed as such, is written as it is; `transduce
decode` would write a space there. Copied characters are written alike.)

The file decodes greedily, in float32 (a model trained in bf16 or fp16 too; the metadata
says how it was trained): beam search and scores are not in it (TorchScript could express
a beam; not written). Refused in one line (`ExportError`): subword (BPE) units, whose
segmenters are not TorchScript; a source put in NFC or NFKC (`source_normalize`: composing
is not written); ensembles; and ONNX, whose standard operators cannot cut a UTF-8 string
into characters, so its file could not hold the tokenization (an ids-in, ids-out ONNX
graph is possible and not written).
"""

import json
import os
import tempfile
import unicodedata
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from transduce.config import DecodeConfig
from transduce.data import tokens
from transduce.data.batching import Batch
from transduce.data.sides import FEATURES_SEPARATOR
from transduce.decoding import copy_index_of, never_written
from transduce.errors import ConfigError
from transduce.models import Seq2SeqModel, Tagger
from transduce.special import BOS_ID, EOS_ID, PAD_ID, SEP, SPACE, SPECIALS, UNK_ID, unescape

FORMATS = ("torchscript",)
# of tsv's source_normalize: decompositions, by table
EXPORTED_FORMS = ("nfd", "nfkd", tokens.HANGUL)
# sinusoidal position tables are exported with this many positions: a longer input is an
# error, and outputs stop there, as with learned positions
POSITIONS = 1024
METADATA = "transduce.json"  # the extra file in the archive: what was exported, from what


class ExportError(ConfigError):
    """A model that cannot be exported in the format asked for (one line, exit 2)."""


# ----------------------------------------------------------------- text, as Python cuts it


def _whitespace() -> dict[str, str]:
    """Every whitespace character (Python's `str.isspace`) and its symbol escape."""
    table = {}
    for point in range(0x110000):
        char = chr(point)
        if char.isspace():
            table[char] = SPACE if char == " " else f"<U+{point:04X}>"
    return table


def _lower() -> tuple[dict[str, str], dict[str, bool]]:
    """Python's `str.lower` of each code point where it changes it, and the cased code
    points (those with a lower or an upper case other than themselves)."""
    lower, cased = {}, {}
    for point in range(0x110000):
        char = chr(point)
        if 0xD800 <= point < 0xE000:  # surrogates: not characters of a str read from text
            continue
        low = char.lower()
        if low != char:
            lower[char] = low
        if low != char or char.upper() != char:
            cased[char] = True
    return lower, cased


def _decompositions(form: str) -> tuple[dict[str, str], dict[str, int]]:
    """For NFD or NFKD (`form`, as `tokens.NORMAL_FORMS` spells it): Python's full
    decomposition of each code point where it changes it (`unicodedata.normalize` of the
    character alone; 11,172 of them are Hangul syllables), and the canonical combining
    class of each code point whose class is not 0 (`unicodedata.combining`). For hangul:
    the syllables' decompositions alone, and no classes (nothing is reordered)."""
    if form not in EXPORTED_FORMS:
        raise ExportError(f"the export writes {', '.join(EXPORTED_FORMS)}, not {form!r}")
    table: dict[str, str] = {}
    classes: dict[str, int] = {}
    if form == tokens.HANGUL:
        first, last = (ord(c) for c in tokens.HANGUL_SYLLABLES)
        for point in range(first, last + 1):
            table[chr(point)] = tokens.normalize(chr(point), form)
        return table, classes
    for point in range(0x110000):
        if 0xD800 <= point < 0xE000:  # surrogates: not characters of a str read from text
            continue
        char = chr(point)
        parts = tokens.normalize(char, form)
        if parts != char:
            table[char] = parts
        rank = unicodedata.combining(char)
        if rank:
            classes[char] = rank
    return table, classes


def decompose_chars(chars: list[str], table: dict[str, str], classes: dict[str, int]) -> list[str]:
    """`unicodedata.normalize("NFD")` (or NFKD, by `table`), character by character: each
    character's full decomposition, then the marks of each run of characters with a
    combining class other than 0 sorted stably by their class (the Unicode Standard's
    canonical ordering, sec. 3.11: a decomposition may put a mark after marks of a
    higher class, e.g. U+1E0B U+0323 -> d U+0323 U+0307)."""
    out: list[str] = []
    for c in chars:
        if c in table:
            out.extend(utf8_chars(table[c]))
        else:
            out.append(c)
    n = len(out)
    i = 0
    while i < n:
        if out[i] not in classes:
            i += 1
            continue
        end = i
        while end < n and out[end] in classes:
            end += 1
        for k in range(i + 1, end):  # insertion sort: stable
            mark = out[k]
            rank = classes[mark]
            m = k - 1
            while m >= i and classes[out[m]] > rank:
                out[m + 1] = out[m]
                m -= 1
            out[m + 1] = mark
        i = end
    return out


def utf8_chars(text: str) -> list[str]:
    """The characters (code points) of `text`, cut by their UTF-8 lead bytes (a TorchScript
    string is indexed by bytes)."""
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        lead = ord(text[i])
        width = 1
        if lead >= 240:
            width = 4
        elif lead >= 224:
            width = 3
        elif lead >= 192:
            width = 2
        out.append(text[i : i + width])
        i += width
    return out


def split_space(chars: list[str], space: dict[str, str]) -> list[str]:
    """`str.split()`: the runs of non-whitespace characters."""
    words: list[str] = []
    start = 0
    for i in range(len(chars) + 1):
        if i == len(chars) or chars[i] in space:
            if i > start:
                words.append("".join(chars[start:i]))
            start = i + 1
    return words


def strip_space(text: str, space: dict[str, str]) -> str:
    """`str.strip()`."""
    chars = utf8_chars(text)
    start = 0
    end = len(chars)
    while start < end and chars[start] in space:
        start += 1
    while end > start and chars[end - 1] in space:
        end -= 1
    return "".join(chars[start:end])


def lower_chars(chars: list[str], lower: dict[str, str], cased: dict[str, bool]) -> list[str]:
    """`str.lower()`, character by character; a capital sigma is final (ς) after a cased
    character and before none."""
    out: list[str] = []
    n = len(chars)
    for i in range(n):
        c = chars[i]
        if c == "\u03a3":
            after = i > 0 and chars[i - 1] in cased
            before = i + 1 < n and chars[i + 1] in cased
            out.append("\u03c2" if after and not before else "\u03c3")
        elif c in lower:  # İ lowers to two characters: two symbols, as decode cuts them
            out.extend(utf8_chars(lower[c]))
        else:
            out.append(c)
    return out


def char_symbols(text: str, space: dict[str, str]) -> list[str]:
    """`transduce.data.tokens.chars`: one symbol per character, whitespace escaped."""
    out: list[str] = []
    for c in utf8_chars(text):
        if c in space:
            out.append(space[c])
        else:
            out.append(c)
    return out


def sorted_by_length(lengths: list[int]) -> list[int]:
    """The indices of `lengths`, shortest first, ties in input order (Python's stable sort)."""
    n = len(lengths)
    keys: list[int] = []
    for i in range(n):
        keys.append(lengths[i] * n + i)
    keys.sort()
    order: list[int] = []
    for key in keys:
        order.append(key % n)
    return order


# ----------------------------------------------------------------- the exported modules


class _Encoder(nn.Module):
    """Traced: source ids B x S, mask, and the numbers of the unknown source symbols
    B x S with their slots B x K (`Batch.copy_oov`, `copy_slots`: read by a model that
    copies) -> the decoder's first state."""

    def __init__(self, model: Seq2SeqModel) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, source: Tensor, mask: Tensor, oov: Tensor, slots: Tensor
    ) -> dict[str, Tensor]:
        return self.model.init_state(Batch(source, mask, copy_oov=oov, copy_slots=slots))


class _Step(nn.Module):
    """Traced: one decoder step."""

    def __init__(self, model: Seq2SeqModel) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, state: dict[str, Tensor], previous: Tensor
    ) -> tuple[Tensor, dict[str, Tensor]]:
        step = self.model.step(state, previous)
        return step.log_probs, step.state


class _Tag(nn.Module):
    """Traced: a tagger's tag ids B x S from words B x S, mask and characters B x S x C."""

    def __init__(self, model: Tagger) -> None:
        super().__init__()
        self.model = model

    def forward(self, source: Tensor, mask: Tensor, chars: Tensor) -> Tensor:
        return self.model.tag(Batch(source, mask, chars=chars))


class Seq2SeqExport(nn.Module):
    """Tokenization, greedy decoding and detokenization around a traced encoder and step."""

    source_index: dict[str, int]
    target_index: dict[str, int]
    target_text: list[str]
    space: dict[str, str]
    unspace: dict[str, str]
    lower: dict[str, str]
    cased: dict[str, bool]
    decompose: dict[str, str]
    classes: dict[str, int]

    def __init__(
        self,
        encoder: nn.Module,
        step: nn.Module,
        text: dict[str, Any],
        source_symbols: list[str],
        target_symbols: list[str],
        decode: dict[str, Any],
    ) -> None:
        super().__init__()
        self.sep = SEP
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = PAD_ID, BOS_ID, EOS_ID, UNK_ID
        self.encoder = encoder
        self.step = step
        self.source_index = {s: i for i, s in enumerate(source_symbols)}
        self.target_index = {s: i for i, s in enumerate(target_symbols)}
        self.target_text = _target_pieces(target_symbols, text["target_unit"])
        # a copied unknown source symbol is written as `tokens.detokenize` writes it: a
        # whitespace escape as its character (character and word outputs)
        self.unescapes = text["target_unit"] in (tokens.CHAR, tokens.WORD)
        self.unspace = {escape: char for char, escape in text["space"].items()}
        self.joiner = "" if text["target_unit"] == tokens.CHAR else " "
        self.space = text["space"]
        self.lower = text["lower"]
        self.cased = text["cased"]
        self.normalize = bool(text["normalize"])
        self.decompose = text["decompose"]
        self.classes = text["classes"]
        self.unit = text["source_unit"]
        self.lowercase = bool(text["lowercase"])
        self.tags = bool(text["tags"])
        self.features = bool(text["features"])
        self.feature_separator = str(text["feature_separator"])
        self.tabs = bool(text["tabs"])
        self.source_eos = bool(text["source_eos"])
        self.input_limit = int(decode["input_limit"])  # 0: none
        self.max_length = int(decode["max_length"])  # 0: none
        self.max_output_length = int(decode["max_output_length"])  # 0: 2 |x| + 10
        self.batch_size = int(decode["batch_size"])

    @torch.jit.export
    def symbols(self, line: str) -> list[str]:
        """The model input symbols of one non-empty line, as `transduce decode` cuts it."""
        if self.tags:  # lemma<TAB>tags
            lemma, sep, bundle = line.partition("\t")
            bundle = strip_space(bundle, self.space)
            if sep == "" or bundle == "":
                raise ValueError("expected lemma<TAB>tags, e.g. walk<TAB>V;PST: " + line)
            out: list[str] = []
            for tag in bundle.split(";"):
                out.append("[" + strip_space(tag, self.space) + "]")
            out.append(self.sep)
            out.extend(char_symbols(strip_space(lemma, self.space), self.space))
            return out
        if not self.tabs and line.find("\t") >= 0:
            raise ValueError("a tab in a line of raw text: " + line)
        features: list[str] = []
        if self.features:
            text, _, raw = line.partition("\t")
            for f in raw.split(self.feature_separator):
                f = strip_space(f, self.space)
                if f != "":
                    features.append(f)
            line = text
        chars = utf8_chars(strip_space(line, self.space))
        if self.normalize:  # as `Side.cut`: the normal form first, then lower case
            chars = decompose_chars(chars, self.decompose, self.classes)
        if self.lowercase:
            chars = lower_chars(chars, self.lower, self.cased)
        symbols: list[str] = []
        if self.unit == tokens.CHAR:
            for c in chars:
                symbols.append(self.space.get(c, c))
        else:
            symbols = split_space(chars, self.space)
        if len(features) == 0:
            return symbols
        out = ["[" + f + "]" for f in features]
        out.append(self.sep)
        out.extend(symbols)
        return out

    def _ids(self, symbols: list[str]) -> list[int]:
        ids: list[int] = []
        for s in symbols:
            ids.append(self.source_index.get(s, self.unk_id))
        if self.source_eos:
            ids.append(self.eos_id)
        return ids

    def _copy_targets(self, symbols: list[str], row: list[int]) -> list[str]:
        """`transduce.models.copy.copy_targets`: fills `row` (0, or where a symbol the
        source vocabulary lacks copies to, + 1) and returns the symbols that neither
        vocabulary has (the k-th copies to V + k - 1)."""
        names: list[str] = []
        size = len(self.target_text)
        for s in symbols:
            if s in self.source_index:
                row.append(0)
            elif s in self.target_index:
                row.append(self.target_index[s] + 1)
            else:
                if s not in names:
                    names.append(s)
                row.append(size + names.index(s) + 1)
        return names

    def _greedy(self, sources: list[list[int]], unknown: list[list[int]]) -> list[list[int]]:
        """`transduce.decoding.greedy` of one batch: output ids without EOS. `unknown`:
        for each source position 0, or where a symbol that the source vocabulary lacks
        copies to, + 1 (`_copy_targets`)."""
        size = len(sources)
        width = 1
        vocab = len(self.target_text)
        used: list[int] = []  # the extended ids of each row
        for s in sources:
            width = max(width, len(s))
        source = torch.zeros(size, width, dtype=torch.long)  # self.pad_id is 0
        oov = torch.zeros(size, width, dtype=torch.long)
        lengths: list[int] = []
        for row in range(size):
            n = len(sources[row])
            lengths.append(n)
            used.append(0)
            if n > 0:
                source[row, :n] = torch.tensor(sources[row], dtype=torch.long)
                oov[row, :n] = torch.tensor(unknown[row], dtype=torch.long)
                used[row] = max(0, max(unknown[row]) - vocab)
        extra = max(used)
        slots = torch.arange(extra).unsqueeze(0) >= torch.tensor(used).unsqueeze(1)  # B x K
        mask = source != self.pad_id
        limits: list[int] = []
        for n in lengths:
            limit = self.max_output_length if self.max_output_length > 0 else 2 * n + 10
            if self.max_length > 0:
                limit = min(limit, self.max_length - 1)
            limits.append(limit)
        state = self.encoder(source, mask, oov, slots)
        copy_index = copy_index_of(state)
        never = torch.zeros(0, 0, dtype=torch.bool)  # the active rows' never_written
        active: list[int] = list(range(size))
        previous = torch.full((size,), self.bos_id, dtype=torch.long)
        outputs: list[list[int]] = []
        for _ in range(size):
            outputs.append(torch.jit.annotate(list[int], []))
        for t in range(max(limits) + 1):
            log_probs, state = self.step(state, previous)
            log_probs = log_probs.float()
            log_probs[:, self.pad_id] = float("-inf")
            log_probs[:, self.bos_id] = float("-inf")
            if t == 0:
                never = never_written(source, copy_index, log_probs.shape[-1])
            log_probs = log_probs.masked_fill(never, float("-inf"))
            best = log_probs.max(dim=-1)[1]
            at_limit = torch.tensor([limits[i] <= t for i in active], dtype=torch.bool)
            best = torch.where(at_limit, torch.full_like(best, self.eos_id), best)
            chosen: list[int] = best.tolist()
            keep: list[int] = []
            for row in range(len(chosen)):
                if chosen[row] != self.eos_id:
                    outputs[active[row]].append(chosen[row])
                    keep.append(row)
            if len(keep) == 0:
                break
            if len(keep) < len(chosen):
                rows = torch.tensor(keep, dtype=torch.long)
                selected: dict[str, Tensor] = {}
                for key, value in state.items():
                    selected[key] = value.index_select(0, rows)
                state = selected
                never = never.index_select(0, rows)
                best = best.index_select(0, rows)
                active = [active[row] for row in keep]
            previous = best
        return outputs

    def _text(self, ids: list[int], names: list[str]) -> str:
        """The output's text; an id past the target vocabulary is the source's unknown
        symbol it copied (`names`), written as `transduce decode` writes it."""
        pieces: list[str] = []
        size = len(self.target_text)
        for i in ids:
            if i < size:
                pieces.append(self.target_text[i])
            else:
                name = names[i - size]
                pieces.append(self.unspace.get(name, name) if self.unescapes else name)
        return self.joiner.join(pieces)

    @torch.jit.export
    def transduce(self, lines: list[str], batch_size: int = 0) -> list[str]:
        """The best output of each line, as `transduce decode` prints it (an empty line for
        an empty one); greedy, in batches of `batch_size` lines of similar lengths (0: as
        `transduce decode` by default, 256)."""
        size = batch_size if batch_size > 0 else self.batch_size
        results: list[str] = ["" for _ in lines]
        chunk = 16 * size  # `transduce decode` sorts 16 batches of input lines at a time
        for first in range(0, len(lines), chunk):
            where: list[int] = []
            sources: list[list[int]] = []
            unknown: list[list[int]] = []
            spelled: list[list[str]] = []
            for k in range(first, min(first + chunk, len(lines))):
                if strip_space(lines[k], self.space) == "":
                    continue
                symbols = self.symbols(lines[k])
                if len(symbols) == 0:
                    continue
                if self.input_limit > 0 and len(symbols) > self.input_limit:
                    raise ValueError(
                        "line "
                        + str(k + 1)
                        + ": "
                        + str(len(symbols))
                        + " input symbols, more than the model takes ("
                        + str(self.input_limit)
                        + ")"
                    )
                where.append(k)
                ids = self._ids(symbols)
                numbers: list[int] = []
                names = self._copy_targets(symbols, numbers)
                while len(numbers) < len(ids):  # an appended </s>
                    numbers.append(0)
                sources.append(ids)
                unknown.append(numbers)
                spelled.append(names)
            order = sorted_by_length([len(s) for s in sources])
            for start in range(0, len(order), size):
                batch = order[start : start + size]
                outputs = self._greedy([sources[i] for i in batch], [unknown[i] for i in batch])
                for row in range(len(batch)):
                    names = spelled[batch[row]]
                    results[where[batch[row]]] = self._text(outputs[row], names)
        return results

    def forward(self, lines: list[str]) -> list[str]:
        return self.transduce(lines, 0)


class TaggerExport(nn.Module):
    """Word and character ids, sentence pieces and batches around a traced tagger."""

    word_index: dict[str, int]
    char_index: dict[str, int]
    tag_text: list[str]
    space: dict[str, str]

    def __init__(
        self,
        tagger: nn.Module,
        text: dict[str, Any],
        vocabs: dict[str, list[str]],
        decode: dict[str, Any],
    ) -> None:
        super().__init__()
        self.sep = SEP
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = PAD_ID, BOS_ID, EOS_ID, UNK_ID
        self.tagger = tagger
        self.word_index = {s: i for i, s in enumerate(vocabs["source"])}
        self.char_index = {s: i for i, s in enumerate(vocabs["chars"])}
        self.tag_text = list(vocabs["target"])
        self.space = text["space"]
        self.longest = int(decode["max_word_length"])
        self.max_length = int(decode["max_length"])  # 0: none
        self.batch_size = int(decode["batch_size"])

    @torch.jit.export
    def transduce(self, lines: list[str], batch_size: int = 0) -> list[str]:
        """The tags of each line's words, separated by spaces (an empty line: none)."""
        size = batch_size if batch_size > 0 else self.batch_size
        results: list[str] = ["" for _ in lines]
        chunk = 16 * size
        for first in range(0, len(lines), chunk):
            where: list[int] = []
            words: list[list[str]] = []
            for k in range(first, min(first + chunk, len(lines))):
                if lines[k].find("\t") >= 0:
                    raise ValueError("a tab in a line of raw text: " + lines[k])
                found = split_space(utf8_chars(lines[k]), self.space)
                if len(found) > 0:
                    where.append(k)
                    words.append(found)
            tagged = self._tag(words, size)
            for i in range(len(where)):
                results[where[i]] = " ".join([self.tag_text[t] for t in tagged[i]])
        return results

    def _tag(self, sentences: list[list[str]], size: int) -> list[list[int]]:
        """`tag_sentences`: pieces of at most max_length words, batched by length in pools
        of 50 batches (`plan_batches` with bucketing), tags in sentence order."""
        pieces: list[list[int]] = []  # [sentence, start, end]
        for n in range(len(sentences)):
            count = len(sentences[n])
            if self.max_length <= 0 or count <= self.max_length:
                pieces.append([n, 0, count])
            else:
                for start in range(0, count, self.max_length):
                    pieces.append([n, start, min(start + self.max_length, count)])
        lengths = [max(p[2] - p[1], 1) for p in pieces]
        pool = 50 * size
        order: list[int] = []
        for start in range(0, len(pieces), pool):
            part = sorted_by_length(lengths[start : start + pool])
            for i in part:
                order.append(start + i)
        tagged: list[list[int]] = []
        for _ in pieces:
            tagged.append(torch.jit.annotate(list[int], []))
        for start in range(0, len(order), size):
            batch = order[start : start + size]
            width = 1
            letters = 1
            for i in batch:
                width = max(width, pieces[i][2] - pieces[i][1])
                for w in sentences[pieces[i][0]][pieces[i][1] : pieces[i][2]]:
                    letters = max(letters, min(len(utf8_chars(w)), self.longest))
            source = torch.zeros(len(batch), width, dtype=torch.long)
            chars = torch.zeros(len(batch), width, letters, dtype=torch.long)
            for row in range(len(batch)):
                p = pieces[batch[row]]
                for j in range(p[2] - p[1]):
                    word = sentences[p[0]][p[1] + j]
                    source[row, j] = self.word_index.get(word, self.unk_id)
                    spelled = utf8_chars(word)
                    for c in range(min(len(spelled), self.longest)):
                        letter = spelled[c]
                        chars[row, j, c] = self.char_index.get(letter, self.unk_id)
            ids = self.tagger(source, source != self.pad_id, chars)
            found: list[list[int]] = ids.tolist()
            for row in range(len(batch)):
                p = pieces[batch[row]]
                tagged[batch[row]] = found[row][: p[2] - p[1]]
        out: list[list[int]] = []
        for _ in sentences:
            out.append(torch.jit.annotate(list[int], []))
        for i in range(len(pieces)):
            out[pieces[i][0]].extend(tagged[i])
        return out

    def forward(self, lines: list[str]) -> list[str]:
        return self.transduce(lines, 0)


def _target_pieces(symbols: list[str], unit: str) -> list[str]:
    """The text each target id writes, as `transduce.data.tokens.detokenize` writes it
    (`<unk>` too: a copied unknown symbol)."""
    pieces = []
    for symbol in symbols:
        if unit in (tokens.CHAR, tokens.WORD):
            pieces.append(unescape(symbol))
        else:
            pieces.append(symbol)
    return pieces


# ----------------------------------------------------------------- building the file


def _refuse_unless_exportable(transducer: Any) -> None:
    sides = transducer.sides
    for side in ("source", "target"):
        unit = sides.get(side).unit
        if unit == tokens.SUBWORD:
            raise ExportError(
                f"a model of {side} subwords ({sides.get(side).spec.get('library')}): its "
                "segmenter is not TorchScript, so it cannot be exported; decode it with "
                "`transduce decode`"
            )
        if unit not in (tokens.CHAR, tokens.SYMBOL, tokens.WORD):
            raise ExportError(f"the {side} side's unit {unit!r} cannot be exported")
        form = sides.get(side).normal_form
        if form is not None and (side != "source" or form not in EXPORTED_FORMS):
            raise ExportError(
                f"a model whose {side} text is put in Unicode {form.upper()} "
                f"(source_normalize): the export writes only {', '.join(EXPORTED_FORMS)} "
                "of a source (composing is not written), so it cannot be exported; decode it "
                "with `transduce decode`"
            )


def _text_spec(transducer: Any) -> dict[str, Any]:
    sides = transducer.sides
    source = sides.source
    lower, cased = _lower() if source.lowercase else ({}, {})
    form = source.normal_form
    decompose, classes = _decompositions(form) if form is not None else ({}, {})
    return {
        "source_unit": source.unit,
        "target_unit": sides.target.unit,
        "lowercase": source.lowercase,
        "tags": source.tagged,
        "features": sides.features is not None,
        "feature_separator": (
            sides.features.separator if sides.features is not None else FEATURES_SEPARATOR
        ),
        # a raw line may hold a tab only where the model's input has one
        "tabs": sides.tabbed_input,
        "source_eos": transducer.source_vocab.end,
        "space": _whitespace(),
        "lower": lower,
        "cased": cased,
        "normalize": form or "",
        "decompose": decompose,
        "classes": classes,
    }


def _example_sources(vocab_size: int, width: int = 6) -> tuple[Tensor, Tensor]:
    """Two sources of different lengths (`width` and fewer), of real symbol ids, for
    tracing."""
    first = len(SPECIALS)
    ids = [first + i % max(1, vocab_size - first) for i in range(width)]
    rows = [ids, ids[: max(1, width - 2)]]
    source = torch.zeros(2, width, dtype=torch.long)
    for row, seq in enumerate(rows):
        source[row, : len(seq)] = torch.tensor(seq)
    return source, source != PAD_ID


def _unknown_example(source: Tensor, extra: int, size: int) -> tuple[Tensor, Tensor, Tensor]:
    """`source` with its first `extra` positions of row 0 made symbols that neither
    vocabulary has (`<unk>`, copied to the extended ids V..V + extra - 1 of a target
    vocabulary of `size`), their `copy_oov` and `copy_slots` (the other rows use none):
    B x S, B x S, B x K."""
    source, oov = source.clone(), torch.zeros_like(source)
    for k in range(extra):
        source[0, k], oov[0, k] = UNK_ID, size + k + 1
    slots = torch.ones(len(source), extra, dtype=torch.bool)
    slots[0] = False
    return source, oov, slots


def _check(model: Any, encoder: nn.Module, step: nn.Module) -> None:
    """Refuse an export whose traced encoder and step do not compute what the model does
    on a batch of another size and other lengths than they were traced on, with none and
    with two unknown source symbols (a family whose step branched in Python on its input's
    values would fail here)."""
    ids = _random_ids([9, 3, 1], 9, model.source_vocab, torch.Generator().manual_seed(0))
    for extra in (0, 2):
        source, oov, slots = _unknown_example(ids, extra, model.target_vocab)
        mask = source != PAD_ID
        batch = Batch(source, mask, copy_oov=oov, copy_slots=slots)
        expected, traced = model.init_state(batch), encoder(source, mask, oov, slots)
        previous = torch.full((3,), BOS_ID, dtype=torch.long)
        for _ in range(4):
            reference = model.step(expected, previous)
            log_probs, traced = step(traced, previous)
            if log_probs.shape != reference.log_probs.shape or not torch.allclose(
                log_probs, reference.log_probs, atol=1e-5
            ):
                raise ExportError(
                    f"a {model.name} model: its traced decoder step does not reproduce the "
                    "model on other batch shapes, so it cannot be exported"
                )
            expected = reference.state
            # the most probable symbol: a copied unknown one (an id past V) too
            previous = reference.log_probs.argmax(dim=-1).clamp(min=len(SPECIALS))


def _sinusoidal(module: nn.Module) -> bool:
    """A table of sinusoidal positions (`transduce.models.transformer.Positions`)."""
    return hasattr(module, "grow") and getattr(module, "kind", None) != "learned"


def _random_ids(lengths: list[int], width: int, vocab: int, generator: torch.Generator) -> Tensor:
    """Rows of random symbol ids (no reserved one, each below `vocab`) of `lengths`,
    right-padded to `width`: len(lengths) x width."""
    out = torch.zeros(len(lengths), width, dtype=torch.long)
    top = max(vocab, len(SPECIALS) + 1)
    for row, n in enumerate(lengths):
        out[row, :n] = torch.randint(len(SPECIALS), top, (n,), generator=generator)
    return out.clamp(max=vocab - 1)


def _check_tagger(model: Tagger, traced: nn.Module, vocab: int, chars: int) -> None:
    """`_check` for a traced tagger: other batch sizes, sentence and word lengths."""
    generator = torch.Generator().manual_seed(0)
    width = min(9, model.max_length or 9)
    lengths = [width, 3, 1]
    source = _random_ids(lengths, width, vocab, generator)
    letters = torch.stack(  # words of 1 to 7 characters
        [
            _random_ids(
                [1 + (row + j) % 7 if j < n else 0 for j in range(width)], 7, chars, generator
            )
            for row, n in enumerate(lengths)
        ]
    )  # B x S x C
    mask = source != PAD_ID
    expected = model.tag(Batch(source, mask, chars=letters))
    if not torch.equal(traced(source, mask, letters), expected):
        raise ExportError(
            f"a {model.name} model: its traced tagger does not reproduce the model on other "
            "batch shapes, so it cannot be exported"
        )


def build(transducer: Any) -> nn.Module:
    """The TorchScript module of a loaded model (`Transducer`), on the CPU, float32."""
    if len(transducer.members) > 1:
        raise ExportError("an ensemble cannot be exported; export its models one by one")
    _refuse_unless_exportable(transducer)
    model = transducer.model.float().cpu().eval()
    model.requires_grad_(False)  # the file decodes: no autograd graph at its steps
    for part in model.modules():  # sinusoid tables: 1,024 positions (traced as they are)
        if _sinusoidal(part):
            part.grow(POSITIONS)
    vocabs = transducer.payload["vocab"]
    text = _text_spec(transducer)
    with torch.no_grad(), warnings.catch_warnings():
        # the tracer warns of every Python number it records as a constant (a head's
        # size, a branch on an option); `_check` runs the traced pieces on other shapes
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        if isinstance(model, Seq2SeqModel):
            # traced with one unknown source symbol, so that a copying model's step records
            # the extended ids of unknown symbols (`transduce.models.copy.extend`)
            example = _example_sources(len(vocabs["source"]))[0]
            source, oov, slots = _unknown_example(example, 1, len(vocabs["target"]))
            mask = source != PAD_ID
            encoder = torch.jit.trace(_Encoder(model), (source, mask, oov, slots), strict=False)
            state = model.init_state(Batch(source, mask, copy_oov=oov, copy_slots=slots))
            first = model.step(state, torch.full((2,), BOS_ID, dtype=torch.long))
            previous = first.log_probs.argmax(dim=-1).clamp(min=len(SPECIALS))
            # traced on the second step, so that caches that grow (a transformer's) are
            # not empty in the example
            step = torch.jit.trace(_Step(model), (first.state, previous), strict=False)
            _check(model, encoder, step)
            limit = transducer.task.input_limit(model)
            longest = model.max_length
            if any(_sinusoidal(m) for m in model.modules()):  # sinusoids: the table's
                longest = min(longest or POSITIONS, POSITIONS)
                limit = min(limit or POSITIONS, POSITIONS - int(transducer.source_vocab.end))
            module: nn.Module = Seq2SeqExport(
                encoder,
                step,
                text,
                vocabs["source"],
                vocabs["target"],
                {
                    "input_limit": limit or 0,
                    "max_length": longest or 0,
                    "max_output_length": 0,  # 2 |x| + 10, as `transduce decode` by default
                    "batch_size": DecodeConfig().batch_size,
                },
            )
        elif isinstance(model, Tagger):
            width = min(6, model.max_length or 6)
            source, mask = _example_sources(len(vocabs["source"]), width)
            chars = torch.full((2, width, 3), len(SPECIALS), dtype=torch.long)
            chars[:, :, 2] = PAD_ID
            tagger = torch.jit.trace(_Tag(model), (source, mask, chars), strict=False)
            _check_tagger(model, tagger, len(vocabs["source"]), len(vocabs["chars"]))
            module = TaggerExport(
                tagger,
                text,
                vocabs,
                {
                    "max_word_length": model.config.max_word_length,
                    "max_length": model.max_length or 0,
                    "batch_size": DecodeConfig().batch_size,
                },
            )
        else:
            raise ExportError(f"a {model.name} model cannot be exported")
    return torch.jit.script(module)


def export(
    model_path: str | os.PathLike[str], out: str | os.PathLike[str], format: str = "torchscript"
) -> dict[str, Any]:
    """Export a run directory's model (final.pt or best.pt; or a checkpoint) to `out`,
    written whole or not at all. Returns the metadata stored in the file."""
    from transduce import checkpoint
    from transduce.inference import Transducer
    from transduce.version import __version__

    if format not in FORMATS:
        raise ExportError(
            f"--format {format}: not written yet; the formats are {', '.join(FORMATS)}"
        )
    payload = checkpoint.load(os.fspath(model_path))
    transducer = Transducer.from_checkpoint(payload, "cpu", bf16=False)
    module = build(transducer)
    config = transducer.task.config
    metadata = {
        "format": format,
        "transduce": __version__,
        "torch": torch.__version__,
        "checkpoint": str(payload.get("path")),
        "model": transducer.model.name,
        "task": transducer.model.task,
        "trained_precision": payload.get("precision") or config.train.precision,
        "precision": "fp32",
        "search": "greedy",
        "sides": transducer.sides.to_manifest(),
    }
    target = Path(out)
    with tempfile.NamedTemporaryFile(
        dir=target.parent, prefix=f".{target.name}.", delete=False
    ) as handle:
        temporary = Path(handle.name)
    try:
        torch.jit.save(module, str(temporary), _extra_files={METADATA: json.dumps(metadata)})
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    return metadata
