"""The exceptions a user's mistake can raise.

The library raises these with the file, line and value at fault; only the command-line
layer turns them into a one-line red message on stderr and exit code 2.
"""

from __future__ import annotations

import re
from pathlib import Path

_MAX_VALUE_CHARS = 80

EXIT_USER_ERROR = 2  # a user's mistake (TransduceError), as usage errors
EXIT_INTERRUPTED = 130  # as a shell reports a process ended by SIGINT


class TransduceError(Exception):
    """Base class of every error caused by the user's input rather than by a bug."""


class ConfigError(TransduceError):
    """A bad option, configuration key or value."""


class DataError(TransduceError):
    """Bad input data: a malformed line, an empty file, mismatched line counts.

    Args:
        message: What is wrong, e.g. "expected 3 tab-separated columns, found 2".
        path: The file at fault (or "-" for stdin).
        line: The 1-based line number at fault.
        value: The offending value (usually the line or field); shortened in the message.
    """

    def __init__(
        self,
        message: str,
        path: str | Path | None = None,
        line: int | None = None,
        value: str | None = None,
    ) -> None:
        self.message = message
        self.path = None if path is None else str(path)
        self.line = line
        self.value = value
        super().__init__(self._format())

    def _format(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path if self.line is None else f"{self.path}:{self.line}"
            where += ": "
        text = where + self.message
        if self.value is not None:
            text += f": {shorten(self.value)!r}"
        return text


class CheckpointError(TransduceError):
    """A checkpoint that cannot be read or does not fit the request."""


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """`plural(1, "line")` -> "1 line"; `plural(3, "line")` -> "3 lines"; `nouns`: irregular."""
    return f"{count} {noun}" if count == 1 else f"{count} {nouns or noun + 's'}"


def shorten(value: str, limit: int = _MAX_VALUE_CHARS) -> str:
    """Cut `value` to at most `limit` characters, marking the cut with an ellipsis."""
    return value if len(value) <= limit else value[: limit - 1] + "…"


class OutOfMemory(TransduceError):
    """An allocation failed; the message names the size asked for and what to change."""


def memory_request(error: BaseException) -> int | None:
    """The bytes a failed allocation asked for, if `error` is an out-of-memory error (0 when
    it does not say); None for any other error."""
    if isinstance(error, MemoryError):
        return 0
    text = str(error)
    oom = type(error).__name__ == "OutOfMemoryError" or (
        isinstance(error, RuntimeError)
        and ("not enough memory" in text or "can't allocate memory" in text)
    )
    if not oom:
        return None
    match = re.search(r"allocate (\d+) bytes", text) or re.search(
        r"allocate ([0-9.]+) ([KMGT]i?B)", text
    )
    if match is None:
        return 0
    if match.lastindex == 1:
        return int(match[1])
    unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[match[2][0]]
    return int(float(match[1]) * unit)


def size_text(count: int) -> str:
    """Bytes for people: 34.5 GB, 812 MB, 4 KB."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count} bytes"


def out_of_memory(error: BaseException, what: str, hint: str) -> OutOfMemory | None:
    """An `OutOfMemory` for `error` if it is one ("out of memory WHAT (asked for SIZE):
    HINT"), else None."""
    size = memory_request(error)
    if size is None:
        return None
    asked = f" (asked for {size_text(size)})" if size else ""
    where = f" {what}" if what else ""
    return OutOfMemory(f"out of memory{where}{asked}: {hint}")


def interrupted(error: BaseException) -> bool:
    """Whether `error` is a Ctrl-C, or an error raised while one was being handled (a
    library's clean-up that failed because a KeyboardInterrupt cut its work short, such as
    torch.save's zip writer)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )
    return False


def chained_os_error(error: BaseException) -> OSError | None:
    """The `OSError` that `error` is, or was raised from or while handling (torch's zip
    writer turns a full disk into a RuntimeError whose cause is the OSError); None if none.
    A context dropped on purpose (`raise ... from None`) is not followed: the OSError that
    Python's import machinery was handling when a Ctrl-C cut an import short is no cause."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, OSError):
            return current
        seen.add(id(current))
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )
    return None
