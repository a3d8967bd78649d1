"""Reading prepared dataset directories (the output of `transduce prepare`)."""

from __future__ import annotations

import json
from pathlib import Path

from transduce.data.prepare import MANIFEST
from transduce.data.sides import Side
from transduce.io import sha256_bytes

COLUMNS = ("source", "target", "features")  # the columns of a prepared split, 1-based


def prepared_side(path: str | Path, data: bytes, column: int) -> Side | None:
    """The side of `column` when `path` is an unmodified split of a prepared directory.

    A file counts as prepared when a `manifest.json` beside it lists it with the same
    SHA-256 as `data` (its bytes). Returns None otherwise.
    """
    path = Path(path)
    manifest_path = path.parent / MANIFEST
    if str(path) == "-" or not manifest_path.is_file() or not 1 <= column <= len(COLUMNS):
        return None
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        entry = manifest["outputs"][path.name]
        spec = manifest["sides"][COLUMNS[column - 1]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if entry.get("sha256") != sha256_bytes(data) or not isinstance(spec, dict):
        return None
    return Side(spec)


def is_prepared_file(path: str | Path) -> bool:
    """Whether `path` is the manifest of a prepared directory or a file it lists."""
    path = Path(path)
    manifest_path = path.parent / MANIFEST
    if path.name == MANIFEST:
        return path.is_file()
    try:
        return path.name in json.loads(manifest_path.read_text(encoding="utf-8"))["outputs"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
