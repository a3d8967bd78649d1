"""Registries are plain dicts; `lookup` is their one lookup, whose error lists the names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from transduce.errors import ConfigError

T = TypeVar("T")


def lookup(registry: Mapping[str, T], name: str, what: str) -> T:
    """`registry[name]`, or a `ConfigError` like "unknown metric 'f1' (valid: acc, wer)"."""
    try:
        return registry[name]
    except KeyError:
        raise ConfigError(f"unknown {what} {name!r} (valid: {', '.join(registry)})") from None
