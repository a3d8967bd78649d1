"""`analyze-monotonicity`: how monotone a trained model's attention is, on a dataset.

Two readings of the attention (every mechanism: layers x heads, or one):

- forced: while the model reads the reference, teacher-forced, as Rios et al. (2021)
  measure it (Table 1);
- decoded: while it decodes freely. The model is run teacher-forced on its own output,
  which gives exactly the attention of each decoding step of that output.

For each, %mono and L_mono (`transduce.monotonicity`, the definitions of the loss) at
delta = 0, 0.5 and 1, per mechanism and overall (their mean); and crossing alignments
(Wu et al. 2018, Table 5): an output is non-monotonic for a mechanism when two alignment
edges with weight above `threshold` cross, i.e. output steps i < i' attend positions
j > j'. Only the counted source positions (right of a `<sep>`) take part, and the weights
are renormalized over them first, as in the loss. Outputs are counted as monotonic or not,
split by whether the decoded output equals the reference.

Plots (`--plot`): the attention of chosen lines, one heatmap per mechanism (a row per layer,
heads as columns, one colorbar), and the dev %mono of a run over its training (its
`train.json`), as PNG, PDF or SVG through matplotlib.

Everything here runs the model or reads and writes files; `transduce.cli.analyze` only
parses the command line and prints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from transduce import checkpoint, defaults
from transduce.config import DecodeConfig
from transduce.data.batching import collate, plan_batches
from transduce.data.dataset import load_prepared, parse_split_line
from transduce.decoding import decode_all
from transduce.errors import ConfigError, DataError, TransduceError, plural
from transduce.inference import Transducer
from transduce.io import save_figure
from transduce.lines import decode_lines, read_bytes
from transduce.models import Seq2SeqModel, expect
from transduce.monotonicity import FLOOR, MonotonicityStats, counted_positions
from transduce.runs import RunDir

DELTAS = defaults.MONOTONICITY_DELTAS
Pair = tuple[list[int], list[int]]  # the source ids and reference ids of a line


def load_model(path: str, device: str = "cpu") -> Transducer:
    """The model of a run directory (its final.pt or best.pt) or a checkpoint file, to analyze, on
    `device` (cpu, cuda, cuda:N or auto).

    Raises:
        CheckpointError: not a checkpoint of this version.
        TransduceError: a model without cross-attention (a tagger).
    """
    payload = checkpoint.load(path)
    transducer = Transducer.from_checkpoint(payload, device)
    if not isinstance(transducer.model, Seq2SeqModel):
        raise TransduceError(
            f"{payload['path']}: a {transducer.model.name} model tags each word; it has no "
            "cross-attention between an output and its input to analyze"
        )
    return transducer


def read_pairs(
    transducer: Transducer,
    data: Path,
    split: str = "test",
    warn: Callable[[str], None] | None = None,
) -> list[Pair]:
    """(source, reference) ids of a prepared split file, or of a prepared directory's split;
    `warn` receives a message about symbols unknown to the model.

    Raises:
        DataError: a line without a reference, no lines, or data the model cannot read
            (most of its symbols unknown: raw text, or another task's data).
    """
    if data.is_dir():
        prepared = load_prepared(data)
        if split not in prepared.splits:
            raise ConfigError(
                f"--split: {split!r} is not a split of {data} ({', '.join(prepared.splits)})"
            )
        pairs = prepared.splits[split]
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
    for side, vocab in (("source", transducer.source_vocab), ("target", transducer.target_vocab)):
        symbols = [s for p in pairs for s in getattr(p, side)]
        unknown = vocab.unknown(symbols)
        if unknown * 2 > len(symbols):
            first = next(n for n, p in enumerate(pairs, 1) if vocab.unknown(getattr(p, side)))
            raise DataError(
                f"{unknown} of {len(symbols)} {side} symbols are unknown to the model: not data "
                "of its task, or not prepared (a prepared split has space-separated symbols), "
                f"e.g. line {first}",
                where,
            )
        if unknown and warn is not None:
            count = plural(unknown, f"{side} symbol")
            warn(f"{where}: {count} of {len(symbols)} unknown to the model (read as <unk>)")
    return [
        (transducer.source_vocab.encode(p.source), transducer.target_vocab.encode(p.target))
        for p in pairs
    ]


def crosses(attention: Tensor, positions: Tensor, threshold: float) -> Tensor:
    """Whether the edges above `threshold` cross, per mechanism: attention K x T x S of one
    output (its real steps), positions S (1-based counted positions, 0 elsewhere): K bool."""
    counted = positions > 0  # S
    weights = attention[..., counted]  # K x T x X
    weights = weights / weights.sum(dim=-1, keepdim=True).clamp(min=FLOOR)  # as in the loss
    edges = weights > threshold  # K x T x X
    index = torch.arange(1, weights.shape[-1] + 1)  # 1 .. X
    big = weights.shape[-1] + 1
    highest = torch.where(edges, index, 0).max(dim=-1).values  # K x T (0: no edge)
    lowest = torch.where(edges, index, big).min(dim=-1).values  # K x T (big: no edge)
    before = torch.cummax(highest, dim=-1).values  # K x T: highest edge up to step i
    # an edge at step i' below the highest edge of an earlier step
    return (lowest[:, 1:] < before[:, :-1]).any(dim=-1)


@dataclass
class Crossings:
    """Outputs that are monotonic or not, correct or not, for one mechanism."""

    monotonic_correct: int = 0
    monotonic_incorrect: int = 0
    crossing_correct: int = 0
    crossing_incorrect: int = 0

    def add(self, crossing: bool, correct: bool) -> None:
        name = ("crossing_" if crossing else "monotonic_") + ("correct" if correct else "incorrect")
        setattr(self, name, getattr(self, name) + 1)


def analyze(
    transducer: Transducer,
    pairs: Sequence[Pair],
    mode: str = "forced",
    threshold: float = 0.1,
    beam: int = 1,
    batch_size: int = 64,
) -> dict[str, Any]:
    """The report of `analyze-monotonicity` for encoded (source, reference) id pairs."""
    model, device = expect(transducer.model, Seq2SeqModel), transducer.device
    sources = [s for s, _ in pairs]
    with transducer.autocast():
        hyps = decode_all(model, sources, DecodeConfig(beam=beam, batch_size=batch_size), device)
    outputs = [h[0].tokens for h in hyps]
    correct = [list(o) == list(r) for o, (_, r) in zip(outputs, pairs)]
    read = [r for _, r in pairs] if mode == "forced" else outputs
    names = model.attention_names
    stats = {delta: MonotonicityStats(names, delta) for delta in DELTAS}
    crossings = [Crossings() for _ in names]
    lengths = [(len(s), len(t)) for s, t in zip(sources, read)]
    with torch.inference_mode(), transducer.autocast():
        for chunk in plan_batches(lengths, batch_size, bucketing=True):
            batch = collate([sources[i] for i in chunk], [read[i] for i in chunk]).to(device)
            attention = model(batch).attention.float().cpu()  # B x K x T x S
            source, source_mask = batch.source.cpu(), batch.source_mask.cpu()
            target_mask = batch.target_mask.cpu()
            for delta in DELTAS:
                stats[delta].add(attention, source, source_mask, target_mask)
            positions = counted_positions(source, source_mask)  # B x S
            for row, index in enumerate(chunk):
                steps = int(target_mask[row].sum())
                crossing = crosses(attention[row, :, :steps], positions[row], threshold)
                for k in range(len(names)):
                    crossings[k].add(bool(crossing[k]), correct[index])
    per_delta = {str(delta): stats[delta].summary() for delta in DELTAS}
    return {
        "mode": mode,
        "examples": len(pairs),
        "accuracy": 100.0 * sum(correct) / max(len(pairs), 1),
        "mechanisms": names,
        "monotonicity": per_delta,
        "crossing_threshold": threshold,
        "crossings": {name: vars(c) for name, c in zip(names, crossings)},
    }


@dataclass
class AttentionMap:
    """The attention of one line, for a heatmap.

    Attributes:
        line: The line's number in the data (1-based).
        attention: K x T x S, float32 on the CPU.
        columns: The S source symbols.
        rows: The T output symbols, the last one `</s>`.
    """

    line: int
    attention: Tensor
    columns: list[str]
    rows: list[str]


def attention_maps(
    transducer: Transducer, pairs: Sequence[Pair], lines: Sequence[int], forced: bool = True
) -> list[AttentionMap]:
    """The attention of the chosen `lines` (1-based) while the model reads the reference
    (`forced`) or its own greedy output."""
    model = expect(transducer.model, Seq2SeqModel)
    maps = []
    for number in lines:
        source, reference = pairs[number - 1]
        target = reference
        if not forced:
            with transducer.autocast():
                target = decode_all(model, [source], DecodeConfig(), transducer.device)[0][0].tokens
        batch = collate([source], [target]).to(transducer.device)
        with torch.inference_mode(), transducer.autocast():
            attention = model(batch).attention[0].float().cpu()  # K x T x S
        rows = [*transducer.target_vocab.decode(target), "</s>"]
        maps.append(AttentionMap(number, attention, transducer.source_vocab.decode(source), rows))
    return maps


def mechanism_grid(names: Sequence[str]) -> list[list[int]]:
    """The mechanisms laid out as rows of a grid: a row per layer, heads as columns, when
    the names are "{prefix}.{layer}.head.{head}" (`head_names`); else one row."""
    rows: dict[str, list[int]] = {}
    for index, name in enumerate(names):
        layer, dot, _ = name.rpartition(".head.")
        if not dot:
            return [list(range(len(names)))]
        rows.setdefault(layer, []).append(index)
    return list(rows.values())


def _heatmaps(plt: Any, item: AttentionMap, names: Sequence[str], forced: bool) -> Any:
    """One figure: a panel per mechanism (layers as rows, heads as columns), shared axes
    labelled on the outer panels, one colorbar for all (weights 0 to 1)."""
    grid = mechanism_grid(names)
    rows, columns = len(grid), max(len(r) for r in grid)
    S, T = len(item.columns), len(item.rows)
    # about 0.2 inch per symbol, so that 7-point labels never overlap, from 1.4 to 4 inches
    # a panel; past 20 symbols, every n-th is labelled
    width, height = min(max(1.4, 0.2 * S), 4.0), min(max(1.4, 0.2 * T), 4.0)
    x_step, y_step = -(-S // 20), -(-T // 20)
    figure, axes = plt.subplots(
        rows, columns, figsize=(columns * width + 1.6, rows * height + 1.0),
        squeeze=False, sharex=True, sharey=True, layout="constrained",
    )  # fmt: skip
    image = None
    for r, indices in enumerate(grid):
        for c in range(columns):
            axis = axes[r][c]
            if c >= len(indices):
                axis.set_visible(False)
                continue
            k = indices[c]
            image = axis.imshow(
                item.attention[k].numpy(), cmap="Greys", vmin=0, vmax=1, aspect="auto",
                interpolation="nearest",
            )  # fmt: skip
            layer, dot, head = names[k].rpartition(".head.")
            axis.set_title(f"head {head}" if dot else names[k], fontsize=8)
            if c == 0:
                axis.set_yticks(range(0, T, y_step), item.rows[::y_step], fontsize=7)
                if dot:
                    axis.set_ylabel(f"{layer}\n(output)", fontsize=8)
            if r == rows - 1:
                axis.set_xticks(range(0, S, x_step), item.columns[::x_step], fontsize=7)
                axis.tick_params(axis="x", rotation=90)
            axis.tick_params(length=0)
    figure.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="attention weight")
    mode = "reading the reference" if forced else "decoding"
    figure.suptitle(f"line {item.line}: attention while {mode}", fontsize=9)
    return figure


def _curve(plt: Any, points: list[tuple[int, dict[str, Any]]]) -> Any:
    """Dev %mono per update: a line per mechanism in distinct colours (and dashes past
    ten), the mean over them in black, the legend outside the data, on the right."""
    names = list(points[0][1]["mechanisms"])
    figure, axis = plt.subplots(figsize=(6.5, 3.5), layout="constrained")
    palette = plt.get_cmap("tab10" if len(names) <= 10 else "tab20").colors
    updates = [u for u, _ in points]
    for k, name in enumerate(names):
        axis.plot(
            updates, [m["mechanisms"][name]["mono"] for _, m in points], label=name,
            color=palette[k % len(palette)], linestyle=("-", "--", ":")[k // len(palette) % 3],
            linewidth=1.2, marker="." if len(points) < 30 else None,
        )  # fmt: skip
    if len(names) > 1:
        axis.plot(updates, [m["overall"]["mono"] for _, m in points], color="black",
                  linewidth=2.2, label="mean")  # fmt: skip
    axis.xaxis.get_major_locator().set_params(integer=True)
    axis.set_xlabel("update")
    axis.set_ylabel(f"dev %mono (δ={points[0][1]['delta']:g})")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False,
                ncols=1 if len(names) <= 16 else 2)  # fmt: skip
    return figure


def write_plots(
    maps: Sequence[AttentionMap],
    names: Sequence[str],
    directory: Path,
    run_dir: Path,
    forced: bool = True,
    fmt: str = "png",
) -> list[Path]:
    """Write `line{N}.{fmt}` for each map (`_heatmaps`) and, when `run_dir` has a
    `train.json` with dev monotonicity, `monotonicity.{fmt}` (`_curve`). Each file is
    written atomically (a crash leaves the old file or the new one).

    Returns:
        The files written; none when matplotlib is not installed.
    """
    if fmt not in defaults.PLOT_FORMATS:
        valid = ", ".join(defaults.PLOT_FORMATS)
        raise ConfigError(f"--format: {fmt!r} is not one of {valid}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    figures: list[tuple[str, Any]] = [
        (f"line{item.line}", _heatmaps(plt, item, names, forced)) for item in maps
    ]
    report = RunDir(run_dir).read_report()
    if report is not None:
        entries = report.history
        points = [(e["update"], e["dev_monotonicity"]) for e in entries if "dev_monotonicity" in e]
        if points:
            figures.append(("monotonicity", _curve(plt, points)))
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for stem, figure in figures:
        path = directory / f"{stem}.{fmt}"
        save_figure(figure, path, fmt, dpi=200)
        plt.close(figure)
        written.append(path)
    return written
