"""Checkpoints: written atomically, read with `torch.load(weights_only=True)`.

A checkpoint is a dict of plain containers (dicts, lists, strings, numbers, bytes) and
tensors, so that loading it runs no pickled code:

    format        "transduce.checkpoint/1"
    model_name    the registry key of the model family
    config        the resolved configuration (every default filled in)
    model         the model's state_dict
    vocab         {"source": [...symbols...], "target": [...]}
    sides         the side specs of the prepared data (how to tokenize and detokenize)
    subwords      {"source": {...}, "target": {...}}: BPE models, as text or bytes, if any
    training      optimizer, scheduler, RNG states, progress, history (resumable runs)
    versions      of transduce, Python and the core libraries
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from transduce.errors import CheckpointError, TransduceError
from transduce.io import atomic_binary

FORMAT = "transduce.checkpoint/1"
BEST, LAST = "best.pt", "last.pt"


def save(path: str | Path, payload: dict[str, Any]) -> None:
    """Write `payload` to a temporary file beside `path`, then rename it into place."""
    with atomic_binary(Path(path)) as handle:
        torch.save({"format": FORMAT, **payload}, handle)


def load(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint (no code runs: weights_only); errors are `CheckpointError`s."""
    path = Path(path)
    if path.is_dir():
        for name in (BEST, LAST):
            if (path / name).is_file():
                path = path / name
                break
        else:
            raise CheckpointError(f"{path}: no {BEST} or {LAST} in this directory")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint") from None
    except Exception as error:  # torch raises many kinds for a file that is not a checkpoint
        raise CheckpointError(
            f"{path}: not a transduce checkpoint ({type(error).__name__})"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a transduce checkpoint (format {FORMAT} expected)")
    payload["path"] = str(path)
    return upgrade(payload)


def _version(payload: dict[str, Any]) -> tuple[int, ...]:
    """The transduce version that wrote a checkpoint, (0,) if it says none."""
    text = str((payload.get("versions") or {}).get("transduce") or "0")
    return tuple(int(part) for part in text.split(".") if part.isdigit()) or (0,)


def upgrade(payload: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint of an older transduce, its config in today's terms (the same model):
    before 0.3, `attention.type: local_m` had the Gaussian that is now `local_m_gaussian`."""
    attention = (payload.get("config") or {}).get("model", {}).get("attention")
    old = _version(payload) < (0, 3) and isinstance(attention, dict)
    if old and attention.get("type") == "local_m":
        attention["type"] = "local_m_gaussian"
    return payload


class Checkpointer:
    """The checkpoints of a run directory: `last.pt` after every validation (to resume),
    `best.pt` whenever the dev score improved (to decode and test)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir

    def resume_state(self) -> dict[str, Any]:
        """The last checkpoint, which must hold a training state."""
        state = load(self.run_dir / LAST)
        if "training" not in state:
            raise TransduceError(f"{state['path']}: has no training state to resume from")
        return state

    def save(self, payload: dict[str, Any], improved: bool) -> None:
        save(self.run_dir / LAST, payload)
        if improved:
            save(self.run_dir / BEST, payload)

    def load_best(self) -> dict[str, Any]:
        return load(self.run_dir / BEST)
