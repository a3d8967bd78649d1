"""The `transduce` command line: a Typer app (`transduce.cli.app`) with one module per
command; importing this package registers every command.

Library errors (`TransduceError`), failed file operations and usage mistakes (a misspelt
option value) become one red line on stderr and exit code 2; a traceback is left for
real bugs only.
"""

from __future__ import annotations

from transduce.cli import analyze, decode, prepare, recipes, score, train  # noqa: F401  (register)
from transduce.cli.app import EXIT_USER_ERROR, app

__all__ = ["EXIT_USER_ERROR", "app"]
