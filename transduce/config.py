"""Typed configuration: YAML recipes -> dataclasses, every error reported at once.

A recipe has five sections, `data`, `model`, `loss`, `train` and `decode`. Each is a
dataclass; `model` is the dataclass of the model it names (`model.name`, a key of
`transduce.models.MODELS`). Loading checks every key and every type before any data is
read, and raises one `ConfigError` listing all problems, e.g.

    model.embedding_dim: expected an integer, got 'big'
    train.optimiser: unknown key (did you mean optimizer?)

`--set train.batch_size=64` overrides a value (parsed as YAML: 64, 0.1, true, [1, 2]).
`transduce.recipe_loader` finds recipes by name, merges `base:` recipes in and places
`$DATA/` paths under the data root first.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args, get_origin

import yaml

from transduce import defaults, recipe_loader
from transduce.errors import ConfigError, plural

# Finding, reading and composing recipe files lives in recipe_loader; these names stay
# importable from here.
from transduce.recipe_loader import load_yaml_text
from transduce.recipe_loader import read_yaml as read_yaml
from transduce.recipe_loader import recipe_path as recipe_path
from transduce.recipe_loader import shipped_recipes as shipped_recipes

if TYPE_CHECKING:  # only annotations: loading a recipe needs no torch
    from _typeshed import DataclassInstance

    from transduce.models.base import ModelConfig

S = TypeVar("S", bound="DataclassInstance")

# --------------------------------------------------------------------------- sections


def _at_least(obj: Any, minimum: float, *names: str) -> list[str]:
    """Problems for the fields of `obj` (None allowed) that are below `minimum`."""
    return [
        f"{name}: must be at least {minimum}, not {getattr(obj, name)}"
        for name in names
        if getattr(obj, name) is not None and getattr(obj, name) < minimum
    ]


@dataclass
class DataConfig:
    """Where the data comes from: a prepared directory, or raw files and a format.

    Raw data is prepared into `RUN_DIR/data` with `transduce.data.prepare` (the same as
    `transduce prepare`); `format: cmudict` without `train` uses the embedded CMUdict.
    """

    prepared: str | None = None
    format: str | None = None
    train: list[str] | None = None
    dev: list[str] | None = None
    test: list[str] | None = None
    options: dict[str, Any] = field(default_factory=dict)
    dev_ratio: float = defaults.DEV_RATIO
    test_ratio: float = defaults.TEST_RATIO
    split_seed: int = defaults.SPLIT_SEED
    max_source_length: int | None = None  # longer training examples are left out
    max_target_length: int | None = None
    # symbols seen fewer times in the kept training examples are <unk> (word-level models:
    # Tjandra et al. 2017 §7.1 keep the words seen at least twice)
    min_count: int = 1
    # keep the most frequent fraction of the distinct source symbols, the rest are <unk>
    # (Dufter et al. 2020, Table 1b: 50% of the unique words for UD)
    vocab_fraction: float = 1.0
    # an end symbol (</s>) after every source, as Sockeye appends one (Rios et al. 2021):
    # the decoder can attend to it, and the monotonicity loss and %mono count it in |X|
    source_eos: bool = False

    def check(self) -> list[str]:
        problems = _at_least(self, 1, "max_source_length", "max_target_length", "min_count")
        if not 0 < self.vocab_fraction <= 1:
            problems.append(f"vocab_fraction: must be in (0, 1], not {self.vocab_fraction}")
        if (self.prepared is None) == (self.format is None):
            problems.append(
                "prepared: give either `prepared` (a prepared directory) or `format` (raw data)"
            )
        if self.prepared is not None and (self.train or self.dev or self.test or self.options):
            problems.append("prepared: `train`, `dev`, `test` and `options` go with `format`")
        if self.format is not None:
            from transduce.data.formats import get_format
            from transduce.errors import TransduceError

            try:
                get_format(self.format, **self.options)
            except (TransduceError, TypeError, ValueError) as error:
                where = "format" if str(error).startswith("unknown format") else "options"
                problems.append(f"{where}: {error}")
        return problems


@dataclass
class MonotonicityConfig:
    """The monotonicity loss of Rios et al. (2021), eq. (4): total = NLL + weight(update) *
    L_mono over the selected attention mechanisms (`transduce/monotonicity.py` has the
    definitions).

    `layers` and `heads` are `all` or lists, 1-based as the paper counts (a model with one
    attention mechanism has layer 1, head 1). The weight schedule: `constant`; `linear_decay`
    (weight * (1 - update / until), 0 from `until` on); `step` (weight until `until`
    updates, then weight * `factor`): learn monotone behaviour early, relax it later (§6);
    `transduce.schedules.MonotonicityWeight` computes it.
    `reverse` biases towards decreasing positions (footnote 2).
    """

    weight: float = 0.0
    margin: float = 0.0  # delta of eq. (4)
    layers: Literal["all"] | list[int] = "all"
    heads: Literal["all"] | list[int] = "all"
    schedule: Literal["constant", "linear_decay", "step"] = "constant"
    until: int | None = None  # updates: the end of the decay, or the step
    factor: float = 0.0  # step: the weight after `until`, as a fraction
    reverse: bool = False
    # how a batch's costs become L_mono (transduce.monotonicity.monotonicity_loss): per
    # target token of the batch, as §3 says, or per sentence's |Y| and summed over the
    # batch, as the authors' Sockeye runs computed it (about batch-size times stronger)
    normalize: Literal["tokens", "sentences_summed"] = "tokens"
    # which attention the loss reads in training: the weights the model computed, or the
    # weights as they mixed the states after attention dropout and DropHead (the authors'
    # Sockeye runs: a dropped head costs nothing); the same for models without them
    reads: Literal["attention", "attention_after_dropout"] = "attention"
    # positions with a <sep> (inflection): the lemma's, renumbered from 1 and renormalized
    # over, or, as the authors' runs, absolute in the source with the tags at position 0
    sep_positions: Literal["lemma", "absolute"] = "lemma"

    def check(self) -> list[str]:
        problems: list[str] = []
        if self.weight < 0 or self.margin < 0:
            problems.append("weight and margin: must be at least 0")
        if self.schedule != "constant" and (self.until is None or self.until < 1):
            problems.append(f"until: the {self.schedule} schedule needs a number of updates")
        for name in ("layers", "heads"):
            value = getattr(self, name)
            if isinstance(value, list) and (not value or min(value) < 1):
                problems.append(f"{name}: `all` or a list of numbers from 1, not {value}")
        return problems


@dataclass
class LossConfig:
    label_smoothing: float = 0.0
    monotonicity: MonotonicityConfig = field(default_factory=MonotonicityConfig)

    def check(self) -> list[str]:
        if not 0 <= self.label_smoothing < 1:
            return [f"label_smoothing: must be in [0, 1), not {self.label_smoothing}"]
        return []


@dataclass
class OptimizerConfig:
    """Adam (betas, eps) or RMSprop (rho: the decay of the squared-gradient average)."""

    type: Literal["adam", "rmsprop"] = "adam"
    lr: float = 1e-3
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    weight_decay: float = 0.0
    rho: float = 0.9

    def check(self) -> list[str]:
        problems = []
        if self.lr <= 0 or self.eps <= 0 or self.weight_decay < 0:
            problems.append("lr and eps must be positive, weight_decay at least 0")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            problems.append(f"betas: two numbers in [0, 1), not {self.betas}")
        if not 0 <= self.rho < 1:
            problems.append(f"rho: must be in [0, 1), not {self.rho}")
        return problems


@dataclass
class ScheduleConfig:
    """Learning-rate schedule.

    constant: `lr` throughout. inverse_sqrt (Rios et al. 2021, Table 5): linear warm-up over
    `warmup` updates, then lr * sqrt(warmup / update). plateau (Wu et al. 2018 §8.2): multiply
    the rate by `factor` after `patience` validations without improvement of `monitor`
    (the selected dev metric, or the dev loss), and stop training once it is below `min_lr`
    (unless `stop_at_min_lr: false`, as Sockeye).
    cosine (Loshchilov and Hutter 2017, one cycle, no restart): from `lr` at update 1 down
    to `min_lr` at update `until` (default: train.max_updates) along half a cosine,
    min_lr + (lr - min_lr) (1 + cos(pi (u - 1) / (until - 1))) / 2, then `min_lr`: a run
    anneals within a number of updates fixed in advance, whatever the machine's speed.
    sockeye_inv_sqrt (Sockeye 1.18's `fixed-rate-inv-sqrt-t` with `--learning-rate-warmup`,
    which Rios et al. 2021 trained with: `lr_scheduler.LearningRateSchedulerInvSqrtT`):
    min(lr / sqrt(1 + 3 t / half_life), lr (t + 1) / (warmup + 1)) at update t, the rate
    halved after `half_life` updates (Sockeye's half life in checkpoints times its updates
    per checkpoint: 10 x 400 for Rios et al.); with lr 1e-3 and warm-up 4000 it peaks at
    6.0e-4 near update 2,393.
    """

    type: Literal["constant", "inverse_sqrt", "plateau", "cosine", "sockeye_inv_sqrt"] = "constant"
    warmup: int = 4000
    half_life: int = 4000  # sockeye_inv_sqrt: updates until the rate is halved
    until: int | None = None  # cosine: the update that reaches min_lr; None: max_updates
    factor: float = 0.5
    patience: int = 1
    min_lr: float = 1e-5
    # plateau: stop training once the rate is below min_lr (Wu et al.'s code); false: the
    # rate keeps falling and train.patience alone stops the run, as Sockeye's plateau-reduce
    # scheduler does (the Rios et al. 2021 RNN recipes)
    stop_at_min_lr: bool = True
    monitor: Literal["metric", "loss"] = "metric"

    def check(self) -> list[str]:
        problems = _at_least(self, 1, "warmup", "patience", "half_life")
        problems += _at_least(self, 0, "min_lr")
        if self.until is not None and self.until < 2:
            problems.append(f"until: must be at least 2, not {self.until}")
        if not 0 < self.factor < 1:
            problems.append(f"factor: must be in (0, 1), not {self.factor}")
        return problems


@dataclass
class TrainConfig:
    seed: int = 1
    max_epochs: int | None = 50
    max_updates: int | None = None
    max_minutes: float | None = None  # wall-clock limit (checked after each update)
    batch_size: int = 20
    batch_by: Literal["sentences", "tokens"] = "sentences"
    bucketing: bool = True  # batches of similar lengths: less padding
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    clip_norm: float | None = None
    validate_every: int | None = None  # updates; None: once per epoch
    select_on: str = "per"
    # more dev metrics a validation must be at least as good on to become the best, with
    # select_on (ties: the later validation): Wu's two-metric choice (neural-transducer's
    # select_model, accuracy and distance); [] : select_on alone, strictly better
    select_also: list[str] = field(default_factory=list)
    patience: int | None = 10  # validations without improvement before stopping
    device: Literal["cpu", "cuda", "auto"] = "auto"  # auto: CUDA when there is one
    threads: int | None = None  # CPU threads; None: PyTorch's default
    # fp32, bf16 or fp16 autocast (fp16 with a gradient scaler, CUDA only); auto: bf16 on a
    # GPU that has it, else fp16, bf16 on a CPU with native bfloat16, else fp32
    # (transduce.precision)
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    # each update's batch is split into this many micro-batches, run one after another
    # (the same update in less memory: losses are weighted by their share of the tokens)
    accumulate: int = 1
    dev_batch_size: int = 256
    dev_subset: int | None = None  # validate on this many distinct dev sources (seeded)
    # the seed that draws them (None: train.seed); a fixed one gives every seed of a
    # recipe the same sample, as Sockeye's checkpoint decoder (seed 42) does
    dev_subset_seed: int | None = None
    test: bool = True  # decode and score the test split with the run's model at the end
    # at the end of training, the run's model is the mean of best.pt's and last.pt's weights
    # (RUN_DIR/final.pt, `transduce.averaging`): validated on dev, tested, and what decode,
    # export, ensembles and init_from read (2017 medium, 35 languages: +0.93 test accuracy
    # for single models, RESULTS.md)
    average_best_last: bool = False
    # also keep the checkpoints of the K best validations (by select_on) and of the K last
    # in RUN_DIR/checkpoints/, for `transduce average` (0: only best.pt and last.pt)
    keep_best: int = 0
    keep_last: int = 0
    # start a new run from a trained model's weights (RUN_DIR: its model, final.pt or
    # best.pt, or a checkpoint file): fine-tuning with this recipe and data (transduce.finetune)
    init_from: str | None = None
    # what records each validation as it happens: RUN_DIR/metrics.csv, and TensorBoard
    # event files in RUN_DIR/tensorboard/ (the `tensorboard` extra) (transduce.runlog)
    log: list[Literal["csv", "tensorboard"]] = field(default_factory=lambda: ["csv"])
    # the model's forward compiled with torch.compile (transduce.compiling): the same
    # numbers as without (dropout draws the same masks), fewer kernel launches; slower on
    # the CPU where measured, so off by default (README: Speed options)
    compile: bool = False

    def check(self) -> list[str]:
        from transduce.metrics import METRICS

        problems = _at_least(
            self, 1, "max_epochs", "max_updates", "batch_size", "validate_every", "patience",
            "threads", "dev_batch_size", "dev_subset", "accumulate",
        )  # fmt: skip
        problems += _at_least(self, 0, "keep_best", "keep_last")
        if isinstance(self.seed, int) and not 0 <= self.seed <= MAX_SEED:
            # torch.manual_seed takes 64 bits, and the seed of an update is derived from it
            problems.append(f"seed: must be in [0, {MAX_SEED}], not {self.seed}")
        problems += [
            f"{n}: must be positive"
            for n in ("max_minutes", "clip_norm")
            if getattr(self, n) is not None and getattr(self, n) <= 0
        ]
        if self.select_on not in METRICS:
            problems.append(
                f"select_on: unknown metric {self.select_on!r} (valid: {', '.join(METRICS)})"
            )
        for name in self.select_also:
            if name not in METRICS:
                problems.append(
                    f"select_also: unknown metric {name!r} (valid: {', '.join(METRICS)})"
                )
            elif name == self.select_on:
                problems.append(f"select_also: {name} is select_on already")
        if self.max_epochs is None and self.max_updates is None and self.max_minutes is None:
            problems.append("max_epochs: give a limit (max_epochs, max_updates or max_minutes)")
        if self.schedule.type == "cosine" and self.schedule.until is None:
            if self.max_updates is None:
                problems.append(
                    "schedule.until: the cosine schedule needs the update it ends at "
                    "(schedule.until, or train.max_updates)"
                )
            elif self.max_updates < 2:
                problems.append("max_updates: the cosine schedule needs at least 2 updates")
        if self.schedule.type == "cosine" and self.schedule.min_lr > self.optimizer.lr:
            problems.append(
                f"schedule.min_lr: the cosine schedule anneals down to it, so it must not "
                f"exceed optimizer.lr ({self.schedule.min_lr} > {self.optimizer.lr})"
            )
        return problems


MAX_SEED = 2**32 - 1  # train.seed: the largest (as numpy's); derived seeds stay in 64 bits


@dataclass
class DecodeConfig:
    beam: int = 1
    length_penalty: float = 0.0  # score / |Y|^alpha
    nbest: int = 1
    max_output_length: int | None = None  # None: 2 * |x| + 10
    batch_size: int = 256
    # of the nbest, the best ones until their probabilities (exp of the log-probability,
    # no length penalty) add up to at least this; None: all nbest
    prob_mass: float | None = None

    def check(self) -> list[str]:
        problems = _at_least(self, 1, "beam", "nbest", "max_output_length", "batch_size")
        if self.nbest > self.beam:
            problems.append(f"nbest ({self.nbest}) cannot exceed beam ({self.beam})")
        if self.prob_mass is not None and not 0 < self.prob_mass <= 1:
            problems.append(f"prob_mass: must be in (0, 1], not {self.prob_mass}")
        return problems


@dataclass
class Config:
    data: DataConfig
    model_name: str  # a key of transduce.models.MODELS
    model: ModelConfig  # that model's own dataclass
    loss: LossConfig
    train: TrainConfig
    decode: DecodeConfig


SECTIONS: dict[str, type] = {
    "data": DataConfig,
    "loss": LossConfig,
    "train": TrainConfig,
    "decode": DecodeConfig,
}

# ------------------------------------------------------------------------ conversion


def _type_name(kind: Any) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
    if kind in names:
        return names[kind]
    if get_origin(kind) is Literal:
        return "one of " + ", ".join(map(str, get_args(kind)))
    if get_origin(kind) in (list, typing.List):  # noqa: UP006
        return "a list"
    if get_origin(kind) in (dict, typing.Dict):  # noqa: UP006
        return "a mapping"
    if dataclasses.is_dataclass(kind):
        return "a mapping"
    return str(kind)


def _convert(value: Any, kind: Any, where: str, errors: list[str]) -> Any:
    """Check `value` against the annotation `kind`; record problems in `errors`."""
    origin = get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        options = get_args(kind)
        if value is None and type(None) in options:
            return None
        inner = [o for o in options if o is not type(None)]
        if len(inner) == 1:
            return _convert(value, inner[0], where, errors)
        sections = [o for o in inner if isinstance(o, type) and dataclasses.is_dataclass(o)]
        if isinstance(value, dict) and sections:  # a mapping: report the section's own errors
            return build(sections[0], value, where, errors)
        for option in inner:  # int | str: the first that fits
            trial: list[str] = []
            result = _convert(value, option, where, trial)
            if not trial:
                return result
        errors.append(f"{where}: expected {' or '.join(map(_type_name, inner))}, got {value!r}")
        return None
    if kind is Any:
        return value
    if origin is Literal:
        if value not in get_args(kind):
            errors.append(f"{where}: expected {_type_name(kind)}, got {value!r}")
        return value
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return build(kind, value, where, errors)
    if origin in (list, typing.List):  # noqa: UP006
        if not isinstance(value, list):
            errors.append(f"{where}: expected a list, got {value!r}")
            return value
        (item,) = get_args(kind) or (Any,)
        return [_convert(v, item, f"{where}[{i}]", errors) for i, v in enumerate(value)]
    if origin in (dict, typing.Dict):  # noqa: UP006
        if not isinstance(value, dict):
            errors.append(f"{where}: expected a mapping, got {value!r}")
        return value
    if kind is bool:
        if not isinstance(value, bool):
            errors.append(f"{where}: expected true or false, got {value!r}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            errors.append(f"{where}: expected an integer, got {value!r}")
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            errors.append(f"{where}: expected a number, got {value!r}")
            return value
        if not math.isfinite(value):
            errors.append(f"{where}: expected a finite number, got {value!r}")
            return value
        return float(value)
    if kind is str:
        if not isinstance(value, str):
            errors.append(f"{where}: expected a string, got {value!r}")
        return value
    raise TypeError(f"unsupported annotation {kind!r} at {where}")  # a bug in a dataclass


def build(cls: type, data: Any, where: str, errors: list[str]) -> Any:
    """Build dataclass `cls` from a mapping, recording every problem in `errors`.

    Returns None when the mapping has problems (all of them recorded). The value rules
    of the class's `check()` run too, on the well-typed fields (the others take their
    defaults for the check), so a wrong type and a bad value elsewhere show up together.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        errors.append(f"{where}: expected a mapping, got {data!r}")
        return None
    before = len(errors)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    values, bad = {}, set()
    for key, value in data.items():
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f" (did you mean {close[0]}?)" if close else f" (valid: {', '.join(fields)})"
            if f"{where}.{key}" in RENAMED:
                hint = f" ({RENAMED[f'{where}.{key}']})"
            errors.append(f"{where}.{key}: unknown key{hint}")
            continue
        count = len(errors)
        converted = _convert(value, hints[key], f"{where}.{key}", errors)
        if len(errors) > count:
            bad.add(key)
        else:
            values[key] = converted
    for name, f in fields.items():
        if _required(f) and name not in values and name not in bad:
            errors.append(f"{where}.{name}: required")
    if any(name not in values for name, f in fields.items() if _required(f)):
        return None
    instance = cls(**values)
    check = getattr(instance, "check", None)
    if callable(check):
        problems = check()
        mentions = re.compile(r"\b(" + "|".join(map(re.escape, bad)) + r")\b") if bad else None
        errors.extend(
            f"{where}.{p}" for p in problems if mentions is None or not mentions.search(p)
        )
    return instance if len(errors) == before else None


def from_flags(cls: type[S], values: dict[str, Any]) -> S:
    """A config section from command-line options (`--beam 4` -> beam=4), checked as a
    recipe's would be; the first problem is a `ConfigError` naming the --flags, e.g.
    "--beam must be at least 1, not 0"."""
    errors: list[str] = []
    instance = build(cls, values, "", errors)
    if errors or instance is None:
        names = sorted((f.name for f in dataclasses.fields(cls)), key=len, reverse=True)
        pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
        problem = errors[0].removeprefix(".")  # built at the root: ".beam: must ..."
        message = pattern.sub(lambda m: "--" + m.group(1).replace("_", "-"), problem)
        raise ConfigError(re.sub(r"^(--[\w-]+): ", r"\1 ", message))
    return instance


def _required(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def renamed(data: dict[str, Any]) -> dict[str, Any]:
    """A configuration with the keys of earlier versions in today's terms: `train.bf16`
    (transduce < 0.4; what a run's config.yaml of then holds) is `train.precision`, true
    bf16 and false fp32, unless the precision is given too (then it is an unknown key)."""
    train = data.get("train") if isinstance(data, dict) else None
    if not isinstance(train, dict) or "precision" in train:
        return data
    if isinstance(train.get("bf16"), bool):
        precision = "bf16" if train["bf16"] else "fp32"
        return {
            **data,
            "train": {**{k: v for k, v in train.items() if k != "bf16"}, "precision": precision},
        }
    return data


# keys of earlier versions that `renamed` could not take: what replaced them
RENAMED = {
    "train.bf16": "replaced by train.precision in transduce 0.4: bf16: true is precision: "
    "bf16, false is fp32",
}


def to_dict(obj: Any) -> Any:
    """A dataclass as plain containers (for YAML, JSON and checkpoints)."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, list | tuple):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


# --------------------------------------------------------------------------- loading


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> None:
    """Apply `--set section.key=value` overrides (values parsed as YAML) in place."""
    for override in overrides:
        key, sep, text = override.partition("=")
        if key.strip() == "train.bf16" and text.strip().lower() in ("true", "false"):
            key, text = "train.precision", "bf16" if text.strip().lower() == "true" else "fp32"
        if not sep or not key.strip():
            raise ConfigError(f"--set {override!r}: expected KEY=VALUE, e.g. train.batch_size=64")
        try:
            value = load_yaml_text(text)
        except yaml.YAMLError:
            value = text
        node = data
        parts = key.strip().split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(
                    f"--set {override!r}: {part} is {child!r}, not a section "
                    f"(write it as a mapping in the recipe to set a key inside it)"
                )
            node = child
        node[parts[-1]] = value


def parse(data: dict[str, Any], source: str = "config") -> Config:
    """Validate a recipe mapping; raise one `ConfigError` listing every problem."""
    from transduce.models import MODELS

    errors: list[str] = []
    data = renamed(data)
    unknown = sorted(set(data) - {*SECTIONS, "model"})
    for key in unknown:
        errors.append(f"{key}: unknown section (valid: data, model, loss, train, decode)")
    sections = {name: build(cls, data.get(name), name, errors) for name, cls in SECTIONS.items()}
    raw_model = data.get("model")
    misshapen = raw_model is not None and not isinstance(raw_model, dict)
    if misshapen:
        errors.append(f"model: expected a mapping with a name, got {raw_model!r}")
    model_data = dict(raw_model) if isinstance(raw_model, dict) else {}
    name = model_data.pop("name", None)
    model = None
    if name is None:
        if not misshapen:  # (`model:` left empty too)
            errors.append(f"model.name: required (valid: {', '.join(MODELS)})")
    elif not isinstance(name, str) or name not in MODELS:
        errors.append(f"model.name: unknown model {name!r} (valid: {', '.join(MODELS)})")
    else:
        model = build(MODELS[name].Config, model_data, "model", errors)
    if errors:
        raise ConfigError(f"{source}: {plural(len(errors), 'problem')}: " + "; ".join(errors))
    assert isinstance(name, str) and model is not None  # both set where there was no error
    return Config(model_name=name, model=model, **sections)


def load(
    name_or_path: str,
    overrides: list[str] | None = None,
    data_root: str | Path | None = None,
    *,
    check_data: bool = True,
) -> tuple[Config, dict[str, Any]]:
    """Load and validate a recipe; returns the config and its resolved mapping.

    Args:
        name_or_path: A recipe file, or the name of a shipped recipe.
        overrides: `--set KEY=VALUE` overrides, applied after the bases are merged in.
        data_root: The folder of `$DATA/` data paths; None: `TRANSDUCE_DATA`, else
            `../shared/data` (`transduce.recipe_loader` has the rules).
        check_data: Raise a `DataError` when a `$DATA/` path does not exist (False:
            check the configuration only).
    """
    path = recipe_path(name_or_path)
    data, chain = recipe_loader.compose(path)
    apply_overrides(data, overrides or [])
    root, origin = recipe_loader.data_root(data_root)
    placed = recipe_loader.place_data(data, root)  # after --set: it may name $DATA/ too
    config = parse(data, recipe_loader.describe(chain))
    if check_data:
        recipe_loader.check_data(placed, root, origin)
    return config, resolved(config)


def resolved(config: Config) -> dict[str, Any]:
    """The complete configuration (every default filled in) as plain containers."""
    model = {"name": config.model_name, **to_dict(config.model)}
    return {
        "data": to_dict(config.data),
        "model": model,
        "loss": to_dict(config.loss),
        "train": to_dict(config.train),
        "decode": to_dict(config.decode),
    }


def setting_keys(models: bool = True) -> list[str]:
    """Every `section.key` a recipe or `--set` can name (nested sections dotted, e.g.
    `train.optimizer.lr`), with the model keys of every model family (`models`; that
    imports torch: completion instead takes them from the shipped recipes)."""

    def walk(cls: type, prefix: str) -> list[str]:
        keys = []
        for f in dataclasses.fields(cls):
            kind = f.type if not isinstance(f.type, str) else typing.get_type_hints(cls)[f.name]
            inner = [
                a for a in get_args(kind) if isinstance(a, type) and dataclasses.is_dataclass(a)
            ]
            dataclass = isinstance(kind, type) and dataclasses.is_dataclass(kind)
            target = kind if dataclass else (inner[0] if inner else None)
            if target is not None:
                keys += walk(target, f"{prefix}{f.name}.")
            else:
                keys.append(prefix + f.name)
        return keys

    keys = ["model.name"]
    for name, cls in SECTIONS.items():
        keys += walk(cls, f"{name}.")
    if models:
        from transduce.models import MODELS

        for family in MODELS.values():
            keys += walk(family.Config, "model.")
    else:
        for recipe in shipped_recipes():
            try:
                model = read_yaml(recipe_path(recipe)).get("model")
            except ConfigError:
                continue
            keys += [f"model.{key}" for key in model or {}] if isinstance(model, dict) else []
    return sorted(set(keys))
