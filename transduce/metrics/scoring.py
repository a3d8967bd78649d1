"""Scoring files: what `transduce score` does, as a library call.

Reads a hypothesis file and one or more reference files (either may be "-", standard
input), takes a column of a TSV where asked, splits alternatives inside a line, scores
every requested metric on one shared `Corpus`, and builds the JSON report and the
per-line statistics.

A reference column of a prepared split (`test.tsv` with a `manifest.json` beside it that
lists the file with the same SHA-256) is turned back into the target's own text, the way
`decode` prints it: characters joined for character targets ("w a l k e d" -> "walked"),
BPE merged for subword targets. With `--unit auto`, such references also settle the unit
(char for character targets, symbol otherwise).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from transduce import defaults
from transduce.data import tokens
from transduce.data.prepared import prepared_side
from transduce.errors import ConfigError, DataError, plural
from transduce.io import STDIN, decode_lines, display, read_bytes
from transduce.metrics import get_metric
from transduce.metrics.base import Metric, Score
from transduce.metrics.bleu import Bleu
from transduce.metrics.corpus import Corpus
from transduce.metrics.edit import MeanFScore
from transduce.reporting import versions

REPORT_SCHEMA = "transduce.score/1"


@dataclass
class ScoreRequest:
    """The inputs and options of one scoring run (what the `score` command takes)."""

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


@dataclass
class Column:
    """The lines of one input file (or of one of its columns)."""

    path: str
    lines: list[str]
    side: dict[str, Any] | None = None  # the side spec when it is a prepared split


def read_column(path: str, column: int | None) -> Column:
    """Read the lines of `path`, or the 1-based `column` of its tab-separated lines."""
    if column is not None and column < 1:
        raise ConfigError(f"columns are 1-based: {column} is not a column")
    data = read_bytes(path)
    lines, _ = decode_lines(data, display(path))
    if column is None:
        return Column(path, lines)  # type: ignore[arg-type]  # strict decoding: no None
    values = []
    for number, line in enumerate(lines, 1):
        cols = line.split("\t")  # type: ignore[union-attr]
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


def load_corpus(request: ScoreRequest) -> tuple[Corpus, list[Column]]:
    """Read the hypotheses and references into a `Corpus` (and the reference columns)."""
    if [request.hyp, *request.refs].count(STDIN) > 1:
        raise ConfigError("standard input ('-') can be read only once: use it for one file")
    if request.ref_sep == "":
        raise ConfigError("--ref-sep must not be empty")
    hyps = read_column(request.hyp, request.hyp_col)
    refs = [read_column(path, request.ref_col) for path in request.refs]
    for ref in refs:
        if len(ref.lines) != len(hyps.lines):
            raise DataError(
                f"line counts differ: {display(hyps.path)} has {plural(len(hyps.lines), 'line')}, "
                f"{display(ref.path)} has {plural(len(ref.lines), 'line')}"
            )
    if not hyps.lines:
        raise DataError("nothing to score: the files are empty", display(hyps.path))
    per_file = [_alternatives(ref, request.ref_sep) for ref in refs]
    if len(per_file) == 1:
        alternatives = per_file[0]
    else:
        alternatives = [
            [a for alts in line for a in ([alts] if isinstance(alts, str) else alts)]
            for line in zip(*per_file)
        ]
    unit = request.unit
    sides = [ref.side for ref in refs if ref.side is not None]
    if unit == "auto" and sides:
        unit = tokens.CHAR if all(s.get("unit") == tokens.CHAR for s in sides) else tokens.SYMBOL
    return Corpus(hyps.lines, alternatives, unit, parallel=True), refs


def make_metrics(request: ScoreRequest) -> list[Metric]:
    """The requested metrics with their options, checked before any file is read."""
    if not request.metrics:
        raise ConfigError("no metric requested")
    unknown = set(request.metric_options) - set(request.metrics)
    if unknown:
        raise ConfigError(
            f"options given for metric(s) not requested: {', '.join(sorted(unknown))}"
        )
    names = list(dict.fromkeys(request.metrics))  # each once, in the order given
    if request.bootstrap < 0:
        raise ConfigError(f"--bootstrap must be 0 or more, not {request.bootstrap}")
    return [get_metric(n, unit=request.unit, **request.metric_options.get(n, {})) for n in names]


def score_request(request: ScoreRequest) -> tuple[dict[str, Any], Corpus, list[Metric]]:
    """Score files as the request says.

    Returns:
        The JSON report, the corpus and the metric objects (for `per_item_rows`).
    """
    metrics = make_metrics(request)
    corpus, _ = load_corpus(request)
    scores: dict[str, Score] = {
        m.name: m.score(corpus, bootstrap=request.bootstrap, seed=request.seed) for m in metrics
    }
    report = {
        "schema": REPORT_SCHEMA,
        "hyp": request.hyp,
        "refs": request.refs,
        "lines": len(corpus),
        "unit": corpus.unit,
        "nrefs": corpus.nrefs,
        "options": {
            "hyp_col": request.hyp_col,
            "ref_col": request.ref_col,
            "ref_sep": request.ref_sep,
            "metric_options": request.metric_options,
        },
        "scores": {name: s.to_dict() for name, s in scores.items()},
        "versions": versions(),
    }
    return report, corpus, metrics


def _cell(text: str) -> str:
    return text.replace("\t", "\\t")


def per_item_rows(corpus: Corpus, metrics: Sequence[Metric]) -> list[list[str]]:
    """Per-line statistics for error analysis, header first.

    Columns: line, hypothesis, closest reference (as text), its index among the line's
    references, edits, hypothesis and reference lengths (in the unit), correct, the line's
    ED / |r|; with mfs: LCS, precision, recall and F of the reference mfs used; with bleu:
    sacrebleu's sentence BLEU (effective order).
    """
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
        [str(i) for i in range(1, len(corpus) + 1)],
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
