"""Reading text lines with precise errors: files or stdin, decoded as UTF-8 with the
line and column of a bad byte, lines of bounded length, and batches of lines as they
arrive (`line_batches`, for `decode` behind a pipe).

Lines are split on "\\n" only (never on the other characters `str.splitlines` treats as
line breaks, such as U+2028 or U+001C, which do occur inside real data); a trailing "\\r"
(CRLF files) and a leading byte-order mark are dropped.
"""

from __future__ import annotations

import codecs
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from transduce.errors import DataError

STDIN = "-"


def display(path: str | Path) -> str:
    """How a path is named in messages: standard input is "<stdin>"."""
    return "<stdin>" if str(path) == STDIN else str(path)


@dataclass(frozen=True)
class BadLine:
    """A line that could not be decoded, kept so that a caller can skip and count it."""

    line: int
    message: str
    value: str


def resolved(path: str | Path) -> Path:
    """`path` made absolute with its links followed, as far as they can be (a link loop or
    an unreadable folder stops there, with no error)."""
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError):  # Python < 3.13 raises RuntimeError for a link loop
        return Path(path).absolute()


def read_bytes(path: str | Path) -> bytes:
    """Read a whole file, or standard input when `path` is "-"."""
    if str(path) == STDIN:
        return sys.stdin.buffer.read()
    try:
        return Path(path).read_bytes()
    except IsADirectoryError:
        raise DataError("is a directory, not a file", path) from None
    except OSError as error:
        raise DataError(f"cannot read: {error.strerror}", path) from None


def _split(text: str) -> list[str | None]:
    lines: list[str | None] = list(text.split("\n"))
    if lines[-1] == "":
        lines.pop()
    if "\r" in text:
        lines = [line[:-1] if line and line.endswith("\r") else line for line in lines]
    return lines


def decode_lines(
    data: bytes, path: str | Path, encoding: str = "utf-8", *, keep_bad: bool = False
) -> tuple[list[str | None], list[BadLine]]:
    """Decode `data` into lines.

    Args:
        data: The raw bytes of a file.
        path: The file's name, for error messages.
        encoding: A Python codec name; with UTF-8, a leading byte-order mark is dropped.
        keep_bad: When False, the first undecodable line raises `DataError`; when True,
            such lines are None in the result and reported in the second return value.

    Returns:
        The lines (None where a line could not be decoded) and the undecodable lines.
    """
    if encoding.replace("_", "-").lower() in ("utf-8", "utf8") and data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]  # a byte-order mark is not text (no line break in it)
    try:
        return _split(data.decode(encoding)), []
    except LookupError:
        raise DataError(f"unknown encoding {encoding!r}") from None
    except UnicodeDecodeError as error:
        if not keep_bad:
            number = data.count(b"\n", 0, error.start) + 1
            start = data.rfind(b"\n", 0, error.start) + 1
            end = data.find(b"\n", error.start)
            raw = data[start : None if end < 0 else end]
            raise DataError(
                f"invalid {encoding} (byte {data[error.start : error.start + 1]!r})",
                path,
                number,
                raw.decode(encoding, errors="replace"),
            ) from None
    # Slow path: decode line by line so the good lines survive.
    lines: list[str | None] = []
    bad: list[BadLine] = []
    raw_lines = data.split(b"\n")
    if raw_lines[-1] == b"":
        raw_lines.pop()
    for number, raw in enumerate(raw_lines, 1):
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        try:
            text = raw.decode(encoding)
        except UnicodeDecodeError:
            lines.append(None)
            value = raw.decode(encoding, errors="replace")
            bad.append(BadLine(number, f"invalid {encoding}", value))
            continue
        lines.append(text)
    return lines, bad


def check_line_lengths(
    lines: Sequence[str | None], path: str | Path, limit: int | None, first: int = 1
) -> None:
    """A `DataError` for the first line longer than `limit` characters (None: no limit);
    `first`: the number of `lines[0]`."""
    if limit is None:
        return
    for number, line in enumerate(lines, first):
        if line is not None and len(line) > limit:
            raise DataError(
                f"a line of {len(line):,} characters, over the limit of {limit:,} "
                "(--max-line-length)",
                display(path),
                number,
                line,
            )


def line_batches(
    path: str | Path, size: int, max_chars: int | None = None
) -> Iterator[tuple[int, list[str]]]:
    """The lines of a file or of standard input ("-") in batches, as they arrive: a batch
    is given as soon as it has `size` lines or, when no more input is ready yet (a pipe, a
    person typing), with what it has. Yields (number of its first line, its lines); lines
    are decoded as `decode_lines` does (UTF-8, a leading BOM and a trailing CR dropped) and
    checked against `max_chars` (`check_line_lengths`)."""
    name = display(path)
    if str(path) == STDIN:
        try:
            fd = sys.stdin.fileno()
        except (OSError, ValueError, AttributeError):  # a stand-in without a descriptor
            whole = iter([read_bytes(STDIN), b""])
            yield from _batches(lambda: next(whole), lambda: True, name, size, max_chars)
            return
        yield from _batches(lambda: os.read(fd, 1 << 16), lambda: _ready(fd), name, size,
                            max_chars)  # fmt: skip
        return
    if os.path.isdir(path):
        raise DataError("is a directory, not a file", path)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as error:
        raise DataError(f"cannot read: {error.strerror}", path) from None
    try:
        yield from _batches(lambda: os.read(fd, 1 << 16), lambda: True, name, size, max_chars)
    finally:
        os.close(fd)


def _ready(fd: int) -> bool:
    """Whether reading `fd` now would not block (always True where select cannot tell)."""
    try:
        import select

        return bool(select.select([fd], [], [], 0)[0])
    except (ImportError, OSError, ValueError):
        return True


def _batches(
    read: Callable[[], bytes],
    ready: Callable[[], bool],
    name: str,
    size: int,
    max_chars: int | None,
) -> Iterator[tuple[int, list[str]]]:
    pending, batch, first, number = b"", [], 1, 0
    while True:
        try:
            chunk = read()
        except OSError as error:
            raise DataError(f"cannot read: {error.strerror}", name) from None
        pending += chunk
        complete: list[bytes] = []
        if b"\n" in chunk or not chunk:  # split only when a line ended: linear in the input
            *complete, pending = pending.split(b"\n")
            if not chunk and pending:  # the last line, without a line end
                complete, pending = [*complete, pending], b""
        elif max_chars is not None and len(pending) > 4 * max_chars + 4:  # UTF-8: <= 4 bytes
            raise DataError(
                f"a line of more than {max_chars:,} characters (--max-line-length)",
                name,
                number + 1,
                pending[:200].decode("utf-8", errors="replace"),
            )
        for raw in complete:
            number += 1
            if number == 1:
                raw = raw.removeprefix(codecs.BOM_UTF8)
            raw = raw.removesuffix(b"\r")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                value = raw.decode("utf-8", errors="replace")
                byte = raw[error.start : error.start + 1]
                raise DataError(f"invalid utf-8 (byte {byte!r})", name, number, value) from None
            check_line_lengths([line], name, max_chars, number)
            batch.append(line)
            if len(batch) == size:
                yield first, batch
                first, batch = number + 1, []
        if not chunk:
            break
        if batch and not ready():  # nothing more yet: give what there is
            yield first, batch
            first, batch = number + 1, []
    if batch:
        yield first, batch
