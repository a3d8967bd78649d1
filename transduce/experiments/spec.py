"""Experiment files: a grid of training runs (systems x datasets x seeds) and the numbers
to compare them with. Every cell is an ordinary run of `transduce train`.

    # how to run it: transduce experiment run this.yaml
    systems:                      # name: a recipe (shipped name, or a path relative to
      soft:                       # this file) and its --set overrides
        recipe: paper/wu2018/soft-small-inflection-medium
        set: {train.max_epochs: 30}
      hard: {recipe: paper/wu2018/hard-small-inflection-medium}
      tuned:                      # a random search: trials tuned-t1 ... tuned-t8, each
        recipe: paper/wu2018/soft-small-inflection-medium   # a system of its own whose
        search:                   # overrides are its sampled values (after `set:`), drawn
          trials: 8               # from random.Random(seed) in the space's order: the
          seed: 1                 # same seed, the same trials; the report ranks them by
          space:                  # their best dev score (train.json's `best`)
            train.optimizer.lr: {loguniform: [0.0001, 0.01]}
            model.dropout: {uniform: [0.0, 0.5]}
            model.encoder_size: {int: [100, 400]}     # both ends included
            train.batch_size: {choice: [20, 50]}
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
    published:                    # optional: the paper's numbers, system (a trial's name
                                  # for a search): dataset: metric
      soft: {english: {acc: 92.8}, average: {acc: 82.5}}   # (system: metric without datasets)
    references:                   # optional: published numbers of systems not run here,
      official-baseline:          # NAME: DATASET: METRIC: number (no datasets: NAME:
        english: {acc: 90.9}      # METRIC: number); a column each beside our means, their
        german: {acc: 75.4}       # average over this experiment's datasets (when a
      cluzh-7: {english: {acc: 96.1}}  # reference has every one), and a count of the
                                  # datasets where each system beats each reference; a
                                  # dataset that `only` leaves out may be given (not shown)
    baseline: soft                # optional: the system the report compares every other
                                  # system with, per dataset and on the average: the
                                  # difference of the means and the two-sided p-value of
                                  # Welch's t-test over the seeds (a search's trial by
                                  # its name, tuned-t3)
    score: {per: {average: word}} # optional: metrics the report scores again from each
                                  # run's test.predictions, with these options (`score`'s);
                                  # `variants: each` scores every test line against its
                                  # own reference (a word's pronunciations not merged:
                                  # Rios et al.'s eval.py), `merge` as `score` [merge]
    ensemble:                     # optional: once every seed of a (system, dataset) has
      systems: [soft]             # finished, decode its test split with the seeds' best
      mean: probability           # checkpoints as one ensemble (`transduce decode A B C`);
                                  # systems: a list (a search's name: its trials) or `all`;
                                  # mean: probability [default] or
                                  # log-probability (`--ensemble-mean`)

`load` checks it all before any run starts: each cell's configuration is loaded as
`transduce train` would load it (recipe, overrides, data files), and any problem is one
`ConfigError` naming the experiment file and the key at fault.
"""

from __future__ import annotations

import glob
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from transduce import config as configuration
from transduce import recipe_loader
from transduce.errors import ConfigError, TransduceError, plural

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_+-]*$")  # system and dataset names: run dirs
KEYS = {
    *("systems", "datasets", "seeds", "set", "metrics", "published", "score", "ensemble"),
    *("references", "baseline"),
}
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
    device: str = "auto"  # its train.device: the local executor gives a GPU to auto and cuda

    @property
    def id(self) -> str:
        """The cell's name, and its run directory's: SYSTEM[.DATASET].seedN."""
        middle = f".{self.dataset}" if self.dataset is not None else ""
        return f"{self.system}{middle}.seed{self.seed}"


@dataclass(frozen=True)
class EnsembleSpec:
    """`ensemble:`: the systems whose seeds are decoded as one model, per dataset."""

    systems: tuple[str, ...]
    mean: str = "probability"  # transduce.ensemble.MEANS
    # also each ensemble with `decode --tie-break-rules` (inflection): rows of their own
    tie_break_rules: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "systems": list(self.systems),
            "mean": self.mean,
            "tie_break_rules": self.tie_break_rules,
        }


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
    ensemble: EnsembleSpec | None = None
    # published numbers of systems not run: NAME: DATASET: METRIC: number (no datasets:
    # NAME: METRIC: number); only the experiment's datasets
    references: dict[str, Any] = field(default_factory=dict)
    # a system's random search: NAME: {"seed": S, "trials": {NAME-tK: {KEY: value}}}
    search: dict[str, Any] = field(default_factory=dict)
    # what the machine must offer, (train.device, train.precision, train.log): the first
    # system and dataset that asks for it (`check_machine`)
    machine: dict[tuple[str, str, tuple[str, ...]], str] = field(default_factory=dict)
    # the system every other one is compared with (`report`: Welch's t over the seeds)
    baseline: str | None = None
    # how `score:` reads a test split that repeats a source: "merge" (one item, as `score`
    # does) or "each" (every line against its own reference)
    variants: str = "merge"

    def published_value(self, system: str, dataset: str | None, metric: str) -> float | None:
        """The paper's number for a system (on a dataset, or `average`), if given."""
        numbers = self.published.get(system) or {}
        if dataset is not None:
            numbers = numbers.get(dataset) or {}
        value = numbers.get(metric)
        return float(value) if isinstance(value, int | float) else None

    def reference_value(self, name: str, dataset: str | None, metric: str) -> float | None:
        """A reference's number on a dataset; on `average`, its mean over the experiment's
        datasets when it has a number for every one (else None)."""
        numbers = self.references.get(name) or {}
        if dataset is None:
            value = numbers.get(metric)
            return float(value) if isinstance(value, int | float) else None
        if dataset == AVERAGE:
            values = [self.reference_value(name, d, metric) for d in self.datasets]
            known = [v for v in values if v is not None]
            if not values or len(known) < len(values):
                return None
            return sum(known) / len(known)
        value = (numbers.get(dataset) or {}).get(metric)
        return float(value) if isinstance(value, int | float) else None


def _problem(path: Path, key: str, message: str) -> ConfigError:
    return ConfigError(f"{path}: {key}: {message}")


class Problems:
    """The problems of an experiment file found so far: the checks that do not depend on
    each other all run, and `raise_any` reports every problem at once, as a recipe's
    (`config.parse`) are ("FILE: 2 problems: seeds: ...; metrics: ...")."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.found: list[str] = []

    def add(self, error: ConfigError) -> None:
        self.found.append(str(error).removeprefix(f"{self.path}: "))

    def check(self, function: Callable[..., Any], *args: Any) -> Any:
        """`function(*args)`, or None with its `ConfigError` kept."""
        try:
            return function(*args)
        except ConfigError as error:
            self.add(error)
            return None

    def raise_any(self) -> None:
        if len(self.found) == 1:
            raise ConfigError(f"{self.path}: {self.found[0]}")
        if self.found:
            raise ConfigError(
                f"{self.path}: {plural(len(self.found), 'problem')}: " + "; ".join(self.found)
            )


def _check_seeds(path: Path, seeds: Any) -> list[int]:
    if not isinstance(seeds, list) or not seeds or not all(type(s) is int for s in seeds):
        raise _problem(path, "seeds", f"expected a list of integers, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise _problem(path, "seeds", f"a seed is listed twice: {seeds}")
    return seeds


def _check_metrics(path: Path, metrics: Any) -> list[str] | None:
    if metrics is None:
        return None
    if not isinstance(metrics, list) or not all(isinstance(m, str) for m in metrics):
        raise _problem(path, "metrics", f"expected a list of metric names, got {metrics!r}")
    for name in metrics:
        if why := _unknown_metric(name):
            raise _problem(path, "metrics", f"unknown metric {name!r} ({why})")
    return metrics


MAX_VALUES = 200_000  # values in an experiment file, its YAML aliases expanded


def _check_expansion(path: Path, data: Any) -> None:
    """Refuse an experiment file whose YAML aliases refer to themselves, or expand to more
    than `MAX_VALUES` values (nested aliases multiply: a 1 KB file can stand for
    gigabytes), before anything walks or copies it."""
    count = 0
    stack: list[tuple[Any, str, frozenset[int]]] = [(data, "", frozenset())]
    while stack:
        value, key, above = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise _problem(
                path,
                key or "(top)",
                f"the file's YAML aliases expand to more than {MAX_VALUES:,} values",
            )
        if not isinstance(value, dict | list):
            continue
        if id(value) in above:
            raise _problem(path, key, "a YAML alias refers to a value that holds it (a cycle)")
        inner = above | {id(value)}
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for name, item in items:
            stack.append((item, f"{key}.{name}" if key else str(name), inner))


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


def _datasets(
    path: Path, value: Any, root: Path, matched: set[str] | None = None
) -> dict[str | None, list[str]]:
    """Dataset name: its overrides (one nameless dataset when there are none); `matched`
    gets every name a pattern matches, those that `only` leaves out too."""
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
        if matched is not None:
            matched.update(found)
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


def _check_numbers(path: Path, where: str, values: Any) -> None:
    """METRIC: number, for a published or reference dataset (`where` names it)."""
    if not isinstance(values, dict):
        raise _problem(path, where, f"expected METRIC: number, got {values!r}")
    for metric, value in values.items():
        if why := _unknown_metric(str(metric)):
            raise _problem(path, f"{where}.{metric}", f"not a metric ({why})")
        if type(value) not in (int, float):
            raise _problem(path, f"{where}.{metric}", f"expected a number, got {value!r}")


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
            _check_numbers(path, where, values)


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
        ConfigError: naming the file and the key: every problem of its top-level keys
            (systems, seeds, metrics, published, ensemble, baseline, set) at once, else
            the first of its datasets, references and cells.
    """
    path = experiment_path(path)
    try:
        data = recipe_loader.load_yaml_text(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the experiment file ({error.strerror})") from None
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {error.object[error.start : error.start + 1]!r} "
            f"at offset {error.start})"
        ) from None
    except yaml.YAMLError as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else "not YAML"
        mark = getattr(error, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        hint = ""
        if "flow" in first:  # [$DATA/{lang}-dev]: YAML reads {lang} as a mapping
            hint = '; quote a value with a {field} inside [...] or {...}: ["$DATA/{lang}-dev"]'
        raise ConfigError(f"{path}{where}: not a YAML experiment file ({first}){hint}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with systems:, got {data!r:.80}")
    _check_expansion(path, data)
    problems = Problems(path)
    for key in data:
        if key not in KEYS:
            problems.add(
                _problem(path, str(key), f"unknown key (valid: {', '.join(sorted(KEYS))})")
            )
    seeds = problems.check(_check_seeds, path, data.get("seeds", [1])) or [1]
    metrics = problems.check(_check_metrics, path, data.get("metrics"))
    published = data.get("published") or {}
    if not isinstance(published, dict):
        problems.add(_problem(path, "published", f"expected a mapping, got {published!r}"))
        published = {}
    systems = data.get("systems")
    if not isinstance(systems, dict) or not systems:
        problems.add(
            _problem(path, "systems", "expected a mapping of NAME: {recipe: ..., set: ...}")
        )
        problems.raise_any()
    found = problems.check(_systems, path, systems)
    if found is None:
        problems.raise_any()
    entries, search = found
    names = [entry[0] for entry in entries]
    for name in published:
        if name not in names:
            problems.add(_problem(path, f"published.{name}", "not a system of this experiment"))
    ensemble = problems.check(_check_ensemble, path, data.get("ensemble"), names, search)
    baseline = problems.check(_check_baseline, path, data.get("baseline"), names, search)
    root, _ = recipe_loader.data_root(data_root)
    common = problems.check(_overrides, path, "set", data.get("set")) or []
    problems.raise_any()  # the datasets and the cells need all of the above
    matched: set[str] = set()
    datasets = _datasets(path, data.get("datasets"), root, matched)
    named = [d for d in datasets if d is not None]
    _check_published(path, published, named)
    references = _check_references(path, data.get("references"), named, matched | set(named), names)
    cells = []
    machine: dict[tuple[str, str, tuple[str, ...]], str] = {}
    for name, where, recipe, own in entries:
        for dataset, data_overrides in datasets.items():
            overrides = [*common, *own, *data_overrides]
            try:
                loaded, _ = configuration.load(recipe, overrides, data_root)
            except TransduceError as error:
                cell = where + (f", dataset {dataset}" if dataset is not None else "")
                raise ConfigError(f"{path}: {cell}: {error}") from None
            if ensemble is not None and name in ensemble.systems:
                _check_ensemble_model(path, name, loaded)
                if ensemble.tie_break_rules:
                    _check_tie_break_data(path, name, loaded)
            t = loaded.train
            wanted = (t.device, t.precision, tuple(t.log))
            machine.setdefault(wanted, where + (f", dataset {dataset}" if dataset else ""))
            for seed in seeds:
                seeded = (*overrides, f"train.seed={seed}")
                cells.append(Cell(name, dataset, seed, recipe, seeded, t.device))
    return Experiment(
        path,
        cells,
        names,
        list(datasets),
        list(seeds),
        metrics,
        published,
        data,
        _check_score(path, data.get("score"), metrics),
        ensemble,
        references,
        search,
        machine,
        baseline,
        _check_variants(path, data.get("score")),
    )


def check_machine(experiment: Experiment) -> None:
    """What `train` checks of this machine before it starts (train.device, precision and
    log), once per setting here rather than once per cell after they started.

    Raises:
        ConfigError: the first cell's setting this machine cannot run, named.
    """
    from transduce.precision import choose, resolve_device
    from transduce.runlog import check as check_logs

    for (wanted, precision, log), where in experiment.machine.items():
        try:
            check_logs(list(log))
            where_to = resolve_device(wanted)
            if precision != "auto":  # auto runs on any device
                choose(precision, where_to)
        except TransduceError as error:
            raise ConfigError(f"{experiment.path}: {where}: {error}") from None


def _systems(
    path: Path, systems: dict[str, Any]
) -> tuple[list[tuple[str, str, str, list[str]]], dict[str, Any]]:
    """(name, key for messages, recipe, its overrides) of each system, a system with
    `search:` as its trials NAME-t1 ... NAME-tN; and each search's trials (`search`)."""
    entries = []
    searches: dict[str, Any] = {}
    for name, system in systems.items():
        where = f"systems.{name}"
        if not NAME.match(str(name)):
            raise _problem(path, where, "a name of letters, digits, _ + -")
        if not isinstance(system, dict) or "recipe" not in system:
            raise _problem(path, where, "expected {recipe: NAME_OR_PATH, set: {...}}")
        unknown = set(system) - {"recipe", "set", "search"}
        if unknown:
            raise _problem(
                path, f"{where}.{sorted(unknown)[0]}", "unknown key (valid: recipe, search, set)"
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
        if system.get("search") is None:
            entries.append((str(name), where, recipe, own))
            continue
        seed, trials = _check_search(path, f"{where}.search", system["search"])
        searches[str(name)] = {"seed": seed, "trials": {}}
        for number, values in enumerate(trials, 1):
            trial = f"{name}-t{number}"
            searches[str(name)]["trials"][trial] = values
            sampled = _overrides(path, f"{where}.search", values)
            entries.append((trial, f"{where} (trial {trial})", recipe, [*own, *sampled]))
    taken = [entry[0] for entry in entries]
    for name in taken:
        if taken.count(name) > 1:
            raise _problem(path, f"systems.{name}", "also the name of a trial of a search")
    return entries, searches


DISTRIBUTIONS = ("uniform", "loguniform", "int", "choice")


def _check_search(path: Path, where: str, value: Any) -> tuple[int, list[dict[str, Any]]]:
    """search: {trials: N, seed: S, space: {KEY: {DISTRIBUTION: ...}}}: the seed and each
    trial's sampled values (`sample`)."""
    if not isinstance(value, dict):
        raise _problem(
            path, where, f"expected {{trials: N, seed: S, space: {{...}}}}, got {value!r}"
        )
    unknown = set(value) - {"trials", "seed", "space"}
    if unknown:
        raise _problem(
            path, f"{where}.{sorted(unknown)[0]}", "unknown key (valid: seed, space, trials)"
        )
    trials, seed, space = value.get("trials"), value.get("seed", 0), value.get("space")
    if type(trials) is not int or trials < 1:
        raise _problem(path, f"{where}.trials", f"expected a positive integer, got {trials!r}")
    if type(seed) is not int:
        raise _problem(path, f"{where}.seed", f"expected an integer, got {seed!r}")
    if not isinstance(space, dict) or not space:
        raise _problem(
            path, f"{where}.space", f"expected KEY: {{DISTRIBUTION: ...}}, got {space!r}"
        )
    for key, spec in space.items():
        at = f"{where}.space.{key}"
        if key == "train.seed" or key == "train.select_on":
            raise _problem(path, at, "not searched: the seeds are the experiment's, and the "
                           "trials are ranked by one select_on")  # fmt: skip
        if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in DISTRIBUTIONS:
            raise _problem(
                path,
                at,
                "expected one of {uniform: [A, B]}, {loguniform: [A, B]}, {int: [A, B]}, "
                f"{{choice: [...]}}, got {spec!r}",
            )
        kind, bounds = next(iter(spec.items()))
        if kind == "choice":
            if not isinstance(bounds, list) or not bounds:
                raise _problem(path, f"{at}.choice", f"expected a list of values, got {bounds!r}")
            continue
        number = int if kind == "int" else (int, float)
        if (
            not isinstance(bounds, list)
            or len(bounds) != 2
            or not all(isinstance(b, number) and not isinstance(b, bool) for b in bounds)
            or bounds[0] > bounds[1]
        ):
            what = "integers" if kind == "int" else "numbers"
            raise _problem(path, f"{at}.{kind}", f"expected [A, B], {what}, A <= B, got {bounds!r}")
        if kind == "loguniform" and bounds[0] <= 0:
            raise _problem(path, f"{at}.loguniform", f"expected A > 0, got {bounds!r}")
    return seed, sample(space, trials, seed)


def sample(space: dict[str, dict[str, Any]], trials: int, seed: int) -> list[dict[str, Any]]:
    """Each trial's values of a search space, drawn in the space's order from one
    `random.Random(seed)` (the same seed, the same trials, on any machine): uniform in
    [A, B], log-uniform (uniform in [log A, log B], then exp), an integer in [A, B] (both
    included), one of a list; real numbers kept to 6 significant digits."""
    import math
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(trials):
        values: dict[str, Any] = {}
        for key, spec in space.items():
            kind, bounds = next(iter(spec.items()))
            if kind == "uniform":
                values[key] = float(f"{rng.uniform(bounds[0], bounds[1]):.6g}")
            elif kind == "loguniform":
                low, high = math.log(bounds[0]), math.log(bounds[1])
                values[key] = float(f"{math.exp(rng.uniform(low, high)):.6g}")
            elif kind == "int":
                values[key] = rng.randint(bounds[0], bounds[1])
            else:
                values[key] = bounds[rng.randrange(len(bounds))]
        out.append(values)
    return out


def _check_references(
    path: Path, value: Any, datasets: list[str], known: set[str], systems: list[str]
) -> dict[str, Any]:
    """references: NAME: DATASET: METRIC: number (NAME: METRIC: number without datasets):
    published numbers of systems not run here. A dataset that `only` leaves out may be
    given (a paper's whole table), and is not shown; the average is computed (over the
    experiment's datasets), never given."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _problem(path, "references", f"expected NAME: DATASET: METRIC: number, got {value!r}")
    out: dict[str, Any] = {}
    for name, numbers in value.items():
        where = f"references.{name}"
        if not NAME.match(str(name)):
            raise _problem(path, where, "a name of letters, digits, _ + -")
        if str(name) in systems:
            raise _problem(path, where, "a system of this experiment (give it in published:)")
        if not isinstance(numbers, dict):
            raise _problem(path, where, f"expected a mapping, got {numbers!r}")
        groups = {str(k): v for k, v in numbers.items()} if datasets else {None: numbers}
        for dataset, values in groups.items():
            at = where + (f".{dataset}" if dataset is not None else "")
            if dataset == AVERAGE:
                raise _problem(path, at, "the average is computed over this experiment's datasets")
            if dataset is not None and dataset not in known:
                raise _problem(path, at, "not a dataset of this experiment")
            _check_numbers(path, at, values)
        out[str(name)] = (
            {
                k: {str(m): float(v) for m, v in values.items()}
                for k, values in groups.items()
                if k is None or k in datasets
            }
            if datasets
            else {str(m): float(v) for m, v in numbers.items()}
        )
    return out


def _check_baseline(
    path: Path, value: Any, systems: list[str], search: dict[str, Any]
) -> str | None:
    """baseline: SYSTEM, a system of this experiment (of a search: one of its trials)."""
    if value is None:
        return None
    if isinstance(value, str) and value in search:
        trials = list(search[value]["trials"])
        raise _problem(
            path, "baseline", f"{value!r} is a search: name one of its trials ({', '.join(trials)})"
        )
    if not isinstance(value, str) or value not in systems:
        raise _problem(
            path,
            "baseline",
            f"{value!r} is not a system of this experiment (valid: {', '.join(systems)})",
        )
    return value


def _check_ensemble(
    path: Path, value: Any, systems: list[str], search: dict[str, Any]
) -> EnsembleSpec | None:
    """ensemble: {systems: [NAME, ...] or all, mean: probability or log-probability,
    tie_break_rules: true or false}; the name of a system with `search:` stands for its
    trials."""
    from transduce.defaults import ENSEMBLE_MEANS

    if value is None:
        return None
    if not isinstance(value, dict):
        raise _problem(
            path, "ensemble", f"expected {{systems: [NAME, ...], mean: ...}}, got {value!r}"
        )
    unknown = set(value) - {"systems", "mean", "tie_break_rules"}
    if unknown:
        raise _problem(
            path,
            f"ensemble.{sorted(unknown)[0]}",
            "unknown key (valid: mean, systems, tie_break_rules)",
        )
    tie_break = value.get("tie_break_rules", False)
    if not isinstance(tie_break, bool):
        raise _problem(path, "ensemble.tie_break_rules", f"true or false, not {tie_break!r}")
    chosen = value.get("systems", "all")
    if chosen == "all":
        chosen = list(systems)
    if not isinstance(chosen, list) or not chosen or not all(isinstance(n, str) for n in chosen):
        raise _problem(
            path, "ensemble.systems", f"expected a list of systems or all, got {chosen!r}"
        )
    expanded = []
    for name in chosen:
        if name in search:
            expanded += list(search[name]["trials"])
        elif name in systems:
            expanded.append(name)
        else:
            raise _problem(path, "ensemble.systems", f"{name!r} is not a system of this experiment")
    chosen = expanded
    mean = value.get("mean", ENSEMBLE_MEANS[0])
    if mean not in ENSEMBLE_MEANS:
        raise _problem(path, "ensemble.mean", f"{mean!r}: one of {', '.join(ENSEMBLE_MEANS)}")
    return EnsembleSpec(tuple(dict.fromkeys(chosen)), str(mean), tie_break)


def _check_ensemble_model(path: Path, system: str, config: configuration.Config) -> None:
    """An ensemble is of sequence-to-sequence models (`transduce.ensemble`)."""
    from transduce.models import MODELS, Seq2SeqModel

    if not issubclass(MODELS[config.model_name], Seq2SeqModel):
        raise _problem(
            path,
            "ensemble.systems",
            f"{system}: a {config.model_name} model; an ensemble is of sequence-to-sequence models",
        )


def _check_tie_break_data(path: Path, system: str, config: configuration.Config) -> None:
    """`tie_break_rules` learns from (lemma, form, tags): the system's data must be
    sigmorphon (raw, or prepared from it), known before anything trains."""
    fmt = config.data.format
    if fmt is None and config.data.prepared is not None:
        manifest = Path(config.data.prepared) / "manifest.json"
        try:
            fmt = json.loads(manifest.read_text(encoding="utf-8")).get("format")
        except (OSError, ValueError, AttributeError):
            return  # not prepared yet, or unreadable: training says so first
    if fmt != "sigmorphon":
        raise _problem(
            path,
            "ensemble.tie_break_rules",
            f"{system}: {fmt} data; the rules learn from sigmorphon data (lemma<TAB>form<TAB>tags)",
        )


VARIANTS = ("merge", "each")


def _check_variants(path: Path, value: Any) -> str:
    """score.variants: merge or each, beside the metrics it applies to."""
    chosen = value.get("variants", "merge") if isinstance(value, dict) else "merge"
    if chosen not in VARIANTS:
        raise _problem(path, "score.variants", f"one of {', '.join(VARIANTS)}, not {chosen!r}")
    if isinstance(value, dict) and "variants" in value and len(value) == 1:
        raise _problem(
            path, "score.variants", "name the metrics to score again beside it, e.g. wer: {}"
        )
    return str(chosen)


def _check_score(path: Path, value: Any, metrics: list[str] | None) -> dict[str, dict[str, Any]]:
    """score: METRIC: {OPTION: VALUE}, checked as `transduce score` checks its options; a
    metric the report shows (in `metrics`, when the file lists them). `variants` is not a
    metric (`_check_variants`)."""
    if value is None:
        return {}
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k != "variants"}
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
