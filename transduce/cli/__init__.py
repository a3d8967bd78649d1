"""The `transduce` command line: a Typer app with one module per command.

Library errors (`TransduceError`), failed file operations and usage mistakes (a misspelt
option value) become one red line on stderr and exit code 2; a traceback is left for
real bugs only.
"""

from __future__ import annotations

import errno
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from transduce import __version__
from transduce.cli import ui
from transduce.cli.common import Verbosity
from transduce.errors import TransduceError

EXIT_USER_ERROR = 2


def _usage_error(error: Exception) -> typer.Exit:
    """Print a usage error (a bad option value, a missing argument) as one line."""
    message = error.format_message()  # type: ignore[attr-defined]
    ctx = getattr(error, "ctx", None)
    command = ctx.command_path if ctx is not None else "transduce"
    ui.error(f"{message.removeprefix('Value error, ')} (see: {command} --help)")
    return typer.Exit(getattr(error, "exit_code", EXIT_USER_ERROR))


def _is_usage_error(error: Exception) -> bool:
    return isinstance(error, typer.TyperException) and hasattr(error, "format_message")


class _Group(TyperGroup):
    """Turns a user's mistake into one red line and exit code 2, for every command."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        ui.set_verbosity(ui.NORMAL)  # each invocation starts afresh (tests run many)
        try:
            return super().make_context(*args, **kwargs)
        except typer.TyperException as error:  # options before the command: transduce --nope
            if not _is_usage_error(error):
                raise
            raise _usage_error(error) from None

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except TransduceError as error:
            ui.error(str(error))
        except OSError as error:
            if error.errno == errno.EPIPE or error.filename is None:
                raise  # a closed pipe is handled quietly by Typer; others are bugs
            ui.error(f"{error.filename}: {error.strerror}")
        except typer.TyperException as error:  # a usage error of a command (bad value, ...)
            if not _is_usage_error(error):
                raise
            raise _usage_error(error) from None
        raise typer.Exit(EXIT_USER_ERROR)


app = typer.Typer(
    name="transduce",
    cls=_Group,
    help="Neural character- and word-level transduction: G2P, inflection, transliteration, "
    "normalization, tagging.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"transduce {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_show_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
    verbosity: Verbosity = None,
) -> None:
    """Neural character- and word-level transduction from the command line."""


from transduce.cli import analyze as _analyze  # noqa: E402, F401
from transduce.cli import decode as _decode  # noqa: E402, F401
from transduce.cli import prepare as _prepare  # noqa: E402, F401  (registers the command)
from transduce.cli import recipes as _recipes  # noqa: E402, F401
from transduce.cli import score as _score  # noqa: E402, F401
from transduce.cli import train as _train  # noqa: E402, F401
