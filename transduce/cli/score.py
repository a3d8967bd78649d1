"""`transduce score HYP REF [REF ...] --metric NAME`: score predictions against references."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from transduce import defaults
from transduce.cli import app, ui
from transduce.errors import ConfigError
from transduce.io import atomic_write_text
from transduce.metrics import METRICS
from transduce.metrics.bleu import Bleu
from transduce.metrics.corpus import UNITS
from transduce.metrics.scoring import ScoreRequest, per_item_rows, score_request
from transduce.reporting import to_json, write_json

MetricName = Enum("MetricName", {name: name for name in METRICS}, type=str)  # type: ignore[misc]
Unit = Enum("Unit", {name: name for name in UNITS}, type=str)  # type: ignore[misc]
PerAverage = Enum("PerAverage", {"corpus": "corpus", "word": "word"}, type=str)  # type: ignore[misc]
MfsLcs = Enum("MfsLcs", {"levenshtein": "levenshtein", "exact": "exact"}, type=str)  # type: ignore[misc]
DEFAULT_UNIT, DEFAULT_AVERAGE, DEFAULT_LCS = (
    Unit("auto"),
    PerAverage("corpus"),
    MfsLcs("levenshtein"),
)

_OUT = "Output"
_OPTS = "Metric options"


@app.command(name="score")
def score_command(
    hyp: Annotated[
        str, typer.Argument(help="Hypotheses, one per line ('-': stdin).", show_default=False)
    ],
    refs: Annotated[
        list[str],
        typer.Argument(help="Reference file(s), line-aligned ('-': stdin).", show_default=False),
    ],
    metric: Annotated[
        list[MetricName] | None,
        typer.Option(
            "--metric",
            "-m",
            help="Metric (repeat for more) [default: wer, per].",
            show_default=False,
        ),
    ] = None,
    unit: Annotated[
        Unit,
        typer.Option(
            help="symbol: whitespace-separated tokens; char: characters, whitespace ignored; "
            "auto: symbol when most references contain spaces."
        ),
    ] = DEFAULT_UNIT,
    ref_col: Annotated[
        int | None,
        typer.Option(
            help="Read references from this 1-based TSV column (a prepared test.tsv: 2).",
            show_default=False,
        ),
    ] = None,
    hyp_col: Annotated[
        int | None,
        typer.Option(help="Read hypotheses from this 1-based TSV column.", show_default=False),
    ] = None,
    ref_sep: Annotated[
        str | None,
        typer.Option(
            help="Separator of alternative references inside one line.", show_default=False
        ),
    ] = None,
    per_average: Annotated[
        PerAverage,
        typer.Option(
            help="per: corpus (sum ED / sum |r|) or word (mean ED/|r|).", rich_help_panel=_OPTS
        ),
    ] = DEFAULT_AVERAGE,
    mfs_lcs: Annotated[
        MfsLcs,
        typer.Option(
            help="mfs: levenshtein (LCS = (|c|+|r|-ED)/2, Rios et al. A.1) "
            "or exact (true LCS, as the NEWS script).",
            rich_help_panel=_OPTS,
        ),
    ] = DEFAULT_LCS,
    bleu_option: Annotated[
        list[str] | None,
        typer.Option(
            help="sacrebleu BLEU option KEY=VALUE, e.g. tokenize=none (repeatable).",
            rich_help_panel=_OPTS,
            show_default=False,
        ),
    ] = None,
    json_: Annotated[
        bool, typer.Option("--json", help="Print the JSON report on stdout.", rich_help_panel=_OUT)
    ] = False,
    report: Annotated[
        Path | None,
        typer.Option(
            help="Write the JSON report to this file.", rich_help_panel=_OUT, show_default=False
        ),
    ] = None,
    per_item: Annotated[
        Path | None,
        typer.Option(
            help="Write per-line statistics (TSV) to this file.",
            rich_help_panel=_OUT,
            show_default=False,
        ),
    ] = None,
    bootstrap: Annotated[
        int,
        typer.Option(
            help="Add 95% confidence intervals from N bootstrap resamples.", rich_help_panel=_OUT
        ),
    ] = 0,
    seed: Annotated[
        int, typer.Option(help="Seed of the bootstrap.", rich_help_panel=_OUT)
    ] = defaults.BOOTSTRAP_SEED,
) -> None:
    """Score hypotheses against references: a table on stderr, JSON on request."""
    names = [m.value for m in metric] if metric else list(defaults.METRICS)
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
    request = ScoreRequest(
        hyp, list(refs), names, unit.value, hyp_col, ref_col, ref_sep, options, bootstrap, seed
    )
    result, corpus, metrics = score_request(request)
    if per_item is not None:
        atomic_write_text(
            per_item, "".join("\t".join(row) + "\n" for row in per_item_rows(corpus, metrics))
        )
    if report is not None:
        write_json(report, result)
    if json_:
        typer.echo(to_json(result), nl=False)
    _table(result)


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
    if ui.verbosity() < ui.NORMAL:
        return
    scores = result["scores"]
    with_ci = any("ci" in s for s in scores.values())
    table = Table(
        title=f"{result['lines']} lines, unit {result['unit']}, refs per line {result['nrefs']}",
        title_justify="left",
    )
    table.add_column("metric")
    table.add_column("value", justify="right")
    if with_ci:
        table.add_column("95% CI", justify="right")
    table.add_column("signature", overflow="fold")
    for name, s in scores.items():
        row = [name, f"{s['value']:.2f}"]
        if with_ci:
            row.append(f"{s['ci'][0]:.2f}–{s['ci'][1]:.2f}" if "ci" in s else "")
        table.add_row(*row, s["signature"])
    ui.stderr.print(table)
