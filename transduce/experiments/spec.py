"""Experiment files: a grid of training runs (systems x datasets x seeds) and the numbers
to compare them with. Every cell is an ordinary run of `transduce train`.

    # how to run it: transduce experiment run this.yaml
    systems:                      # name: a recipe (shipped name, or a path relative to
      soft:                       # this file) and its --set overrides
        recipe: paper/wu2018/soft-small-inflection-medium
        set: {train.max_epochs: 30}
      hard: {recipe: paper/wu2018/hard-small-inflection-medium}
    datasets:                     # optional: name: --set overrides of the data section,
      # or a pattern: a cell per file it matches, named by the {field} (quoted in [...]:
      # YAML would read {...} there as a mapping)
      match: $DATA/sigmorphon2017-task1/all/{language}-train-medium
      set:
        data.train: ["$DATA/sigmorphon2017-task1/all/{language}-train-medium"]
        data.dev: ["$DATA/sigmorphon2017-task1/all/{language}-dev"]
      only: [english, german]     # optional: these names only
    seeds: [1, 2, 3]              # train.seed of each cell [1]
    set: {train.threads: 1}       # optional: for every cell (before the system's own)
    metrics: [acc, lev]           # optional: the report's columns [the test scores]
    published:                    # optional: the paper's numbers, system: dataset: metric
      soft: {english: {acc: 92.8}, average: {acc: 82.5}}   # (system: metric without datasets)
    score: {per: {average: word}} # optional: metrics the report scores again from each
                                  # run's test.predictions, with these options (`score`'s)

`load` checks it all before any run starts: each cell's configuration is loaded as
`transduce train` would load it (recipe, overrides, data files), and any problem is one
`ConfigError` naming the experiment file and the key at fault.
"""

from __future__ import annotations

import glob
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from transduce import config as configuration
from transduce import recipe_loader
from transduce.errors import ConfigError, TransduceError

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_+-]*$")  # system and dataset names: run dirs
KEYS = {"systems", "datasets", "seeds", "set", "metrics", "published", "score"}
FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
AVERAGE = "average"  # the report's row over the datasets: not a dataset's name
# the test split's monotonicity (train.json's test_monotonicity, overall) as report
# metrics: name -> its key there (ours, and the authors' as Rios et al. 2021 report it)
MONOTONICITY = {
    "mono": "mono",
    "loss_mono": "loss",
    "mono_authors": "mono_authors",
    "loss_authors": "loss_authors",
}


def _unknown_metric(name: str) -> str | None:
    """Why `name` is not a metric of a report (None: it is one): a metric's name, a part of
    one (tagacc_oov), or a monotonicity measure."""
    from transduce.metrics import METRICS

    if name in MONOTONICITY or name.split("_")[0] in METRICS:
        return None
    return f"valid: {', '.join(METRICS)}, {', '.join(MONOTONICITY)}"


@dataclass(frozen=True)
class Cell:
    """One run of the grid."""

    system: str
    dataset: str | None
    seed: int
    recipe: str  # a shipped name or a file path
    overrides: tuple[str, ...]  # --set KEY=VALUE, in order

    @property
    def id(self) -> str:
        """The cell's name, and its run directory's: SYSTEM[.DATASET].seedN."""
        middle = f".{self.dataset}" if self.dataset is not None else ""
        return f"{self.system}{middle}.seed{self.seed}"


@dataclass
class Experiment:
    """A loaded and checked experiment file."""

    path: Path
    cells: list[Cell]
    systems: list[str]
    datasets: list[str | None]
    seeds: list[int]
    metrics: list[str] | None = None
    published: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)  # the file's own mapping
    score: dict[str, dict[str, Any]] = field(default_factory=dict)  # metric: its options

    def published_value(self, system: str, dataset: str | None, metric: str) -> float | None:
        """The paper's number for a system (on a dataset, or `average`), if given."""
        numbers = self.published.get(system) or {}
        if dataset is not None:
            numbers = numbers.get(dataset) or {}
        value = numbers.get(metric)
        return float(value) if isinstance(value, int | float) else None


def _problem(path: Path, key: str, message: str) -> ConfigError:
    return ConfigError(f"{path}: {key}: {message}")


def _overrides(path: Path, key: str, value: Any) -> list[str]:
    """A `set:` mapping as `--set` overrides (values written as JSON, which YAML reads)."""
    if value is None:
        return []
    if not isinstance(value, dict):
        raise _problem(path, key, f"expected a mapping of KEY: VALUE, got {value!r}")
    return [f"{name}={json.dumps(item)}" for name, item in value.items()]


def _fill(value: Any, field_name: str, text: str) -> Any:
    """`value` with {field_name} replaced by `text` in every string."""
    if isinstance(value, str):
        return value.replace("{" + field_name + "}", text)
    if isinstance(value, list):
        return [_fill(v, field_name, text) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, field_name, text) for k, v in value.items()}
    return value


def _datasets(path: Path, value: Any, root: Path) -> dict[str | None, list[str]]:
    """Dataset name: its overrides (one nameless dataset when there are none)."""
    if value is None:
        return {None: []}
    if not isinstance(value, dict) or not value:
        raise _problem(path, "datasets", f"expected a mapping, got {value!r}")
    if "match" not in value:
        out: dict[str | None, list[str]] = {}
        for name, overrides in value.items():
            if not NAME.match(str(name)) or name == AVERAGE:
                raise _problem(path, f"datasets.{name}", "a name of letters, digits, _ + -")
            out[str(name)] = _overrides(path, f"datasets.{name}", overrides)
        return out
    unknown = set(value) - {"match", "set", "only"}
    if unknown:
        raise _problem(
            path, f"datasets.{sorted(unknown)[0]}", "unknown key (valid: match, set, only)"
        )
    pattern = value["match"]
    fields = FIELD.findall(pattern) if isinstance(pattern, str) else []
    if len(fields) != 1:
        raise _problem(
            path, "datasets.match", f"a path with one {{field}} naming the dataset, not {pattern!r}"
        )
    name = fields[0]
    if pattern.startswith(recipe_loader.DATA):  # as `train` places $DATA/: from here
        placed = pattern.replace(recipe_loader.DATA, os.path.abspath(root.expanduser()), 1)
    else:  # a path of its own: relative to the experiment file
        placed = str((path.parent / Path(pattern).expanduser()).absolute())
    regex = re.compile(
        "^" + re.escape(placed).replace(re.escape("{" + name + "}"), "(?P<field>.+)") + "$"
    )
    found = {}
    for match in sorted(glob.glob(placed.replace("{" + name + "}", "*"))):
        hit = regex.match(match)
        if hit:
            found[hit.group("field")] = match
    only = value.get("only")
    if only is not None:
        if not isinstance(only, list):
            raise _problem(path, "datasets.only", f"expected a list of names, got {only!r}")
        missing = [str(n) for n in only if str(n) not in found]
        if missing:
            raise _problem(path, "datasets.only", f"{missing[0]!r} matches no file of {pattern}")
        found = {n: found[n] for n in map(str, only)}
    if not found:
        raise _problem(
            path, "datasets.match", f"no file matches {pattern} (under {placed.rsplit('/', 1)[0]})"
        )
    out = {}
    for text in found:
        if not NAME.match(text) or text == AVERAGE:
            raise _problem(path, "datasets.match", f"{text!r} is not a usable dataset name")
        out[text] = _overrides(path, "datasets.set", _fill(value.get("set"), name, text))
    return out


def _check_published(path: Path, published: dict[str, Any], datasets: list[str]) -> None:
    """published: SYSTEM: DATASET (or average): METRIC: number, or SYSTEM: METRIC: number
    without datasets."""
    for system, numbers in published.items():
        groups = numbers if datasets else {None: numbers}
        if datasets and isinstance(groups, dict):
            groups = {str(k): v for k, v in groups.items()}
            published[system] = groups
        if not isinstance(groups, dict):
            raise _problem(path, f"published.{system}", f"expected a mapping, got {groups!r}")
        for dataset, values in groups.items():
            where = f"published.{system}" + (f".{dataset}" if dataset is not None else "")
            if dataset is not None and dataset not in (*datasets, AVERAGE):
                raise _problem(path, where, f"not a dataset of this experiment (or {AVERAGE})")
            if not isinstance(values, dict):
                raise _problem(path, where, f"expected METRIC: number, got {values!r}")
            for metric, value in values.items():
                if why := _unknown_metric(str(metric)):
                    raise _problem(path, f"{where}.{metric}", f"not a metric ({why})")
                if type(value) not in (int, float):
                    raise _problem(path, f"{where}.{metric}", f"expected a number, got {value!r}")


SHIPPED = Path(__file__).parent / "files"  # the experiments of the papers, by name


def shipped_experiments() -> list[str]:
    """The names of the experiment files shipped with transduce."""
    return sorted(p.stem for p in SHIPPED.glob("*.yaml"))


def summary(name: str, width: int = 110) -> str:
    """What the shipped experiment `name` is: its opening comment (up to the first
    command line), on one line, cut at a word to `width` characters."""
    words: list[str] = []
    for line in (SHIPPED / f"{name}.yaml").read_text(encoding="utf-8").splitlines():
        text = line.strip()
        if not text.startswith("#") or text.lstrip("# ").startswith("transduce "):
            break
        words += text.lstrip("#").split()
    joined = " ".join(words)
    if len(joined) <= width:
        return joined
    return joined[: width - 1].rsplit(" ", 1)[0] + " …"


def experiment_path(name_or_path: str | Path) -> Path:
    """An experiment file: a path, or the name of a shipped one."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    shipped = SHIPPED / f"{str(name_or_path).removesuffix('.yaml')}.yaml"
    if shipped.is_file():
        return shipped
    raise ConfigError(
        f"{name_or_path}: no such experiment file, and not a shipped experiment "
        f"(shipped: {', '.join(shipped_experiments())})"
    )


def load(path: str | Path, data_root: str | Path | None = None) -> Experiment:
    """Read and check an experiment file: every cell's configuration is loaded (and its
    data files found) before anything runs.

    Raises:
        ConfigError: the first problem, naming the file and the key.
    """
    path = experiment_path(path)
    try:
        data = recipe_loader.load_yaml_text(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the experiment file ({error.strerror})") from None
    except yaml.YAMLError as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else "not YAML"
        mark = getattr(error, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        hint = ""
        if "flow" in first:  # [$DATA/{lang}-dev]: YAML reads {lang} as a mapping
            hint = '; quote a value with a {field} inside [...] or {...}: ["$DATA/{lang}-dev"]'
        raise ConfigError(f"{path}{where}: not a YAML experiment file ({first}){hint}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with systems:, got {data!r}")
    for key in data:
        if key not in KEYS:
            raise _problem(path, str(key), f"unknown key (valid: {', '.join(sorted(KEYS))})")
    systems = data.get("systems")
    if not isinstance(systems, dict) or not systems:
        raise _problem(path, "systems", "expected a mapping of NAME: {recipe: ..., set: ...}")
    seeds = data.get("seeds", [1])
    if not isinstance(seeds, list) or not seeds or not all(type(s) is int for s in seeds):
        raise _problem(path, "seeds", f"expected a list of integers, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise _problem(path, "seeds", f"a seed is listed twice: {seeds}")
    metrics = data.get("metrics")
    if metrics is not None:
        if not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics):
            raise _problem(path, "metrics", f"expected a list of metric names, got {metrics!r}")
        for name in metrics:
            if why := _unknown_metric(name):
                raise _problem(path, "metrics", f"unknown metric {name!r} ({why})")
    published = data.get("published") or {}
    if not isinstance(published, dict):
        raise _problem(path, "published", f"expected a mapping, got {published!r}")
    for name in published:
        if name not in systems:
            raise _problem(path, f"published.{name}", "not a system of this experiment")
    root, _ = recipe_loader.data_root(data_root)
    common = _overrides(path, "set", data.get("set"))
    datasets = _datasets(path, data.get("datasets"), root)
    _check_published(path, published, [d for d in datasets if d is not None])
    cells = []
    for name, system in systems.items():
        where = f"systems.{name}"
        if not NAME.match(str(name)):
            raise _problem(path, where, "a name of letters, digits, _ + -")
        if not isinstance(system, dict) or "recipe" not in system:
            raise _problem(path, where, "expected {recipe: NAME_OR_PATH, set: {...}}")
        unknown = set(system) - {"recipe", "set"}
        if unknown:
            raise _problem(
                path, f"{where}.{sorted(unknown)[0]}", "unknown key (valid: recipe, set)"
            )
        recipe = str(system["recipe"])
        beside = path.parent / recipe
        if not Path(recipe).is_absolute() and beside.is_file():
            recipe = str(beside)  # a path relative to the experiment file
        try:
            recipe_loader.recipe_path(recipe)
        except ConfigError as error:
            raise _problem(path, f"{where}.recipe", str(error)) from None
        own = _overrides(path, f"{where}.set", system.get("set"))
        for dataset, data_overrides in datasets.items():
            overrides = [*common, *own, *data_overrides]
            try:
                configuration.load(recipe, overrides, data_root)
            except TransduceError as error:
                cell = where + (f", dataset {dataset}" if dataset is not None else "")
                raise ConfigError(f"{path}: {cell}: {error}") from None
            for seed in seeds:
                cells.append(
                    Cell(str(name), dataset, seed, recipe, (*overrides, f"train.seed={seed}"))
                )
    return Experiment(
        path,
        cells,
        [str(n) for n in systems],
        list(datasets),
        list(seeds),
        metrics,
        published,
        data,
        _check_score(path, data.get("score"), metrics),
    )


def _check_score(path: Path, value: Any, metrics: list[str] | None) -> dict[str, dict[str, Any]]:
    """score: METRIC: {OPTION: VALUE}, checked as `transduce score` checks its options; a
    metric the report shows (in `metrics`, when the file lists them)."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise _problem(path, "score", f"expected METRIC: {{OPTION: VALUE}}, got {value!r}")
    from transduce.scoring import ScoreRequest, make_metrics

    for name, options in value.items():
        if metrics is not None and name not in metrics:
            raise _problem(path, f"score.{name}", f"not one of the report's metrics {metrics}")
        try:
            make_metrics(ScoreRequest("", [], [str(name)], metric_options={name: options}))
        except TransduceError as error:
            raise _problem(path, f"score.{name}", str(error)) from None
    return {str(k): dict(v) for k, v in value.items()}
