"""The metric contract: per-item statistics, an aggregate, a signature, a bootstrap.

Every metric computes a few statistics per line (edits, reference length, correct, ...),
and its corpus score is a function of the *sums* of those statistics over the lines. The
same statistics give the per-line report (`score --per-item`) and the bootstrap
confidence interval (resample lines with replacement, re-aggregate).

The input of every metric is a `transduce.metrics.corpus.Corpus`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from transduce import defaults
from transduce.errors import ConfigError
from transduce.metrics.corpus import UNITS, Corpus, Text
from transduce.version import __version__


@dataclass(frozen=True)
class Score:
    """A corpus score with what is needed to reproduce it.

    Attributes:
        metric: The metric's name.
        value: The score.
        signature: Metric, options and versions, e.g. "per|nrefs:1|unit:symbol|...".
        lines: Number of lines scored.
        higher_is_better: Direction of the metric.
        ci: (low, high) bootstrap confidence interval, if requested.
        bootstrap: Samples, seed and confidence level of that interval.
    """

    metric: str
    value: float
    signature: str
    lines: int
    higher_is_better: bool
    ci: tuple[float, float] | None = None
    bootstrap: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "value": self.value,
            "signature": self.signature,
            "lines": self.lines,
            "higher_is_better": self.higher_is_better,
        }
        if self.ci is not None:
            data["ci"] = list(self.ci)
            data["bootstrap"] = self.bootstrap
        return data


@dataclass
class Option:
    """One option of a metric: default, valid values (if restricted), help, value type.

    `kind` is the type a text value (from the command line) is converted to. `score` offers
    each option as a flag `--METRIC-OPTION` (or through `--METRIC-option KEY=VALUE`, see
    `Metric.option_pairs`), unless `cli` is False: an option with one possible value, or
    one the metric sets itself (`tagacc`'s subset). `choices` may be a function that
    returns them, called only when a value is checked (`allowed`): BLEU's come from
    sacrebleu, which is not imported until a command needs it. (BLEU takes its options as
    KEY=VALUE pairs; a metric with flags of its own and such a function would call it while
    `score` builds its flags, at start-up.)
    """

    default: Any
    choices: tuple[Any, ...] | Callable[[], tuple[Any, ...]] | None = None
    help: str = ""
    kind: type = str
    cli: bool = True

    @property
    def allowed(self) -> tuple[Any, ...] | None:
        """The valid values (None: any), `choices` called if it is a function."""
        return self.choices() if callable(self.choices) else self.choices

    def parse(self, name: str, text: str) -> Any:
        """Convert a command-line value: "true" -> True for bool, "4" -> 4 for int, ..."""
        if self.kind is bool:
            if text.lower() not in ("true", "false"):
                raise ConfigError(f"{name}: expected true or false, not {text!r}")
            return text.lower() == "true"
        try:
            return self.kind(text)
        except ValueError:
            raise ConfigError(f"{name}: expected a {self.kind.__name__}, not {text!r}") from None


@dataclass(frozen=True)
class DataFile:
    """A file a metric reads besides the hypotheses and references: `score --NAME PATH`.

    The metric module reads no file: `transduce.scoring` reads it as `reads` says and hands
    the content to `Metric.create`. A name is one flag whatever the metrics that declare it.

    Attributes:
        help: What the file is, for --help.
        reads: What the file holds: "tagged", the (words, tags) of each sentence of a
            CoNLL-U file (`.conllu`) or of a TSV `words<TAB>tags`.
        needs_sources: Given this file, the metric needs the sources of every line
            (`Corpus.sources`); the text is the error when the references cannot give them.
    """

    help: str
    reads: str
    needs_sources: str | None = None


@dataclass(frozen=True)
class FileContent:
    """A `DataFile` as read: its name (for signatures and messages) and its content."""

    name: str
    content: Any


class Metric(ABC):
    """A corpus-level metric built from per-line statistics.

    Subclasses set `name`, `title`, `higher_is_better`, `definition` and `options`, and
    implement `item_stats` and `aggregate`. What else a metric needs or gives, it declares
    (`data_files`, `uses_unit`, `create`, `item_columns`), so that the code around it never
    tests a metric's name.
    """

    name: ClassVar[str]
    title: ClassVar[str]  # the metric in words, for messages: "tagging accuracy"
    higher_is_better: ClassVar[bool]
    definition: ClassVar[str]  # the exact definition, shown in the README and --help
    options: ClassVar[dict[str, Option]] = {}
    # True: `score` takes the options as `--NAME-option KEY=VALUE` (many options, passed
    # through to a library, as BLEU's to sacrebleu) rather than as a flag each
    option_pairs: ClassVar[bool] = False
    data_files: ClassVar[dict[str, DataFile]] = {}  # files it reads besides hyps and refs
    uses_unit: ClassVar[bool] = True  # False: it cuts lines its own way (BLEU, whole tags)

    def __init__(self, unit: str = "auto", **options: Any) -> None:
        if unit not in UNITS:
            raise ConfigError(f"unknown unit {unit!r} (valid: {', '.join(UNITS)})")
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            valid = ", ".join(sorted(self.options)) or "none"
            raise ConfigError(
                f"metric {self.name}: unknown option(s) {', '.join(unknown)} (valid: {valid})"
            )
        self.unit = unit
        self.values: dict[str, Any] = {k: o.default for k, o in self.options.items()}
        for key, value in options.items():
            choices = self.options[key].allowed
            if choices is not None and value not in choices:
                valid = ", ".join(map(str, choices))
                raise ConfigError(
                    f"metric {self.name}: {key} must be one of {valid}, not {value!r}"
                )
            self.values[key] = value

    @property
    def label(self) -> str:
        """The score's name in tables and reports (a metric with a subset option adds it)."""
        return self.name

    @classmethod
    def create(
        cls, unit: str, options: dict[str, Any], files: dict[str, FileContent]
    ) -> list[Metric]:
        """The metric objects that `score --metric NAME` reports: one, by default.

        Args:
            unit: The unit of the corpus.
            options: The metric's options.
            files: The declared `data_files` that were given, read.
        """
        return [cls(unit, **options)]

    def item_columns(self, corpus: Corpus) -> list[tuple[str, list[str]]]:
        """The metric's own columns of `score --per-item` (header, one cell per line)."""
        return []

    @abstractmethod
    def item_stats(self, corpus: Corpus) -> list[list[float]]:
        """Per-line statistics as columns: one list of N floats per statistic."""

    @abstractmethod
    def aggregate(self, sums: Sequence[float], n: int) -> float:
        """The corpus score from the sums of the statistics over `n` lines."""

    def signature(self, corpus: Corpus) -> str:
        """`name|nrefs:N|unit:U|option:value...|version:transduce-X`."""
        parts = [self.name, f"nrefs:{corpus.nrefs}", f"unit:{corpus.unit}"]
        parts += [f"{key}:{value}" for key, value in self.values.items()]
        parts.append(f"version:transduce-{__version__}")
        return "|".join(parts)

    def evaluate(self, corpus: Corpus) -> tuple[float, str]:
        """The corpus score (the aggregate of the summed statistics) and its signature."""
        columns = self.item_stats(corpus)
        value = self.aggregate([float(sum(c)) for c in columns], len(corpus))
        return value, self.signature(corpus)

    def score(
        self,
        corpus: Corpus,
        bootstrap: int = 0,
        seed: int = defaults.BOOTSTRAP_SEED,
        confidence: float = defaults.CONFIDENCE,
    ) -> Score:
        """Score a prepared corpus; `bootstrap` > 0 adds a percentile confidence interval."""
        value, signature = self.evaluate(corpus)
        ci = info = None
        if bootstrap > 0:
            ci = bootstrap_interval(self, corpus, bootstrap, seed, confidence)
            info = {
                "samples": bootstrap,
                "seed": seed,
                "confidence": confidence,
                "method": "percentile",
            }
        return Score(self.name, value, signature, len(corpus), self.higher_is_better, ci, info)

    def corpus_score(
        self, hyps: Sequence[Text], refs: Sequence[Text | Sequence[Text]], **kwargs: Any
    ) -> Score:
        """Score hypotheses against references.

        Args:
            hyps: Per line a string, or a sequence of symbols.
            refs: Per line a string (one reference) or a list of alternatives, each a string
                or a sequence of symbols: `["K AE T", ["K AE T", "K AA T"]]`, or for
                tokenized input `[[["K", "AE", "T"]], [["K", "AE", "T"], ["K", "AA", "T"]]]`.
            **kwargs: `bootstrap`, `seed`, `confidence` (see `score`).
        """
        return self.score(Corpus(hyps, refs, self.unit), **kwargs)


MIN_BOOTSTRAP = 100


def check_bootstrap(samples: int) -> None:
    """Refuse fewer resamples than a percentile interval needs (1000 is usual)."""
    if samples < MIN_BOOTSTRAP:
        raise ConfigError(
            f"--bootstrap takes at least {MIN_BOOTSTRAP} resamples for a 95% interval "
            f"(1000 is usual), not {samples}"
        )


def bootstrap_interval(
    metric: Metric, corpus: Corpus, samples: int, seed: int, confidence: float
) -> tuple[float, float]:
    """Percentile bootstrap interval: resample lines with replacement `samples` times.

    Each resample draws len(corpus) line indices uniformly with replacement; the metric is
    re-aggregated from the resampled statistics; the interval is the (1 - confidence) / 2
    and (1 + confidence) / 2 quantiles of the resampled scores.
    """
    import torch  # only here: plain scoring does not pay torch's import time

    check_bootstrap(samples)
    if not 0 < confidence < 1:
        raise ConfigError(f"confidence must be between 0 and 1, not {confidence}")
    if not 0 <= seed < 2**63:
        raise ConfigError(f"the bootstrap seed must be in [0, 2**63), not {seed}")
    stats = torch.tensor(metric.item_stats(corpus), dtype=torch.float64).T  # n x k
    n = stats.shape[0]
    generator = torch.Generator().manual_seed(seed)
    values = []
    for _ in range(samples):
        picks = torch.randint(n, (n,), generator=generator)  # n
        weights = torch.bincount(picks, minlength=n).to(
            torch.float64
        )  # n: times each line is drawn
        values.append(metric.aggregate((weights @ stats).tolist(), n))  # k sums
    tail = (1 - confidence) / 2
    low, high = torch.quantile(
        torch.tensor(values, dtype=torch.float64),
        torch.tensor([tail, 1 - tail], dtype=torch.float64),
    ).tolist()
    return low, high
