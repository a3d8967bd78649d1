"""Schedules over the updates of a run: the learning rate and the monotonicity weight.

Both are functions of the update number (1-based); the learning rate's `plateau` also of
the dev scores seen so far, so its state goes into every checkpoint and a resumed run
continues it (the monotonicity weight has no state).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from transduce import config as configuration
from transduce.errors import ConfigError


class Schedule:
    """The learning rate (see `transduce.config.ScheduleConfig`), set on the optimizer."""

    def __init__(
        self,
        config: configuration.ScheduleConfig,
        optimizer: torch.optim.Optimizer,
        lr: float,
        max_updates: int | None = None,
    ):
        self.config, self.optimizer, self.base = config, optimizer, lr
        self.until = config.until or max_updates
        if config.type == "cosine" and (self.until is None or self.until < 2):
            raise ConfigError(
                "train.schedule: the cosine schedule needs the update it ends at "
                "(schedule.until, or train.max_updates), at least 2"
            )
        self.lr = lr if config.type not in ("inverse_sqrt", "sockeye_inv_sqrt") else 0.0
        self.best: float | None = None
        self.bad = 0
        self._apply()

    def _apply(self) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr

    def before_update(self, update: int) -> None:
        """Set the rate of update number `update` (1-based)."""
        if self.config.type == "inverse_sqrt":
            warmup = self.config.warmup
            self.lr = self.base * min(update / warmup, math.sqrt(warmup / update))
            self._apply()
        elif self.config.type == "sockeye_inv_sqrt":
            self.lr = sockeye_inv_sqrt(self.base, update, self.config.warmup, self.config.half_life)
            self._apply()
        elif self.config.type == "cosine":
            low, until = self.config.min_lr, self.until
            assert until is not None  # checked in __init__
            done = min(update - 1, until - 1) / (until - 1)
            self.lr = low + (self.base - low) * (1 + math.cos(math.pi * done)) / 2
            self._apply()

    def after_validation(self, value: float, lower_is_better: bool) -> bool:
        """Plateau: reduce after `patience` bad validations. True: the rate fell under min_lr."""
        if self.config.type != "plateau":
            return False
        better = self.best is None or (value < self.best if lower_is_better else value > self.best)
        if better:
            self.best, self.bad = value, 0
            return False
        self.bad += 1
        if self.bad >= self.config.patience:
            self.lr *= self.config.factor
            self.bad = 0
            self._apply()
        return self.config.stop_at_min_lr and self.lr < self.config.min_lr

    def state_dict(self) -> dict[str, Any]:
        return {"lr": self.lr, "best": self.best, "bad": self.bad, "until": self.until}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume. A cosine schedule keeps the end it was started with unless the config
        names one (`schedule.until`): resuming with a larger max_updates goes on at min_lr
        rather than jumping back up the curve."""
        self.lr, self.best, self.bad = state["lr"], state["best"], state["bad"]
        if self.config.until is None and state.get("until") is not None:
            self.until = state["until"]
        self._apply()


def sockeye_inv_sqrt(base: float, update: int, warmup: int, half_life: int) -> float:
    """Sockeye 1.18's `fixed-rate-inv-sqrt-t` rate at update t with a linear warm-up:
    min(base / sqrt(1 + 3 t / half_life), base (t + 1) / (warmup + 1)). The factor 3 makes
    the rate half the base at t = half_life: 1 / sqrt(1 + 3) = 1/2."""
    decayed = base / math.sqrt(1 + 3 * update / half_life)
    return min(decayed, base * (update + 1) / (warmup + 1)) if warmup > 0 else decayed


class MonotonicityWeight:
    """lambda of Rios et al. (2021), eq. (4), at each update (see
    `transduce.config.MonotonicityConfig`): constant, linearly decayed to 0 at `until`, or
    stepped down to weight * factor after `until`."""

    def __init__(self, config: configuration.MonotonicityConfig) -> None:
        self.config = config

    def at(self, update: int) -> float:
        """The weight of update number `update` (1-based)."""
        c = self.config
        if c.schedule == "linear_decay" and c.until is not None:
            return c.weight * max(0.0, 1.0 - update / c.until)
        if c.schedule == "step" and c.until is not None and update > c.until:
            return c.weight * c.factor
        return c.weight
