"""`Corpus`: the hypotheses and references of one scoring run, shared by all metrics.

Strings are cut into symbols by a unit; the closest reference of every line and its edit
distance are computed once (`Corpus.edit`) and read by every edit-based metric.

Large corpora of plain lines (files) take a faster path: the cutting and the edit
distances run in worker processes, one slice of the lines each, on every core the
process may use (fork start method, Linux); the per-line statistics come back as plain
integers. Below `defaults.PARALLEL_MIN_LINES` lines, or without fork, it all runs here.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeGuard

import editdistance

from transduce import defaults
from transduce.data.tokens import CHAR, SYMBOL, guess_unit
from transduce.errors import ConfigError, DataError

CHAR_NOSPACE = "char-nospace"  # characters with whitespace left out
UNITS = (SYMBOL, CHAR, CHAR_NOSPACE, "auto")

Text = str | Sequence[str]


@contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while building millions of small lists.

    None of them form cycles, and with the collector on, its repeated full passes over the
    growing heap cost more than the tokenization itself (measured: 4.0 s -> 0.9 s for
    1,000,000 lines).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def characters(text: str) -> str:
    """Every character, whitespace included (a str is a sequence of characters): what the
    official scorers count (SIGMORPHON 2017 `evalm.py`, the NEWS script)."""
    return text


def characters_nospace(text: str) -> str:
    """The characters other than whitespace."""
    return "".join(text.split())


def cutter(unit: str) -> Callable[[str], Sequence[str]]:
    """The function that cuts a string into the symbols of `unit`."""
    if unit == CHAR:
        return characters
    return characters_nospace if unit == CHAR_NOSPACE else str.split


@dataclass(frozen=True)
class EditStats:
    """Per line: edits to the closest reference and the lengths involved.

    The closest reference is the one with the fewest edits (Levenshtein distance over
    symbols); on ties, the first one.
    """

    edits: list[int]
    hyp_len: list[int]
    ref_len: list[int]  # of the closest reference
    best: list[int]  # index of the closest reference among the line's references


def edit_stats(hyps: Sequence[Sequence[str]], refs: Sequence[Any], single: bool) -> EditStats:
    """Closest-reference statistics of tokenized lines.

    Args:
        hyps: Symbol sequences.
        refs: One symbol sequence per line when `single`, else a list of them per line.
        single: Whether every line has exactly one reference.
    """
    distance = editdistance.eval
    with no_gc():
        hyp_len = list(map(len, hyps))
        if single:  # the common case, with no Python-level loop body
            edits = list(map(distance, hyps, refs))
            return EditStats(edits, hyp_len, list(map(len, refs)), [0] * len(edits))
        edits, ref_len, best = [], [], []
        for hyp, alts in zip(hyps, refs):
            dists = [distance(hyp, r) for r in alts]
            index = dists.index(min(dists))  # fewest edits; the first on ties
            edits.append(dists[index])
            ref_len.append(len(alts[index]))
            best.append(index)
    return EditStats(edits, hyp_len, ref_len, best)


# Set in the parent just before the workers fork; read by them (never pickled).
_SHARED: tuple[Sequence[str], Sequence[str], str] | None = None


def _edit_slice(bounds: tuple[int, int]) -> tuple[list[int], list[int], list[int]]:
    start, stop = bounds
    if _SHARED is None:
        raise RuntimeError("a worker of parallel_edit_stats started without its corpus")
    hyps, refs, unit = _SHARED
    cut = cutter(unit)
    with no_gc():
        stats = edit_stats(list(map(cut, hyps[start:stop])), list(map(cut, refs[start:stop])), True)
    return stats.edits, stats.hyp_len, stats.ref_len


def _workers() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return min(cores, defaults.PARALLEL_MAX_WORKERS)


def parallel_edit_stats(hyps: Sequence[str], refs: Sequence[str], unit: str) -> EditStats | None:
    """`edit_stats` of plain lines in worker processes; None where that is not possible."""
    global _SHARED
    workers = _workers()
    if workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return None
    n = len(hyps)
    bounds = [(n * k // workers, n * (k + 1) // workers) for k in range(workers)]
    _SHARED = (hyps, refs, unit)
    try:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            parts = pool.map(_edit_slice, bounds)
    finally:
        _SHARED = None
    edits, hyp_len, ref_len = ([x for part in parts for x in part[i]] for i in range(3))
    return EditStats(edits, hyp_len, ref_len, [0] * n)


def _all_str(items: Sequence[object]) -> TypeGuard[Sequence[str]]:
    return set(map(type, items)) <= {str}  # C-level, unlike a loop of isinstance


def _all_text(alternatives: list[list[Any]] | None, single: bool) -> bool:
    """Whether every reference is a string (rather than a sequence of symbols)."""
    return single or all(_all_str(alts) for alts in alternatives or ())


class Corpus:
    """Hypotheses and references of one scoring run, tokenized once.

    Args:
        hyps: One hypothesis per line: a string (cut into symbols by `unit`) or a sequence
            of symbols.
        refs: One entry per line: a string (one reference) or a list of alternative
            references. Hypotheses and references are both strings, or both symbol
            sequences: with strings, a line's entry is "K AE T" or ["K AE T", "K AA T"];
            with symbols, [["K", "AE", "T"]] or [["K", "AE", "T"], ["K", "AA", "T"]].
        unit: How strings are cut: "symbol" (whitespace-separated tokens), "char"
            (characters, a space among them, as the official scorers count them),
            "char-nospace" (characters, whitespace left out) or "auto" (symbol when more
            than half of the reference strings contain whitespace between symbols, else
            char; decided on at most `AUTO_SAMPLE` evenly spaced references).
        parallel: Compute the edit distances of large corpora (`PARALLEL_MIN_LINES` lines
            or more) in worker processes (what `transduce score` does). Off by default,
            so that a library caller (a training loop) never forks.
        sources: The input symbols of each line, for metrics that need them (`tagacc`
            finds out-of-vocabulary and ambiguous words by them).

    Raises:
        DataError: different numbers of lines, no lines, or an empty reference.
        ConfigError: an unknown unit, or strings mixed with symbol sequences.
    """

    AUTO_SAMPLE = 10_000

    def __init__(
        self,
        hyps: Sequence[Text],
        refs: Sequence[Text | Sequence[Text]],
        unit: str = "auto",
        parallel: bool = False,
        sources: Sequence[Sequence[str]] | None = None,
    ):
        if unit not in UNITS:
            raise ConfigError(f"unknown unit {unit!r} (valid: {', '.join(UNITS)})")
        if len(hyps) != len(refs):
            raise DataError(f"{len(hyps)} hypotheses but {len(refs)} references")
        if not hyps:
            raise DataError("nothing to score: no lines")
        if sources is not None and len(sources) != len(hyps):
            raise DataError(f"{len(hyps)} hypotheses but {len(sources)} source lines")
        self._hyp_source, self._ref_source = hyps, refs
        # the references as strings, one per line, where they are (None: not all strings)
        self._ref_strings: Sequence[str] | None = refs if _all_str(refs) else None
        self._parallel = parallel
        self.sources = sources
        self.memo: dict[Any, Any] = {}  # results several metrics share (tagacc's counts)
        # One string per line is the common case (files): it never builds per-line lists.
        self._plain = _all_str(hyps) and _all_str(refs)
        self._single = _all_str(refs)
        self._alternatives = (
            None if self._single else [[r] if isinstance(r, str) else list(r) for r in refs]
        )
        if _all_str(hyps) != _all_text(self._alternatives, self._single):
            raise ConfigError(
                "give hypotheses and references both as strings or both as symbol sequences "
                "(a line's tokenized references: [['K', 'AE', 'T'], ['K', 'AA', 'T']])"
            )
        if unit == "auto":
            step = max(1, len(refs) // self.AUTO_SAMPLE)
            sample = (
                refs[::step]
                if self._alternatives is None
                else [a for alts in self._alternatives[::step] for a in alts]
            )
            texts = [t for t in sample if isinstance(t, str)]
            unit = guess_unit(texts) if texts else SYMBOL
        self.unit = unit
        self._check_references()

    def _check_references(self) -> None:
        if self._ref_strings is not None:  # a blank reference is an error in every unit
            if "" not in set(map(str.strip, self._ref_strings)):  # (one of spaces, too)
                return
            empty = [not r.strip() for r in self._ref_strings]
        else:
            empty = [  # blank strings too: a reference of only spaces is no reference
                not alts or not all(a.strip() if isinstance(a, str) else a for a in alts)
                for alts in self._alternatives or ()
            ]
            if not any(empty):
                return
        raise DataError("empty reference", line=empty.index(True) + 1)

    def __len__(self) -> int:
        return len(self._hyp_source)

    @cached_property
    def hyps(self) -> list[Sequence[str]]:
        """The hypotheses as symbol sequences."""
        cut = cutter(self.unit)
        with no_gc():
            hyps = self._hyp_source
            if _all_str(hyps):
                return list(map(cut, hyps))
            return [cut(h) if isinstance(h, str) else h for h in self._hyp_source]

    @cached_property
    def refs(self) -> list[list[Sequence[str]]]:
        """Per line, the list of its alternative references as symbol sequences."""
        cut = cutter(self.unit)
        with no_gc():
            alternatives = self._alternatives
            if alternatives is None:  # one string per line
                return [[r] for r in map(cut, self._ref_strings or ())]
            return [[cut(r) if isinstance(r, str) else r for r in alts] for alts in alternatives]

    @cached_property
    def hyp_texts(self) -> list[str]:
        """The hypotheses as strings (symbol sequences joined by spaces)."""
        return [h if isinstance(h, str) else " ".join(h) for h in self._hyp_source]

    @cached_property
    def ref_texts(self) -> list[list[str]]:
        """The references as strings, per line a list of alternatives."""
        return [
            [r] if isinstance(r, str) else [a if isinstance(a, str) else " ".join(a) for a in r]
            for r in self._ref_source
        ]

    @cached_property
    def nrefs(self) -> str:
        """References per line: a number, or "var" when lines differ."""
        if self._alternatives is None:
            return "1"
        counts = set(map(len, self._alternatives))
        return str(counts.pop()) if len(counts) == 1 else "var"

    @cached_property
    def edit(self) -> EditStats:
        """Closest-reference edit statistics, computed once for all edit-based metrics."""
        if self._parallel and self._plain and len(self) >= defaults.PARALLEL_MIN_LINES:
            hyps, plain = self._hyp_source, self._ref_strings
            if _all_str(hyps) and plain is not None:
                stats = parallel_edit_stats(hyps, plain, self.unit)
                if stats is not None:
                    return stats
        if self._ref_strings is not None:
            with no_gc():
                refs = list(map(cutter(self.unit), self._ref_strings))
            return edit_stats(self.hyps, refs, single=True)
        if self.nrefs == "1":
            return edit_stats(self.hyps, [alts[0] for alts in self.refs], single=True)
        return edit_stats(self.hyps, self.refs, single=False)
