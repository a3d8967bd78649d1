"""`transduce analyze-monotonicity RUN_DIR|CHECKPOINT DATA`: how monotone the attention is.

The model runs in `transduce.analysis`; this module parses the command line and prints the
tables and, without matplotlib, the heatmaps.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from transduce import defaults
from transduce.cli import ui
from transduce.cli.app import app
from transduce.cli.common import Device, Verbosity, choices
from transduce.errors import TransduceError
from transduce.outputs import check_outputs
from transduce.reporting import to_json, write_json

if TYPE_CHECKING:
    from transduce.analysis import AttentionMap

DELTAS = defaults.MONOTONICITY_DELTAS
SHADES = " .:-=+*#%@"  # the terminal heatmap, weight 0 .. 1
PlotFormat = choices("PlotFormat", defaults.PLOT_FORMATS)
DEFAULT_FORMAT = PlotFormat("png")
CPU = Device.cpu


def _lines(text: str | None, count: int) -> list[int]:
    if text is None:
        return [1]
    try:
        numbers = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise TransduceError(f"--lines: line numbers such as 1,5,9, not {text!r}") from None
    bad = [n for n in numbers if not 1 <= n <= count]
    if bad:
        raise TransduceError(f"--lines: line {bad[0]} is not in the data (1 to {count})")
    return numbers


@app.command(name="analyze-monotonicity")
def analyze_command(
    model: Annotated[
        str, typer.Argument(help="A run directory (its final.pt or best.pt) or a checkpoint file.")
    ],
    data: Annotated[
        Path,
        typer.Argument(
            help="A prepared split file (source<TAB>target symbols, as RUN_DIR/data/test.tsv) "
            "or a prepared directory (see --split)."
        ),
    ],
    forced: Annotated[
        bool,
        typer.Option(
            "--forced/--decoded",
            help="The attention while reading the reference (forced) or while decoding.",
        ),
    ] = True,
    split: Annotated[str, typer.Option(help="The split of a prepared directory.")] = "test",
    threshold: Annotated[
        float, typer.Option(help="Weight above which an attention edge counts in crossings.")
    ] = 0.1,
    beam: Annotated[int, typer.Option(help="Beam size of the decoding (1: greedy).")] = 1,
    batch_size: Annotated[int, typer.Option(help="Sentences per batch.")] = 64,
    device: Annotated[Device, typer.Option(help="cpu, cuda or auto.")] = CPU,
    json_: Annotated[bool, typer.Option("--json", help="Print the JSON report on stdout.")] = False,
    report: Annotated[
        Path | None, typer.Option(help="Write the JSON report to this file.", show_default=False)
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            help="Write attention heatmaps of --lines (a row per layer, a panel per head) "
            "and the monotonicity-over-training curve (from a run's train.json) here "
            "(needs matplotlib; without it, terminal heatmaps).",
            show_default=False,
        ),
    ] = None,
    lines: Annotated[
        str | None, typer.Option(help="Lines to plot, e.g. 1,5,9 (default: 1).", show_default=False)
    ] = None,
    format_: Annotated[
        PlotFormat, typer.Option("--format", help="File format of --plot.", case_sensitive=False)
    ] = DEFAULT_FORMAT,
    verbosity: Verbosity = None,
) -> None:
    """How monotone a model's attention is: %mono and L_mono per head at delta 0, 0.5, 1
    (Rios et al. 2021), and crossing alignments (Wu et al. 2018), on a dataset."""
    from transduce.analysis import analyze, attention_maps, load_model, read_pairs, write_plots
    from transduce.models import Seq2SeqModel, expect

    if not 0 <= threshold < 1:
        raise TransduceError(f"--threshold: must be in [0, 1), not {threshold}")
    if beam < 1 or batch_size < 1:
        raise TransduceError("--beam and --batch-size: must be at least 1")
    check_outputs([report], [model, data])
    transducer = load_model(model, device.value)
    check_outputs([report], [transducer.payload["path"]])
    if transducer.precision_warning:
        ui.warn(transducer.precision_warning)
    pairs = read_pairs(transducer, data, split, ui.warn)
    chosen = _lines(lines, len(pairs)) if plot is not None else []
    result = analyze(
        transducer, pairs, "forced" if forced else "decoded", threshold, beam, batch_size
    )
    path = transducer.payload["path"]
    result["model"], result["data"] = path, str(data)
    if report is not None:
        write_json(report, result)
    if json_:
        typer.echo(to_json(result), nl=False)
    else:
        _tables(result)
    if plot is not None:
        maps = attention_maps(transducer, pairs, chosen, forced)
        names = expect(transducer.model, Seq2SeqModel).attention_names
        written = write_plots(maps, names, plot, Path(path).parent, forced, format_.value)
        if written:
            ui.info(f"plots: {', '.join(str(p) for p in written)}")
            return
        ui.warn(
            "--plot: plots need matplotlib (pip install 'transduce[plot]' or pip install "
            "matplotlib); terminal heatmaps instead"
        )
        for item in maps:
            _terminal(item, names)


def _tables(result: dict[str, Any]) -> None:
    if ui.verbosity() < ui.NORMAL:
        return
    heading = (
        f"{result['examples']} examples, attention {result['mode']}, "
        f"accuracy {result['accuracy']:.2f}"
    )
    per = result["monotonicity"]
    for mono, loss, what in (
        ("mono", "loss", "%mono and L_mono"),
        ("mono_authors", "loss_authors", "on the scale of the paper's tables (authors' scorer)"),
    ):
        table = Table(title=f"{heading}: {what}", title_justify="left")
        table.add_column("mechanism")
        for delta in DELTAS:
            table.add_column(f"%mono δ={delta:g}", justify="right")
            table.add_column(f"L_mono δ={delta:g}", justify="right")
        for name in [*result["mechanisms"], "overall"]:
            row = [name]
            for delta in DELTAS:
                s = per[str(delta)]
                values = s["overall"] if name == "overall" else s["mechanisms"][name]
                row += [f"{values[mono]:.2f}", f"{values[loss]:.4f}"]
            table.add_row(*row)
        ui.stderr.print(table)
    crossing = Table(
        title=f"outputs with crossing edges (weight > {result['crossing_threshold']:g})",
        title_justify="left",
    )
    for column in ("mechanism", "monotonic correct", "monotonic incorrect", "crossing correct",
                   "crossing incorrect"):  # fmt: skip
        crossing.add_column(column, justify="left" if column == "mechanism" else "right")
    for name, counts in result["crossings"].items():
        crossing.add_row(name, *(str(v) for v in counts.values()))
    ui.stderr.print(crossing)


def _terminal(item: AttentionMap, names: list[str]) -> None:
    """A heatmap per mechanism on stderr: a character per weight, darker when heavier."""
    width = max(len(r) for r in item.rows)
    for k, name in enumerate(names):
        ui.stderr.print(f"line {item.line}, {name}", highlight=False, markup=False)
        ui.stderr.print(" " * (width + 1) + " ".join(c[:1] for c in item.columns), markup=False)
        for t, row in enumerate(item.rows):
            shades = " ".join(
                SHADES[min(int(w * len(SHADES)), len(SHADES) - 1)]
                for w in item.attention[k, t].tolist()
            )
            ui.stderr.print(f"{row:>{width}} {shades}", highlight=False, markup=False)
