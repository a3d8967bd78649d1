"""Progress on stderr: a rich progress bar on a terminal, one line per validation otherwise.

The trainer reports through a `Reporter` (its methods are no-ops by default), so the
library itself never prints; the command line passes one of these.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn


class Reporter:
    """What the trainer tells the outside world; every method may be ignored."""

    def start(self, total_updates: int | None, first: int) -> None:
        """Training starts (or resumes at update `first`)."""

    def update(self, update: int, epoch: int, loss: float, examples_per_s: float) -> None:
        """After each update."""

    def validation(self, entry: dict[str, Any]) -> None:
        """After each validation, with its history entry."""

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


class ConsoleReporter(Reporter):
    """A progress bar when `console` is a terminal, else a summary line per validation.

    `quiet`: no bar and no messages, only the line per validation (the issue's "off with
    --quiet, where one summary line per validation is printed instead").
    """

    def __init__(self, console: Console, quiet: bool = False) -> None:
        self.console, self.quiet = console, quiet
        self.bar: Progress | None = None
        self.task: TaskID | None = None
        self.last = ""

    def start(self, total_updates: int | None, first: int) -> None:
        if self.quiet or not self.console.is_terminal:
            return
        self.bar = Progress(
            TextColumn("[bold]train"),
            BarColumn(),
            TextColumn("update {task.completed}"),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        self.bar.start()
        self.task = self.bar.add_task("train", total=total_updates, completed=first, status="")

    def update(self, update: int, epoch: int, loss: float, examples_per_s: float) -> None:
        if self.bar is not None and self.task is not None:
            status = f"epoch {epoch} loss {loss:.3f} {examples_per_s:.0f} ex/s {self.last}"
            self.bar.update(self.task, completed=update, status=status)

    def validation(self, entry: dict[str, Any]) -> None:
        line = _summary(entry)
        self.last = " ".join(f"dev {k} {v:.2f}" for k, v in entry["dev_scores"].items())
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
