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

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transduce import defaults
from transduce.data import tokens
from transduce.data.prepared import is_prepared_file, prepared_side
from transduce.errors import ConfigError, DataError, plural
from transduce.io import STDIN, decode_lines, display, read_bytes
from transduce.metrics import get_metric
from transduce.metrics.base import Metric, Score, check_bootstrap
from transduce.metrics.bleu import Bleu
from transduce.metrics.corpus import Corpus
from transduce.metrics.edit import MeanFScore
from transduce.metrics.tagging import SUBSETS, Lexicon, TaggingAccuracy
from transduce.reporting import versions

REPORT_SCHEMA = "transduce.score/1"


@dataclass
class ScoreRequest:
    """The inputs and options of one scoring run (what the `score` command takes).

    Attributes:
        merge_variants: Lines whose source (column `source_col` of the first reference
            TSV) is the same count as one item: scored once, with the hypothesis of its
            first line, against the references of all its lines. This is how G2P is scored
            on CMUdict, where a word with two pronunciations has two lines.
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
    merge_variants: bool = False
    source_col: int = 1
    train: str | None = None  # tagacc: the training data (OOV and ambiguous words)


@dataclass
class Column:
    """The lines of one input file (or of one of its columns)."""

    path: str
    lines: list[str]
    side: dict[str, Any] | None = None  # the side spec when it is a prepared split


@dataclass
class Loaded:
    """What `load_corpus` read.

    Attributes:
        corpus: The scoring items.
        lines: The input line of each item (its first line with --merge-variants).
        input_lines: The number of input lines.
        warnings: Signs that an input may be misread (shown on stderr and in the report).
        notes: Details for --verbose and the report.
    """

    corpus: Corpus
    lines: list[int]
    input_lines: int
    warnings: list[str]
    notes: list[str]


Files = dict[str, tuple[bytes, list[str]]]  # path -> (bytes, lines): each file is read once


def read_column(
    path: str,
    column: int | None,
    flag: str = "--ref-col",
    encoding: str = defaults.ENCODING,
    files: Files | None = None,
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
        files[path] = data, decode_lines(data, display(path), encoding)[0]  # type: ignore[assignment]
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
        values = [tokens.detokenize(v.split(), side) if v.strip() else "" for v in values]
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
    """Read the hypotheses and references into a `Corpus`."""
    if [request.hyp, *request.refs].count(STDIN) > 1:
        raise ConfigError("standard input ('-') can be read only once: use it for one file")
    if request.ref_sep == "":
        raise ConfigError("--ref-sep must not be empty")
    if request.merge_variants and request.ref_col is None:
        raise ConfigError("--merge-variants reads the sources from a reference TSV: give --ref-col")
    if request.source_col != 1 and not (request.merge_variants or request.train):
        raise ConfigError("--source-col goes with --merge-variants or --train")
    files: Files = {}
    hyps = read_column(request.hyp, request.hyp_col, "--hyp-col", request.encoding, files)
    sources: list[list[str]] | None = None
    if any(str(path).endswith(".conllu") for path in request.refs):
        if len(request.refs) > 1 or request.ref_col is not None or request.merge_variants:
            raise ConfigError("a CoNLL-U reference is scored alone, without --ref-col")
        sentences = read_tagged(request.refs[0], request.encoding)
        refs = [Column(request.refs[0], [" ".join(tags) for _, tags in sentences])]
        sources = [words for words, _ in sentences]
    else:
        refs = [
            read_column(path, request.ref_col, "--ref-col", request.encoding, files)
            for path in request.refs
        ]
        if request.train is not None:
            if request.ref_col is None:
                raise ConfigError(
                    "tagacc over OOV and ambiguous words needs the words: give a CoNLL-U "
                    "reference, or a TSV words<TAB>tags with --ref-col 2"
                )
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
    if len(per_file) > 1 or request.merge_variants:
        alternatives = [
            [a for alts in line for a in ([alts] if isinstance(alts, str) else alts)]
            for line in zip(*per_file)
        ]
    hyp_lines, numbers = hyps.lines, list(range(1, len(hyps.lines) + 1))
    if (request.merge_variants or refs[0].side is not None) and sources is None:
        keys = read_column(
            request.refs[0], request.source_col, "--source-col", request.encoding, files
        ).lines
        if request.merge_variants:
            hyp_lines, alternatives, numbers, disagree = _merge_variants(
                hyp_lines, alternatives, keys
            )
            notes.append(f"merged {len(keys)} lines into {len(numbers)} sources")
            if disagree:
                notes.append(
                    f"{plural(disagree, 'source')} with variants got different hypotheses on "
                    "their lines: the first line's is scored"
                )
        elif len(set(keys)) < len(keys):
            warnings.append(
                f"{plural(len(keys) - len(set(keys)), 'line')} repeat a source with another "
                "answer (variants): --merge-variants scores each source once against all of them"
            )
    unit = request.unit
    sides = [ref.side for ref in refs if ref.side is not None]
    if unit == "auto" and sides:
        unit = tokens.CHAR if all(s.get("unit") == tokens.CHAR for s in sides) else tokens.SYMBOL
    corpus = Corpus(hyp_lines, alternatives, unit, parallel=True, sources=sources)
    return Loaded(corpus, numbers, len(hyps.lines), warnings, notes)


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


def make_metrics(request: ScoreRequest) -> list[Metric]:
    """The requested metrics with their options, checked before any file is read."""
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
    if request.train is not None and "tagacc" not in names:
        raise ConfigError("--train applies to --metric tagacc, which is not requested")
    if request.train is not None and request.merge_variants:
        raise ConfigError("--merge-variants does not apply to tagging accuracy (--train)")
    metrics: list[Metric] = []
    for n in names:
        if n != "tagacc":
            metrics.append(get_metric(n, unit=request.unit, **request.metric_options.get(n, {})))
            continue
        lexicon = None
        if request.train is not None:
            sentences = read_tagged(request.train, request.encoding)
            lexicon = Lexicon.build(sentences, display(request.train))
        subsets = SUBSETS if lexicon is not None else ("all",)
        metrics += [TaggingAccuracy(request.unit, lexicon, subset=s) for s in subsets]
    return metrics


def check_outputs(request: ScoreRequest, outputs: Sequence[str | Path | None]) -> None:
    """Refuse to write a report over an input file or over a file of a prepared dataset."""
    inputs = {Path(p).resolve() for p in [request.hyp, *request.refs] if p != STDIN}
    for output in outputs:
        if output is None:
            continue
        path = Path(output)
        if path.resolve() in inputs:
            raise ConfigError(f"{path}: is an input of this command; write the report elsewhere")
        if is_prepared_file(path):
            raise ConfigError(f"{path}: is part of a prepared dataset; write the report elsewhere")


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
    if any(not isinstance(m, Bleu | TaggingAccuracy) for m in metrics):
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
            "merge_variants": request.merge_variants,
            "metric_options": request.metric_options,
            "train": request.train,
        },
        "scores": {name: s.to_dict() for name, s in scores.items()},
        "warnings": loaded.warnings,
        "notes": loaded.notes,
        "versions": versions(),
    }
    return report, loaded, metrics


def _cell(text: str) -> str:
    return text.replace("\t", "\\t")


def per_item_rows(loaded: Loaded, metrics: Sequence[Metric]) -> list[list[str]]:
    """Per-line statistics for error analysis, header first.

    Columns: line, hypothesis, closest reference (as text), its index among the line's
    references, edits, hypothesis and reference lengths (in the unit), correct, the line's
    ED / |r|; with mfs: LCS, precision, recall and F of the reference mfs used; with bleu:
    sacrebleu's sentence BLEU (effective order). With --merge-variants, `line` is the
    first input line of the source.
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
        if isinstance(metric, MeanFScore):
            header += ["mfs_ref_index", "lcs", "precision", "recall", "f"]
            rows = metric.details(corpus)
            columns.append([str(best) for _, _, best in rows])
            columns.append([f"{lcs:g}" for _, lcs, _ in rows])
            lengths = [
                (len(h), len(alts[best]))
                for h, alts, (_, _, best) in zip(corpus.hyps, corpus.refs, rows)
            ]
            columns.append(
                [f"{lcs / c:.6f}" if c else "0" for (_, lcs, _), (c, _) in zip(rows, lengths)]
            )
            columns.append([f"{lcs / r:.6f}" for (_, lcs, _), (_, r) in zip(rows, lengths)])
            columns.append([f"{f:.6f}" for f, _, _ in rows])
        elif isinstance(metric, Bleu):
            header.append("sentence_bleu")
            columns.append([f"{s.score:.4f}" for s in metric.sentences(corpus)])
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
        fields = line.split("\t")
        if len(fields) < 2:
            raise DataError("expected words<TAB>tags", display(path), number, line)
        words, tags = fields[0].split(), fields[1].split()
        if len(words) != len(tags):
            raise DataError(f"{len(words)} words but {len(tags)} tags", display(path), number, line)
        sentences.append((words, tags))
    return sentences
