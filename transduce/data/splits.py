"""Deterministic, leak-free splitting: all entries of one source go to the same split.

Each distinct source (the symbol sequence: a word for G2P, tags + lemma for inflection, a
sentence for tagging) is ranked by SHA-256 of the seed and the source; the first
`round(n * test_ratio)` sources form the test split, the next `round(n * dev_ratio)` the
dev split, the rest the training split. So:

* no source appears in two splits (the widely used Wu et al. CMUdict split has 1,133
  words in both train and test, each time with a different pronunciation; ours cannot);
* the result depends on the seed and the set of sources only, not on the input order,
  the Python version or the platform;
* entries keep their input order inside each split.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from transduce.data.formats import Example
from transduce.errors import ConfigError, DataError

KEY_SEPARATOR = "\x1f"  # never inside a symbol


def source_key(example: Example) -> str:
    return KEY_SEPARATOR.join(example.source)


def check_ratios(dev_ratio: float, test_ratio: float) -> None:
    """Raise `ConfigError` unless both ratios are in [0, 1) and leave room for training."""
    for flag, ratio in (("--dev-ratio", dev_ratio), ("--test-ratio", test_ratio)):
        if not 0 <= ratio < 1:
            raise ConfigError(f"{flag} must be at least 0 and below 1, not {ratio}")
    if dev_ratio + test_ratio >= 1:
        raise ConfigError(
            f"--dev-ratio + --test-ratio must be below 1, not {dev_ratio + test_ratio}"
        )


def _count(n: int, ratio: float) -> int:
    # A requested split is never empty when there are sources to spare.
    return 0 if ratio == 0 else max(1, round(n * ratio))


def split_examples(
    examples: Sequence[Example], ratios: dict[str, float], seed: int, name: str
) -> dict[str, list[Example]]:
    """Carve splits out of `examples` by distinct source.

    Args:
        examples: The entries to split.
        ratios: Split name -> fraction of the distinct sources, in the order they are
            carved (e.g. {"test": 0.1, "dev": 0.05}); the rest is "train".
        seed: The split seed.
        name: The input's name, for the error when there are too few sources.

    Returns:
        Split name -> its entries, in input order; "train" holds the rest.
    """
    keys = list(dict.fromkeys(source_key(e) for e in examples))

    def rank(key: str) -> str:
        return hashlib.sha256(f"{seed}{KEY_SEPARATOR}{key}".encode()).hexdigest()

    ordered = sorted(keys, key=rank)
    counts = {split: _count(len(keys), ratio) for split, ratio in ratios.items()}
    if sum(counts.values()) >= len(keys):
        raise DataError(
            f"too few distinct sources ({len(keys)}) to carve {', '.join(counts)} "
            f"({sum(counts.values())} sources) and keep some for training",
            name,
        )
    assign: dict[str, str] = {}
    start = 0
    for split, count in counts.items():
        for key in ordered[start : start + count]:
            assign[key] = split
        start += count
    result: dict[str, list[Example]] = {"train": [], **{split: [] for split in ratios}}
    for example in examples:
        result[assign.get(source_key(example), "train")].append(example)
    return result
