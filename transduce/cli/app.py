"""The `transduce` app: the Typer application every command module registers with.

Library errors (`TransduceError`), failed file operations and usage mistakes (a misspelt
option value) become one red line on stderr and exit code 2; a traceback is left for
real bugs only.
"""

from __future__ import annotations

import errno
import io
import os
import sys
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from transduce.cli import ui
from transduce.cli.common import Verbosity
from transduce.errors import (
    EXIT_INTERRUPTED,
    EXIT_USER_ERROR,
    TransduceError,
    chained_os_error,
    interrupted,
    out_of_memory,
)
from transduce.version import __version__


def _usage_error(error: Exception) -> typer.Exit:
    """Print a usage error (a bad option value, a missing argument) as one line."""
    formatted = getattr(error, "format_message", None)  # click's usage errors have it
    message = formatted() if callable(formatted) else str(error)
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
        _stand_in_for_closed_streams()
        try:
            return self._invoke(ctx)
        except (KeyboardInterrupt, Exception) as error:
            if not interrupted(error) or isinstance(error, typer.Exit):
                raise
            _settle_stdout()  # Ctrl-C: exit as a shell reports SIGINT, no traceback
            raise typer.Exit(EXIT_INTERRUPTED) from None

    def _invoke(self, ctx: Any) -> Any:
        try:
            result = super().invoke(ctx)
            _flush_stdout()
            return result
        except typer.Exit:  # click's Exit is a RuntimeError: not one to explain below
            raise
        except TransduceError as error:
            _settle_stdout()
            ui.error(str(error))
        except OSError as error:
            if error.errno == errno.EPIPE:
                _silence_stdout()
                raise typer.Exit(0) from None  # the reader went away (`| head`): not an error
            stdout_failed = _settle_stdout() or _writing_stdout(error)
            if error.filename is None and stdout_failed:
                error = OSError(error.errno, error.strerror, STDOUT)
            ui.error(_os_message(error))
        except typer.TyperException as error:  # a usage error of a command (bad value, ...)
            if not _is_usage_error(error):
                raise
            raise _usage_error(error) from None
        except (MemoryError, RuntimeError) as error:
            trouble = out_of_memory(
                error, "", "use smaller batches, shorter sequences or a smaller model"
            )
            cause = chained_os_error(error) if trouble is None else None
            if trouble is None and cause is None:
                raise  # a bug: keep the traceback
            _settle_stdout()
            message = trouble if trouble is not None else cause
            ui.error(_os_message(message) if isinstance(message, OSError) else str(message))
        raise typer.Exit(EXIT_USER_ERROR)


STDOUT = "<stdout>"


class _Closed(io.TextIOBase):
    """A standard stream the caller closed (`<&-`, `>&-`, as cron may): Python has None
    there; any use of this stand-in is an `OSError` naming the stream, so one line."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.stream_name = name

    def _fail(self, *args: Any) -> Any:
        raise OSError(errno.EBADF, "closed by the caller (<&- or >&-)", self.stream_name)

    def read(self, *args: Any) -> Any:
        return self._fail()

    def readline(self, *args: Any) -> Any:
        return self._fail()

    def write(self, *args: Any) -> Any:
        return self._fail()

    def fileno(self) -> int:
        return self._fail()

    @property
    def buffer(self) -> Any:
        return self._fail()

    def flush(self) -> None:  # nothing was written: nothing to fail at exit
        pass


def _stand_in_for_closed_streams() -> None:
    if sys.stdin is None:
        sys.stdin = _Closed("<stdin>")
    if sys.stdout is None:
        sys.stdout = _Closed(STDOUT)


def _flush_stdout() -> None:
    """Flush what a command printed now, so that a failure (a full disk) is reported here
    as one line and not by the interpreter at exit."""
    try:
        sys.stdout.flush()
    except OSError as error:
        _silence_stdout()
        raise OSError(error.errno, error.strerror, STDOUT) from None


def _settle_stdout() -> bool:
    """Before an error message: flush what the command printed (it keeps its data), or,
    if stdout cannot take it, drop it so that the interpreter's exit cannot fail again.
    Whether stdout failed."""
    try:
        sys.stdout.flush()
        return False
    except (OSError, ValueError):
        _silence_stdout()
        return True


def _writing_stdout(error: BaseException) -> bool:
    """Whether `error` was raised where standard output was written (the innermost frame
    holds it: click's echo, rich's console), though a flush now succeeds (the failed
    write's data was dropped)."""
    traceback = error.__traceback__
    while traceback is not None and traceback.tb_next is not None:
        traceback = traceback.tb_next
    if traceback is None:
        return False
    values = list(traceback.tb_frame.f_locals.values())
    values += [getattr(v, "file", None) for v in values]  # a console's stream
    for value in values:
        try:
            if value is sys.stdout or (hasattr(value, "fileno") and value.fileno() == 1):
                return True
        except (OSError, ValueError, TypeError, AttributeError):
            continue
    return False


def _silence_stdout() -> None:
    """Point standard output at /dev/null, its buffer dropped: nothing left in it can fail
    again at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _os_message(error: OSError) -> str:
    """One line for a failed file operation: the file, and what the system said."""
    reason = error.strerror or str(error)
    if error.filename is None:
        return reason
    name = error.filename if error.filename2 is None else f"{error.filename} -> {error.filename2}"
    return f"{name}: {reason}"


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
