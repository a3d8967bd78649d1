"""`transduce score HYP REF [REF ...] --metric NAME`: score predictions against references.

The metric options and data files (`--per-average`, `--mfs-lcs`, `--bleu-option`,
`--train`, ...) are not written here: each is a flag of `transduce.scoring.metric_flags`,
made from what the metrics declare, and added to the command's parameters.
"""

from __future__ import annotations

import inspect
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from transduce import defaults
from transduce.cli import ui
from transduce.cli.app import app
from transduce.cli.common import Verbosity, choices, with_parameters
from transduce.errors import ConfigError
from transduce.io import atomic_write_text
from transduce.metrics import METRICS
from transduce.metrics.corpus import UNITS
from transduce.reporting import to_json, write_json
from transduce.scoring import (
    MetricFlag,
    ScoreRequest,
    check_outputs,
    flag_values,
    metric_flags,
    per_item_rows,
    score_request,
)

MetricName = choices("MetricName", METRICS)
Unit = choices("Unit", UNITS)
DEFAULT_UNIT = Unit("auto")

_IN, _OUT, _OPTS = "Input", "Output", "Metric options"


def _option(*args: str, **kwargs: Any) -> Any:
    """An option of `score`: [its flag,] its help, its help panel."""
    *names, help, panel = args
    return typer.Option(*names, help=help, rich_help_panel=panel, case_sensitive=False, **kwargs)


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
            "--unit",  # named: typer 0.27 made "--UNIT" of the metavar of an unnamed enum option
            "symbol (whitespace-separated tokens), char (characters, a space being one), "
            "char-nospace (characters but spaces) or auto (symbol when most references have "
            "spaces; a prepared split: its target's unit).",
            _IN,
            metavar="UNIT",
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
        bool | None,
        _option(
            "Score each source once, against the references of all its lines (CMUdict "
            "variants; needs --ref-col). Default: merge those of a prepared split.",
            _IN,
            show_default=False,
        ),
    ] = None,
    source_col: Annotated[
        int, _option("The source column for --merge-variants (and the words for --train).", _IN)
    ] = 1,
    encoding: Annotated[str, _option("Encoding of the input files.", _IN)] = defaults.ENCODING,
    max_line_length: Annotated[
        int, _option("The longest line read, in characters (a longer one is an error).", _IN)
    ] = defaults.MAX_LINE_LENGTH,
    # here the flags of the metrics' declarations: see with_parameters below
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
    **flags: Any,
) -> None:
    """Score hypotheses against references: a table on stderr, JSON on request."""
    names = [m.value for m in metric] if metric else list(defaults.METRICS)
    options, files = flag_values(names, {k: getattr(v, "value", v) for k, v in flags.items()})
    request = ScoreRequest(
        hyp, list(refs), names, unit.value, hyp_col, ref_col, ref_sep, options, bootstrap, seed,
        encoding, merge_variants, source_col, files, max_line_length,
    )  # fmt: skip
    if max_line_length < 1:
        raise ConfigError(f"--max-line-length: must be at least 1, not {max_line_length}")
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


def _parameter(flag: MetricFlag) -> inspect.Parameter:
    """The command's parameter for a flag of the metrics' declarations."""
    default: Any = None
    if flag.file:
        annotation: Any = Annotated[str | None, _option(flag.help, _OPTS, show_default=False)]
    elif flag.pairs:
        annotation = Annotated[list[str] | None, _option(flag.help, _OPTS, show_default=False)]
    else:
        assert flag.option is not None
        kind: Any = flag.option.kind
        default = flag.option.default
        if flag.option.allowed is not None:  # an Enum, so that Typer checks and completes
            kind = choices(flag.name.title().replace("_", ""), map(str, flag.option.allowed))
            default = kind(str(default))
        annotation = Annotated[kind, _option(flag.help, _OPTS)]
    return inspect.Parameter(flag.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=annotation)  # fmt: skip


# a parameter for each flag of `metric_flags` (its **flags), after --encoding
app.command(name="score")(
    with_parameters(score_command, [_parameter(f) for f in metric_flags()], after="encoding")
)


def _table(result: dict[str, Any]) -> None:
    """The scores as a table, then each signature on a line of its own (never wrapped)."""
    if ui.verbosity() < ui.NORMAL:
        return
    scores = result["scores"]
    with_ci = any("ci" in s for s in scores.values())
    lines = f"{result['lines']} lines"
    if result["input_lines"] != result["lines"]:
        lines = f"{result['lines']} sources from {result['input_lines']} lines (variants merged)"
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
