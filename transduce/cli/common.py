"""Pieces the commands share: the verbosity option and enums of choices for completion."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterable
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

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


def echo_names(rows: list[tuple[str, str]]) -> None:
    """NAME and what it is, a line each on stdout: aligned for a reader at a terminal,
    NAME<TAB>TEXT for cut, awk and grep."""
    import sys

    if sys.stdout.isatty():
        width = max((len(name) for name, _ in rows), default=0)
        typer.echo("\n".join(f"{name:<{width}}  {text}" for name, text in rows))
    else:
        typer.echo("\n".join(f"{name}\t{text}" for name, text in rows))


class Device(str, Enum):
    """`--device` of train, decode and analyze-monotonicity."""

    cpu = "cpu"
    cuda = "cuda"
    auto = "auto"


def with_parameters(command: Any, generated: list[inspect.Parameter], after: str) -> Any:
    """`command` with the `generated` parameters (for its `**kwargs`) after its parameter
    `after`, as Typer reads parameters: from the signature (`score`'s metric flags,
    `prepare`'s format flags)."""
    signature = inspect.signature(command, eval_str=True)
    static = [p for p in signature.parameters.values() if p.kind != p.VAR_KEYWORD]
    at = [p.name for p in static].index(after) + 1
    static = [p.replace(kind=p.KEYWORD_ONLY) for p in static]  # Typer passes keywords only
    command.__signature__ = signature.replace(parameters=[*static[:at], *generated, *static[at:]])
    return command


def choices(name: str, values: Iterable[str]) -> type[Enum]:
    """A str Enum of `values` known only when the program runs (the registries' names),
    so that Typer validates and completes them."""
    # mypy types Enum's functional API as returning an instance, not a class
    return Enum(name, {value: value for value in values}, type=str)  # type: ignore[return-value]


def complete_recipe(incomplete: str) -> list[str]:
    """Shell completion of --config: shipped recipe names and the YAML files here."""
    from transduce.recipe_loader import shipped_recipes

    names = list(shipped_recipes())
    folder = Path(incomplete).parent if "/" in incomplete else Path(".")
    with contextlib.suppress(OSError):
        names += [
            str(p) if "/" in incomplete else p.name
            for p in sorted(folder.iterdir())
            if p.suffix in (".yaml", ".yml") or p.is_dir()
        ]
    return [name for name in names if name.startswith(incomplete)]


def complete_setting(incomplete: str) -> list[str]:
    """Shell completion of --set: every `section.key=` a recipe can hold."""
    from transduce.config import setting_keys

    return [f"{key}=" for key in setting_keys(models=False) if key.startswith(incomplete)]
