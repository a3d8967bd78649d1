"""Writing files and directories atomically (temporary, fsync, rename; the stale
temporaries a killed write leaves), their hashes, and the processes the toolkit starts
(`child_environment`, `stop_with_parent`). Reading lines: `transduce.lines`; the directory
lock: `transduce.locking`; the fault-injection points: `transduce.faults`.
"""

from __future__ import annotations

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
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from transduce.errors import EXIT_INTERRUPTED, TransduceError, chained_os_error
from transduce.faults import fault_point


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
            raise named_error(error, path) from None
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


def save_figure(figure: Any, path: Path, fmt: str, dpi: int) -> None:
    """Write a matplotlib figure atomically, the same plot as the same bytes: no creation
    date in PDF and SVG files, a fixed SVG id salt."""
    import matplotlib

    metadata = {"CreationDate": None} if fmt == "pdf" else {"Date": None} if fmt == "svg" else {}
    with atomic_binary(path) as handle, matplotlib.rc_context({"svg.hashsalt": "transduce"}):
        figure.savefig(handle, format=fmt, dpi=dpi, metadata=metadata)  # a matplotlib Figure


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
        raise named_error(error, path) from None
    try:
        os.chmod(tmp, 0o666 & ~umask())
        try:
            with os.fdopen(fd, "wb") as handle:
                yield handle
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as error:
            raise named_error(error, path) from None
        except RuntimeError as error:  # torch's zip writer: a full disk is its cause
            cause = chained_os_error(error)
            if cause is None:
                raise
            raise named_error(cause, path) from None
        fault_point(f"before-rename:{path.name}")
        os.replace(tmp, path)
        _sync_directory(path.parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def named_error(error: OSError, path: Path) -> OSError:
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
        raise named_error(error, path) from None


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


def clean(paths: list[Path]) -> list[str]:
    """Remove stale temporaries (`stale_temporaries`); what was removed, as messages."""
    for path in paths:
        remove(path)
    return [f"removed {path.name}, left by an interrupted write" for path in paths]


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


def umask() -> int:
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
    os.chmod(tmp, 0o777 & ~umask())  # mkdtemp makes it private; the result should not be
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
