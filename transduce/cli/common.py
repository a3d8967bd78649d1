"""Pieces the commands share: the verbosity option and enums of choices for completion."""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import Annotated

import typer

from transduce.cli import ui


def _set_verbosity(value: bool | None) -> None:
    if value is not None:
        ui.set_verbosity(ui.QUIET if value else ui.VERBOSE)


# Accepted before the command (`transduce -q score ...`) and after it (`... score -q ...`).
Verbosity = Annotated[
    bool | None,
    typer.Option(
        "--quiet/--verbose",
        "-q/-v",
        callback=_set_verbosity,
        expose_value=False,
        help="Quiet: errors and data only. Verbose: more detail on stderr.",
        show_default=False,
    ),
]


def choices(name: str, values: Iterable[str]) -> type[Enum]:
    """A str Enum of `values`, so that Typer validates and completes them."""
    return Enum(name, {value: value for value in values}, type=str)  # type: ignore[return-value]
