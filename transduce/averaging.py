"""Checkpoint averaging (`transduce average`): one model whose every weight is the mean of
that weight over several checkpoints of one model, as Vaswani et al. (2017, §6.1) average
their last checkpoints and Sockeye and fairseq (`average_checkpoints.py`) do.

The checkpoints come from a run's kept ones (`train.keep_best` / `train.keep_last`: the
K best by the run's `select_on`, or the K last) or are given as files. They must be of one
model: the same family, options and vocabularies. Floating-point tensors are averaged in
float64 and stored in their own dtype; any other tensor (an integer buffer) must be equal
in all of them. The result is a checkpoint for `decode` and `analyze-monotonicity`
without a training state (it cannot be resumed), with `averaged` saying what it came from.
A run with `train.average_best_last` does this itself at its end, with its best.pt and
last.pt, into final.pt (`training.average_best_last`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from transduce import checkpoint
from transduce.errors import CheckpointError, ConfigError


def average_weights(states: Sequence[dict[str, Tensor]], names: Sequence[str]) -> dict[str, Tensor]:
    """The element-wise mean of state dicts with the same keys and shapes (`names`: where
    each came from, for messages)."""
    first = states[0]
    for state, name in zip(states[1:], names[1:]):
        if state.keys() != first.keys():
            raise CheckpointError(f"{name}: its weights are not those of {names[0]}'s model")
    averaged: dict[str, Tensor] = {}
    for key, value in first.items():
        values = [state[key] for state in states]
        for other, name in zip(values[1:], names[1:]):
            if other.shape != value.shape:
                raise CheckpointError(
                    f"{name}: {key} has shape {tuple(other.shape)}, not {tuple(value.shape)}"
                )
        if value.is_floating_point():
            total = torch.zeros(value.shape, dtype=torch.float64)
            for v in values:
                total += v.double()
            averaged[key] = (total / len(values)).to(value.dtype)
        else:
            for other, name in zip(values[1:], names[1:]):
                if not torch.equal(other, value):
                    raise CheckpointError(f"{name}: {key} differs (it is not a weight to average)")
            averaged[key] = value.clone()
    return averaged


def kept_checkpoints(run_dir: Path, by: str, count: int) -> list[Path]:
    """The `count` best (`by` "best") or last (`by` "last") checkpoints of a run, among
    those it keeps (`train.keep_best`, `train.keep_last`): at most that many."""
    index = checkpoint.read_kept(run_dir)
    if not index.get("kept"):
        raise ConfigError(
            f"{run_dir}: no kept checkpoints (train with train.keep_best or train.keep_last "
            "to keep them); or give the checkpoint files"
        )
    if count < 1:
        raise ConfigError(f"--{by}: must be at least 1, not {count}")
    limit = int(index.get(f"keep_{by}", 0))
    if count > limit:
        raise ConfigError(
            f"--{by} {count}: {run_dir} keeps its {limit} {by} checkpoints "
            f"(train.keep_{by}: {limit})"
        )
    lower = index.get("select", "lower") == "lower"
    picked = checkpoint.chosen(index["kept"], by, count, lower)
    picked.sort(key=lambda e: e["update"])
    return [run_dir / checkpoint.KEPT / e["file"] for e in picked]


def average(paths: Sequence[str | Path]) -> dict[str, Any]:
    """The averaged checkpoint of `paths` (files, or run directories for their model:
    final.pt or best.pt)."""
    payloads = [checkpoint.load(path) for path in paths]
    names = [p["path"] for p in payloads]
    fields = {"model_name": "model family", "config.model": "model options"}
    fields.update(checkpoint.DECODING_FIELDS)
    checkpoint.check_compatible(payloads, fields, "averaging needs checkpoints of one model")
    weights = average_weights([p["model"] for p in payloads], names)
    newest = max(payloads, key=lambda p: checkpoint.update_of(p) or -1)
    result = {k: v for k, v in newest.items() if k not in ("training", "format", "path", "model")}
    result["model"] = weights
    result["averaged"] = {
        "checkpoints": names,
        "updates": [checkpoint.update_of(p) for p in payloads],
    }
    return result
