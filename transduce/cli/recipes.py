"""`transduce recipes`: the shipped recipes, one per line, with what each is for."""

from __future__ import annotations

import sys

import typer

from transduce import recipe_loader
from transduce.cli.app import app
from transduce.cli.common import Verbosity


@app.command(name="recipes")
def recipes_command(verbosity: Verbosity = None) -> None:
    """List the shipped recipes (`train --config NAME`): NAME<TAB>PURPOSE on stdout."""
    rows = [(name, recipe_loader.purpose(name)) for name in recipe_loader.shipped_recipes()]
    if sys.stdout.isatty():  # aligned for a reader; tab-separated for cut, awk and grep
        width = max(len(name) for name, _ in rows)
        lines = [f"{name:<{width}}  {text}" for name, text in rows]
    else:
        lines = [f"{name}\t{text}" for name, text in rows]
    typer.echo("\n".join(lines))
