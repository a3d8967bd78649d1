"""`transduce score HYP REF [REF ...] --metric NAME`: score predictions against references."""

from __future__ import annotations

import time
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from transduce import defaults
from transduce.cli import app, ui
from transduce.cli.common import Verbosity, choices
from transduce.errors import ConfigError
from transduce.io import atomic_write_text
from transduce.metrics import METRICS
from transduce.metrics.bleu import Bleu
from transduce.metrics.corpus import UNITS
from transduce.reporting import to_json, write_json
from transduce.scoring import ScoreRequest, check_outputs, per_item_rows, score_request

MetricName = choices("MetricName", METRICS)
Unit = choices("Unit", UNITS)
PerAverage = choices("PerAverage", ("corpus", "word"))
MfsLcs = choices("MfsLcs", ("levenshtein", "exact"))
DEFAULT_UNIT, DEFAULT_AVERAGE, DEFAULT_LCS = (
    Unit("auto"),
    PerAverage("corpus"),
    MfsLcs("levenshtein"),
)

_IN, _OUT, _OPTS = "Input", "Output", "Metric options"


def _option(help: str, panel: str, **kwargs: Any) -> Any:
    return typer.Option(help=help, rich_help_panel=panel, case_sensitive=False, **kwargs)


@app.command(name="score")
def score_command(
    hyp: Annotated[
        str, typer.Argument(help="Hypotheses, one per line ('-': stdin).", show_default=False)
    ],
    refs: Annotated[
        list[str],
        typer.Argument(help="Line-aligned reference file(s) ('-': stdin).", show_default=False),
    ],
    metric: Annotated[
        list[MetricName] | None,
        typer.Option(
            "--metric",
            "-m",
            help="A metric; repeat for more.",
            show_default="wer, per",
            case_sensitive=False,
        ),
    ] = None,
    unit: Annotated[
        Unit,
        _option(
            "symbol: whitespace-separated tokens; char: characters, a space counts as one "
            "(as the official scorers); char-nospace: characters, whitespace left out; "
            "auto: symbol when most references contain spaces (a prepared split: its target's).",
            _IN,
        ),
    ] = DEFAULT_UNIT,
    ref_col: Annotated[
        int | None,
        _option(
            "Read the references from this 1-based TSV column (a prepared split: 2).",
            _IN,
            show_default=False,
        ),
    ] = None,
    hyp_col: Annotated[
        int | None,
        _option("Read the hypotheses from this 1-based TSV column.", _IN, show_default=False),
    ] = None,
    ref_sep: Annotated[
        str | None,
        _option("Separator of alternative references inside one line.", _IN, show_default=False),
    ] = None,
    merge_variants: Annotated[
        bool,
        _option(
            "Score each source once, against the references of all its lines (CMUdict "
            "variants); needs --ref-col.",
            _IN,
        ),
    ] = False,
    source_col: Annotated[
        int, _option("The source column for --merge-variants (and the words for --train).", _IN)
    ] = 1,
    train: Annotated[
        str | None,
        _option(
            "tagacc: the training data (CoNLL-U, or words<TAB>tags), to score OOV and "
            "ambiguous words too.",
            _OPTS,
            show_default=False,
        ),
    ] = None,
    encoding: Annotated[str, _option("Encoding of the input files.", _IN)] = defaults.ENCODING,
    per_average: Annotated[
        PerAverage, _option("per: corpus (sum ED / sum |r|) or word (mean of ED / |r|).", _OPTS)
    ] = DEFAULT_AVERAGE,
    mfs_lcs: Annotated[
        MfsLcs,
        _option(
            "mfs: levenshtein (LCS = (|c|+|r|-ED)/2, Rios et al. A.1) "
            "or exact (true LCS, the NEWS script).",
            _OPTS,
        ),
    ] = DEFAULT_LCS,
    bleu_option: Annotated[
        list[str] | None,
        _option(
            "A sacrebleu BLEU option KEY=VALUE, e.g. tokenize=none; repeatable.",
            _OPTS,
            show_default=False,
        ),
    ] = None,
    json_: Annotated[
        bool, typer.Option("--json", help="Print the JSON report on stdout.", rich_help_panel=_OUT)
    ] = False,
    report: Annotated[
        Path | None, _option("Write the JSON report to this file.", _OUT, show_default=False)
    ] = None,
    per_item: Annotated[
        Path | None,
        _option("Write per-line statistics (TSV) to this file.", _OUT, show_default=False),
    ] = None,
    bootstrap: Annotated[
        int,
        _option("Add 95% confidence intervals from N bootstrap resamples (at least 100).", _OUT),
    ] = 0,
    seed: Annotated[int, _option("Seed of the bootstrap.", _OUT)] = defaults.BOOTSTRAP_SEED,
    verbosity: Verbosity = None,
) -> None:
    """Score hypotheses against references: a table on stderr, JSON on request."""
    names = [m.value for m in metric] if metric else list(defaults.METRICS)
    options = _metric_options(names, per_average, mfs_lcs, bleu_option)
    request = ScoreRequest(
        hyp, list(refs), names, unit.value, hyp_col, ref_col, ref_sep, options, bootstrap, seed,
        encoding, merge_variants, source_col, train,
    )  # fmt: skip
    check_outputs(request, [report, per_item])
    start = time.perf_counter()
    result, loaded, metrics = score_request(request)
    ui.detail(f"scored {result['lines']} lines in {time.perf_counter() - start:.2f} s")
    if per_item is not None:
        rows = per_item_rows(loaded, metrics)
        atomic_write_text(per_item, "".join("\t".join(row) + "\n" for row in rows))
    if report is not None:
        write_json(report, result)
    if json_:
        typer.echo(to_json(result), nl=False)
    for warning in result["warnings"]:
        ui.warn(warning)
    for note in result["notes"]:
        ui.detail(note)
    _table(result)


def _metric_options(
    names: list[str], per_average: Enum, mfs_lcs: Enum, bleu_option: list[str] | None
) -> dict[str, dict[str, Any]]:
    """The options of the requested metrics; an option of a metric not requested is an error."""
    options: dict[str, dict[str, Any]] = {}
    for flag, name, key, value, default in (
        ("--per-average", "per", "average", per_average, DEFAULT_AVERAGE),
        ("--mfs-lcs", "mfs", "lcs", mfs_lcs, DEFAULT_LCS),
    ):
        if name in names:
            options[name] = {key: value.value}
        elif value != default:
            raise ConfigError(f"{flag} applies to --metric {name}, which is not requested")
    if bleu_option:
        if "bleu" not in names:
            raise ConfigError("--bleu-option applies to --metric bleu, which is not requested")
        options["bleu"] = parse_bleu_options(bleu_option)
    return options


def parse_bleu_options(pairs: list[str]) -> dict[str, Any]:
    """`["tokenize=none", "lowercase=true"]` -> {"tokenize": "none", "lowercase": True}."""
    parsed: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in Bleu.options:
            raise ConfigError(
                f"--bleu-option {pair!r}: expected KEY=VALUE, KEY one of {', '.join(Bleu.options)}"
            )
        parsed[key] = Bleu.options[key].parse(f"--bleu-option {key}", text.strip())
    return parsed


def _table(result: dict[str, Any]) -> None:
    """The scores as a table, then each signature on a line of its own (never wrapped)."""
    if ui.verbosity() < ui.NORMAL:
        return
    scores = result["scores"]
    with_ci = any("ci" in s for s in scores.values())
    lines = f"{result['lines']} lines"
    if result["input_lines"] != result["lines"]:
        lines = f"{result['lines']} sources from {result['input_lines']} lines"
    title = f"{lines}, unit {result['unit']}, references per line {result['nrefs']}"
    table = Table(title=title, title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    if with_ci:
        table.add_column("95% CI", justify="right")
    for name, s in scores.items():
        row = [name, f"{s['value']:.2f}"]
        if with_ci:
            row.append(f"{s['ci'][0]:.2f}–{s['ci'][1]:.2f}" if "ci" in s else "")
        table.add_row(*row)
    ui.stderr.print(table)
    for s in scores.values():
        ui.info(s["signature"])
