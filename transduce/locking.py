"""The directory lock: one process writes a run directory or a prepared dataset at a
time."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from transduce.errors import TransduceError
from transduce.io import named_error, umask


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
                fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT, 0o666 & ~umask())
            except OSError as error:
                raise named_error(error, self.lock_file) from None
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
