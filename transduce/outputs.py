"""The one rule for every file a command writes on request (`--report`, `--per-item`):
never over an input of the command, a checkpoint, a file of a run directory, or a file of
a prepared dataset."""

from __future__ import annotations

import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from transduce.data.prepared import is_prepared_file
from transduce.errors import ConfigError
from transduce.io import STDIN, resolved

# What `train` writes in a run directory (a folder with a last.pt or best.pt).
RUN_FILES = ("last.pt", "best.pt", "config.yaml", "train.json", "test.predictions")


def _is_checkpoint(path: Path) -> bool:
    """A torch checkpoint (a zip archive with a data.pkl), whatever its name."""
    try:
        with zipfile.ZipFile(path) as archive:
            return any(name.endswith("data.pkl") for name in archive.namelist())
    except (OSError, zipfile.BadZipFile, ValueError):
        return False


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
        in_run = any((absolute.parent / name).is_file() for name in RUN_FILES[:2])
        if (in_run and path.name in RUN_FILES) or (path.is_file() and _is_checkpoint(path)):
            raise ConfigError(
                f"{path}: is a checkpoint or a file of a run directory; write the report elsewhere"
            )
