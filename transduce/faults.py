"""Fault injection: named points where the tests of `tests/test_faults.py` stop the
process (`TRANSDUCE_FAULT`), to show that no write leaves a file half-written."""

from __future__ import annotations

import os
import signal
import sys

FAULT_VARIABLE = "TRANSDUCE_FAULT"
_fault_counts: dict[str, int] = {}


def fault_point(name: str) -> None:
    """A named point where the fault-injection tests stop the process.

    `TRANSDUCE_FAULT=POINT[@N][:SIGNAL]` (SIGNAL: KILL (default), INT or TERM) sends the
    signal to this process the N-th time (default 1) POINT is reached; unset, this does
    nothing. The points: `update` (after an update's optimizer step), `validation` (before
    a validation's checkpoints), `after-last`
    (between last.pt and best.pt), `after-best` (after both), `before-rename:FILE` (a
    temporary file or directory complete, not yet renamed to FILE), `before-test`,
    `before-report`, and of `prepare --force`: `after-exchange:DIR` (the new directory in
    place, the old not yet deleted) and `between-renames:DIR` (without an atomic exchange:
    the old directory moved aside, the new not yet in place).
    """
    spec = os.environ.get(FAULT_VARIABLE)
    if not spec:
        return
    point, sig = spec, "KILL"
    head, _, tail = spec.rpartition(":")
    if head and tail in ("KILL", "INT", "TERM"):
        point, sig = head, tail
    point, at, count = point.rpartition("@")
    if not at:
        point, count = count, ""
    if point != name:
        return
    _fault_counts[name] = _fault_counts.get(name, 0) + 1
    if _fault_counts[name] == int(count or 1):
        sys.stdout.flush()
        sys.stderr.flush()
        os.kill(os.getpid(), getattr(signal, "SIG" + sig))
