"""The metrics log of a training run, readable while it trains (`train.log`).

- `csv`: RUN_DIR/metrics.csv, a row per validation, flushed as it is written: update,
  epoch, train_loss, dev_loss, lr, elapsed, examples_per_s, then `dev_<metric>` for each
  dev score and `dev_mono`, `dev_loss_mono` (the monotonicity of the selected attention,
  all mechanisms together) where the task measures them. `tail -f`, a spreadsheet or
  `pandas.read_csv` read it.
- `tensorboard`: TensorBoard event files in RUN_DIR/tensorboard/ (the same values, under
  `train/`, `dev/` and `lr`), with the optional extra `pip install 'transduce[tensorboard]'`.

The log follows `last.pt`: a resumed run first rewrites metrics.csv from the history its
`last.pt` holds, so that validations done after it by the stopped session (and done again
now) are not listed twice. TensorBoard files cannot be rewritten: a resumed run may show a
step twice there, the later value being the one of the run's history.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from transduce import runs
from transduce.errors import ConfigError
from transduce.io import atomic_write_text

LOGS = ("csv", "tensorboard")
CSV = runs.METRICS
TENSORBOARD = runs.TENSORBOARD
FIRST = ("update", "epoch", "train_loss", "dev_loss", "lr", "elapsed", "examples_per_s")


def check(kinds: list[str]) -> None:
    """Refuse a log this installation cannot write (one line)."""
    if "tensorboard" in kinds:
        try:
            from torch.utils.tensorboard import SummaryWriter  # noqa: F401
        except ImportError:
            raise ConfigError(
                "train.log: tensorboard needs the tensorboard package: "
                "pip install 'transduce[tensorboard]' (or leave it out of train.log)"
            ) from None


def row(entry: dict[str, Any]) -> dict[str, Any]:
    """The values of one validation (an entry of `train.json`'s history), flat."""
    values = {key: entry.get(key) for key in FIRST}
    for name, score in (entry.get("dev_scores") or {}).items():
        values[f"dev_{name}"] = score
    overall = (entry.get("dev_monotonicity") or {}).get("overall") or {}
    if overall:
        values["dev_mono"] = overall.get("mono")
        values["dev_loss_mono"] = overall.get("loss")
    return values


def _csv_text(rows: list[dict[str, Any]], columns: list[str], header: bool) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, extrasaction="ignore", lineterminator="\n")
    if header:
        writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


class MetricsLog:
    """The logs `kinds` of the run in `run_dir`, continued from `history`."""

    def __init__(self, run_dir: Path, kinds: list[str], history: list[dict[str, Any]]) -> None:
        self.run_dir, self.kinds = Path(run_dir), list(kinds)
        self.rows = [row(entry) for entry in history]
        self.columns = list(self.rows[0]) if self.rows else []
        self._writer: Any = None
        if "csv" in self.kinds:  # a session without it leaves an earlier one's as it was
            self._rewrite()
        if "tensorboard" in self.kinds:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.run_dir / TENSORBOARD))

    def _rewrite(self) -> None:
        text = _csv_text(self.rows, self.columns, header=bool(self.columns))
        atomic_write_text(self.run_dir / CSV, text)

    def append(self, entry: dict[str, Any]) -> None:
        """Log one validation, flushed before this returns."""
        values = row(entry)
        self.rows.append(values)
        if "csv" in self.kinds:
            if not self.columns or list(values) != self.columns:
                self.columns = list(values)  # the first row, or other metrics: all again
                self._rewrite()
            else:
                with open(self.run_dir / CSV, "a", encoding="utf-8", newline="") as handle:
                    handle.write(_csv_text([values], self.columns, header=False))
                    handle.flush()
        if self._writer is not None:
            step = int(values["update"])
            for key, value in values.items():
                if key in ("update", "epoch") or not isinstance(value, int | float):
                    continue
                tag = key.replace("dev_", "dev/") if key.startswith("dev_") else key
                tag = "train/loss" if key == "train_loss" else tag
                self._writer.add_scalar(tag, value, step)
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
