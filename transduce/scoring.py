"""Scoring files: what `transduce score` does, as a library call.

Reads a hypothesis file and one or more reference files (either may be "-", standard
input), takes a column of a TSV where asked, splits alternatives inside a line, reads a
CoNLL-U reference (`.conllu`) as its tag sequences with their words, scores every
requested metric on one shared `Corpus`, and builds the JSON report and the per-line
statistics. The metrics themselves (`transduce.metrics`) read no files.

A reference column of a prepared split (`test.tsv` with a `manifest.json` beside it that
lists the file with the same SHA-256) is turned back into the target's own text, the way
`decode` prints it: characters joined for character targets ("w a l k e d" -> "walked"),
BPE merged for subword targets. With `--unit auto`, such references also settle the unit
(char for character targets, symbol otherwise).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transduce import defaults
from transduce.data import tokens
from transduce.data.prepared import prepared_side
from transduce.data.sides import Side
from transduce.errors import ConfigError, DataError, plural
from transduce.lines import STDIN, check_line_lengths, decode_lines, display, read_bytes
from transduce.metrics import METRICS
from transduce.metrics.base import DataFile, FileContent, Metric, Option, Score, check_bootstrap
from transduce.metrics.corpus import Corpus, Text
from transduce.outputs import check_outputs as guard_outputs
from transduce.registry import lookup
from transduce.reporting import versions

REPORT_SCHEMA = "transduce.score/1"


@dataclass
class ScoreRequest:
    """The inputs and options of one scoring run (what the `score` command takes).

    Attributes:
        merge_variants: Lines whose source (column `source_col` of the first reference
            TSV) is the same count as one item: scored once, with the hypothesis of its
            first line, against the references of all its lines. This is how G2P is scored
            on CMUdict, where a word with two pronunciations has two lines. None (the
            default): merge when the reference is a prepared split that repeats a source.
        data_files: The files that metrics declare (`Metric.data_files`) by name, e.g.
            {"train": "train.conllu"} for tagacc over OOV and ambiguous words.
    """

    hyp: str
    refs: list[str]
    metrics: list[str] = field(default_factory=lambda: list(defaults.METRICS))
    unit: str = defaults.UNIT
    hyp_col: int | None = None
    ref_col: int | None = None
    ref_sep: str | None = None
    metric_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    bootstrap: int = 0
    seed: int = defaults.BOOTSTRAP_SEED
    encoding: str = defaults.ENCODING
    merge_variants: bool | None = None
    source_col: int = 1
    data_files: dict[str, str] = field(default_factory=dict)
    max_line_length: int | None = defaults.MAX_LINE_LENGTH


@dataclass
class Column:
    """The lines of one input file (or of one of its columns)."""

    path: str
    lines: list[str]
    side: Side | None = None  # its side when it is a column of a prepared split


@dataclass
class Loaded:
    """What `load_corpus` read.

    Attributes:
        corpus: The scoring items.
        lines: The input line of each item (its first line with --merge-variants).
        input_lines: The number of input lines.
        warnings: Signs that an input may be misread (shown on stderr and in the report).
        notes: Details for --verbose and the report.
        merged: Whether lines with the same source were merged (`merge_variants`).
    """

    corpus: Corpus
    lines: list[int]
    input_lines: int
    warnings: list[str]
    notes: list[str]
    merged: bool = False


Files = dict[str, tuple[bytes, list[str]]]  # path -> (bytes, lines): each file is read once


def read_column(
    path: str,
    column: int | None,
    flag: str = "--ref-col",
    encoding: str = defaults.ENCODING,
    files: Files | None = None,
    max_line_length: int | None = defaults.MAX_LINE_LENGTH,
) -> Column:
    """Read the lines of `path`, or the 1-based `column` of its tab-separated lines.

    A column of a prepared split comes back as the target's own text (see the module doc);
    a prepared split read without a column is an error (its lines are source<TAB>target).
    `files` keeps what was read, so that a file (standard input too) is read only once.
    """
    if column is not None and column < 1:
        raise ConfigError(f"{flag}: columns are 1-based, {column} is not a column")
    files = {} if files is None else files
    if path not in files:
        data = read_bytes(path)
        decoded = decode_lines(data, display(path), encoding)[0]
        lines = [line for line in decoded if line is not None]  # None: only with keep_bad
        check_line_lengths(lines, path, max_line_length)
        files[path] = data, lines
    data, lines = files[path]
    if column is None:
        if prepared_side(path, data, 2) is not None:
            raise DataError(
                f"a prepared split (source<TAB>target): use {flag} 2 for its targets", path
            )
        return Column(path, lines)
    values = []
    for number, line in enumerate(lines, 1):
        cols = line.split("\t")
        if len(cols) < column:
            raise DataError(
                f"no column {column} (the line has {len(cols)})", display(path), number, line
            )
        values.append(cols[column - 1])
    side = prepared_side(path, data, column)
    if side is not None and not any(v.strip() for v in values):
        raise DataError(f"column {column} of this prepared split is empty (no answers)", path)
    if side is not None:
        values = [side.detokenize(v.split()) if v.strip() else "" for v in values]
    return Column(path, values, side)


def _alternatives(column: Column, separator: str | None) -> list[str] | list[list[str]]:
    """The references of each line: the line itself, or its parts split by `separator`."""
    if separator is None:
        if "" in set(map(str.strip, column.lines)):  # checked in C; the loop only on error
            number = [line.strip() for line in column.lines].index("") + 1
            raise DataError(
                "empty reference", display(column.path), number, column.lines[number - 1]
            )
        return column.lines
    result = []
    for number, line in enumerate(column.lines, 1):
        alts = line.split(separator)
        if any(not a.strip() for a in alts):
            raise DataError("empty reference", display(column.path), number, line)
        result.append(alts)
    return result


def _joined(per_file: list[list[str] | list[list[str]]]) -> list[list[str]]:
    """The references of each line from all reference files, as one list per line."""
    return [
        [a for alts in line for a in ([alts] if isinstance(alts, str) else alts)]
        for line in zip(*per_file)
    ]


def _merge_variants(
    hyps: list[str], alternatives: list[list[str]], keys: list[str]
) -> tuple[list[str], list[list[str]], list[int], int]:
    """Group lines by source: (hyps, references, first line of each group, disagreeing groups)."""
    groups: dict[str, list[int]] = {}
    for index, key in enumerate(keys):
        groups.setdefault(key, []).append(index)
    firsts = [members[0] for members in groups.values()]
    merged = [
        list(dict.fromkeys(a for i in members for a in alternatives[i]))
        for members in groups.values()
    ]
    disagree = sum(1 for members in groups.values() if len({hyps[i] for i in members}) > 1)
    return [hyps[i] for i in firsts], merged, [i + 1 for i in firsts], disagree


def _tab_warning(column: Column, flag: str, separator: str | None = None) -> list[str]:
    if column.side is not None or (separator and "\t" in separator):
        return []
    sample = column.lines[:: max(1, len(column.lines) // 10_000)]  # evenly spaced, cheap
    if sum("\t" in line for line in sample) * 2 > len(sample):
        return [f"most lines of {display(column.path)} contain a TAB: did you mean {flag} N?"]
    return []


def load_corpus(request: ScoreRequest) -> Loaded:
    """Read the hypotheses and references into a `Corpus`, with the sources of every line
    where a CoNLL-U reference gives them or a requested metric needs them."""
    if [request.hyp, *request.refs].count(STDIN) > 1:
        raise ConfigError("standard input ('-') can be read only once: use it for one file")
    if request.ref_sep == "":
        raise ConfigError("--ref-sep must not be empty")
    if request.merge_variants and request.ref_col is None:
        raise ConfigError("--merge-variants reads the sources from a reference TSV: give --ref-col")
    needs_sources = _sources_needed(request)
    if request.source_col != 1 and not (request.merge_variants or needs_sources):
        flags = [_flag(key) for key, users in declared_files().items() if _with_sources(users)]
        raise ConfigError(f"--source-col goes with {' or '.join(['--merge-variants', *flags])}")
    files: Files = {}
    limit = request.max_line_length
    hyps = read_column(request.hyp, request.hyp_col, "--hyp-col", request.encoding, files, limit)
    sources: list[list[str]] | None = None
    if any(str(path).endswith(".conllu") for path in request.refs):
        if len(request.refs) > 1 or request.ref_col is not None or request.merge_variants:
            raise ConfigError("a CoNLL-U reference is scored alone, without --ref-col")
        sentences = read_tagged(request.refs[0], request.encoding)
        refs = [Column(request.refs[0], [" ".join(tags) for _, tags in sentences])]
        sources = [words for words, _ in sentences]
    else:
        refs = [
            read_column(path, request.ref_col, "--ref-col", request.encoding, files, limit)
            for path in request.refs
        ]
        if needs_sources:
            if request.ref_col is None:
                raise ConfigError(needs_sources[0])
            sources = _words(request.refs[0], request.source_col, files)
    for ref in refs:
        if len(ref.lines) != len(hyps.lines):
            raise DataError(
                f"line counts differ: {display(hyps.path)} has {plural(len(hyps.lines), 'line')}, "
                f"{display(ref.path)} has {plural(len(ref.lines), 'line')}"
            )
    if not hyps.lines:
        raise DataError("nothing to score: the files are empty", display(hyps.path))
    warnings = _tab_warning(hyps, "--hyp-col") + [
        w for r in refs for w in _tab_warning(r, "--ref-col", request.ref_sep)
    ]
    notes: list[str] = []
    per_file = [_alternatives(ref, request.ref_sep) for ref in refs]
    alternatives: list[Any] = per_file[0]
    if len(per_file) > 1:
        alternatives = _joined(per_file)
    hyp_lines, numbers = hyps.lines, list(range(1, len(hyps.lines) + 1))
    merged = False
    if (request.merge_variants or refs[0].side is not None) and sources is None:
        keys = read_column(
            request.refs[0], request.source_col, "--source-col", request.encoding, files
        ).lines
        side = refs[0].side  # a tagger's test: each sentence counts
        tagging = side is not None and side.tag_column is not None
        merged = request.merge_variants is True or (
            request.merge_variants is None and not tagging and len(set(keys)) < len(keys)
        )
        if merged:
            hyp_lines, alternatives, numbers, disagree = _merge_variants(
                hyp_lines, _joined(per_file), keys
            )
            note = f"merged {len(keys)} lines into {len(numbers)} sources"
            if request.merge_variants is None:
                note += " (the variants of a prepared split; --no-merge-variants scores every line)"
            notes.append(note)
            if disagree:
                notes.append(
                    f"{plural(disagree, 'source')} with variants got different hypotheses on "
                    "their lines: the first line's is scored"
                )
    unit = request.unit
    sides = [ref.side for ref in refs if ref.side is not None]
    if unit == "auto" and sides:
        unit = tokens.CHAR if all(s.unit == tokens.CHAR for s in sides) else tokens.SYMBOL
    corpus = Corpus(hyp_lines, alternatives, unit, parallel=True, sources=sources)
    return Loaded(corpus, numbers, len(hyps.lines), warnings, notes, merged)


def _words(path: str, column: int, files: Files) -> list[list[str]]:
    """The words of each line, from a TSV column as written: a prepared split keeps a form
    with spaces one symbol (`chủ<space>tịch`), as its training file and tags do."""
    if column < 1:
        raise ConfigError(f"--source-col: columns are 1-based, {column} is not a column")
    words = []
    for number, line in enumerate(files[path][1], 1):
        cols = line.split("\t")
        if len(cols) < column:
            raise DataError(
                f"no column {column} (the line has {len(cols)})", display(path), number, line
            )
        words.append(cols[column - 1].split())
    return words


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def declared_files() -> dict[str, list[tuple[str, DataFile]]]:
    """Each data file that metrics declare, with the (metric, declaration) pairs of it."""
    files: dict[str, list[tuple[str, DataFile]]] = {}
    for name, metric in METRICS.items():
        for key, data in metric.data_files.items():
            files.setdefault(key, []).append((name, data))
    return files


def _with_sources(users: Sequence[tuple[str, DataFile]]) -> bool:
    return any(data.needs_sources for _, data in users)


def _sources_needed(request: ScoreRequest) -> list[str]:
    """The data files given that make a requested metric need the sources of every line:
    the error of each when the references cannot give them."""
    return [
        data.needs_sources
        for name in dict.fromkeys(request.metrics)
        if name in METRICS
        for key, data in METRICS[name].data_files.items()
        if key in request.data_files and data.needs_sources
    ]


def make_metrics(request: ScoreRequest) -> list[Metric]:
    """The requested metrics with their options and data files, checked before any
    hypothesis or reference is read."""
    if not request.metrics:
        raise ConfigError("no metric requested")
    unknown = set(request.metric_options) - set(request.metrics)
    if unknown:
        raise ConfigError(
            f"options given for metric(s) not requested: {', '.join(sorted(unknown))}"
        )
    if request.bootstrap:
        check_bootstrap(request.bootstrap)
    names = list(dict.fromkeys(request.metrics))  # each once, in the order given
    declared = declared_files()
    for key in request.data_files:
        users = [(name, data) for name, data in declared.get(key, []) if name in names]
        if not users:
            readers = [name for name, _ in declared.get(key, [])]
            if not readers:
                raise ConfigError(f"{_flag(key)}: no metric reads such a file")
            raise ConfigError(
                f"{_flag(key)} applies to --metric {' or '.join(readers)}, which is not requested"
            )
        if request.merge_variants and _with_sources(users):
            title = METRICS[next(n for n, d in users if d.needs_sources)].title
            raise ConfigError(f"--merge-variants does not apply to {title} ({_flag(key)})")
    read: dict[str, FileContent] = {}  # each file once, whatever the metrics that read it
    metrics: list[Metric] = []
    for name in names:
        metric = lookup(METRICS, name, "metric")
        for key, data in metric.data_files.items():
            if key in request.data_files and key not in read:
                path = request.data_files[key]
                read[key] = FileContent(display(path), READERS[data.reads](path, request.encoding))
        files = {key: read[key] for key in metric.data_files if key in read}
        metrics += metric.create(request.unit, request.metric_options.get(name, {}), files)
    return metrics


def check_outputs(request: ScoreRequest, outputs: Sequence[str | Path | None]) -> None:
    """Refuse to write a report over an input file, a checkpoint or a prepared dataset."""
    guard_outputs(outputs, [request.hyp, *request.refs])


def _unit_warning(corpus: Corpus) -> list[str]:
    """Hypotheses of one symbol against references of several: probably characters."""
    if corpus.unit != tokens.SYMBOL:
        return []
    edit = corpus.edit
    spoken = len(edit.hyp_len) - edit.hyp_len.count(0)  # count() runs in C
    single = edit.hyp_len.count(1)
    several = len(edit.ref_len) - edit.ref_len.count(1)  # references are never empty
    if spoken and single >= 0.9 * spoken and several >= 0.5 * len(edit.ref_len):
        return [
            "the hypotheses are mostly one symbol per line and the references several: "
            "if they are strings of characters, score with --unit char"
        ]
    return []


def score_request(request: ScoreRequest) -> tuple[dict[str, Any], Loaded, list[Metric]]:
    """Score files as the request says.

    Returns:
        The JSON report, what was loaded (for `per_item_rows`) and the metric objects.
    """
    metrics = make_metrics(request)
    loaded = load_corpus(request)
    corpus = loaded.corpus
    try:
        scores: dict[str, Score] = {
            m.label: m.score(corpus, bootstrap=request.bootstrap, seed=request.seed)
            for m in metrics
        }
    except DataError as error:  # a line of the corpus: name the hypothesis file and line
        if error.path is not None or error.line is None:
            raise
        number = loaded.lines[error.line - 1]
        raise DataError(
            error.message, display(request.hyp), number, corpus.hyp_texts[error.line - 1]
        ) from None
    if any(m.uses_unit for m in metrics):
        loaded.warnings.extend(_unit_warning(corpus))
    report = {
        "schema": REPORT_SCHEMA,
        "hyp": request.hyp,
        "refs": request.refs,
        "lines": len(corpus),
        "input_lines": loaded.input_lines,
        "unit": corpus.unit,
        "nrefs": corpus.nrefs,
        "options": {
            "hyp_col": request.hyp_col,
            "ref_col": request.ref_col,
            "ref_sep": request.ref_sep,
            "merge_variants": loaded.merged,
            "metric_options": request.metric_options,
            **{key: request.data_files.get(key) for key in declared_files()},
        },
        "scores": {name: s.to_dict() for name, s in scores.items()},
        "warnings": loaded.warnings,
        "notes": loaded.notes,
        "versions": versions(),
    }
    return report, loaded, metrics


def score_lines(
    hypotheses: Sequence[Text],
    references: Sequence[Text | Sequence[Text]],
    metrics: Sequence[str] = defaults.METRICS,
    unit: str = defaults.UNIT,
    options: dict[str, dict[str, Any]] | None = None,
    bootstrap: int = 0,
    seed: int = defaults.BOOTSTRAP_SEED,
) -> dict[str, Score]:
    """`transduce score` on lines in memory (`transduce.score`): each metric's `Score`
    (`.value`, `.signature`, `.ci`), by the label the command's table shows.

    Args:
        hypotheses: A string per line (or a sequence of symbols).
        references: Per line a string, or a list of alternatives.
        metrics: Metric names (`transduce.metrics.METRICS`).
        unit: symbol, char, char-nospace or auto (symbol when most references have spaces).
        options: Each metric's options by name, e.g. {"per": {"average": "word"}}.
        bootstrap: Resamples for a 95% confidence interval (0: none; at least 100).
    """
    for name, value in (("hypotheses", hypotheses), ("references", references)):
        if isinstance(value, str | bytes):
            raise TypeError(f"{name}: a list of lines, not one string ([{value!r:.40}])")
    if isinstance(metrics, str):
        raise TypeError(f"metrics: a list of metric names, not one string ([{metrics!r}])")
    request = ScoreRequest(
        "", [], list(metrics), unit, metric_options=options or {}, bootstrap=bootstrap, seed=seed
    )
    chosen = make_metrics(request)
    corpus = Corpus(hypotheses, references, unit)  # no worker processes in a library call
    return {m.label: m.score(corpus, bootstrap=bootstrap, seed=seed) for m in chosen}


def _cell(text: str) -> str:
    return text.replace("\t", "\\t")


def per_item_rows(loaded: Loaded, metrics: Sequence[Metric]) -> list[list[str]]:
    """Per-line statistics for error analysis, header first.

    Columns: line, hypothesis, closest reference (as text), its index among the line's
    references, edits, hypothesis and reference lengths (in the unit), correct, the line's
    ED / |r|; with mfs: LCS, precision, recall and F of the reference mfs used; with bleu:
    sacrebleu's sentence BLEU (effective order): each metric's `item_columns`. With
    --merge-variants, `line` is the first input line of the source.
    """
    corpus = loaded.corpus
    edit = corpus.edit
    header = [
        "line",
        "hyp",
        "ref",
        "ref_index",
        "edits",
        "hyp_len",
        "ref_len",
        "correct",
        "edits_per_ref_len",
    ]
    columns: list[list[str]] = [
        list(map(str, loaded.lines)),
        [_cell(h) for h in corpus.hyp_texts],
        [_cell(alts[b]) for alts, b in zip(corpus.ref_texts, edit.best)],
        list(map(str, edit.best)),
        list(map(str, edit.edits)),
        list(map(str, edit.hyp_len)),
        list(map(str, edit.ref_len)),
        ["1" if e == 0 else "0" for e in edit.edits],
        [f"{e / r:.6f}" for e, r in zip(edit.edits, edit.ref_len)],
    ]
    for metric in metrics:
        for name, column in metric.item_columns(corpus):
            header.append(name)
            columns.append(column)
    return [header, *map(list, zip(*columns))]


def read_tagged(
    path: str, encoding: str = "utf-8", tag: str = "upos"
) -> list[tuple[list[str], list[str]]]:
    """(words, tags) of each sentence of a CoNLL-U file (`.conllu`; `tag`: upos or xpos) or
    of a TSV `words<TAB>tags` (space-separated, as a prepared split of `prepare conllu`).

    Raises:
        DataError: a malformed line, or a line with unequal numbers of words and tags.
    """
    from transduce.data.formats import Conllu, InputFile, Problems, ReadContext  # CoNLL-U only

    if str(path).endswith(".conllu"):
        context = ReadContext("score", encoding, Problems(), True)
        examples = Conllu(tag=tag).read([InputFile.read(path)], context)
        return [(list(e.source), list(e.target or ())) for e in examples]
    lines, _ = decode_lines(read_bytes(path), display(path), encoding)
    sentences = []
    for number, line in enumerate(lines, 1):
        assert line is not None  # None: only with keep_bad
        fields = line.split("\t")
        if len(fields) < 2:
            raise DataError("expected words<TAB>tags", display(path), number, line)
        words, tags = fields[0].split(), fields[1].split()
        if len(words) != len(tags):
            raise DataError(f"{len(words)} words but {len(tags)} tags", display(path), number, line)
        sentences.append((words, tags))
    return sentences


READERS: dict[str, Callable[[str, str], Any]] = {"tagged": read_tagged}  # by DataFile.reads


# ------------------------------------------------------------- flags from declarations


@dataclass(frozen=True)
class MetricFlag:
    """A flag of `score` that the metrics' declarations give.

    Attributes:
        name: The parameter; the flag is `--` and the name with "-" for "_": per_average.
        help: The flag's help, "METRIC: ...".
        metrics: The metrics it applies to.
        option: The option it sets (a flag per option: `--per-average`), or None.
        key: The name of that option ("average").
        pairs: It takes options as repeatable KEY=VALUE pairs (`--bleu-option`).
        file: It names a data file (`--train`).
    """

    name: str
    help: str
    metrics: tuple[str, ...]
    option: Option | None = None
    key: str = ""
    pairs: bool = False
    file: bool = False

    @property
    def flag(self) -> str:
        return _flag(self.name)


def metric_flags() -> list[MetricFlag]:
    """The flags of the registered metrics: their data files first (one flag for a name,
    whatever the metrics that declare it), then their options, in registry order."""
    flags = [
        MetricFlag(key, f"{'/'.join(n for n, _ in users)}: {users[0][1].help}.",
                   tuple(n for n, _ in users), file=True)
        for key, users in declared_files().items()
    ]  # fmt: skip
    for name, metric in METRICS.items():
        shown = {key: option for key, option in metric.options.items() if option.cli}
        if metric.option_pairs and shown:
            help = f"{name}: a {metric.title} option KEY=VALUE ({', '.join(shown)}); repeatable."
            flags.append(MetricFlag(f"{name}_option", help, (name,), pairs=True))
        elif not metric.option_pairs:
            flags += [
                MetricFlag(f"{name}_{key}", f"{name}: {option.help}.", (name,), option, key)
                for key, option in shown.items()
            ]
    return flags


def flag_values(
    names: Sequence[str], values: dict[str, Any]
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The metric options and data files that the flags of `metric_flags` give.

    Args:
        names: The requested metrics.
        values: Per flag name its value from the command line: an option's value (its
            default when not given), a list of KEY=VALUE pairs, a path, or None.

    Returns:
        `ScoreRequest.metric_options` (every flag option of a requested metric) and
        `ScoreRequest.data_files`.

    Raises:
        ConfigError: an option given for a metric not requested, or a malformed pair.
    """
    options: dict[str, dict[str, Any]] = {}
    files: dict[str, str] = {}
    for flag in metric_flags():
        value = values.get(flag.name)
        metric = flag.metrics[0]
        if flag.file:
            if value is not None:
                files[flag.name] = str(value)  # make_metrics checks that a metric reads it
        elif flag.option is not None:
            if metric in names:
                if value is None:
                    value = flag.option.default
                elif not isinstance(value, flag.option.kind):
                    value = flag.option.parse(flag.flag, str(value))
                options.setdefault(metric, {})[flag.key] = value
            elif value is not None and value != flag.option.default:
                raise ConfigError(
                    f"{flag.flag} applies to --metric {metric}, which is not requested"
                )
        elif value:
            if metric not in names:
                raise ConfigError(
                    f"{flag.flag} applies to --metric {metric}, which is not requested"
                )
            options[metric] = parse_pairs(METRICS[metric], flag.flag, value)
    return options, files


def parse_pairs(metric: type[Metric], flag: str, pairs: Sequence[str]) -> dict[str, Any]:
    """`["tokenize=none", "lowercase=true"]` -> {"tokenize": "none", "lowercase": True}."""
    shown = [key for key, option in metric.options.items() if option.cli]
    parsed: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in shown:
            raise ConfigError(f"{flag} {pair!r}: expected KEY=VALUE, KEY one of {', '.join(shown)}")
        parsed[key] = metric.options[key].parse(f"{flag} {key}", text.strip())
    return parsed
