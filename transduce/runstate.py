"""The state of a training run: where it is (`Progress`), what it trains (`RunState`),
how both go into a checkpoint and come back, and what a resumed run must agree with.

`Trainer` (the loop) holds one `RunState`; this module is the checkpoint round trip of it:
`RunState.checkpoint` writes what `RunState.restore` reads back, so that a run stopped at a
validation and resumed ends with the same weights, bit for bit, on the CPU
(`transduce.training`). `check_resumed`, `check_plan` and `check_limits` are the checks a resumed
run passes before anything in its run directory changes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from transduce import config as configuration
from transduce.checkpoint import model_options
from transduce.data.prepare import MANIFEST
from transduce.distributed import World
from transduce.errors import CheckpointError, ConfigError, shorten
from transduce.io import sha256_file
from transduce.metrics import get_metric
from transduce.models import Model
from transduce.reporting import machine, versions
from transduce.runs import RunReport
from transduce.schedules import Schedule
from transduce.tasks import TaskData

REPORT_SCHEMA = "transduce.train/1"


@dataclass
class Progress:
    """Where a run is; saved in every checkpoint (plain values only)."""

    update: int = 0
    epoch: int = 0  # epochs completed
    batch: int = 0  # batches done in the current epoch
    elapsed: float = 0.0  # seconds of training and validation so far
    # CPU seconds of this process (all its threads) in training and validation so far, as
    # `elapsed`; None when a session's are unknown (resumed from a checkpoint without them)
    cpu_seconds: float | None = 0.0
    best_score: float | None = None
    best_update: int | None = None
    bad_validations: int = 0
    last_validation: int = -1
    loss_sum: float = 0.0  # since the last validation
    loss_updates: int = 0
    examples: int = 0
    train_seconds: float = 0.0
    history: list[dict[str, Any]] = field(default_factory=list)
    stop: str | None = None
    plan: str | None = None  # digest of the current epoch's batches (`plan_digest`)
    run_id: str | None = None  # random, set at a run's start: its checkpoints carry it

    @classmethod
    def restore(cls, saved: Any, path: str) -> tuple[Progress, list[str]]:
        """The progress a checkpoint `path` saved, and warnings: a key this version does not
        know (a newer version's) is left out; a value of the wrong kind is a
        `CheckpointError` naming the key."""
        if not isinstance(saved, dict):
            raise CheckpointError(f"{path}: training.progress is not a mapping")
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(str(key) for key in saved if key not in known)
        kinds: dict[str, tuple[type, ...]] = {
            "int": (int,),
            "float": (int, float),
            "list[dict[str, Any]]": (list,),
            "str | None": (str, type(None)),
            "float | None": (int, float, type(None)),
            "int | None": (int, type(None)),
        }
        for key, value in saved.items():
            if key not in known:
                continue
            kind = kinds[str(known[key].type)]
            if isinstance(value, bool) or not isinstance(value, kind):
                raise CheckpointError(
                    f"{path}: training.progress.{key} is {shorten(repr(value))}, not "
                    f"{known[key].type}; the checkpoint is damaged"
                )
        if any(not isinstance(entry, dict) for entry in saved.get("history", [])):
            raise CheckpointError(f"{path}: training.progress.history holds a non-mapping entry")
        progress = cls(**{k: v for k, v in saved.items() if k in known})
        if "cpu_seconds" not in saved:  # an earlier version's checkpoint: not counted
            progress.cpu_seconds = None
        warnings = (
            [
                f"warning: {path}: training.progress has keys this version does not know "
                f"({', '.join(unknown)}; a newer transduce's?): left out"
            ]
            if unknown
            else []
        )
        return progress, warnings

    def improved_by(self, scores: dict[str, float], train: configuration.TrainConfig) -> bool:
        """Whether a validation with dev `scores` becomes the best: the first one; then
        strictly better on train.select_on, or, with train.select_also, at least as good
        on select_on and on each of select_also as the best so far (Wu's `select_model`:
        ties go to the later one)."""
        if self.best_score is None:
            return True
        if not train.select_also:
            score = scores[train.select_on]
            if get_metric(train.select_on).higher_is_better:
                return score > self.best_score
            return score < self.best_score
        best: dict[str, float] = next(
            (h["dev_scores"] for h in self.history if h["update"] == self.best_update), {}
        )
        for name in (train.select_on, *train.select_also):
            now, then = scores[name], best.get(name, scores[name])
            if (now > then) if not get_metric(name).higher_is_better else (now < then):
                return False
        return True


@dataclass
class RunState:
    """What a run trains and where it is, made by `Trainer.setup` and held by the trainer
    (`Trainer.state`) for the whole run: its methods take at most a batch. `scaler` is
    the gradient scaler (fp16; disabled otherwise), `initialized` what `train.init_from`
    loaded (fine-tuning; kept in every checkpoint for the train.json of a resumed run)."""

    data: TaskData
    model: Model
    optimizer: torch.optim.Optimizer
    schedule: Schedule
    progress: Progress
    scaler: torch.amp.GradScaler
    initialized: dict[str, Any] | None = None

    def checkpoint(
        self, config: configuration.Config, precision: str, extras: dict[str, Any]
    ) -> dict[str, Any]:
        """A checkpoint: config, weights, what the task needs to decode (`extras`), and
        the training state `restore` reads back."""
        rng: dict[str, Any] = {"torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        return {
            "model_name": config.model_name,
            "config": configuration.resolved(config),
            "precision": precision,  # what train.precision ran as
            "model": self.model.state_dict(),
            **extras,
            "training": {
                "optimizer": self.optimizer.state_dict(),
                "schedule": self.schedule.state_dict(),
                "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None,
                "rng": rng,
                "progress": asdict(self.progress),
                "init_from": self.initialized,
            },
            "versions": versions(),
        }

    def restore(self, saved: dict[str, Any]) -> list[str]:
        """Continue from the checkpoint `saved` (`checkpoint.load`'s, with its `path`):
        weights, optimizer, schedule, scaler, progress and random state; what to tell the
        user. A checkpoint whose weights do not fit the model is a `CheckpointError`."""
        training = saved["training"]
        try:
            self.model.load_state_dict(saved["model"])
        except (RuntimeError, KeyError) as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            raise CheckpointError(
                f"{saved['path']}: its weights do not fit the configured model ({first}); "
                "resume with the run's own configuration"
            ) from None
        self.optimizer.load_state_dict(training["optimizer"])
        self.schedule.load_state_dict(training["schedule"])
        if training.get("scaler") and self.scaler.is_enabled():
            self.scaler.load_state_dict(training["scaler"])
        self.initialized = training.get("init_from")
        self.progress, notes = Progress.restore(training.get("progress"), saved["path"])
        self.progress.stop = None
        torch.set_rng_state(training["rng"]["torch"])
        if "cuda" in training["rng"] and torch.cuda.is_available():
            with contextlib.suppress(RuntimeError, IndexError):  # another number of GPUs
                torch.cuda.set_rng_state_all(training["rng"]["cuda"])
        return [*notes, f"resuming at update {self.progress.update}, epoch {self.progress.epoch}"]

    def report(
        self,
        config: configuration.Config,
        *,
        device: torch.device,
        precision: str,
        world: World,
        test: dict[str, float] | None,
        test_monotonicity: dict[str, Any] | None,
        predictions: Path,
        wall: float,
        final: dict[str, Any] | None = None,
    ) -> RunReport:
        """The run's train.json (`transduce.runs.RunReport`; the README lists its keys):
        what it trained on and as (on `device`, at `precision`, in `world`'s processes),
        its history, best validation, the averaged model's record (`final`, None: the run's
        model is best.pt), `test` scores (None: not tested) with the sha256 of
        `predictions`, and the seconds of `wall`."""
        data, model, progress = self.data, self.model, self.progress
        manifest = data.prepared.directory / MANIFEST
        fields = {
            "schema": REPORT_SCHEMA,
            "config": configuration.resolved(config),
            "data": {
                "directory": str(data.prepared.directory),
                "manifest_sha256": sha256_file(manifest),
                "outputs": {
                    k: v.get("sha256") for k, v in data.prepared.manifest["outputs"].items()
                },
                "train_examples": len(data.train),
                "train_examples_too_long": data.skipped_long,
                "dev_sources": len(data.dev_eval.sources),
                "test_sources": None if data.test_eval is None else len(data.test_eval.sources),
                "test_predictions_sha256": sha256_file(predictions) if test is not None else None,
            },
            "vocab": {"source": len(data.source_vocab), "target": len(data.target_vocab)},
            "parameters": model.parameter_count(),
            "init_from": self.initialized,  # the weights it started from (fine-tuning)
            "device": str(device),
            "machine": machine(device),  # the last session's CPU (and GPU): times differ
            "precision": precision,  # what train.precision ran as on this device
            "processes": world.size,
            "backend": world.backend,  # of the process group (nccl, gloo), if any
            "threads": torch.get_num_threads(),
            "history": progress.history,
            "best": {
                "update": progress.best_update,
                "metric": config.train.select_on,
                "score": progress.best_score,
            },
            # train.average_best_last: the updates of best.pt and last.pt averaged into
            # final.pt, and its dev validation (dev_loss, dev_scores, dev_monotonicity)
            "final": final,
            "test": test,  # of the run's model: final.pt where there is one, else best.pt
            "test_monotonicity": test_monotonicity,  # as dev_monotonicity, of the run's model
            "stop": progress.stop,
            "updates": progress.update,
            "epochs": progress.epoch,
            "training_seconds": progress.elapsed,  # training and validation, all sessions
            # CPU seconds of the (main) process in them (None: a session's are unknown): for a
            # run of one thread, an estimate of its time alone, less swayed by other processes
            "cpu_seconds": progress.cpu_seconds,
            "wall_seconds": wall,  # this process: data, training, test decoding
            "versions": versions(),
        }
        return RunReport(fields)


def check_resumed(config: configuration.Config, saved: dict[str, Any]) -> list[str]:
    """What a resumed run checks of its checkpoint `saved` before it changes anything:
    the model must be the configured one, since its options shape the weights and what
    they compute (e.g. `local_m` of transduce < 0.3 is `local_m_gaussian` now,
    `checkpoint.upgrade`): a `ConfigError` names the option (one newer than the
    checkpoint is taken at its default, which keeps the old behaviour, so only another
    value is refused). A changed dev subset is allowed, with a warning (returned)."""
    trained = model_options(saved) or saved["config"].get("model", {})
    wanted = configuration.resolved(config)["model"]
    for key in sorted(trained):
        if trained.get(key) != wanted.get(key):
            raise ConfigError(
                f"{saved['path']}: the run was trained with model.{key} "
                f"{trained.get(key)!r}, not {wanted.get(key)!r}; resume with the same "
                f"model options (--set model.{key}=...)"
            )
    warnings = []
    before_train = saved["config"].get("train") or {}
    for key in ("dev_subset", "dev_subset_seed"):
        before, now = before_train.get(key), getattr(config.train, key)
        if before != now:
            warnings.append(
                f"warning: train.{key} was {before}, now {now}: the best dev score so "
                "far and the patience count are of the other dev set"
            )
    return warnings


def check_plan(progress: Progress, batches: list[list[int]], last: Path) -> None:
    """A run stopped in the middle of an epoch continues that epoch only if its batches
    (`batches`, planned again) are the same: train.batch_size, batch_by, bucketing, seed
    and the data decide them. `last` is the checkpoint, named in the `ConfigError`."""
    if progress.batch == 0:
        return
    same = (
        plan_digest(batches) == progress.plan
        if progress.plan is not None
        else progress.batch < len(batches)  # a checkpoint of transduce < 0.3.1
    )
    if not same:
        raise ConfigError(
            f"{last}: was saved in the middle of epoch "
            f"{progress.epoch + 1} (after batch {progress.batch}), and with this "
            f"configuration and data that epoch has other batches ({len(batches)}); "
            "resume with the run's train.batch_size, batch_by, bucketing, seed and data"
        )


def check_limits(progress: Progress, train: configuration.TrainConfig, last: Path) -> None:
    """A resumed run must not be past a limit of its configuration already: a checkpoint
    trained further (in a session with a higher train.max_updates or max_epochs, or none)
    would stop at once and report a model trained past the limit it names, and an
    experiment would take it for its cell's run. A `ConfigError` names the checkpoint,
    what it trained and the limit; a run stopped exactly at the limit (`Limits` stops at
    it, an epoch limit at an epoch's end) resumes, and stops, as before."""
    whole = f"{progress.epoch:,} epochs"
    if progress.batch:
        whole += f" and {progress.batch:,} batches"
    limits = (
        (
            "max_updates",
            train.max_updates,
            progress.update > (train.max_updates or 0),
            f"{progress.update:,} updates",
            progress.update,
        ),
        (
            "max_epochs",
            train.max_epochs,
            (progress.epoch, progress.batch) > (train.max_epochs or 0, 0),
            whole,
            progress.epoch + (1 if progress.batch else 0),
        ),
    )
    for key, limit, past, done, enough in limits:
        if limit is not None and past:
            raise ConfigError(
                f"{last}: has trained {done}, past train.{key} {limit:,} of this "
                f"configuration (an earlier session had a higher limit, or none); resume "
                f"with train.{key} {enough} or more, or train again in another --out"
            )


def plan_digest(batches: list[list[int]]) -> str:
    """A fingerprint of an epoch's batches: a resumed run continues the same epoch only
    with the same batches."""
    return hashlib.sha256(json.dumps(batches, separators=(",", ":")).encode()).hexdigest()[:16]
