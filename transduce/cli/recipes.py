"""`transduce recipes`: the shipped recipes, one per line, with what each is for."""

from __future__ import annotations

from transduce import recipe_loader
from transduce.cli.app import app
from transduce.cli.common import Verbosity, echo_names


@app.command(name="recipes")
def recipes_command(verbosity: Verbosity = None) -> None:
    """List the shipped recipes (`train --config NAME`): NAME<TAB>PURPOSE on stdout."""
    echo_names([(name, recipe_loader.purpose(name)) for name in recipe_loader.shipped_recipes()])
