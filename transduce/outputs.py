"""The one rule for every file the toolkit writes.

- A run directory (`train --out`) is written only if `train` creates it, or it is empty,
  or it is one of ours: it holds our marker (`RUN_MARKER`, written as the run starts) or,
  from a transduce before the marker, a `last.pt`.
- A file written on request (`--report`, `--per-item`, `--json`, `--csv`, `--markdown`)
  is never an input of the command, a checkpoint, a file of a prepared dataset, or a file
  of a run or experiment directory (all of them: checkpoints, logs, tables, their folders).
"""

from __future__ import annotations

import contextlib
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from transduce import runs
from transduce.data.prepared import is_prepared_file
from transduce.errors import ConfigError
from transduce.io import atomic_write_text, is_temporary, remove
from transduce.lines import STDIN, resolved

# What `train` writes in a run directory (a folder with a last.pt or best.pt), its marker,
# its lock, and every name it writes there (`transduce.runs` names them)
RUN_FILES, RUN_MARKER, LOCK, RUN_OWNED = runs.FILES, runs.MARKER, runs.LOCK, runs.OWNED
EXPERIMENT_STATE = "cells.json"
EXPERIMENT_OWNED = (EXPERIMENT_STATE, "runs", "logs", "ensembles", "export.json")


def _is_checkpoint(path: Path) -> bool:
    """A torch checkpoint (a zip archive with a data.pkl), whatever its name."""
    try:
        with zipfile.ZipFile(path) as archive:
            return any(name.endswith("data.pkl") for name in archive.namelist())
    except (OSError, zipfile.BadZipFile, ValueError):
        return False


def is_run_dir(path: Path) -> bool:
    """Whether `path` is a run directory (ours, or of a transduce before the marker)."""
    try:
        return any((path / name).is_file() for name in (RUN_MARKER, *RUN_FILES[:2]))
    except OSError:
        return False


def is_experiment_dir(path: Path) -> bool:
    """Whether `path` is an experiment directory (`experiment run` wrote its cells.json)."""
    try:
        return (path / EXPERIMENT_STATE).is_file()
    except OSError:
        return False


def _owner(absolute: Path) -> str | None:
    """What run or experiment directory `absolute` is a file of, said for a message."""
    for depth, folder in enumerate(absolute.parents):
        first = absolute.relative_to(folder).parts[0]
        if is_run_dir(folder) and first in RUN_OWNED:
            return "a file of a run directory"
        if is_experiment_dir(folder) and first in EXPERIMENT_OWNED:
            return "a file of an experiment directory"
        if depth >= 8:  # EXP/runs/CELL/checkpoints/FILE is 4 deep: no need to go to /
            break
    return None


def check_run_dir(run_dir: Path, resume: bool) -> None:
    """Raise a `ConfigError` unless `train` may write in `run_dir`: it does not exist, is
    empty, or is a run directory (with --resume: one with a last.pt, checked elsewhere)."""
    if run_dir.is_symlink() and not run_dir.exists():
        raise ConfigError(f"{run_dir}: is a broken symbolic link; choose another --out")
    if not run_dir.exists():
        return
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: exists and is not a directory; choose another --out")
    if resume or is_run_dir(run_dir):
        return
    try:
        others = sorted(
            p.name for p in run_dir.iterdir() if p.name != LOCK and not is_temporary(p.name)
        )
    except OSError as error:
        raise ConfigError(f"{run_dir}: cannot be read ({error.strerror})") from None
    if others:
        raise ConfigError(
            f"{run_dir}: is not empty and not a transduce run directory (it holds "
            f"{others[0]!r}); train writes only in a new or empty --out"
        )


@contextlib.contextmanager
def claimed_run_dir(run_dir: Path, resume: bool) -> Iterator[None]:
    """Hold `run_dir` for a run (`train`): checked (`check_run_dir`), created if need be,
    locked for the life of the block, marked as a run directory when a run starts there.
    A run that fails before it wrote anything else leaves the folder as it found it: no
    marker, no lock, and no folder if it made it."""
    from transduce.locking import DirectoryLock

    check_run_dir(run_dir, resume)  # before the lock: a user's folder stays as it is
    files = runs.RunDir(run_dir)
    fresh = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = DirectoryLock(files.lock, run_dir).acquire()
    marked = False
    try:
        check_run_dir(run_dir, resume)  # again, under the lock
        if not resume and not files.marker.exists():
            atomic_write_text(files.marker, runs.MARKER_TEXT)
            marked = True
        yield
    except BaseException:
        if not any(p.name not in (runs.LOCK, runs.MARKER) for p in run_dir.iterdir()):
            if marked:
                remove(files.marker)
            lock.release()
            if fresh:
                with contextlib.suppress(OSError):
                    run_dir.rmdir()
        raise
    finally:
        lock.release()


def check_outputs(
    outputs: Sequence[str | Path | None], inputs: Iterable[str | Path | None]
) -> None:
    """Raise a `ConfigError` for an output path that would overwrite something to keep.

    Args:
        outputs: The paths the command will write (None: not asked for; "-": stdout).
        inputs: The files and directories the command reads.
    """
    read = {resolved(p) for p in inputs if p is not None and str(p) != STDIN}
    for output in outputs:
        if output is None or str(output) == STDIN:
            continue
        path = Path(output)
        absolute = resolved(path)
        if absolute in read:
            raise ConfigError(f"{path}: is an input of this command; write the report elsewhere")
        if path.is_dir():
            raise ConfigError(f"{path}: is a directory; give a file name")
        if is_prepared_file(path):
            raise ConfigError(f"{path}: is part of a prepared dataset; write the report elsewhere")
        if path.is_file() and _is_checkpoint(path):
            raise ConfigError(f"{path}: is a checkpoint; write the report elsewhere")
        owner = _owner(absolute)
        if owner is not None:
            raise ConfigError(f"{path}: is {owner}; write the report elsewhere")
