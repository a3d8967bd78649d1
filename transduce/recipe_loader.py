"""Recipe files: found by path or by name, composed with `base:`, data under a data root.

What happens to a recipe before `transduce.config` types and checks it:

- **Names.** `--config` takes a file (an existing file wins) or the name of a recipe
  shipped in the package: its path under `transduce/recipes/`, with or without `.yaml`
  (`g2p`, `paper/rios2021/transformer-g2p-cmudict`). `transduce recipes` lists them with
  the first line of each, a comment saying what the recipe is for.
- **Bases.** `base: OTHER` at the top of a recipe names the recipe it varies: a path
  relative to the directory of the recipe that names it, else a shipped name. The
  variant's mappings are merged over the base's key by key; any other value (a list, a
  number, a string, null) replaces the base's. A base may have a base; a cycle is an
  error. There is no way to delete a key: null is a value (`max_epochs: null`).
- **Data root.** A path in `data.prepared`, `data.train`, `data.dev` or `data.test` that
  starts with `$DATA/` lies under the data root: `--data-root DIR`, else the environment
  variable `TRANSDUCE_DATA`, else `../shared/data` relative to the working directory. The
  paths become absolute, so the run directory's `config.yaml` needs no data root to
  resume, and a missing file is reported before any data is read.
"""

from __future__ import annotations

import difflib
import os
import re
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from transduce import defaults
from transduce.errors import ConfigError, DataError, plural
from transduce.lines import resolved

if TYPE_CHECKING:  # importlib.resources.abc is Python 3.11+
    from importlib.resources.abc import Traversable

SUFFIX = ".yaml"
BASE = "base"
# `$DATA` rather than `{data}`: in YAML `{` opens a mapping, so `train: [{data}/x]` would
# not parse unless every path were quoted.
DATA = "$DATA"
DATA_FIELDS = ("prepared", "train", "dev", "test")


def _shipped_folder() -> Traversable:
    return resources.files("transduce") / "recipes"


# ----------------------------------------------------------------------------- names


def shipped_recipes() -> list[str]:
    """Names of the recipes shipped in the package (`--config NAME`), sorted."""
    names: list[str] = []

    def walk(folder: Traversable, prefix: str) -> None:
        for entry in folder.iterdir():
            if entry.is_dir():
                walk(entry, f"{prefix}{entry.name}/")
            elif entry.name.endswith(SUFFIX):
                names.append(prefix + entry.name.removesuffix(SUFFIX))

    walk(_shipped_folder(), "")
    return sorted(names)


def shipped_recipe(name: str) -> Path | None:
    """The file of the shipped recipe `name` (with or without `.yaml`), or None."""
    parts = name.removesuffix(SUFFIX).split("/")
    if not all(parts) or any(part in (".", "..") for part in parts):
        return None  # a name never leaves the package's recipes folder
    entry = _shipped_folder()
    for part in parts[:-1]:
        entry = entry / part
    entry = entry / (parts[-1] + SUFFIX)
    return Path(str(entry)) if entry.is_file() else None


def recipe_path(name_or_path: str) -> Path:
    """A recipe file: a path, or the name of a recipe shipped in the package."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    shipped = shipped_recipe(name_or_path)
    if shipped is not None:
        return shipped
    names = shipped_recipes()
    close = difflib.get_close_matches(name_or_path.removesuffix(SUFFIX), names, n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    raise ConfigError(
        f"{name_or_path}: no such recipe file, and not a shipped recipe "
        f"({hint}`transduce recipes` lists the {len(names)} shipped ones)"
    )


def purpose(name: str) -> str:
    """What the shipped recipe `name` is for: its first line, a comment."""
    path = shipped_recipe(name)
    if path is None:
        raise ConfigError(f"{name}: not a shipped recipe")
    with path.open(encoding="utf-8") as lines:
        first = lines.readline().strip()
    return first.lstrip("#").strip() if first.startswith("#") else ""


# ----------------------------------------------------------------------------- bases


class _Loader(yaml.SafeLoader):
    """YAML as PyYAML reads it, except that `1e-3` is a number (YAML 1.2; YAML 1.1, and so
    PyYAML, reads a float without a dot, `1e-3`, as a string)."""


class _Dumper(yaml.SafeDumper):
    """Writes what `_Loader` reads back the same: a string such as "1e5" is quoted."""


for _kind in (_Loader, _Dumper):
    _kind.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
        list("-+0123456789"),
    )


def dump_yaml(data: Any) -> str:
    """YAML text of `data` (key order kept) that `load_yaml_text` reads back equal."""
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True)


def load_yaml_text(text: str) -> Any:
    """Parse YAML text (a recipe, a --set value) with `_Loader`."""
    return yaml.load(text, Loader=_Loader)


def read_yaml(path: Path) -> dict[str, Any]:
    """The mapping in a YAML file; a `ConfigError` naming the file (and line) if it has none."""
    try:
        data = load_yaml_text(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {error.object[error.start : error.start + 1]!r} "
            f"at offset {error.start})"
        ) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: not valid YAML: {getattr(error, 'problem', error)}") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a recipe is a mapping of sections (data, model, ...)")
    return data


def merge(base: dict[str, Any], variant: dict[str, Any]) -> dict[str, Any]:
    """`variant` over `base`: mappings merge key by key, any other value replaces.

    Neither argument is changed; the result shares unmerged values with them.
    """
    merged = dict(base)
    for key, value in variant.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def compose(path: Path) -> tuple[dict[str, Any], list[Path]]:
    """The recipe in `path` with its bases merged in.

    Returns:
        The merged mapping (without `base`), and the files it came from, `path` first.
    """
    chain: list[Path] = []
    layers: list[dict[str, Any]] = []
    current = path
    while True:
        if any(resolved(current) == resolved(seen) for seen in chain):
            cycle = " -> ".join(str(p) for p in [*chain, current])
            raise ConfigError(f"{path}: base: the recipes name each other in a cycle: {cycle}")
        chain.append(current)
        layer = read_yaml(current)
        layers.append(layer)
        if BASE not in layer:
            break
        current = _base_file(layer.pop(BASE), current, chain)
    data: dict[str, Any] = {}
    for layer in reversed(layers):
        data = merge(_without_other_family(data, layer), layer)
    return data, chain


# models whose options extend another's: a `hard` model is an `lstm` with hard attention
# (its config class extends the LSTM's) and these options of its own; tests/test_config.py
# checks both against the config classes
EXTENDS = {"hard": ("lstm", ("estimator", "monotonic", "samples", "baseline_decay"))}


def family(model_name: Any) -> Any:
    """The family of a model name: the model whose options it has (itself, or the one it
    extends)."""
    return (
        EXTENDS[model_name][0]
        if isinstance(model_name, str) and model_name in EXTENDS
        else model_name
    )


def _without_other_family(base: dict[str, Any], variant: dict[str, Any]) -> dict[str, Any]:
    """`base` without its `model` section when `variant` names another model family: the
    options of one family mean nothing to another, so the variant's `model` stands alone.
    Within a family the sections merge as any mapping, except that a variant naming the
    base model of an extended one (`lstm` over `hard`) drops the extension's own options."""
    model, theirs = base.get("model"), variant.get("model")
    if not isinstance(model, dict) or not isinstance(theirs, dict) or "name" not in theirs:
        return base
    ours = model.get("name")
    if family(theirs["name"]) != family(ours):
        return {k: v for k, v in base.items() if k != "model"}
    if theirs["name"] != ours and ours in EXTENDS:  # lstm over hard: hard's own options go
        own = EXTENDS[ours][1]
        return {**base, "model": {k: v for k, v in model.items() if k not in own}}
    return base


def _base_file(base: Any, naming: Path, chain: list[Path]) -> Path:
    """The file of `base`, named in the recipe `naming`: a file beside it, else a shipped
    recipe. A file already in the `chain` is passed over for the shipped recipe of that
    name, so a local `g2p.yaml` can say `base: g2p` to build on the shipped one."""
    if not isinstance(base, str) or not base.strip():
        raise ConfigError(f"{naming}: base: expected a recipe path or name, got {base!r}")
    relative = naming.parent / base
    seen = {resolved(p) for p in chain}
    candidates = (relative, relative.with_name(relative.name + SUFFIX))
    for candidate in candidates:
        if candidate.is_file():
            if resolved(candidate) not in seen or shipped_recipe(base) is None:
                return candidate
            break
    shipped = shipped_recipe(base)
    if shipped is not None:
        return shipped
    raise ConfigError(
        f"{naming}: base: no recipe {base!r} (no file {relative}, and not a shipped recipe)"
    )


def describe(chain: list[Path]) -> str:
    """The name of a composed recipe in messages: `variant.yaml (base: a.yaml, b.yaml)`."""
    if len(chain) == 1:
        return str(chain[0])
    return f"{chain[0]} (base: {', '.join(p.name for p in chain[1:])})"


# ------------------------------------------------------------------------- data root


def data_root(option: str | Path | None = None) -> tuple[Path, str]:
    """The data root and where it comes from (for messages).

    Args:
        option: `--data-root DIR`; None (or empty): the environment, then the default.
    """
    if option is not None and str(option):
        return Path(option), "--data-root"
    env = os.environ.get(defaults.DATA_ROOT_ENV)
    if env:
        return Path(env), defaults.DATA_ROOT_ENV
    return Path(defaults.DATA_ROOT), "the default"


def place_data(data: dict[str, Any], root: Path) -> list[Path]:
    """Put the `$DATA/` paths of the data section under `root`, in place.

    Returns:
        The paths placed, absolute (they are also what the data section now holds).
    """
    section = data.get("data")
    if not isinstance(section, dict):
        return []  # not a mapping: config.parse reports it
    # absolute and free of `..`: a run's config.yaml stays right from any directory
    absolute = Path(os.path.abspath(root.expanduser()))
    placed: list[Path] = []

    def place(value: Any) -> Any:
        if isinstance(value, str) and (value == DATA or value.startswith(DATA + "/")):
            path = absolute / value.removeprefix(DATA).lstrip("/")
            placed.append(path)
            return str(path)
        return value

    for key in DATA_FIELDS:
        if key in section:
            value = section[key]
            section[key] = [place(v) for v in value] if isinstance(value, list) else place(value)
    return placed


def check_data(placed: list[Path], root: Path, origin: str) -> None:
    """Raise a `DataError` naming the first of `placed` that does not exist."""
    missing = [path for path in placed if not path.exists()]
    if not missing:
        return
    more = f", and {plural(len(missing) - 1, 'other')}" if len(missing) > 1 else ""
    absent = "" if root.expanduser().is_dir() else ", which does not exist"
    raise DataError(
        f"no such data file{more} under the data root {root} ({origin}{absent}): give "
        f"--data-root DIR or set {defaults.DATA_ROOT_ENV} to the folder that holds the datasets",
        path=missing[0],
    )
