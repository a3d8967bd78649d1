"""An experiment's results without its checkpoints (`transduce experiment export EXP_DIR
DEST`), small enough to commit (e.g. to results/EXPERIMENT/ of a repository), from which
`transduce experiment report DEST` gives the same table as from EXP_DIR.

DEST gets what the report reads and nothing else: cells.json; each finished run's
train.json and test.predictions; each up-to-date ensemble's ensemble.json and
test.predictions; and, when the experiment scores metrics again (`score:`), each run's
test split as runs/CELL/data/test.tsv (the report scores test.predictions against it).
DEST/export.json lists every file it wrote with its sha256: an export again replaces
those (if unchanged since), and refuses, before copying anything, to overwrite any other
file.
"""

from __future__ import annotations

import json
from pathlib import Path

from transduce import runs
from transduce.errors import ConfigError
from transduce.experiments import ensembles, report
from transduce.experiments.runner import RUNS, STATE, finished, read_state, run_report

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


def _manifest(destination: Path) -> dict[str, str]:
    """The files an earlier export wrote in `destination` (relative path: sha256)."""
    path = destination / MANIFEST
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("schema") != SCHEMA:
            raise ValueError
        return {str(k): str(v) for k, v in data["files"].items()}
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
    if destination.exists() and not destination.is_dir():
        raise ConfigError(f"{destination}: exists and is not a directory")
    if destination.resolve() == directory.resolve():
        raise ConfigError(f"{destination}: is the experiment directory itself")
    written = _manifest(destination) if destination.is_dir() else {}
    for name in wanted:
        target = destination / name
        if target.exists() and (name not in written or sha256_file(target) != written[name]):
            raise ConfigError(
                f"{target}: exists and was not written by an export (or changed since); "
                "will not overwrite it (choose another DEST, or remove it)"
            )
    out = {}
    for name, source in wanted.items():
        content = source.read_bytes()
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        with atomic_binary(target) as handle:
            handle.write(content)
        out[name] = sha256_file(target)
    kept = {
        name: digest
        for name, digest in written.items()
        if name not in out and (destination / name).is_file()
    }
    manifest = {"schema": SCHEMA, "source": str(directory.resolve()), "files": {**kept, **out}}
    atomic_write_text(destination / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    return out
