"""Reading text lines with precise errors, and writing files and directories atomically.

Lines are split on "\\n" only (never on the other characters `str.splitlines` treats as
line breaks, such as U+2028 or U+001C, which do occur inside real data); a trailing "\\r"
(CRLF files) and a leading byte-order mark are dropped.
"""

from __future__ import annotations

import codecs
import contextlib
import ctypes
import errno
import hashlib
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from transduce.errors import EXIT_INTERRUPTED, DataError, TransduceError, chained_os_error

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
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if "\r" in text:
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]
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
    lines: list[str | None], path: str | Path, limit: int | None, first: int = 1
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


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | Path) -> str:
    """Hex SHA-256 of a file's contents, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` through a temporary file and a rename.

    A reader never sees a half-written file, and an existing file is only replaced once
    the new one is complete. A path that exists and is not a regular file (/dev/stdout, a
    named pipe) is written into directly.
    """
    path = Path(path)
    if path.exists() and not path.is_file():  # /dev/stdout, a FIFO: write into it, no rename
        if path.is_dir():
            raise TransduceError(f"{path}: is a directory; give a file name")
        try:
            with open(path, "w", encoding="utf-8", newline="\n") as handle:
                handle.write(text)
        except OSError as error:
            raise _named(error, path) from None
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_binary(path) as handle:
        handle.write(text.encode("utf-8"))


@contextlib.contextmanager
def atomic_binary(path: Path) -> Iterator[BinaryIO]:
    """A binary file object whose content replaces `path` when the block ends without error.

    The data goes to a temporary file beside `path` (mode as the umask allows, not the
    private mode of `mkstemp`), is flushed to disk, then renamed into place; on an error
    the temporary file is removed and `path` is untouched. A Ctrl-C meanwhile is handled
    when the file is in place (`deferred_interrupts`), so it never leaves a temporary file
    behind or cuts a library's writer short.
    """
    with deferred_interrupts():
        yield from _atomic_binary(path)


def save_figure(figure: object, path: Path, fmt: str, dpi: int) -> None:
    """Write a matplotlib figure atomically, the same plot as the same bytes: no creation
    date in PDF and SVG files, a fixed SVG id salt."""
    import matplotlib

    metadata = {"CreationDate": None} if fmt == "pdf" else {"Date": None} if fmt == "svg" else {}
    with atomic_binary(path) as handle, matplotlib.rc_context({"svg.hashsalt": "transduce"}):
        figure.savefig(handle, format=fmt, dpi=dpi, metadata=metadata)  # type: ignore[attr-defined]


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Hold a Ctrl-C (SIGINT) back until the block ends, then handle it as it would have
    been (the handler in place before: the trainer's, or Python's KeyboardInterrupt).
    Only in the main thread, where Python runs signal handlers, and only when that handler
    is Python's to replace."""
    previous = signal.getsignal(signal.SIGINT)
    if previous is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught and previous == signal.SIG_DFL:
            signal.raise_signal(signal.SIGINT)
        elif callable(previous):
            for _ in caught[:2]:  # a second press still means "stop at once"
                previous(signal.SIGINT, None)


def _atomic_binary(path: Path) -> Iterator[BinaryIO]:
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{_MARK}", suffix=".tmp", dir=path.parent)
    except OSError as error:
        if error.errno == errno.ENOENT and path.parent.is_dir():  # not "no such file": /proc
            why = f"cannot create a file in {path.parent} (its file system takes no new files)"
            raise OSError(error.errno, why, str(path)) from None
        raise _named(error, path) from None
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        try:
            with os.fdopen(fd, "wb") as handle:
                yield handle
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as error:
            raise _named(error, path) from None
        except RuntimeError as error:  # torch's zip writer: a full disk is its cause
            cause = chained_os_error(error)
            if cause is None:
                raise
            raise _named(cause, path) from None
        fault_point(f"before-rename:{path.name}")
        os.replace(tmp, path)
        _sync_directory(path.parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _named(error: OSError, path: Path) -> OSError:
    """`error` as if it had happened on `path` (not on the temporary file beside it), so
    that messages name the file the user asked for."""
    return OSError(error.errno, error.strerror, str(path))


# Temporary files and directories of `atomic_binary` and `atomic_directory`:
# ".NAME.transduce-<8 random characters of tempfile>.tmp" (or .old) beside NAME; the mark
# keeps a user's own ".data.backup_1.tmp" from ever being taken for one of ours.
_MARK = "transduce-"
_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.transduce-[a-z0-9_]{8}\.(?:tmp|old)$")


def is_temporary(name: str) -> bool:
    """Whether `name` is that of a temporary file or directory of our atomic writes."""
    return _TEMPORARY.match(name) is not None


def _sync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable (a power loss cannot undo it); best effort."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_file(path: Path, data: bytes) -> None:
    """`path.write_bytes(data)`, with a failure (a full disk) naming `path`."""
    try:
        path.write_bytes(data)
    except OSError as error:
        raise _named(error, path) from None


def stale_temporaries(directory: Path, names: Iterable[str] | None = None) -> list[Path]:
    """The temporary files and directories our atomic writes left in `directory` when a
    process was killed during one (of the files `names`, or of any file). Only call this
    while holding the directory's lock: a live writer's temporaries look the same."""
    found = []
    wanted = None if names is None else set(names)
    with contextlib.suppress(OSError):
        for entry in sorted(directory.iterdir()):
            match = _TEMPORARY.match(entry.name)
            if match and (wanted is None or match["name"] in wanted):
                found.append(entry)
    return found


def remove(path: Path) -> None:
    """Delete a file or a directory tree."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


# --------------------------------------------------------- processes we start

PARENT_VARIABLE = "TRANSDUCE_PARENT_PID"  # set for a child that is to stop with its parent
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def child_environment(environment: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child process that is to stop when this one dies, however it
    dies (kill -9 included): see `stop_with_parent`, which the child calls as it starts."""
    base = os.environ if environment is None else environment
    return {**base, PARENT_VARIABLE: str(os.getpid())}


def stop_with_parent() -> None:
    """In a process started with `child_environment`: when the parent that started it dies,
    a Ctrl-C (SIGINT: training stops after its update and writes last.pt), through Linux's
    parent-death signal (prctl PR_SET_PDEATHSIG), a SIGHUP. Linux sends it again as each
    thread of the dying parent exits, so only the first SIGHUP is a Ctrl-C (a second would
    mean "stop at once"). A parent already gone is an exit with 130 at once. Elsewhere, and
    in a process started otherwise, nothing."""
    expected = os.environ.pop(PARENT_VARIABLE, None)
    if expected is None or not sys.platform.startswith("linux"):
        return
    hung_up: list[int] = []

    def hang_up(signum: int, frame: object) -> None:
        if not hung_up:
            hung_up.append(signum)
            signal.raise_signal(signal.SIGINT)

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        previous = signal.signal(signal.SIGHUP, hang_up)
        if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGHUP), 0, 0, 0) != 0:
            signal.signal(signal.SIGHUP, previous)
            return
    except (OSError, AttributeError, ValueError):
        return
    if str(os.getppid()) != expected:  # it died before the signal was asked for
        raise SystemExit(EXIT_INTERRUPTED)


# ------------------------------------------------------------------ fault injection

FAULT_VARIABLE = "TRANSDUCE_FAULT"
_fault_counts: dict[str, int] = {}


def fault_point(name: str) -> None:
    """A named point where the fault-injection tests stop the process.

    `TRANSDUCE_FAULT=POINT[@N][:SIGNAL]` (SIGNAL: KILL (default), INT or TERM) sends the
    signal to this process the N-th time (default 1) POINT is reached; unset, this does
    nothing. The points: `update` (after an update's optimizer step), `validation` (before
    a validation's checkpoints), `after-last`
    (between last.pt and best.pt), `after-best` (after both), `before-rename:FILE` (a
    temporary file or directory complete, not yet renamed to FILE), `before-test`,
    `before-report`, and of `prepare --force`: `after-exchange:DIR` (the new directory in
    place, the old not yet deleted) and `between-renames:DIR` (without an atomic exchange:
    the old directory moved aside, the new not yet in place).
    """
    spec = os.environ.get(FAULT_VARIABLE)
    if not spec:
        return
    point, sig = spec, "KILL"
    head, _, tail = spec.rpartition(":")
    if head and tail in ("KILL", "INT", "TERM"):
        point, sig = head, tail
    point, at, count = point.rpartition("@")
    if not at:
        point, count = count, ""
    if point != name:
        return
    _fault_counts[name] = _fault_counts.get(name, 0) + 1
    if _fault_counts[name] == int(count or 1):
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), getattr(signal, "SIG" + sig))


# ------------------------------------------------------------------------ locks


class DirectoryLock:
    """An exclusive lock that one process holds on a path while it writes there (a run
    directory, a prepared dataset's destination); released when the process exits in any
    way, since the kernel drops the `flock` of a dead process.

    The lock is the file `lock_file`, holding the owner's PID; it is removed on release.
    A second process gets a `TransduceError` naming the holder's PID.
    """

    def __init__(self, lock_file: Path, what: Path) -> None:
        self.lock_file, self.what = Path(lock_file), what
        self._fd: int | None = None

    def acquire(self) -> DirectoryLock:
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock (Windows is not a supported platform)
            return self
        while True:
            try:
                fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT, 0o666 & ~_umask())
            except OSError as error:
                raise _named(error, self.lock_file) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as error:
                if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    # a file system without locks (some NFS or FUSE mounts): go on unlocked
                    os.close(fd)
                    return self
                holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
                os.close(fd)
                raise TransduceError(
                    f"{self.what}: in use by another transduce process (PID {holder}); "
                    "wait for it to end or stop it"
                ) from None
            # the file we locked may have been removed by the holder we waited on
            try:
                same = os.stat(self.lock_file).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode("ascii"))
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.lock_file)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> DirectoryLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one atomic step (Linux renameat2 RENAME_EXCHANGE); False where
    the system or its file system cannot."""
    if sys.platform != "linux":
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    done = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return done == 0


def recover_directory(target: Path) -> list[str]:
    """Put back a directory that a replacement killed between its two renames left in a
    hidden `.NAME.*.old/dir`, and remove the temporaries of killed builds. Call with the
    target's lock held. Returns what was done, as messages."""
    target = Path(target)
    parent = target.absolute().parent
    done = []
    for stale in stale_temporaries(parent, [target.name]):
        kept = stale / "dir"
        ours = stale.is_dir() and [p.name for p in stale.iterdir()] == ["dir"]
        if stale.name.endswith(".old") and ours and kept.is_dir() and not target.exists():
            os.replace(kept, target)
            done.append(f"{target}: put back the directory an interrupted --force had moved away")
        remove(stale)
        done.append(f"removed {stale.name}, left by an interrupted prepare")
    return done


@contextlib.contextmanager
def atomic_directory(target: str | Path, *, force: bool = False) -> Iterator[Path]:
    """Build a directory under a temporary name and move it into place when done.

    Yields the temporary directory to write into. On success it replaces `target`; on any
    failure it is removed and `target` is left exactly as it was. The replacement of an
    existing directory is one atomic exchange where Linux allows it; elsewhere it is two
    renames, and a process killed between them leaves the old directory in
    `.NAME.*.old/dir`, which `recover_directory` (run by the next `prepare`) puts back.

    Args:
        target: The directory to create.
        force: Replace `target` if it exists and is not empty (otherwise that is an error,
            raised before anything is written).
    """
    target = Path(target)
    if (target.exists() or target.is_symlink()) and not target.is_dir():
        raise TransduceError(f"{target}: exists and is not a directory")
    if target.is_dir() and any(target.iterdir()) and not force:
        raise TransduceError(
            f"{target}: output directory exists and is not empty (use --force to replace it)"
        )
    parent = target.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.{_MARK}", suffix=".tmp", dir=parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes it private; the result should not be
    try:
        yield tmp
        fault_point(f"before-rename:{target.name}")
        if target.is_dir():
            if _exchange(tmp, target):  # target is the new one; tmp holds the old
                fault_point(f"after-exchange:{target.name}")
                shutil.rmtree(tmp, ignore_errors=True)
                return
            old = Path(
                tempfile.mkdtemp(prefix=f".{target.name}.{_MARK}", suffix=".old", dir=parent)
            )
            os.replace(target, old / "dir")
            try:
                fault_point(f"between-renames:{target.name}")
                os.replace(tmp, target)
            except BaseException:
                os.replace(old / "dir", target)  # put the old directory back
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
