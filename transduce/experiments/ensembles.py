"""Ensembles of an experiment's seeds (the experiment file's `ensemble:`).

Once every seed of a (system, dataset) has finished, the seeds' models (each run's best.pt,
or its final.pt where it averaged, `train.average_best_last`) decode the test split as one
model (`transduce.ensemble`, as `transduce decode RUN_1 RUN_2 ...`), with the decoding
options of the runs' own `decode` section (beam, length penalty, ...), and the output is
scored exactly as a run scores its test split (`Task.evaluate`). The dev split is decoded
and scored the same way, as a run's validation scores it, so that what the ensemble adds
can be read on dev beside its members' own dev scores (`experiment report --dev`) without
looking at the test split. Each
ensemble is `python -m transduce.experiments.ensembles` in a process of its own (its
output in EXP_DIR/logs/SYSTEM.DATASET.ensemble.log), N at a time, on this machine, and
writes, in EXP_DIR/ensembles/SYSTEM.DATASET/:

    test.predictions   one output per test line, in the test split's order (as a run's)
    ensemble.json      the members (cell ids and their train.json's sha256), the test
                       and dev splits' sha256 (as the members' train.json record them),
                       the test and dev scores, the decoding options and the mean

ensemble.json is written last: an ensemble whose ensemble.json names the members as they
are now (and whose test.predictions is the one it describes) is up to date and is not
decoded again; a member run again (another train.json) makes it out of date, and the next
`experiment run` decodes it again. One written before ensembles scored the dev split (no
`dev` in its ensemble.json) still counts for the test table, and the next `experiment run`
decodes it again to add the dev scores (`needs_decoding`). Members validated on different
dev sets (another dev file, or `train.dev_subset` drawn with each run's own seed) make an
ensemble with `dev` null and the reason in `dev_skipped`. The report reads ensemble.json
alone.

With `ensemble: {tie_break_rules: true}` each (system, dataset) has a second group,
EXP_DIR/ensembles/SYSTEM.DATASET.tie-break/: the same members, each also decoded alone, and
where their outputs differ, the output of suffix rules learned from the real pairs of the
members' prepared training split if one of them wrote it (`transduce.rules`, as `decode
--tie-break-rules`); scored as above, its ensemble.json also has `tie_break_rules` (the
number of pairs, and the outputs changed on test and dev).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transduce import runs
from transduce.errors import EXIT_INTERRUPTED, TransduceError
from transduce.experiments.runner import (
    DONE,
    FAILED,
    INTERRUPTED,
    LOGS,
    PENDING,
    RUNS,
    Stopping,
    entry_seconds,
    finished,
    last_line,
    recorded_seconds,
)
from transduce.experiments.spec import Cell, Experiment
from transduce.io import child_environment
from transduce.runs import RunDir, RunReport

# an ensemble's outputs have the name of a run's (`transduce.runs.PREDICTIONS`)
ENSEMBLES, RECORD, PREDICTIONS = "ensembles", "ensemble.json", runs.PREDICTIONS
SCHEMA = "transduce.experiment-ensemble/1"
OUT_OF_DATE = "out of date"
TIE_BREAK = "tie-break"
NO_DEV = "no dev scores"


@dataclass(frozen=True)
class Group:
    """The seeds of one (system, dataset): one ensemble."""

    system: str
    dataset: str | None
    members: tuple[str, ...]  # cell ids, in the experiment's seed order
    mean: str
    tie_break: bool = False  # decoded as `decode --tie-break-rules` decodes an ensemble

    @property
    def id(self) -> str:
        """SYSTEM[.DATASET][.tie-break]: its directory's name under EXP_DIR/ensembles."""
        dataset = f".{self.dataset}" if self.dataset is not None else ""
        return self.system + dataset + (f".{TIE_BREAK}" if self.tie_break else "")

    @property
    def label(self) -> str:
        """Its row's name in the report."""
        rules = ", rule tie-break" if self.tie_break else ""
        return f"{self.system} (ensemble of {len(self.members)}{rules})"


@dataclass
class EnsembleOutcome:
    """What became of an ensemble in this session."""

    group: Group
    status: str
    seconds: float = 0.0
    error: str | None = None


def groups(experiment: Experiment) -> list[Group]:
    """The ensembles of an experiment, in its systems' and datasets' order."""
    if experiment.ensemble is None:
        return []
    out = []
    for system in experiment.systems:
        if system not in experiment.ensemble.systems:
            continue
        for dataset in experiment.datasets:
            members = tuple(
                c.id for c in experiment.cells if (c.system, c.dataset) == (system, dataset)
            )
            if members:
                out.append(Group(system, dataset, members, experiment.ensemble.mean))
                if experiment.ensemble.tie_break_rules:
                    out.append(Group(system, dataset, members, experiment.ensemble.mean, True))
    return out


def _sha256(path: Path) -> str | None:
    from transduce.io import sha256_file

    try:
        return sha256_file(path)
    except OSError:
        return None


def fingerprint(directory: Path, group: Group) -> list[dict[str, Any]]:
    """The members as they are now: each cell id and its train.json's sha256."""
    return [
        {"cell": m, "train_json_sha256": _sha256(RunDir(directory / RUNS / m).report)}
        for m in group.members
    ]


def record(directory: Path, group: Group) -> dict[str, Any] | None:
    """The group's ensemble.json (None: none, or unreadable)."""
    try:
        data = json.loads((directory / ENSEMBLES / group.id / RECORD).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def up_to_date(directory: Path, group: Group, data: dict[str, Any] | None = None) -> bool:
    """Whether the group's ensemble.json describes these members, this mean, and the
    test.predictions beside it."""
    data = record(directory, group) if data is None else data
    return (
        data is not None
        and data.get("members") == fingerprint(directory, group)
        and data.get("mean") == group.mean
        and data.get("test_predictions_sha256")
        == _sha256(directory / ENSEMBLES / group.id / PREDICTIONS)
    )


def has_dev(data: dict[str, Any] | None) -> bool:
    """Whether an ensemble.json has dealt with the dev split: its dev scores, or why it has
    none (`dev_skipped`; one written before ensembles scored the dev split has neither)."""
    return data is not None and "dev" in data


def needs_decoding(directory: Path, group: Group, data: dict[str, Any] | None = None) -> bool:
    """Whether `experiment run` decodes a group whose members have all finished: it is not
    up to date, or it is but has no dev scores and every member's model is still
    there (without them it cannot be decoded again, and its test scores count as they are:
    a failure is not tried at every run)."""
    data = record(directory, group) if data is None else data
    return not up_to_date(directory, group, data) or _dev_to_add(directory, group, data)


def _dev_to_add(directory: Path, group: Group, data: dict[str, Any] | None) -> bool:
    """Whether an up-to-date ensemble has no dev scores and can be decoded again for them
    (every member's model is still there)."""
    return not has_dev(data) and all(
        RunDir(directory / RUNS / m).model.is_file() for m in group.members
    )


def ready(directory: Path, group: Group) -> bool:
    """Whether every member has finished."""
    return all(finished(directory / RUNS / m) for m in group.members)


def _train_report(directory: Path, cell: str) -> RunReport:
    path = RunDir(directory / RUNS / cell).report
    try:
        return RunReport.from_json(path)
    except (OSError, json.JSONDecodeError) as error:
        raise TransduceError(f"{path}: cannot read the run's report ({error})") from None
    except ValueError as error:  # not of the shape train writes
        raise TransduceError(f"{path}: {error}") from None


def test_split(directory: Path, cell: str, report: RunReport) -> Path | None:
    """The prepared data directory whose test.tsv a member was tested on (its train.json's
    data directory, else RUN_DIR/data where `train` prepares raw data), checked against the
    hash recorded there; None if neither is it."""
    data = report.data
    expected = (data.get("outputs") or {}).get("test.tsv")
    candidates = [Path(data["directory"])] if data.get("directory") else []
    candidates.append(RunDir(directory / RUNS / cell).data)
    for candidate in candidates:
        if expected is not None and _sha256(candidate / "test.tsv") == expected:
            return candidate
    return None


def _dev_differs(
    hashes: dict[str, str | None], reports: dict[str, RunReport], prepared: Path
) -> str | None:
    """Why the members' best validations were not all on one dev set, the one in `prepared`
    (then the ensemble's dev score could not be read beside theirs); None if they were."""
    first = next(iter(hashes))
    for member, digest in hashes.items():
        if digest is None or digest != hashes[first]:
            return f"{member} was validated on another dev split than {first}"
    if _sha256(prepared / "dev.tsv") != hashes[first]:
        return f"{prepared / 'dev.tsv'} is not the dev split the members were validated on"
    subsets = {}
    for member, report in reports.items():
        train = report.config.get("train") or {}
        size, seed = train.get("dev_subset"), train.get("dev_subset_seed")
        subsets[member] = (
            None if size is None else (size, train.get("seed") if seed is None else seed)
        )
    for member, subset in subsets.items():
        if subset != subsets[first]:
            return (
                f"{member} validated on another sample of the dev split than {first} "
                "(train.dev_subset, drawn with each run's seed: set train.dev_subset_seed)"
            )
    return None


def build(directory: Path, group: Group, device: str | None = None) -> dict[str, Any]:
    """Decode the group's test split with its members as one ensemble, score it as a run
    scores its test split, and write test.predictions and ensemble.json; the record.

    Raises:
        TransduceError: a member without a model (best.pt) or a test split, members tested
            on different test splits or decoding differently, models that cannot be one
            ensemble (each naming the ensemble).
    """
    import torch

    from transduce import checkpoint
    from transduce.checkpoint import with_defaults
    from transduce.config import DecodeConfig
    from transduce.inference import Transducer
    from transduce.io import atomic_write_text
    from transduce.reporting import versions, write_json

    start = time.perf_counter()
    where = f"ensemble {group.id}"
    members = fingerprint(directory, group)  # before decoding: a later change redoes it
    reports = {m: _train_report(directory, m) for m in group.members}
    first = group.members[0]
    hashes = {
        split: {m: (r.data.get("outputs") or {}).get(f"{split}.tsv") for m, r in reports.items()}
        for split in ("test", "dev")
    }
    test_hashes = hashes["test"]
    if test_hashes[first] is None:
        raise TransduceError(f"{where}: {first}: its train.json records no test split")
    for member, digest in test_hashes.items():
        if digest != test_hashes[first]:
            raise TransduceError(f"{where}: {member} was tested on another test split than {first}")
    # a run trained before a decode option existed wrote none of it: at its default
    defaults = dataclasses.asdict(DecodeConfig())
    decodes = {m: with_defaults(r.config.get("decode"), defaults) for m, r in reports.items()}
    for member, options in decodes.items():
        if options != decodes[first]:
            raise TransduceError(f"{where}: {member} decodes otherwise than {first} (decode:)")
    prepared = test_split(directory, first, reports[first])
    if prepared is None:
        raise TransduceError(f"{where}: {first}: the test split it was tested on is not there")
    dev_skipped = _dev_differs(hashes["dev"], reports, prepared)
    payloads, models = [], []  # each member's model: final.pt where it averaged, else best.pt
    for member in group.members:
        path = RunDir(directory / RUNS / member).model
        if not path.is_file():
            raise TransduceError(f"{where}: {member}: no {checkpoint.BEST}")
        payloads.append(checkpoint.load(path))
        models.append(str(Path(RUNS) / member / path.name))
    chosen = device or payloads[0]["config"]["train"].get("device", "auto")
    try:
        transducer = Transducer.ensemble(payloads, chosen, None, group.mean)
        task = transducer.task
        data = task.load_data(prepared, payloads[0]["vocab"])
        if data.test_eval is None:
            raise TransduceError(f"{prepared}: no test split with references to score")
        tie_broken = _TieBreak(transducer, task, data) if group.tie_break else None
        with torch.inference_mode():
            scores, outputs = _evaluate(task, transducer, data, data.test_eval, tie_broken)
            dev_scores = None
            if dev_skipped is None:  # as a validation scores it: each distinct source once
                dev_scores, _ = _evaluate(task, transducer, data, data.dev_eval, tie_broken)
        lines = task.test_lines(data, outputs)
    except TransduceError as error:
        raise TransduceError(f"{where}: {error}") from None
    out = directory / ENSEMBLES / group.id
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / PREDICTIONS, "".join(line + "\n" for line in lines))
    result = {
        "schema": SCHEMA,
        "system": group.system,
        "dataset": group.dataset,
        "members": members,
        "checkpoints": models,
        "mean": group.mean,
        "test_sha256": test_hashes[first],
        "test_predictions_sha256": _sha256(out / PREDICTIONS),
        "test_lines": len(lines),
        "test": scores,  # as a run's train.json's test: Task.evaluate on the test split
        "dev_sha256": hashes["dev"][first],
        "dev": dev_scores,  # as a run's validation: Task.evaluate on the dev split
        **({"dev_skipped": dev_skipped} if dev_skipped else {}),  # why dev is None
        "decode": dataclasses.asdict(task.evaluation_options()),
        **({"tie_break_rules": tie_broken.record()} if tie_broken is not None else {}),
        "device": str(transducer.device),
        "bf16": transducer.bf16,
        "seconds": time.perf_counter() - start,
        "versions": versions(),
    }
    write_json(out / RECORD, result)  # last: its presence says the rest is complete
    return result


def _evaluate(
    task: Any, transducer: Any, data: Any, evalset: Any, tie_broken: _TieBreak | None
) -> tuple[dict[str, float], list[list[str]]]:
    """The ensemble's scores and output symbols on `evalset`, tie-broken where asked."""
    if tie_broken is None:
        return task.evaluate(transducer.model, data, evalset)  # type: ignore[no-any-return]
    return tie_broken.evaluate(evalset)


class _TieBreak:
    """`decode --tie-break-rules` on an evaluation set: each member's outputs alone, the
    ensemble's, and suffix rules learned from the real pairs of the members' prepared
    training split (not its hallucinated ones; dev and test, given or carved out, are not
    in it), scored as `Task.evaluate` scores."""

    def __init__(self, transducer: Any, task: Any, data: Any) -> None:
        from transduce.data.dataset import load_prepared
        from transduce.rules import SuffixRules

        prepared = data.prepared
        if prepared.manifest.get("format") != "sigmorphon":
            raise TransduceError(
                f"tie_break_rules: {prepared.directory}: {prepared.manifest.get('format')} "
                "data; the rules learn from sigmorphon data (lemma<TAB>form<TAB>tags)"
            )
        # the task's data keeps no train symbols (encoded): read the split again
        train = load_prepared(prepared.directory).splits["train"]
        real = (prepared.manifest.get("hallucination") or {}).get("real_pairs", len(train))
        sides, triples = prepared.sides, []
        for pair in train[:real]:
            if pair.target is not None:
                lemma, tags = _lemma_and_tags(pair.source, sides.source)
                triples.append((lemma, sides.target.detokenize(pair.target), tags))
        self.rules = SuffixRules(triples)
        self.pairs = len(triples)
        self.transducer, self.task, self.data = transducer, task, data
        self.changed: list[int] = []  # per evaluation set: the outputs not the ensemble's

    def evaluate(self, evalset: Any) -> tuple[dict[str, float], list[list[str]]]:
        from transduce.rules import tie_break
        from transduce.tasks.seq2seq import score_outputs

        task, data = self.task, self.data
        ensemble = self.transducer.model
        _, together = task.evaluate(ensemble, data, evalset)
        alone = [task.evaluate(m.model, data, evalset)[1] for m in self.transducer.alone]
        target, source = data.prepared.sides.target, data.prepared.sides.source
        outputs, changed = [], 0
        for k, symbols in enumerate(evalset.sources):
            lemma, tags = _lemma_and_tags(symbols, source)
            texts = [target.detokenize(a[k]) for a in alone]
            text = target.detokenize(together[k])
            chosen = tie_break(texts, text, self.rules(lemma, tags))
            if chosen == text:
                outputs.append(together[k])
            else:
                outputs.append(target.cut(chosen))
                changed += 1
        self.changed.append(changed)
        scores = score_outputs(outputs, evalset.references, target, task.metrics)
        return scores, outputs

    def record(self) -> dict[str, Any]:
        """What ensemble.json says of it: the pairs the rules learned from, and the outputs
        changed on the test split (and on dev, when it was scored)."""
        names = ("test", "dev")
        return {"pairs": self.pairs, "changed": dict(zip(names, self.changed, strict=False))}


def _lemma_and_tags(symbols: Sequence[str], side: Any) -> tuple[str, str]:
    """An inflection source (`[V]`, `[PST]`, `<sep>`, then the lemma's characters: the
    sigmorphon format's, `transduce.data.sides.inflection_source`) as (lemma, "V;PST")."""
    from transduce.special import SEP

    cut = list(symbols).index(SEP)
    return side.detokenize(symbols[cut + 1 :]), ";".join(t[1:-1] for t in symbols[:cut])


def command(directory: Path, group: Group, threads: int) -> list[str]:
    """The process that decodes one ensemble (`main`)."""
    out = [sys.executable, "-m", "transduce.experiments.ensembles", str(directory.resolve())]
    out += ["--system", group.system, "--mean", group.mean, "--threads", str(threads)]
    if group.dataset is not None:
        out += ["--dataset", group.dataset]
    if group.tie_break:
        out += ["--tie-break-rules"]
    return out + list(group.members)


def log_path(directory: Path, group: Group) -> Path:
    return (directory / LOGS / f"{group.id}.ensemble.log").resolve()


def run_all(
    experiment: Experiment,
    directory: Path,
    workers: int,
    threads: int,
    chosen: list[Cell] | None = None,
    announce: Callable[[str], None] = lambda text: None,
    report: Callable[[list[EnsembleOutcome]], None] = lambda outcomes: None,
    control: Stopping | None = None,
    others: Callable[[], Iterable[subprocess.Popen[bytes]]] = lambda: (),
) -> tuple[list[EnsembleOutcome], bool]:
    """Decode every ensemble whose members have all finished and that is not up to date
    or has no dev scores (of the groups with a cell among `chosen`), `workers` at a time;
    `report` is called after each. Returns the outcomes and whether Ctrl-C stopped them (no
    new one starts; the running ones end). `control`: the signals' state to share (the
    executor's, while its cells run; None: its own), and `others` the processes that
    share it (the running cells), given each stop signal, Ctrl-C too, with the decodes."""
    ids = None if chosen is None else {c.id for c in chosen}
    todo = [
        g
        for g in groups(experiment)
        if (ids is None or ids.intersection(g.members))
        and ready(directory, g)
        and needs_decoding(directory, g)
    ]
    control = Stopping() if control is None else control
    outcomes: list[EnsembleOutcome] = []
    if not todo:
        return outcomes, False
    (directory / LOGS).mkdir(parents=True, exist_ok=True)
    running: dict[subprocess.Popen[bytes], tuple[Group, float]] = {}
    with control.interrupts():
        while todo or running:
            while todo and len(running) < workers and not control.stopping:
                group = todo.pop(0)
                with open(log_path(directory, group), "ab") as log:
                    process = subprocess.Popen(
                        command(directory, group, threads),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=child_environment(),  # it stops if this process is killed
                        start_new_session=control.sessions,  # signals come via `control`
                    )
                running[process] = (group, time.monotonic())
                announce(f"started the ensemble {group.id} ({len(group.members)} runs)")
            control.pass_on([*running, *others()])
            if control.stopping and not running:
                break
            time.sleep(0.1)
            for process in [p for p in running if p.poll() is not None]:
                group, started = running.pop(process)
                code, seconds = process.returncode, time.monotonic() - started
                if code == 0:
                    outcome = EnsembleOutcome(group, DONE, seconds)
                elif code == EXIT_INTERRUPTED or control.stopping:  # Ctrl-C reached it
                    outcome = EnsembleOutcome(group, INTERRUPTED, seconds)
                else:
                    last = last_line(log_path(directory, group))
                    outcome = EnsembleOutcome(group, FAILED, seconds, f"exit {code}: {last}")
                outcomes.append(outcome)
                report(outcomes)
    return outcomes, control.stopping


def states(
    experiment: Experiment, directory: Path, outcomes: list[EnsembleOutcome]
) -> list[dict[str, Any]]:
    """Every ensemble's state for cells.json: done (up to date), no dev scores (up to date
    for the test split, decoded before ensembles scored the dev split), failed,
    interrupted, out of date, or pending (members not finished)."""
    latest = {o.group.id: o for o in outcomes}
    before = recorded_seconds(directory, "ensembles", (DONE, NO_DEV))  # kept, as the cells'
    out = []
    for group in groups(experiment):
        outcome = latest.get(group.id)
        data = record(directory, group)
        status = (
            outcome.status
            if outcome is not None
            else (NO_DEV if _dev_to_add(directory, group, data) else DONE)
            if up_to_date(directory, group, data)
            else OUT_OF_DATE
            if data is not None
            else PENDING
        )
        out.append(
            {
                "id": group.id,
                "system": group.system,
                "dataset": group.dataset,
                "members": list(group.members),
                "status": status,
                "seconds": entry_seconds(outcome, before.get(group.id), status in (DONE, NO_DEV)),
                "error": None if outcome is None else outcome.error,
                "directory": str(Path(ENSEMBLES) / group.id),
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    """One ensemble, in a process of its own (`command`): 0 done, 2 an error (one line on
    stderr), 130 Ctrl-C."""
    parser = argparse.ArgumentParser(prog="python -m transduce.experiments.ensembles")
    parser.add_argument("directory", type=Path)
    parser.add_argument("members", nargs="+")
    parser.add_argument("--system", required=True)
    parser.add_argument("--dataset")
    parser.add_argument("--mean", default="probability")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device")
    parser.add_argument("--tie-break-rules", action="store_true")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    group = Group(args.system, args.dataset, tuple(args.members), args.mean, args.tie_break_rules)
    try:
        result = build(args.directory, group, args.device)
    except TransduceError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"ensemble {group.id}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    scores = ", ".join(f"{k} {v:.2f}" for k, v in result["test"].items())
    print(f"ensemble {group.id}: {len(group.members)} runs, test {scores}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    from transduce.io import stop_with_parent

    try:
        stop_with_parent()  # as at Ctrl-C if `experiment run` is killed
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C before the decoding started (importing torch)
        sys.exit(EXIT_INTERRUPTED)
