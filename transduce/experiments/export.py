"""An experiment's results without its checkpoints (`transduce experiment export EXP_DIR
DEST`), small enough to commit (e.g. to results/EXPERIMENT/ of a repository), from which
`transduce experiment report DEST` gives the same table as from EXP_DIR.

DEST gets what the report reads and nothing else: cells.json; each finished run's
train.json and test.predictions; each up-to-date ensemble's ensemble.json and
test.predictions; and, when the experiment scores metrics again (`score:`), each run's
test split as runs/CELL/data/test.tsv (the report scores test.predictions against it).
DEST/export.json lists every file it wrote with its sha256: an export again replaces
those (if unchanged since), and refuses, before copying anything, to overwrite any other
file. Before it copies, an export records in export.json (`pending`) the sha256 of each
file it is about to write; each file is replaced whole (write and rename), so an export
cut short (a crash, the machine gone) leaves every file either as before or as it meant
to write it, and the next export accepts both.

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


def _manifest(destination: Path) -> dict[str, set[str]]:
    """The files an earlier export wrote in `destination` (relative path: each sha256 it
    may have: as written, or as an export cut short was about to write it)."""
    path = destination / MANIFEST
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("schema") != SCHEMA:
            raise ValueError
        out = {str(k): {str(v)} for k, v in data["files"].items()}
        for name, digest in (data.get("pending") or {}).items():
            out.setdefault(str(name), set()).add(str(digest))
        return out
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
            that an export did not write, or that changed since (nothing is copied).
    """
    from transduce.io import atomic_binary, atomic_write_text, sha256_file

    directory, destination = Path(directory), Path(destination)
    wanted = files(directory)
    state_bytes = wanted[STATE].read_bytes()  # read once: a running grid may change it
    if destination.exists() and not destination.is_dir():
        raise ConfigError(f"{destination}: exists and is not a directory")
    if destination.resolve() == directory.resolve():
        raise ConfigError(f"{destination}: is the experiment directory itself")
    written = _manifest(destination) if destination.is_dir() else {}
    for name in wanted:
        target = destination / name
        if target.exists() and sha256_file(target) not in written.get(name, ()):
            raise ConfigError(
                f"{target}: exists and was not written by an export (or changed since); "
                "will not overwrite it (choose another DEST, or remove it)"
            )
    earlier = _earlier_state(destination, written)
    state = json.loads(state_bytes.decode("utf-8"))
    lost = sorted(_grid(earlier) - _grid(state)) if earlier is not None else []
    if lost:
        raise ConfigError(
            f"{destination / STATE}: an export of another grid than {directory}'s, with "
            f"{len(lost)} cells or ensembles it does not have ({', '.join(lost[:3])}"
            f"{', ...' if len(lost) > 3 else ''}); will not merge them (choose another DEST)"
        )
    sources = _earlier_sources(destination) if written else []
    here = str(directory.resolve())
    sources = [s for s in sources if s != here] + [here]
    contents = {name: source.read_bytes() for name, source in wanted.items() if name != STATE}
    destination.mkdir(parents=True, exist_ok=True)
    kept = _present(destination, written)
    pending = {name: hashlib.sha256(content).hexdigest() for name, content in contents.items()}

    def manifest(files: dict[str, str], pending: dict[str, str] | None = None) -> None:
        data = {
            "schema": SCHEMA,
            "source": here,
            "sources": sources,
            "files": dict(sorted(files.items())),
        }
        if pending:
            data["pending"] = pending
        atomic_write_text(destination / MANIFEST, json.dumps(data, indent=1) + "\n")

    manifest(kept, pending)  # before the first copy: an export cut short is resumable
    out = {}
    for name, content in contents.items():
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        with atomic_binary(target) as handle:
            handle.write(content)
        out[name] = pending[name]
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
    manifest({**_present(destination, written), **out})
    return out


def _present(destination: Path, written: dict[str, set[str]]) -> dict[str, str]:
    """The files an earlier export wrote that are in DEST as it wrote them (relative
    path: sha256)."""
    from transduce.io import sha256_file

    out = {}
    for name, digests in written.items():
        if (destination / name).is_file():
            digest = sha256_file(destination / name)
            if digest in digests:
                out[name] = digest
    return out


def _earlier_state(destination: Path, written: dict[str, set[str]]) -> dict[str, Any] | None:
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
