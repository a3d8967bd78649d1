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

import json
import warnings
from pathlib import Path
from typing import Any

import torch

from transduce.errors import CheckpointError, TransduceError
from transduce.io import atomic_binary, atomic_write_text, fault_point, remove, stale_temporaries

FORMAT = "transduce.checkpoint/1"
BEST, LAST = "best.pt", "last.pt"
REQUIRED = ("model_name", "config", "model", "vocab", "sides")


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
        with warnings.catch_warnings():  # torch warns before refusing a plain pickle
            warnings.simplefilter("ignore")
            payload = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint") from None
    except IsADirectoryError:
        raise CheckpointError(f"{path}: is a directory, not a checkpoint") from None
    except MemoryError:
        raise CheckpointError(f"{path}: too large to load into memory") from None
    except Exception as error:  # torch raises many kinds for a file that is not a checkpoint
        raise CheckpointError(
            f"{path}: not a transduce checkpoint ({type(error).__name__})"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a transduce checkpoint (format {FORMAT} expected)")
    missing = [key for key in REQUIRED if key not in payload]
    if missing:
        raise CheckpointError(f"{path}: incomplete checkpoint, no {', '.join(missing)} entry")
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


def _updates(payload: dict[str, Any]) -> tuple[int | None, int | None]:
    """(the update a checkpoint was written at, the best update it records)."""
    progress = (payload.get("training") or {}).get("progress") or {}
    return progress.get("update"), progress.get("best_update")


def _run_id(payload: dict[str, Any]) -> str | None:
    """The id of the run that wrote a checkpoint (None before transduce 0.3.1)."""
    return ((payload.get("training") or {}).get("progress") or {}).get("run_id")


class Checkpointer:
    """The checkpoints of a run directory: `last.pt` after every validation (to resume),
    `best.pt` whenever the dev score improved (to decode and test).

    A validation that improved writes `last.pt`, then `best.pt`, each atomically. Killed
    between the two, `last.pt` records a best update that `best.pt` does not hold yet; but
    then the best update is last.pt's own, so `check` repairs it by copying `last.pt`
    (the same payload the validation would have written). Any other disagreement means the
    best weights are gone, and is refused.
    """

    def __init__(
        self, run_dir: Path, keep_best: int = 0, keep_last: int = 0, lower_is_better: bool = True
    ) -> None:
        self.run_dir = run_dir
        self.keep_best, self.keep_last = keep_best, keep_last
        self.lower_is_better = lower_is_better

    def resume_state(self) -> dict[str, Any]:
        """The last checkpoint, which must hold a training state."""
        if not (self.run_dir / LAST).exists():
            raise CheckpointError(
                f"{self.run_dir / LAST}: no such checkpoint (the run has not reached its first "
                "validation): start it again without --resume"
            )
        state = load(self.run_dir / LAST)
        if "training" not in state:
            raise TransduceError(f"{state['path']}: has no training state to resume from")
        return state

    def stale_temporaries(self) -> list[Path]:
        """Temporary files that a killed write left behind (call with the run's lock)."""
        names = (LAST, BEST, "config.yaml", "train.json", "test.predictions", "data")
        found = stale_temporaries(self.run_dir, names)
        if (self.run_dir / KEPT).is_dir():  # the folder is ours: any of our temporaries
            found += stale_temporaries(self.run_dir / KEPT)
        return found

    def check(self, state: dict[str, Any]) -> list[str]:
        """Bring `best.pt` in line with `state` (last.pt's) or refuse: what was repaired.

        Raises:
            CheckpointError: best.pt is not the best update last.pt records, and that
                update is not last.pt's own, so its weights are nowhere.
        """
        update, best = _updates(state)
        path = self.run_dir / BEST
        if best is None:  # stopped (Ctrl-C) before its first validation: no best yet
            return []
        try:
            other = load(path)
            held: int | None = _updates(other)[0]
            problem = None if held == best else f"holds update {held}"
            if problem is None and _run_id(other) != _run_id(state):
                problem = "is another run's"
        except CheckpointError as error:
            reason = str(error).removeprefix(f"{path}: ")
            held, problem = None, "missing" if not path.exists() else f"unreadable ({reason})"
        if problem is None:
            return []
        if best is not None and best == update:
            save(path, {k: v for k, v in state.items() if k not in ("format", "path")})
            return [
                f"{path}: was {problem}, but the best dev score is last.pt's (update {best}), "
                "cut short before best.pt was written; copied last.pt to best.pt"
            ]
        raise CheckpointError(
            f"{path}: {problem}, but last.pt records the best dev score at update {best}, "
            "whose weights are in no checkpoint (was best.pt replaced or deleted?); "
            "start the run again in a new --out"
        )

    def save(self, payload: dict[str, Any], improved: bool, score: float | None = None) -> None:
        """After a validation (`score`: its dev score): the kept checkpoints, if any, then
        last.pt, then best.pt if it `improved`. Between validations (a Ctrl-C): last.pt."""
        if score is not None and (self.keep_best or self.keep_last):
            self._keep(payload, score)
        save(self.run_dir / LAST, payload)
        fault_point("after-last")
        if improved:
            save(self.run_dir / BEST, payload)
        fault_point("after-best")

    def _keep(self, payload: dict[str, Any], score: float) -> None:
        """Write `checkpoints/update-N.pt` (the weights, without the optimizer state), add
        it to `checkpoints/index.json`, and remove the checkpoints that are neither among
        the `keep_best` best nor the `keep_last` last. Written before last.pt: a run killed
        in between redoes this validation on resume and writes the same files again."""
        folder = self.run_dir / KEPT
        folder.mkdir(exist_ok=True)
        update = _updates(payload)[0]
        assert update is not None
        progress = (payload.get("training") or {}).get("progress") or {}
        slim = {k: v for k, v in payload.items() if k not in ("training", "format", "path")}
        save(folder / kept_name(update), {**slim, "training": {"progress": progress}})
        entries = [e for e in read_index(self.run_dir) if e["update"] != update]
        entries.append({"update": update, "score": score, "file": kept_name(update)})
        kept = chosen(entries, "best", self.keep_best, self.lower_is_better)
        kept += chosen(entries, "last", self.keep_last, self.lower_is_better)
        entries = sorted({e["update"]: e for e in kept}.values(), key=lambda e: e["update"])
        index = {"select": "lower" if self.lower_is_better else "higher", "kept": entries}
        atomic_write_text(folder / INDEX, json.dumps(index, indent=1) + "\n")
        names = {e["file"] for e in entries}
        for path in folder.glob("update-*.pt"):
            if path.name not in names:
                remove(path)

    def load_best(self, update: int | None = None) -> dict[str, Any]:
        """best.pt, which must hold `update` when one is given."""
        state = load(self.run_dir / BEST)
        if update is not None and _updates(state)[0] != update:
            raise CheckpointError(
                f"{state['path']}: holds update {_updates(state)[0]}, not the best update "
                f"{update}; resume the run (--resume) to repair it"
            )
        return state


KEPT, INDEX = "checkpoints", "index.json"


def kept_name(update: int) -> str:
    return f"update-{update:08d}.pt"


def read_index(run_dir: Path) -> list[dict[str, Any]]:
    """The kept checkpoints of a run ([] if none): {"update", "score", "file"} each."""
    path = run_dir / KEPT / INDEX
    if not path.is_file():
        return []
    try:
        return list(json.loads(path.read_text(encoding="utf-8"))["kept"])
    except (ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"{path}: unreadable ({error})") from None


def index_direction(run_dir: Path) -> bool:
    """Whether lower dev scores are better in a run's kept checkpoints."""
    path = run_dir / KEPT / INDEX
    return json.loads(path.read_text(encoding="utf-8")).get("select", "lower") == "lower"


def chosen(
    entries: list[dict[str, Any]], by: str, count: int, lower_is_better: bool
) -> list[dict[str, Any]]:
    """The `count` best entries by score (ties: the later update), or the `count` last."""
    if count <= 0:
        return []
    if by == "last":
        return sorted(entries, key=lambda e: e["update"])[-count:]
    sign = 1 if lower_is_better else -1
    return sorted(entries, key=lambda e: (sign * e["score"], -e["update"]))[:count]


def clean(paths: list[Path]) -> list[str]:
    """Remove stale temporaries; what was removed, as messages."""
    for path in paths:
        remove(path)
    return [f"removed {path.name}, left by an interrupted write" for path in paths]
