"""The `transduce` command line: a Typer app (`transduce.cli.app`) with one module per
command; importing this package registers every command.

Library errors (`TransduceError`), failed file operations and usage mistakes (a misspelt
option value) become one red line on stderr and exit code 2; a traceback is left for
real bugs only.
"""

from __future__ import annotations

import os
import signal
import sys

from transduce.cli import (  # noqa: F401  (register)
    analyze,
    average,
    decode,
    experiment,
    export,
    prepare,
    recipes,
    score,
    train,
)
from transduce.cli.app import EXIT_USER_ERROR, app


def main() -> None:
    """The `transduce` program: the app, and then, while the interpreter shuts down (the
    command's work done and its files written), a Ctrl-C ends the process at once, as
    SIGINT does by default, instead of a traceback from a clean-up function. For the
    console script and `python -m transduce` only; in-process callers (tests) use `app`.
    A process that `experiment run` or `train --nproc` started stops with its parent."""
    from transduce.io import stop_with_parent

    stop_with_parent()
    try:
        app(prog_name="transduce")
    except SystemExit as done:
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # a torchrun process
            # its files written and its process group destroyed: end here, without the
            # interpreter's finalization, where gloo's threads have been seen to abort
            # ("terminate called without an active exception", SIGABRT, after a
            # finished run, twice in a loaded test run)
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        raise
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL)


__all__ = ["EXIT_USER_ERROR", "app", "main"]
