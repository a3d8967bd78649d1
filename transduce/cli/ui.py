"""What the commands print on stderr: messages, warnings, errors, tables.

stdout carries data only (predictions, JSON on request); everything for the person at
the terminal goes to stderr, through here, and respects --quiet / --verbose.
"""

from __future__ import annotations

import logging
import os

from rich.console import Console
from rich.markup import escape

QUIET, NORMAL, VERBOSE = 0, 1, 2

stderr = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)  # user text: no :x:
_level = NORMAL


def set_verbosity(level: int) -> None:
    global _level
    _level = level
    # sacrebleu warns through logging (e.g. about tokenized input); --quiet silences it too
    logging.getLogger("sacrebleu").setLevel(logging.ERROR if level == QUIET else logging.WARNING)


def verbosity() -> int:
    return _level


def info(message: str) -> None:
    """A normal message (hidden by --quiet)."""
    if _level >= NORMAL:
        stderr.print(escape(message))


def detail(message: str) -> None:
    """A message shown only with --verbose."""
    if _level >= VERBOSE:
        stderr.print(escape(message), style="dim")


def warn(message: str) -> None:
    """A warning (hidden by --quiet)."""
    if _level >= NORMAL:
        stderr.print(f"[yellow]warning:[/yellow] {escape(message)}")


def error(message: str) -> None:
    """The one-line red error of a user's mistake (always shown)."""
    line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    if os.environ.get("RANK", "0") != "0":  # a training process of torchrun other than 0
        line = f"rank {os.environ['RANK']}: {line}"
    stderr.print(f"[bold red]error:[/bold red] [red]{escape(line)}[/red]")
