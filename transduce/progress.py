"""Progress on stderr: a rich progress bar on a terminal, one line per validation otherwise.

The trainer reports through a `Reporter` (its methods are no-ops by default), so the
library itself never prints; the command line passes one of these.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn


class Reporter:
    """What the trainer tells the outside world; every method may be ignored."""

    def start(
        self,
        total_updates: int | None,
        first: int,
        max_minutes: float | None = None,
        elapsed: float = 0.0,
    ) -> None:
        """Training starts (or resumes at update `first`, `elapsed` seconds into the run);
        it ends at `total_updates` or after `max_minutes`, whichever comes first."""

    def update(self, update: int, epoch: int, loss: float, examples_per_s: float) -> None:
        """After each update."""

    def validation(self, entry: dict[str, Any], best: bool = False) -> None:
        """After each validation, with its history entry; `best`: the best one so far."""

    def message(self, text: str) -> None:
        """A note for the user (resuming, stopping, ...)."""

    def stop(self) -> None:
        """Training has ended."""


def _summary(entry: dict[str, Any]) -> str:
    scores = " ".join(f"{k} {v:.2f}" for k, v in entry["dev_scores"].items())
    where = f"update {entry['update']} epoch {entry['epoch']:.2f}"
    mono = entry.get("dev_monotonicity", {}).get("overall")
    mono_text = (
        f", %mono {mono['mono']:.1f} (authors' {mono['mono_authors']:.1f})"
        if mono and entry["dev_monotonicity"]["mechanisms"]
        else ""
    )
    return (
        f"{where}: train loss {entry['train_loss']:.4f}, "
        f"dev loss {entry['dev_loss']:.4f}, {scores}{mono_text}, lr {entry['lr']:.2e}, "
        f"{entry['examples_per_s']:.0f} ex/s, {entry['elapsed']:.0f} s"
    )


def eta(
    update: int,
    first: int,
    total: int | None,
    seconds: float,
    elapsed: float,
    max_minutes: float | None,
) -> float | None:
    """Seconds left until the first limit that binds: the updates still to go at this
    session's pace (`seconds` for `update - first` updates), or what is left of
    `max_minutes` (`elapsed`: the run's seconds so far); None when neither is known."""
    left = []
    if total is not None and update > first and seconds > 0:
        left.append((total - update) * seconds / (update - first))
    if max_minutes is not None:
        left.append(max(60 * max_minutes - elapsed, 0.0))
    return max(min(left), 0.0) if left else None


def clock(seconds: float) -> str:
    """1:02:03, 4:05."""
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class ConsoleReporter(Reporter):
    """A progress bar when `console` is a terminal, else a summary line per validation.

    The bar fits 80 columns: the update, the epoch, the loss, examples/s, the best dev
    score so far and the time left until the first limit (updates, epochs or minutes).
    `quiet`: no bar and no messages, only the line per validation.
    """

    def __init__(self, console: Console, quiet: bool = False) -> None:
        self.console, self.quiet = console, quiet
        self.bar: Progress | None = None
        self.task: TaskID | None = None
        self.best = ""
        self.total: int | None = None
        self.first, self.max_minutes, self.elapsed = 0, None, 0.0
        self.started = time.perf_counter()

    def start(
        self,
        total_updates: int | None,
        first: int,
        max_minutes: float | None = None,
        elapsed: float = 0.0,
    ) -> None:
        self.total, self.first = total_updates, first
        self.max_minutes, self.elapsed = max_minutes, elapsed
        self.started = time.perf_counter()
        if self.quiet or not self.console.is_terminal:
            return
        self.bar = Progress(
            BarColumn(bar_width=16),
            TextColumn("{task.completed}"),
            TextColumn("{task.fields[status]}"),
            console=self.console,
            transient=True,
        )
        self.bar.start()
        self.task = self.bar.add_task("train", total=total_updates, completed=first, status="")

    def update(self, update: int, epoch: int, loss: float, examples_per_s: float) -> None:
        if self.bar is None or self.task is None:
            return
        seconds = time.perf_counter() - self.started
        left = eta(
            update, self.first, self.total, seconds, self.elapsed + seconds, self.max_minutes
        )
        status = f"ep {epoch} loss {loss:.3f} {examples_per_s:.0f}/s"
        status += f" {self.best}" if self.best else ""
        status += f" ETA {clock(left)}" if left is not None else f" {clock(seconds)}"
        self.bar.update(self.task, completed=update, status=status)

    def validation(self, entry: dict[str, Any], best: bool = False) -> None:
        line = _summary(entry) + (" (best)" if best else "")
        if best:
            metric, value = next(iter(entry["dev_scores"].items()))
            self.best = f"best {metric} {value:.2f}"
        console = self.bar.console if self.bar is not None else self.console
        console.print(line, highlight=False, markup=False, emoji=False)

    def message(self, text: str) -> None:
        if not self.quiet:
            (self.bar.console if self.bar is not None else self.console).print(
                text, highlight=False, markup=False, emoji=False
            )

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
