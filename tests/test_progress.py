"""The progress display: the time left until the first limit, the best validation marked,
a bar that fits 80 columns."""

from __future__ import annotations

import io

from rich.console import Console

from transduce.progress import ConsoleReporter, clock, eta


def test_eta_takes_the_limit_that_binds_first():
    # 100 of 1000 updates in 50 s: 450 s left at this pace
    assert eta(100, 0, 1000, 50.0, 50.0, None) == 450.0
    # resumed at update 500: the pace counts this session's updates only
    assert eta(600, 500, 1000, 20.0, 400.0, None) == 80.0
    # max_minutes 10, 9 of them gone: 60 s left, sooner than the updates
    assert eta(100, 0, 1000, 50.0, 540.0, 10.0) == 60.0
    assert eta(100, 0, None, 50.0, 50.0, None) is None
    assert eta(0, 0, 1000, 0.0, 0.0, None) is None  # no pace yet
    assert eta(10, 0, None, 5.0, 700.0, 10.0) == 0.0  # past the limit: nothing left


def test_clock():
    assert clock(5) == "0:05" and clock(65) == "1:05" and clock(3723) == "1:02:03"


def test_the_bar_fits_80_columns_marks_the_best_and_shows_the_eta(monkeypatch):
    import transduce.progress

    now = [1000.0]
    monkeypatch.setattr(transduce.progress.time, "perf_counter", lambda: now[0])
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80, color_system=None)
    reporter = ConsoleReporter(console)
    reporter.start(1000, 0, max_minutes=None)
    entry = {
        "update": 10, "epoch": 0.5, "train_loss": 1.0, "dev_loss": 1.0,
        "dev_scores": {"per": 12.345, "wer": 50.0}, "lr": 1e-3, "elapsed": 3.0,
        "examples_per_s": 100.0, "dev_monotonicity": {},
    }  # fmt: skip
    reporter.validation(entry, best=True)
    now[0] += 30  # 30 s later
    reporter.update(10, 1, 1.2345, 1234.0)
    assert reporter.bar is not None
    status = reporter.bar.tasks[0].fields["status"]
    # 10 updates in 30 s: 990 left, 49:30
    assert "best per 12.35" in status and "ETA 49:30" in status, status
    reporter.bar.refresh()
    reporter.stop()
    text = out.getvalue()
    assert "(best)" in text
    rendered = [line for line in text.replace("\r", "\n").splitlines() if "ETA" in line]
    assert rendered and all(len(line.rstrip()) <= 80 for line in rendered)
