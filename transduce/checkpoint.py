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

import dataclasses
import json
import warnings
from pathlib import Path
from typing import Any

import torch

from transduce import runs
from transduce.errors import CheckpointError, ConfigError, TransduceError
from transduce.faults import fault_point
from transduce.io import atomic_binary, atomic_write_text, remove, sha256_file, stale_temporaries
from transduce.models import MODELS

FORMAT = "transduce.checkpoint/1"
BEST, LAST, FINAL = runs.BEST, runs.LAST, runs.FINAL
REQUIRED = ("model_name", "config", "model", "vocab", "sides")


def save(path: str | Path, payload: dict[str, Any]) -> None:
    """Write `payload` to a temporary file beside `path`, then rename it into place."""
    with atomic_binary(Path(path)) as handle:
        torch.save({"format": FORMAT, **payload}, handle)


def load(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint (no code runs: weights_only); errors are `CheckpointError`s. A run
    directory means its model: final.pt (`train.average_best_last`), else best.pt, else
    last.pt."""
    path = Path(path)
    if path.is_dir():
        for name in (FINAL, BEST, LAST):
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
    before 0.3, `attention.type: local_m` had the Gaussian that is now `local_m_gaussian`;
    before 0.4, `train.bf16` was what `train.precision` is (true: bf16, false: fp32)."""
    attention = (payload.get("config") or {}).get("model", {}).get("attention")
    old = _version(payload) < (0, 3) and isinstance(attention, dict)
    if old and attention.get("type") == "local_m":
        attention["type"] = "local_m_gaussian"
    if isinstance(payload.get("config"), dict):
        from transduce.config import renamed

        payload["config"] = renamed(payload["config"])
    return payload


def progress_of(payload: dict[str, Any]) -> dict[str, Any]:
    """The training progress a checkpoint records ({} if none)."""
    return (payload.get("training") or {}).get("progress") or {}


def _updates(payload: dict[str, Any]) -> tuple[int | None, int | None]:
    """(the update a checkpoint was written at, the best update it records)."""
    progress = progress_of(payload)
    return progress.get("update"), progress.get("best_update")


def update_of(payload: dict[str, Any]) -> int | None:
    """The update a checkpoint was written at (None: not a training checkpoint)."""
    return _updates(payload)[0]


def _run_id(payload: dict[str, Any]) -> str | None:
    """The id of the run that wrote a checkpoint (None before transduce 0.3.1)."""
    return progress_of(payload).get("run_id")


def _field(payload: dict[str, Any], key: str) -> Any:
    value: Any = payload
    for part in key.split("."):
        value = (value or {}).get(part) if isinstance(value, dict) else None
    return value


def with_defaults(options: Any, defaults: dict[str, Any]) -> Any:
    """Options written by an earlier version (a checkpoint's, a run's train.json) with
    every option they lack at its default (recursively)."""
    if not isinstance(options, dict):
        return options
    merged = dict(options)
    for key, default in defaults.items():
        value = options.get(key, default)
        merged[key] = with_defaults(value, default) if isinstance(default, dict) else value
    return merged


def model_options(payload: dict[str, Any]) -> Any:
    """`config.model` of a checkpoint with the options added since it was written at their
    defaults (which keep the old behaviour), so that a checkpoint from before an option
    and one from after compare equal when they are the same model."""
    options = _field(payload, "config.model")
    family = MODELS.get(payload.get("model_name") or "")
    if family is None or not isinstance(options, dict):
        return options
    defaults: Any = family.Config()  # a dataclass (every family's Config is one)
    return with_defaults(options, dataclasses.asdict(defaults))


def check_compatible(payloads: list[dict[str, Any]], fields: dict[str, str], why: str) -> None:
    """Raise a `CheckpointError` naming the first checkpoint whose `fields` (dotted keys,
    with what they are called) differ from the first one's (`config.model` compared with
    the options a checkpoint lacks at their defaults)."""
    first = payloads[0]
    for payload in payloads[1:]:
        for key, what in fields.items():
            mine, theirs = _field(payload, key), _field(first, key)
            if key == "config.model":
                mine, theirs = model_options(payload), model_options(first)
            if key in ABSENT_IS_FALSE:  # a checkpoint older than the option has none
                mine, theirs = bool(mine), bool(theirs)
            if mine != theirs:
                many = what.endswith("s")  # vocabularies, BPE models; a family, a tokenization
                raise CheckpointError(
                    f"{payload.get('path')}: its {what} {'differ' if many else 'differs'} "
                    f"from {'those' if many else 'that'} of {first.get('path')}; {why}"
                )


# what decoding reads besides the weights: one tokenization and one pair of vocabularies
ABSENT_IS_FALSE = {"config.data.source_eos"}
DECODING_FIELDS = {
    "vocab": "vocabularies",
    "sides": "tokenization",
    "subwords": "BPE models",
    "config.data.source_eos": "source end symbol",
}


class Checkpointer:
    """The checkpoints of a run directory: `last.pt` after every validation (to resume),
    `best.pt` whenever the dev score improved (to decode and test, unless the run averages
    it with `last.pt` at its end into `final.pt`, `train.average_best_last`).

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
        names = (*runs.FILES, runs.DATA, runs.MARKER)
        found = stale_temporaries(self.run_dir, names)
        kept = self.run_dir / KEPT
        if kept.is_dir() and not kept.is_symlink():  # the folder is ours: our temporaries
            found += stale_temporaries(kept)
        return found

    def check_kept_folder(self) -> None:
        """Refuse a `checkpoints/` that is a link (to a bigger disk, or a folder shared by
        runs) when the run keeps checkpoints: pruning deletes files there, and only files
        of the run's own folder may be."""
        kept = self.run_dir / KEPT
        if (self.keep_best or self.keep_last) and kept.is_symlink():
            raise ConfigError(
                f"{kept}: is a symbolic link; kept checkpoints (train.keep_best, keep_last) "
                "are written in the run directory's own folder: remove the link"
            )
        if self.keep_best or self.keep_last:
            read_kept(self.run_dir)  # a damaged index is refused now, not at a validation

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
                f"{path}: {problem}, but the best dev score is last.pt's (update {best}), "
                "cut short before best.pt was written; copied last.pt to best.pt"
            ]
        raise CheckpointError(
            f"{path}: {problem}, but last.pt records the best dev score at update {best}, "
            "whose weights are in no checkpoint (was best.pt replaced or deleted?); "
            "start the run again in a new --out"
        )

    def save(self, payload: dict[str, Any], improved: bool, score: float | None = None) -> None:
        """After a validation (`score`: its dev score): the kept checkpoint, if any, then
        last.pt, then best.pt if it `improved`, then the pruning of the kept ones.
        Between validations (a Ctrl-C): last.pt only. A final.pt of an earlier session
        (`train.average_best_last`) is removed first: it averages a last.pt that is no
        longer the last, and the run's model is best.pt again until training ends; and
        an earlier session's train.json says no more that the run stopped
        (`runs.training_on`)."""
        runs.training_on(self.run_dir)  # first: killed in between, final.pt is still there
        remove(self.run_dir / FINAL)
        keeping = score is not None and bool(self.keep_best or self.keep_last)
        if keeping:
            assert score is not None
            self._keep(payload, score)
        save(self.run_dir / LAST, payload)
        fault_point("after-last")
        if improved:
            save(self.run_dir / BEST, payload)
        fault_point("after-best")
        if keeping:
            self._prune()

    def _index(self, entries: list[dict[str, Any]], run_id: str | None) -> None:
        index = {
            "run_id": run_id,
            "select": "lower" if self.lower_is_better else "higher",
            "keep_best": self.keep_best,
            "keep_last": self.keep_last,
            "kept": sorted(entries, key=lambda e: e["update"]),
        }
        atomic_write_text(self.run_dir / KEPT / INDEX, json.dumps(index, indent=1) + "\n")

    def _keep(self, payload: dict[str, Any], score: float) -> None:
        """Write `checkpoints/update-N.pt` (the weights, without the optimizer state) and
        add it to `checkpoints/index.json`. Written before last.pt: a run killed in between
        redoes this validation on resume and writes it again. Entries of another run (a
        fresh run in the same directory) and of later updates (a redo that went elsewhere)
        are dropped."""
        folder = self.run_dir / KEPT
        folder.mkdir(exist_ok=True)
        update = update_of(payload)
        assert update is not None
        progress = progress_of(payload)
        slim = {k: v for k, v in payload.items() if k not in ("training", "format", "path")}
        index = read_kept(self.run_dir)
        save(folder / kept_name(update), {**slim, "training": {"progress": progress}})
        same_run = index.get("run_id") == progress.get("run_id")
        old = index.get("kept", [])
        entries = [e for e in old if same_run and e["update"] < update]
        entries.append(
            {
                "update": update,
                "score": score,
                "file": kept_name(update),
                "sha256": sha256_file(folder / kept_name(update)),
            }
        )
        self._index(entries, progress.get("run_id"))
        self._remove_ours([e for e in old if e not in entries], entries)

    def _remove_ours(self, dropped: list[dict[str, Any]], kept: list[dict[str, Any]]) -> None:
        """Delete the files of `dropped` index entries: only those our index names, still
        with the content it recorded (an entry of an index before the hashes: by name)."""
        keep = {e["file"] for e in kept}
        for entry in dropped:
            name = entry.get("file")
            if not isinstance(name, str) or name in keep or name != Path(name).name:
                continue
            path = self.run_dir / KEPT / name
            if not path.is_file() or path.is_symlink():
                continue
            if "sha256" in entry and sha256_file(path) != entry["sha256"]:
                continue  # not the file we wrote
            remove(path)

    def _prune(self) -> None:
        """Keep the `keep_best` best and `keep_last` last in the index, and only their
        files (once last.pt and best.pt are written)."""
        index = read_kept(self.run_dir)
        entries = index.get("kept", [])
        kept = chosen(entries, "best", self.keep_best, self.lower_is_better)
        kept += chosen(entries, "last", self.keep_last, self.lower_is_better)
        unique = list({e["update"]: e for e in kept}.values())
        self._index(unique, index.get("run_id"))
        self._remove_ours([e for e in entries if e not in unique], unique)

    def load_best(self, update: int | None = None) -> dict[str, Any]:
        """best.pt, which must hold `update` when one is given."""
        state = load(self.run_dir / BEST)
        if update is not None and _updates(state)[0] != update:
            raise CheckpointError(
                f"{state['path']}: holds update {_updates(state)[0]}, not the best update "
                f"{update}; resume the run (--resume) to repair it"
            )
        return state


KEPT, INDEX = runs.KEPT, runs.KEPT_INDEX


def kept_name(update: int) -> str:
    return f"update-{update:08d}.pt"


def read_kept(run_dir: Path) -> dict[str, Any]:
    """A run's `checkpoints/index.json` ({} if none): `kept` ({"update", "score", "file"}
    each), `select` (lower or higher is better), `keep_best`, `keep_last`, `run_id`."""
    path = run_dir / KEPT / INDEX
    if not path.is_file():
        return {}
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path}: unreadable ({error})") from None
    if not isinstance(index, dict) or not isinstance(index.get("kept"), list):
        raise CheckpointError(f"{path}: not an index of kept checkpoints (no 'kept' list)")
    for key in ("keep_best", "keep_last"):
        value = index.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, int):
            raise CheckpointError(f"{path}: its {key!r} is {value!r}, not a whole number")
    if index.get("select", "lower") not in ("lower", "higher"):
        raise CheckpointError(f"{path}: its 'select' is {index['select']!r}, not lower or higher")
    for number, entry in enumerate(index["kept"], 1):
        problem = _entry_problem(entry)
        if problem:
            raise CheckpointError(
                f"{path}: kept entry {number} {problem}; it is not the index this run wrote"
            )
    return index


def _entry_problem(entry: Any) -> str | None:
    """What is wrong with an entry of `index.json` (None: nothing)."""
    if not isinstance(entry, dict):
        return "is not an object"
    kinds = {"update": (int,), "score": (int, float), "file": (str,)}
    for key, kind in kinds.items():
        value = entry.get(key)
        if key not in entry:
            return f"has no {key!r}"
        if isinstance(value, bool) or not isinstance(value, kind):
            what = "number" if key == "score" else kind[0].__name__
            return f"has {key!r} {value!r}, not a {what}"
    if entry["file"] != Path(entry["file"]).name or not entry["file"].endswith(".pt"):
        return f"has 'file' {entry['file']!r}, not the name of a checkpoint in its folder"
    if "sha256" in entry and not isinstance(entry["sha256"], str):
        return f"has 'sha256' {entry['sha256']!r}, not a str"
    return None


def read_index(run_dir: Path) -> list[dict[str, Any]]:
    """The kept checkpoints of a run ([] if none): {"update", "score", "file"} each."""
    return list(read_kept(run_dir).get("kept", []))


def chosen(
    entries: list[dict[str, Any]], by: str, count: int, lower_is_better: bool
) -> list[dict[str, Any]]:
    """The `count` best entries by score (ties: the earlier update, as best.pt keeps the
    first of equal scores), or the `count` last."""
    if count <= 0:
        return []
    if by == "last":
        return sorted(entries, key=lambda e: e["update"])[-count:]
    sign = 1 if lower_is_better else -1
    return sorted(entries, key=lambda e: (sign * e["score"], e["update"]))[:count]
