"""`transduce analyze-monotonicity RUN_DIR|CHECKPOINT DATA`: how monotone the attention is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from transduce import checkpoint
from transduce.analysis import DELTAS, analyze
from transduce.cli import ui
from transduce.cli.app import app
from transduce.data.dataset import load_prepared, parse_split_line
from transduce.errors import DataError, TransduceError
from transduce.inference import Transducer
from transduce.io import decode_lines, read_bytes
from transduce.models import Seq2SeqModel
from transduce.reporting import to_json, write_json

SHADES = " .:-=+*#%@"  # the terminal heatmap, weight 0 .. 1


def _pairs(transducer: Transducer, data: Path, split: str) -> list[tuple[list[int], list[int]]]:
    """(source, reference) ids of a prepared split file, or of a prepared directory's split."""
    if data.is_dir():
        pairs = load_prepared(data).splits[split]
        where = data / f"{split}.tsv"
    else:
        lines, _ = decode_lines(read_bytes(data), data)
        pairs = [parse_split_line(line, str(data), n) for n, line in enumerate(lines, 1)]
        where = data
    for number, pair in enumerate(pairs, 1):
        if pair.target is None:
            raise DataError("a line without a reference (source<TAB>target)", where, number)
    if not pairs:
        raise DataError("no lines to analyze", where)
    return [
        (transducer.source_vocab.encode(p.source), transducer.target_vocab.encode(p.target))
        for p in pairs
    ]


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
        str, typer.Argument(help="A run directory (its best.pt) or a checkpoint file.")
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
    json_: Annotated[bool, typer.Option("--json", help="Print the JSON report on stdout.")] = False,
    report: Annotated[
        Path | None, typer.Option(help="Write the JSON report to this file.", show_default=False)
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            help="Write attention heatmaps of --lines (one panel per head) and the "
            "monotonicity-over-training curve (from a run's train.json) as PNGs here "
            "(needs matplotlib; without it, terminal heatmaps).",
            show_default=False,
        ),
    ] = None,
    lines: Annotated[
        str | None, typer.Option(help="Lines to plot, e.g. 1,5,9 (default: 1).", show_default=False)
    ] = None,
) -> None:
    """How monotone a model's attention is: %mono and L_mono per head at delta 0, 0.5, 1
    (Rios et al. 2021), and crossing alignments (Wu et al. 2018), on a dataset."""
    if not 0 <= threshold < 1:
        raise TransduceError(f"--threshold: must be in [0, 1), not {threshold}")
    if beam < 1 or batch_size < 1:
        raise TransduceError("--beam and --batch-size: must be at least 1")
    payload = checkpoint.load(model)
    transducer = Transducer.from_checkpoint(payload)
    if transducer.precision_warning:
        ui.warn(transducer.precision_warning)
    if not isinstance(transducer.model, Seq2SeqModel):
        raise TransduceError(
            f"{payload['path']}: a {transducer.model.name} model tags each word; it has no "
            "cross-attention between an output and its input to analyze"
        )
    pairs = _pairs(transducer, data, split)
    chosen = _lines(lines, len(pairs)) if plot is not None else []
    result = analyze(
        transducer, pairs, "forced" if forced else "decoded", threshold, beam, batch_size
    )
    result["model"], result["data"] = payload["path"], str(data)
    if report is not None:
        write_json(report, result)
    if json_:
        typer.echo(to_json(result), nl=False)
    else:
        _tables(result)
    if plot is not None:
        _plot(transducer, pairs, chosen, forced, plot, Path(payload["path"]).parent)


def _tables(result: dict[str, Any]) -> None:
    if ui.verbosity() < ui.NORMAL:
        return
    title = (
        f"{result['examples']} examples, attention {result['mode']}, "
        f"accuracy {result['accuracy']:.2f}: %mono and L_mono"
    )
    table = Table(title=title, title_justify="left")
    table.add_column("mechanism")
    for delta in DELTAS:
        table.add_column(f"%mono δ={delta:g}", justify="right")
        table.add_column(f"L_mono δ={delta:g}", justify="right")
    per = result["monotonicity"]
    for name in [*result["mechanisms"], "overall"]:
        row = [name]
        for delta in DELTAS:
            s = per[str(delta)]
            values = s["overall"] if name == "overall" else s["mechanisms"][name]
            row += [f"{values['mono']:.2f}", f"{values['loss']:.4f}"]
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


def _plot(
    transducer: Transducer,
    pairs: list[tuple[list[int], list[int]]],
    chosen: list[int],
    forced: bool,
    directory: Path,
    run_dir: Path,
) -> None:
    """Heatmaps of the chosen lines and the curve of train.json; terminal heatmaps without
    matplotlib."""
    import torch

    from transduce.config import DecodeConfig
    from transduce.data.batching import collate
    from transduce.decoding import decode_all

    model = transducer.model
    assert isinstance(model, Seq2SeqModel)  # checked by the command
    maps = []
    for number in chosen:
        source, reference = pairs[number - 1]
        target = reference
        if not forced:
            with transducer.autocast():
                target = decode_all(model, [source], DecodeConfig(), transducer.device)[0][0].tokens
        batch = collate([source], [target]).to(transducer.device)
        with torch.inference_mode(), transducer.autocast():
            attention = model(batch).attention[0].float().cpu()  # K x T x S
        rows = [*transducer.target_vocab.decode(target), "</s>"]
        maps.append((number, attention, transducer.source_vocab.decode(source), rows))
    history = run_dir / "train.json"
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        ui.warn(
            "--plot: PNGs need matplotlib (pip install 'transduce[plot]' or pip install "
            "matplotlib); terminal heatmaps instead"
        )
        for number, attention, columns, rows in maps:
            _terminal(number, attention, model.attention_names, columns, rows)
        return
    directory.mkdir(parents=True, exist_ok=True)
    for number, attention, columns, rows in maps:
        K = attention.shape[0]
        figure, axes = plt.subplots(1, K, figsize=(3 * K + 1, 3), squeeze=False)
        for k, axis in enumerate(axes[0]):
            axis.imshow(attention[k].numpy(), cmap="Greys", vmin=0, vmax=1, aspect="auto")
            axis.set_title(model.attention_names[k], fontsize=8)
            axis.set_xticks(range(len(columns)), columns, fontsize=7)
            axis.set_yticks(range(len(rows)), rows, fontsize=7)
        figure.tight_layout()
        figure.savefig(directory / f"line{number}.png", dpi=120)
        plt.close(figure)
    if history.is_file():
        entries = json.loads(history.read_text(encoding="utf-8")).get("history", [])
        points = [(e["update"], e["dev_monotonicity"]) for e in entries if "dev_monotonicity" in e]
        if points:
            figure, axis = plt.subplots(figsize=(5, 3))
            for name in points[0][1]["mechanisms"]:
                axis.plot(
                    [u for u, _ in points],
                    [m["mechanisms"][name]["mono"] for _, m in points],
                    label=name,
                )
            axis.set_xlabel("update")
            axis.set_ylabel(f"dev %mono (δ={points[0][1]['delta']:g})")
            axis.legend(fontsize=6)
            figure.tight_layout()
            figure.savefig(directory / "monotonicity.png", dpi=120)
            plt.close(figure)
    ui.info(f"plots: {directory}")


def _terminal(number: int, attention, names: list[str], columns: list[str], rows: list[str]):
    width = max(len(r) for r in rows)
    for k, name in enumerate(names):
        ui.stderr.print(f"line {number}, {name}", highlight=False, markup=False)
        ui.stderr.print(" " * (width + 1) + " ".join(c[:1] for c in columns), markup=False)
        for t, row in enumerate(rows):
            shades = " ".join(
                SHADES[min(int(w * len(SHADES)), len(SHADES) - 1)] for w in attention[k, t].tolist()
            )
            ui.stderr.print(f"{row:>{width}} {shades}", highlight=False, markup=False)
