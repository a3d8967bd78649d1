"""`transduce prepare FORMAT [INPUT...] --out DIR`: raw data -> a prepared dataset directory."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from transduce import defaults
from transduce.cli import app, ui
from transduce.data.formats import FORMATS
from transduce.data.prepare import SPLITS, PrepareRequest, prepare

FormatName = Enum("FormatName", {name: name for name in FORMATS}, type=str)  # type: ignore[misc]

_SPLITS = "Splits"
_TSV, _CMU, _CONLLU, _PARALLEL = "tsv format", "cmudict format", "conllu format", "parallel format"
Files = Annotated[list[Path] | None, typer.Option(rich_help_panel=_SPLITS, show_default=False)]


@app.command(name="prepare")
def prepare_command(
    format: Annotated[FormatName, typer.Argument(help="Input format.", show_default=False)],
    inputs: Annotated[
        list[Path] | None,
        typer.Argument(
            help="The training data (one file; parallel: source then target). Missing dev "
            "and test splits are carved out of it. cmudict with no input: the embedded CMUdict.",
            show_default=False,
        ),
    ] = None,
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Directory to create.", show_default=False)
    ] = ...,  # type: ignore[assignment]
    train: Files = None,
    dev: Annotated[
        list[Path] | None,
        typer.Option(
            help="Dev file(s) to keep as given.", rich_help_panel=_SPLITS, show_default=False
        ),
    ] = None,
    test: Annotated[
        list[Path] | None,
        typer.Option(
            help="Test file(s) to keep as given (answers optional).",
            rich_help_panel=_SPLITS,
            show_default=False,
        ),
    ] = None,
    dev_ratio: Annotated[
        float,
        typer.Option(help="Share of distinct sources carved out as dev.", rich_help_panel=_SPLITS),
    ] = defaults.DEV_RATIO,
    test_ratio: Annotated[
        float,
        typer.Option(help="Share of distinct sources carved out as test.", rich_help_panel=_SPLITS),
    ] = defaults.TEST_RATIO,
    seed: Annotated[
        int, typer.Option(help="Seed of the split.", rich_help_panel=_SPLITS)
    ] = defaults.SPLIT_SEED,
    skip_invalid: Annotated[
        bool,
        typer.Option(help="Skip malformed lines (counted in the manifest) instead of stopping."),
    ] = False,
    force: Annotated[bool, typer.Option(help="Replace OUT if it exists.")] = False,
    encoding: Annotated[str, typer.Option(help="Encoding of the input files.")] = defaults.ENCODING,
    source_col: Annotated[
        int | None,
        typer.Option(
            help="1-based source column [default: 1].", rich_help_panel=_TSV, show_default=False
        ),
    ] = None,
    target_col: Annotated[
        int | None,
        typer.Option(
            help="1-based target column [default: 2].", rich_help_panel=_TSV, show_default=False
        ),
    ] = None,
    features_col: Annotated[
        int | None,
        typer.Option(
            help="1-based features column [default: none].",
            rich_help_panel=_TSV,
            show_default=False,
        ),
    ] = None,
    source_unit: Annotated[
        str | None,
        typer.Option(
            help="char, symbol or auto [default: auto].", rich_help_panel=_TSV, show_default=False
        ),
    ] = None,
    target_unit: Annotated[
        str | None,
        typer.Option(
            help="char, symbol or auto [default: auto].", rich_help_panel=_TSV, show_default=False
        ),
    ] = None,
    features_sep: Annotated[
        str | None,
        typer.Option(
            help="Separator inside the features column [default: ;].",
            rich_help_panel=_TSV,
            show_default=False,
        ),
    ] = None,
    keep_stress: Annotated[
        bool | None,
        typer.Option(
            "--keep-stress/--strip-stress",
            help="Keep stress digits (AH0) [default: strip].",
            rich_help_panel=_CMU,
            show_default=False,
        ),
    ] = None,
    lowercase: Annotated[
        bool | None,
        typer.Option(
            "--lowercase/--keep-case",
            help="Lower-case words [default: lowercase].",
            rich_help_panel=_CMU,
            show_default=False,
        ),
    ] = None,
    tag: Annotated[
        str | None,
        typer.Option(
            help="upos or xpos [default: upos].", rich_help_panel=_CONLLU, show_default=False
        ),
    ] = None,
    subwords: Annotated[
        str | None,
        typer.Option(
            help="none, subword-nmt or sentencepiece (BPE) [default: none].",
            rich_help_panel=_PARALLEL,
            show_default=False,
        ),
    ] = None,
    bpe_merges: Annotated[
        int | None,
        typer.Option(
            help=f"BPE merge operations [default: {defaults.BPE_MERGES}].",
            rich_help_panel=_PARALLEL,
            show_default=False,
        ),
    ] = None,
    bpe_joint: Annotated[
        bool | None,
        typer.Option(
            "--bpe-joint/--bpe-separate",
            help="One BPE model for both sides [default: joint].",
            rich_help_panel=_PARALLEL,
            show_default=False,
        ),
    ] = None,
) -> None:
    """Read raw data and write a prepared dataset directory (train/dev/test.tsv, manifest.json)."""
    options = {
        "source_col": source_col, "target_col": target_col, "features_col": features_col,
        "source_unit": source_unit, "target_unit": target_unit, "features_sep": features_sep,
        "keep_stress": keep_stress, "lowercase": lowercase, "tag": tag,
        "subwords": subwords, "bpe_merges": bpe_merges, "bpe_joint": bpe_joint,
    }  # fmt: skip
    given = {"train": train or inputs or None, "dev": dev, "test": test}
    if train and inputs:
        raise typer.BadParameter("give the training data as INPUT or as --train, not both")
    request = PrepareRequest(
        format=format.value,
        out=out,
        inputs={split: list(paths) for split, paths in given.items() if paths},
        options={key: value for key, value in options.items() if value is not None},
        dev_ratio=dev_ratio,
        test_ratio=test_ratio,
        seed=seed,
        skip_invalid=skip_invalid,
        force=force,
        encoding=encoding,
    )
    manifest = prepare(request)
    _summary(out, manifest)


def _summary(out: Path, manifest: dict) -> None:
    sides = manifest["sides"]
    table = Table(title=f"{out} ({manifest['format']})", title_justify="left")
    for column in ("split", "entries", "source symbols", "target symbols"):
        table.add_column(column, justify="left" if column == "split" else "right")
    inventory = manifest["inventory"]
    for index, split in enumerate(SPLITS):
        kinds = [
            sum(1 for counts in inventory[side].values() if counts[index])
            for side in ("source", "target")
        ]
        origin = "carved" if split in manifest["split"]["carved"] else "given"
        table.add_row(f"{split} ({origin})", str(manifest["lines"][split]), *map(str, kinds))
    if ui.verbosity() >= ui.NORMAL:
        ui.stderr.print(table)
        ui.info(f"units: source {sides['source']['unit']}, target {sides['target']['unit']}")
    skipped = manifest["skipped"]
    if skipped["total"]:
        ui.warn(f"skipped {skipped['total']} malformed entries, e.g. {skipped['examples'][0]}")
    for pair, count in manifest["overlap"].items():
        if count:
            ui.warn(f"{count} distinct sources are in both {pair.replace('-', ' and ')} (as given)")
    if not manifest["test_has_targets"]:
        ui.info("test has no answers: it can be decoded, not scored")
