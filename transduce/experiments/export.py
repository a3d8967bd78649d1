"""An experiment's results without its checkpoints (`transduce experiment export EXP_DIR
DEST`), small enough to commit (e.g. to results/EXPERIMENT/ of a repository), from which
`transduce experiment report DEST` gives the same table as from EXP_DIR.

DEST gets what the report reads and nothing else: cells.json; each finished run's
train.json and test.predictions; each up-to-date ensemble's ensemble.json and
test.predictions; and, when the experiment scores metrics again (`score:`), each run's
test split as runs/CELL/data/test.tsv (the report scores test.predictions against it).
DEST/export.json lists every file it wrote with its sha256: an export again replaces
those (if unchanged since), and refuses, before copying anything, to overwrite any other
file. One export into a DEST at a time (a lock beside it, `.DEST.export.lock`). Before
it copies, an export records in export.json (`pending`) the sha256 of each file it is
about to write; each file is replaced whole (write and rename), so an export cut short (a
crash, a kill) leaves every file either as before or as it meant to write it (and maybe
a temporary file beside it). An export of the same EXP_DIR again accepts both, removes
the temporaries and finishes it; an export of another EXP_DIR is refused until then,
since the cut-short one may have left a cell's files half replaced.

Exports into one DEST add up: a grid run in parts, on machines that may not come back,
is exported part by part (each machine's EXP_DIR has run some cells; the others are
pending there). The files of a run or ensemble that this EXP_DIR has not finished stay
as an earlier export wrote them, and where DEST has it done, so does its entry in DEST's
cells.json: a cell stays done while its train.json is in DEST, an ensemble (done, or with
no dev scores) while its ensemble.json describes DEST's members (`ensembles.up_to_date`;
a member trained again since leaves it stale, and its entry is this EXP_DIR's). A cell or
ensemble that this EXP_DIR has finished replaces DEST's. The grid may have grown since
(a system added); an export of a grid that lacks some of DEST's cells or ensembles is
refused, before anything is copied. export.json's `sources` lists the paths of
the EXP_DIRs exported into DEST (each once, the latest last; `source`: the latest), so
parts run in one path on different machines show as one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transduce import runs
from transduce.errors import ConfigError
from transduce.experiments import ensembles, report
from transduce.experiments.runner import (
    DONE,
    RUNS,
    STATE,
    finished,
    read_state,
    run_report,
    state_problem,
)
from transduce.experiments.spec import Experiment

MANIFEST = "export.json"
SCHEMA = "transduce.experiment-export/1"


def files(directory: Path) -> dict[str, Path]:
    """What the report of `directory` needs: DEST-relative path: the file to copy."""
    experiment = read_state(directory)
    out = {STATE: directory / STATE}
    for cell in experiment.cells:
        run_dir = directory / RUNS / cell.id
        if not finished(run_dir):
            continue
        for name in (runs.REPORT, runs.PREDICTIONS):
            if (run_dir / name).is_file():
                out[f"{RUNS}/{cell.id}/{name}"] = run_dir / name
        if experiment.score:
            test = _test_split(run_dir, run_report(run_dir) or runs.RunReport())
            if test is not None:
                out[f"{RUNS}/{cell.id}/{runs.DATA}/test.tsv"] = test
    for group in ensembles.groups(experiment):
        if ensembles.up_to_date(directory, group):
            for name in (ensembles.RECORD, ensembles.PREDICTIONS):
                out[f"{ensembles.ENSEMBLES}/{group.id}/{name}"] = (
                    directory / ensembles.ENSEMBLES / group.id / name
                )
    return out


def _test_split(run_dir: Path, run: runs.RunReport) -> Path | None:
    """The test split the run was tested on (as `report.rescore` finds it), if here."""
    from transduce.io import sha256_file

    expected = (run.data.get("outputs") or {}).get("test.tsv")
    for candidate in report.test_candidates(run_dir, run):
        if candidate.is_file() and (expected is None or sha256_file(candidate) == expected):
            return candidate
    return None


def _manifest(destination: Path) -> tuple[dict[str, str], dict[str, str], str | None]:
    """What an earlier export wrote in `destination`: its files (relative path: sha256),
    and, where an export was cut short, the files it was about to write (`pending`) and
    its EXP_DIR (None: none was cut short)."""
    path = destination / MANIFEST
    if not path.exists():
        return {}, {}, None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("schema") != SCHEMA:
            raise ValueError
        files = {str(k): str(v) for k, v in data["files"].items()}
        pending = {str(k): str(v) for k, v in (data.get("pending") or {}).items()}
        return files, pending, (str(data["source"]) if pending else None)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise ConfigError(
            f"{path}: not written by `transduce experiment export`; will not overwrite it "
            "(choose another DEST)"
        ) from None


def export(directory: Path, destination: Path) -> dict[str, str]:
    """Copy what the report of `directory` needs into `destination` (see the module
    docstring); the files written (relative path: sha256).

    Raises:
        ConfigError: not an experiment directory, DEST not a directory, or a file in DEST
            that an export did not write, or that changed since, or an export of another
            EXP_DIR cut short there (nothing is copied).
        TransduceError: another export into DEST is under way.
    """
    from transduce.locking import DirectoryLock

    directory, destination = Path(directory), Path(destination)
    wanted = files(directory)
    if destination.exists() and not destination.is_dir():
        raise ConfigError(f"{destination}: exists and is not a directory")
    if destination.resolve() == directory.resolve():
        raise ConfigError(f"{destination}: is the experiment directory itself")
    parent = destination.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    with DirectoryLock(parent / f".{destination.name}.export.lock", destination):
        return _export(directory, destination, wanted)


def _export(directory: Path, destination: Path, wanted: dict[str, Path]) -> dict[str, str]:
    """`export`, with DEST's lock held."""
    from transduce.io import atomic_binary, atomic_write_text, sha256_file

    state_bytes = wanted[STATE].read_bytes()  # read once: a running grid may change it
    here = str(directory.resolve())
    recorded, pending, cut_short = (
        _manifest(destination) if destination.is_dir() else ({}, {}, None)
    )
    if cut_short is not None and cut_short != here:
        raise ConfigError(
            f"{destination / MANIFEST}: an export of {cut_short} into it was cut short; "
            "export that again to finish it (or put DEST back as it was before it, e.g. "
            "with git)"
        )
    accepted = {name: {recorded.get(name), pending.get(name)} for name in {*recorded, *pending}}
    for name in wanted:
        target = destination / name
        if target.exists() and sha256_file(target) not in accepted.get(name, ()):
            raise ConfigError(
                f"{target}: exists and was not written by an export (or changed since); "
                "will not overwrite it (choose another DEST, or remove it)"
            )
    earlier = _earlier_state(destination, accepted)
    state = json.loads(state_bytes.decode("utf-8"))
    lost = sorted(_grid(earlier) - _grid(state)) if earlier is not None else []
    if lost:
        raise ConfigError(
            f"{destination / STATE}: an export of another grid than {directory}'s, with "
            f"{len(lost)} cells or ensembles it does not have ({', '.join(lost[:3])}"
            f"{', ...' if len(lost) > 3 else ''}); will not merge them (choose another DEST)"
        )
    sources = [s for s in (_earlier_sources(destination) if accepted else []) if s != here]
    sources.append(here)

    def manifest(files: dict[str, str], pending: dict[str, str] | None = None) -> None:
        data: dict[str, Any] = {"schema": SCHEMA, "source": here, "sources": sources}
        data["files"] = dict(sorted(files.items()))
        if pending:
            data["pending"] = dict(sorted(pending.items()))
        atomic_write_text(destination / MANIFEST, json.dumps(data, indent=1) + "\n")

    destination.mkdir(exist_ok=True)
    _remove_temporaries(destination, [*wanted, *accepted, MANIFEST])
    kept = _earlier_files(destination, recorded, pending)
    copies = {name: source for name, source in wanted.items() if name != STATE}
    about = {name: sha256_file(source) for name, source in copies.items()}
    manifest(kept, about)  # before the first copy: the next export accepts what it leaves
    out = {}
    for name, source in copies.items():
        content = source.read_bytes()
        if hashlib.sha256(content).hexdigest() != about[name]:
            raise ConfigError(f"{source}: changed during the export; export again")
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        with atomic_binary(target) as handle:
            handle.write(content)
        out[name] = about[name]
    if earlier is None:
        new_state = state_bytes
    else:  # merged with the earlier exports' (`_merge_state`), once the runs are in DEST
        state = _merge_state(state, earlier, destination, read_state(directory))
        new_state = (json.dumps(state, indent=1) + "\n").encode("utf-8")
    state_digest = hashlib.sha256(new_state).hexdigest()
    manifest({**kept, **out}, {STATE: state_digest})
    with atomic_binary(destination / STATE) as handle:
        handle.write(new_state)
    out[STATE] = state_digest
    manifest({**kept, **out})
    return out


def _remove_temporaries(destination: Path, names: list[str]) -> None:
    """Remove the temporary files that a killed export left beside `names` in DEST."""
    from transduce.io import clean, stale_temporaries

    folders: dict[Path, list[str]] = {}
    for name in names:
        path = destination / name
        folders.setdefault(path.parent, []).append(path.name)
    for folder, base in folders.items():
        clean(stale_temporaries(folder, base))


def _earlier_files(
    destination: Path, recorded: dict[str, str], pending: dict[str, str]
) -> dict[str, str]:
    """The files of the earlier exports that are in DEST (relative path: sha256): as
    recorded, or as an export cut short wrote them (a file changed since keeps its
    recorded sha256, so that an export refuses to overwrite it)."""
    from transduce.io import sha256_file

    out = {}
    for name in sorted({*recorded, *pending}):
        path = destination / name
        if not path.is_file():
            continue
        if name in pending and sha256_file(path) == pending[name]:
            out[name] = pending[name]
        elif name in recorded:
            out[name] = recorded[name]
    return out


def _earlier_state(destination: Path, written: dict[str, Any]) -> dict[str, Any] | None:
    """DEST's cells.json as an earlier export wrote it (None: none there)."""
    if STATE not in written or not (destination / STATE).is_file():
        return None
    try:
        data = json.loads((destination / STATE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if state_problem(data) is None else None


def _grid(state: dict[str, Any]) -> set[str]:
    """The ids of a cells.json's cells and ensembles (a later export into one DEST has
    every one of the earlier's, and may have more: a grid that grew)."""
    return {
        str(entry.get("id"))
        for entry in [*(state.get("cells") or []), *(state.get("ensembles") or [])]
        if isinstance(entry, dict)
    }


def _earlier_sources(destination: Path) -> list[str]:
    """The EXP_DIRs exported into DEST before (an export.json before `sources`: its
    `source`)."""
    data = json.loads((destination / MANIFEST).read_text(encoding="utf-8"))
    sources = data.get("sources")
    if isinstance(sources, list):
        return [str(s) for s in sources]
    return [str(data["source"])] if data.get("source") else []


def _merge_state(
    state: dict[str, Any], earlier: dict[str, Any], destination: Path, experiment: Experiment
) -> dict[str, Any]:
    """This EXP_DIR's cells.json, with the entries of the cells and ensembles that it has
    not finished and an earlier export into DEST had (see the module docstring)."""
    merged = {
        **state,
        "cells": _kept(
            state["cells"], earlier.get("cells"), (DONE,),
            lambda cell: finished(destination / RUNS / cell),
        ),
    }  # fmt: skip
    if state.get("ensembles"):
        done = (DONE, ensembles.NO_DEV)
        up = {  # DEST's ensembles that still describe DEST's members
            e["id"] for e in ensembles.states(experiment, destination, []) if e["status"] in done
        }
        merged["ensembles"] = _kept(
            state["ensembles"], earlier.get("ensembles"), done, up.__contains__
        )
    return merged


def _kept(
    entries: list[dict[str, Any]],
    earlier: list[Any] | None,
    done: tuple[str, ...],
    still_there: Callable[[str], bool],
) -> list[dict[str, Any]]:
    """`entries`, each not `done` replaced by the earlier entry of its id where that one is
    `done` and its files are `still_there` in DEST."""
    before = {e["id"]: e for e in earlier or [] if isinstance(e, dict) and "id" in e}
    out = []
    for entry in entries:
        old = before.get(entry.get("id"))
        if (
            entry.get("status") not in done
            and old is not None
            and old.get("status") in done
            and still_there(entry["id"])
        ):
            entry = old
        out.append(entry)
    return out
