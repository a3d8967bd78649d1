"""The training loop, and nothing else: updates, limits, validation, checkpoints.

`Trainer` runs one loop for every kind of work; what differs between kinds (data,
batches, loss, dev evaluation, test output) is its `transduce.tasks.Task`. The loop:

    until a limit is reached (`Limits`: epochs, updates, minutes, patience, min_lr):
        one update on the next batch of the epoch (`Task.training_loss`)
        every `train.validate_every` updates (or each epoch): validate
    validate once more if the last update was not validated; test with the best checkpoint
    (with `train.average_best_last`, the mean of its weights and the last ones': final.pt)

An update may be split into micro-batches (`train.accumulate`) and between processes
(`torchrun`, `transduce.distributed`): each part's loss is weighted by its share of the
batch's tokens, so the update is the same. The loss is summed on the device and read at
validation (and, for the progress display, at most every `LOSS_READ_SECONDS`): no update
waits for the device.

Validation computes the dev loss and decodes the dev set (`Task.evaluate`); the best
checkpoint is the one with the best `train.select_on` score on that decoded output, not on
teacher-forced accuracy. `last.pt` (after each validation) resumes a run where it stopped:
with the same seed on the CPU, a run stopped at a validation point and resumed ends with
the same weights, bit for bit, as a run that was never stopped.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import signal
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import torch

from transduce import config as configuration
from transduce import defaults, optimizers, runs
from transduce.averaging import average
from transduce.checkpoint import Checkpointer, save
from transduce.compiling import compile_forward
from transduce.data.batching import plan_batches
from transduce.data.prepare import MANIFEST
from transduce.distributed import World
from transduce.errors import CheckpointError, ConfigError, out_of_memory
from transduce.faults import fault_point
from transduce.io import atomic_write_text, clean, remove
from transduce.metrics import get_metric
from transduce.models import Model
from transduce.outputs import claimed_run_dir
from transduce.precision import limit_gpu_memory, scaler
from transduce.preflight import check_start, preflight
from transduce.progress import Reporter
from transduce.runlog import MetricsLog
from transduce.runs import RunDir, RunReport
from transduce.runstate import (
    Progress,
    RunState,
    check_limits,
    check_plan,
    check_resumed,
    plan_digest,
)
from transduce.schedules import Schedule
from transduce.tasks import Task, TaskData

INTERRUPTED = runs.INTERRUPTED  # Progress.stop of a run stopped by Ctrl-C (SIGINT)
LOSS_READ_SECONDS = 1.0  # the progress display's loss is read from the device this often


class Interrupted(Exception):
    """Training stopped at Ctrl-C after a whole update, with last.pt and train.json
    written: `--resume` continues it as if it had never stopped."""

    def __init__(self, run_dir: Path, update: int) -> None:
        self.run_dir, self.update = run_dir, update
        super().__init__(f"interrupted after update {update}")


class Interrupts:
    """While training: the first Ctrl-C (SIGINT) asks the loop to stop after the current
    update (and validation, if one is under way); a second one stops at once, as Python
    does. Only in the main thread; elsewhere, Ctrl-C is Python's as usual."""

    def __init__(self, announce: bool = True) -> None:
        self.requested, self.announce = False, announce
        self.agreed = False  # another training process was asked to stop: this one stops too
        self._previous: Any = None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        if self.announce:  # not in the training processes of a torchrun other than rank 0
            with contextlib.suppress(OSError):
                os.write(2, b"\nCtrl-C: stopping after this update (again to stop at once)\n")

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


class Limits:
    """When training must stop: the one place every limit of `train` is checked."""

    def __init__(self, train: configuration.TrainConfig, schedule: Schedule, clock: float):
        self.train, self.schedule, self.clock = train, schedule, clock

    def reached(self, progress: Progress) -> str | None:
        """Why training must not go on, or None (checked after every update and
        validation, and before the first, so a resumed run that met them stops at once)."""
        t = self.train
        if t.max_epochs is not None and progress.epoch >= t.max_epochs:
            return f"{defaults.STOP_AT_LIMIT}max_epochs ({t.max_epochs})"
        if t.max_updates is not None and progress.update >= t.max_updates:
            return f"{defaults.STOP_AT_LIMIT}max_updates ({t.max_updates})"
        if t.max_minutes is not None and time.perf_counter() - self.clock >= 60 * t.max_minutes:
            return f"{defaults.STOP_AT_LIMIT}max_minutes ({t.max_minutes})"
        if t.patience is not None and progress.bad_validations >= t.patience:
            return f"no better dev {t.select_on} in {t.patience} validations"
        stops = t.schedule.type == "plateau" and t.schedule.stop_at_min_lr
        if stops and self.schedule.lr < t.schedule.min_lr:
            return f"learning rate under min_lr ({t.schedule.min_lr})"
        return None


class Clock:
    """A run's seconds over all its sessions: `progress.elapsed` (wall) and
    `progress.cpu_seconds` (this process's CPU time, all its threads; it stays None once a
    session's are unknown), this session's added to what the checkpoint had."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.start = time.perf_counter() - progress.elapsed  # where elapsed counts from
        self.cpu_before, self.cpu_start = progress.cpu_seconds, time.process_time()

    def read(self) -> None:
        """Set the progress's seconds to now."""
        self.progress.elapsed = time.perf_counter() - self.start
        if self.cpu_before is not None:
            self.progress.cpu_seconds = self.cpu_before + time.process_time() - self.cpu_start


class Losses:
    """The training losses of the updates not yet read from the device (each a scalar on
    it): no update waits for the device to read one."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.pending: list[torch.Tensor] = []
        self._shown = (0.0, float("-inf"))  # the display's loss, and when it was read

    def collect(self, progress: Progress) -> None:
        """Add the losses of the updates since the last call (summed over the processes)
        to `progress`, one by one as when each was read at once (so the sums do not depend
        on when they are read); every process calls it at the same points."""
        if not self.pending:
            return
        losses = self.world.sum_each(torch.stack(self.pending).double())  # updates
        for loss in losses:
            progress.loss_sum += loss
        progress.loss_updates += len(losses)
        self.pending = []

    def shown(self, progress: Progress) -> float:
        """The mean training loss since the last validation for the progress display,
        read from the device at most every `LOSS_READ_SECONDS` (in rank 0: its part of
        each update times the number of processes)."""
        value, when = self._shown
        now = time.perf_counter()
        if now - when >= LOSS_READ_SECONDS:
            pending = float(torch.stack(self.pending).sum()) if self.pending else 0.0
            updates = progress.loss_updates + len(self.pending)
            value = (progress.loss_sum + pending * self.world.size) / max(updates, 1)
            self._shown = (value, now)
        return value


class Trainer:
    """Train a model as a configuration says, in a run directory.

    Args:
        config: The validated configuration.
        run_dir: Where the resolved config, prepared data, checkpoints and train.json go.
        resume: Continue from `run_dir/last.pt`.
        reporter: Receives progress (the CLI prints it).
        task: The kind of work (default: the task of the configured model).
        world: The training processes (default: as `torchrun` describes them, or one).
    """

    def __init__(
        self,
        config: configuration.Config,
        run_dir: Path,
        resume: bool = False,
        reporter: Reporter | None = None,
        task: Task | None = None,
        world: World | None = None,
    ) -> None:
        self.config, self.run_dir, self.resume = config, Path(run_dir), resume
        self.files = RunDir(self.run_dir)
        self.world = world or World.from_environment()
        # only rank 0 shows progress (and writes: see `transduce.distributed`)
        self.reporter = (reporter or Reporter()) if self.world.main else Reporter()
        if task is None:  # refused before anything is written
            kind, where, precision = preflight(config, resume, self.world.device)
            task = kind(config, where, precision)
        else:
            check_start(config, resume)
        self.task = task
        limit_gpu_memory(task.device)
        self.log: MetricsLog | None = None  # rank 0's, from the start of the loop
        self.device, self.precision = task.device, task.precision  # batches and model: one device
        self.losses = Losses(self.world)
        self.lower_is_better = not get_metric(config.train.select_on).higher_is_better
        self.checkpoints = Checkpointer(
            self.run_dir, config.train.keep_best, config.train.keep_last, self.lower_is_better
        )
        self.notes: list[str] = []  # what setup has to say, said once the run is sure to start
        self._resumed_at: int | None = None  # the update a resumed session started at
        self.state: RunState  # what `setup` makes: the data, model, optimizer, schedule, progress

    @property
    def initialized(self) -> dict[str, Any] | None:
        """What train.init_from loaded (fine-tuning), once `setup` ran (None before)."""
        state = getattr(self, "state", None)
        return None if state is None else state.initialized

    def batches(self, data: TaskData, epoch: int) -> list[list[int]]:
        """The batches of epoch `epoch` (0-based): the same order when a run is resumed."""
        t = self.config.train
        rng = random.Random(t.seed * 1_000_003 + epoch)
        return plan_batches(self.task.lengths(data), t.batch_size, t.batch_by, t.bucketing, rng)

    # ------------------------------------------------------------------- setup

    def setup(self, saved: dict[str, Any] | None = None) -> RunState:
        """Data, model (seeded), optimizer, schedule and progress of a new run, or of the
        resumed run whose checkpoint is `saved`: `self.state`, returned."""
        c, t = self.config, self.config.train
        if t.threads:  # the run's threads: split between the processes of a machine
            torch.set_num_threads(self.world.threads(t.threads))
        keep_large_blocks_out_of_the_heap()
        directory = self.task.prepared_dir(self.run_dir)  # rank 0 prepares, the others read
        data = self.task.load_data(directory, None if saved is None else saved["vocab"])
        torch.manual_seed(t.seed)
        try:
            model = self.task.build_model({k: v.symbols for k, v in data.vocabs.items()})
        except (MemoryError, RuntimeError) as error:
            hint = f"the model's sizes (model.* of {c.model_name}) are too large"
            raise out_of_memory(error, "building the model", hint) or error from None
        self.task.check_model(model, data)
        initialized = None  # what train.init_from loads
        if saved is None:
            message = self.task.initialize(model, data)
            if message:
                self.notes.append(message)
            if t.init_from is not None:  # fine-tuning: the trained weights, row by symbol
                from transduce.finetune import describe, init_from

                vocabs = {k: v.symbols for k, v in data.vocabs.items()}
                initialized = init_from(model, vocabs, t.init_from, c)
                self.notes.append(describe(initialized))
        model = model.to(self.device)
        if t.compile:  # transduce.compiling: the same numbers, fewer kernel launches
            compile_forward(model, self.device)
        self.notes.append(f"model {c.model_name}: {model.parameter_count():,} parameters")
        where = f"{self.device}, {self.precision}"
        if self.world.active:
            many = "processes" if self.world.size > 1 else "process, in a process group"
            where += f", {self.world.size} {many} ({t.batch_size} per update in all)"
        self.notes.append(f"training on {where}")
        for warning in self.task.warnings():
            self.notes.append(f"warning: {warning}")
        optimizer = make_optimizer(model, t.optimizer)
        schedule = Schedule(t.schedule, optimizer, t.optimizer.lr, t.max_updates)
        progress = Progress(run_id=uuid.uuid4().hex)
        run = scaler(self.device, self.precision)
        self.state = RunState(data, model, optimizer, schedule, progress, run, initialized)
        if saved is not None:
            self.notes.extend(self.state.restore(saved))
        return self.state

    # -------------------------------------------------------------------- loop

    def run(self) -> dict[str, Any] | None:
        """Train until a limit is reached, test the run's model; the report (None in
        the processes other than rank 0, which write nothing).

        The run directory is locked for the life of the call. A resumed run changes nothing
        in it until the configuration is checked against last.pt and the model loaded."""
        self.world.start(self.device)
        try:
            result = self._locked() if self.world.main else self._run()
        except Interrupted:
            self._leave()
            raise
        except BaseException:
            self.world.stop()
            raise
        self._leave()
        return result

    def _leave(self) -> None:
        """Leave the process group together: a process that tears it down while another
        still uses it (rank 0 testing) can abort."""
        self.world.barrier()
        self.world.stop()

    def _locked(self) -> dict[str, Any] | None:
        with claimed_run_dir(self.run_dir, self.resume):
            return self._run()

    def _run(self) -> dict[str, Any] | None:
        t = self.config.train
        start_time = time.perf_counter()
        if not self.world.main:  # rank 0 has checked, repaired and prepared the run directory
            self.world.barrier()
            self.setup(self.checkpoints.resume_state() if self.resume else None)
            self._distributed()
            return None
        if not self.resume and self.files.last.exists():  # checked under the lock
            raise ConfigError(
                f"{self.run_dir}: already holds a run; --resume continues it, or choose another "
                "--out"
            )
        self.checkpoints.check_kept_folder()
        state = self.checkpoints.resume_state() if self.resume else None
        if state is not None:
            self.notes.extend(check_resumed(self.config, state))
        progress = self.setup(state).progress
        self._resumed_at = None if state is None else progress.update
        if state is not None:
            check_plan(progress, self.batches(self.state.data, progress.epoch), self.files.last)
            check_limits(progress, t, self.files.last)
        repairs = clean(self.checkpoints.stale_temporaries())
        repairs += self.checkpoints.check(state) if state is not None else []
        for message in [f"run directory: {self.run_dir}", *self.notes, *repairs]:
            self.reporter.message(message)
        if not self.files.marker.exists():  # a run of a transduce before the marker
            atomic_write_text(self.files.marker, runs.MARKER_TEXT)
        atomic_write_text(self.files.config, _yaml(configuration.resolved(self.config)))
        self.log = MetricsLog(self.run_dir, list(t.log), progress.history)
        self.world.barrier()  # the others may read the run directory now
        self._distributed()
        # the first of the two limits: updates, or epochs of batches
        limits = [t.max_updates] if t.max_updates is not None else []
        if t.max_epochs is not None:
            limits.append(t.max_epochs * len(self.batches(self.state.data, 0)))
        total = min(limits) if limits else None
        self.reporter.start(total, progress.update, t.max_minutes, progress.elapsed)
        try:
            with Interrupts() as interrupts:  # Ctrl-C is ours during the updates only
                self._train(interrupts)
        finally:
            self.log.close()
        self.reporter.stop()
        self.reporter.message(f"stopped: {progress.stop}")
        report = self.finish(time.perf_counter() - start_time)
        if progress.stop == INTERRUPTED:
            raise Interrupted(self.run_dir, progress.update)
        return report

    def _distributed(self) -> None:
        """With other processes: start from rank 0's weights; in the others, train (rank
        0 goes on in `_run`) and give a stop by Ctrl-C to the caller."""
        if not self.world.active:
            return None
        progress = self.state.progress
        self.world.same_parameters(self.state.model)
        if self.world.main:
            return None
        t = self.config.train  # dropout: another stream than rank 0's, the same on resume
        torch.manual_seed(t.seed * 1_000_003 + self.world.rank * 7919 + progress.update)
        with Interrupts(announce=False) as interrupts:
            self._train(interrupts)
        if progress.stop == INTERRUPTED:
            raise Interrupted(self.run_dir, progress.update)
        return None

    def _train(self, interrupts: Interrupts) -> None:
        """Updates and validations until a limit is reached or Ctrl-C asks to stop."""
        t, progress = self.config.train, self.state.progress
        clock = Clock(progress)
        limits = Limits(t, self.state.schedule, clock.start)
        self.state.model.train()
        planned, batches = -1, []  # the epoch whose batches these are
        main = self.world.main
        progress.stop = self._reached(limits, interrupts)
        while True:
            due, epoch = False, float(progress.epoch)
            if progress.stop is None:
                if planned != progress.epoch:
                    planned, batches = progress.epoch, self.batches(self.state.data, progress.epoch)
                    progress.plan = plan_digest(batches)
                due, epoch = self.train_step(batches)
                progress.stop = self._reached(limits, interrupts)
            # validate when due, and at the end unless this very state was validated (a
            # resumed run that met its limits at once was, when its last.pt was written)
            if due or (progress.stop is not None and progress.last_validation != progress.update):
                clock.read()
                self.losses.collect(progress)
                if main:
                    self.validate(epoch)
                self.world.share(progress, self.state.schedule)
                progress.stop = progress.stop or self._reached(limits, interrupts)
            # with other processes, only the agreed stop: a SIGINT after the agreement is
            # the next update's (stopping alone would leave the others waiting)
            asked = interrupts.agreed if self.world.active else interrupts.requested
            if progress.stop is None and asked:
                progress.stop = INTERRUPTED
                clock.read()
                self.losses.collect(progress)
                if main:
                    self.checkpoints.save(self._checkpoint(), improved=False)
            if progress.stop is not None:
                break

    def _reached(self, limits: Limits, interrupts: Interrupts) -> str | None:
        """`limits.reached`, agreed by every process with a stop by Ctrl-C (the limits of
        a clock, and signals, may come to one process before the others)."""
        stop = limits.reached(self.state.progress)
        if self.world.active:
            timed, asked = self.world.agree([stop is not None, interrupts.requested])
            if timed and stop is None:
                stop = f"{defaults.STOP_AT_LIMIT}max_minutes ({self.config.train.max_minutes})"
            interrupts.agreed = asked  # not `requested`: a SIGINT here later is the first
        return stop

    def train_step(self, batches: list[list[int]]) -> tuple[bool, float]:
        """The next update of the epoch whose `batches` these are, counted in the run's
        progress: (whether a validation is due after it, the epoch reached as a fraction)."""
        tick = time.perf_counter()
        progress = self.state.progress
        if not 0 <= progress.batch < len(batches):  # `_check_plan` refuses this on resume
            raise RuntimeError(f"batch {progress.batch} of an epoch of {len(batches)} batches")
        indices = batches[progress.batch]
        progress.update += 1
        try:
            loss = self.update(indices, progress.update)
            self.losses.pending.append(loss)
        except (MemoryError, RuntimeError) as error:
            longest = max(max(self.task.lengths(self.state.data)[i]) for i in indices)
            raise batch_too_large(error, progress.update, len(indices), longest) from None
        fault_point("update")
        progress.batch += 1
        progress.examples += len(indices)
        progress.train_seconds += time.perf_counter() - tick
        self.reporter.update(
            progress.update,
            progress.epoch + 1,
            self.losses.shown(progress),
            progress.examples / max(progress.train_seconds, 1e-9),
        )
        epoch = progress.epoch + progress.batch / len(batches)
        at_epoch_end = progress.batch == len(batches)
        if at_epoch_end:
            progress.epoch, progress.batch = progress.epoch + 1, 0
        every = self.config.train.validate_every
        return (at_epoch_end if every is None else progress.update % every == 0), epoch

    def update(self, indices: list[int], number: int) -> torch.Tensor:
        """Update number `number` (1-based) on the training examples `indices`: this
        process's part of the batch, in `train.accumulate` micro-batches, each loss
        weighted by its share of the batch's tokens; the gradients summed over the
        processes. The loss of this process's part (a scalar on the device, unread)."""
        s = self.state
        data, model, optimizer = s.data, s.model, s.optimizer
        s.schedule.before_update(number)
        optimizer.zero_grad(set_to_none=True)
        total = max(self.task.loss_tokens(data, indices), 1)
        loss_sum = torch.zeros((), device=self.device)
        for part in self.world.parts(indices, self.config.train.accumulate):
            share = self.task.loss_tokens(data, part) / total
            loss = self.task.training_loss(model, data, part, number, share)
            s.scaler.scale(loss).backward()
            loss_sum += loss.detach().float()
        if s.scaler.is_enabled() and s.scaler._scale is None:  # no part here (a batch
            s.scaler.scale(loss_sum)  # smaller than the processes): start the scaler
        parameters = [p for p in model.parameters() if p.requires_grad]
        self.world.sum_gradients(parameters)
        clip = self.config.train.clip_norm
        if clip is not None:
            s.scaler.unscale_(optimizer)  # clip the true gradients (fp16: scaled up)
            torch.nn.utils.clip_grad_norm_(parameters, clip)
        s.scaler.step(optimizer)  # fp16: skipped when a gradient is not finite
        s.scaler.update()
        return loss_sum

    def validate(self, epoch: float) -> None:
        """Dev loss and decoded dev scores; history, plateau schedule, checkpoints."""
        t, s = self.config.train, self.state
        schedule, progress = s.schedule, s.progress
        dev_loss, statistics, scores = dev_validation(self.task, s)
        score = scores[t.select_on]
        improved = progress.improved_by(scores, t)
        entry = {
            "update": progress.update,
            "epoch": round(epoch, 4),
            "train_loss": progress.loss_sum / max(progress.loss_updates, 1),
            "dev_loss": dev_loss,
            "dev_scores": scores,
            "dev_monotonicity": statistics,
            "lr": schedule.lr,
            "elapsed": progress.elapsed,
            "examples_per_s": progress.examples / max(progress.train_seconds, 1e-9),
        }
        progress.history.append(entry)
        progress.loss_sum, progress.loss_updates = 0.0, 0
        progress.examples, progress.train_seconds = 0, 0.0
        progress.last_validation = progress.update
        if improved:
            progress.best_score, progress.best_update = score, progress.update
            progress.bad_validations = 0
        else:
            progress.bad_validations += 1
        by_loss = t.schedule.monitor == "loss"
        schedule.after_validation(dev_loss if by_loss else score, self.lower_is_better or by_loss)
        fault_point("validation")
        self.checkpoints.save(self._checkpoint(), improved, score)
        if self.log is not None:
            self.log.append(entry)  # after last.pt: the log never runs ahead of it
        self.reporter.validation(entry, improved)

    def _checkpoint(self) -> dict[str, Any]:
        """A checkpoint of the run now (`RunState.checkpoint`)."""
        extras = self.task.checkpoint_extras(self.state.data)
        return self.state.checkpoint(self.config, self.precision, extras)

    def finish(self, wall: float) -> dict[str, Any]:
        """Test the run's model (best.pt, or final.pt with `train.average_best_last`) into
        test.predictions and write train.json (an interrupted run: no test, `"stop":
        "interrupted"`). A resumed session that trained nothing and would decode the test
        set as before keeps the earlier test scores (`RunReport.reusable_test`)."""
        model, data, progress = self.state.model, self.state.data, self.state.progress
        interrupted = progress.stop == INTERRUPTED
        final, test_scores, statistics, kept = None, None, None, None
        if not interrupted:
            model.load_state_dict(self.checkpoints.load_best(progress.best_update)["model"])
            if self.config.train.average_best_last:
                final = average_best_last(self.files, self.task, self.state, self.reporter)
            else:  # an earlier session's, averaged when the run asked for it then
                remove(self.files.final)
            fault_point("before-test")
        earlier = RunReport.read(self.files.report) if self._resumed_at == progress.update else None
        if earlier is not None and not interrupted:
            manifest = data.prepared.directory / MANIFEST
            resolved = configuration.resolved(self.config)
            kept = earlier.reusable_test(
                self.files, manifest, resolved, progress.best_update, progress.update
            )
        if kept is not None:
            test_scores = kept
            self.reporter.message(
                "nothing trained since the last session and the same decoding: its test "
                "scores and test.predictions are kept"
            )
        elif data.test_eval is not None and not interrupted:
            test_scores, outputs = self.task.evaluate(model, data, data.test_eval)
            lines = self.task.test_lines(data, outputs)
            atomic_write_text(self.files.predictions, "".join(line + "\n" for line in lines))
        if not interrupted and self.config.train.test:
            statistics = self.task.test_statistics(model, data)
        report = self.state.report(
            self.config,
            device=self.device,
            precision=self.precision,
            world=self.world,
            test=test_scores,
            test_monotonicity=statistics,
            predictions=self.files.predictions,
            wall=wall,
            final=final,
        )
        fault_point("before-report")
        report.to_json(self.files.report)
        return report.fields


def dev_validation(task: Task, state: RunState) -> tuple[float, Any, dict[str, float]]:
    """The model's dev loss, dev monotonicity and decoded dev scores, as a validation
    computes them."""
    model, data = state.model, state.data
    try:
        dev_loss, statistics = task.dev_loss(model, data)
        scores, _ = task.evaluate(model, data, data.dev_eval)
    except (MemoryError, RuntimeError) as error:
        hint = "lower train.dev_batch_size or decode.max_output_length"
        raise out_of_memory(error, "validating on the dev set", hint) or error from None
    return dev_loss, statistics, scores


def average_best_last(
    files: RunDir, task: Task, state: RunState, reporter: Reporter
) -> dict[str, Any]:
    """`train.average_best_last`: write final.pt, the mean of best.pt's and last.pt's
    weights (`transduce.averaging`, as `transduce average RUN/best.pt RUN/last.pt`), load
    it into the run's model (which it is from now on), validate it on dev
    (`dev_validation`) and say so; what train.json's `final` records."""
    paths = [files.best, files.last]
    try:
        averaged = average(paths)
    except CheckpointError as error:  # e.g. the two written by versions that differ
        raise CheckpointError(
            f"{error}; train.average_best_last cannot average them: resume with --set "
            "train.average_best_last=false to test best.pt"
        ) from None
    averaged["averaged"]["checkpoints"] = [path.name for path in paths]
    save(files.final, averaged)
    state.model.load_state_dict(averaged["model"])
    dev_loss, statistics, scores = dev_validation(task, state)
    best, last = averaged["averaged"]["updates"]
    said = " ".join(f"{k} {v:.2f}" for k, v in scores.items())
    reporter.message(f"final.pt: best.pt (update {best}) and last.pt (update {last}): dev {said}")
    return {
        **averaged["averaged"],
        "dev_loss": dev_loss,
        "dev_scores": scores,
        "dev_monotonicity": statistics,
    }


def batch_too_large(error: BaseException, update: int, size: int, longest: int) -> BaseException:
    """What to raise for `error` in update `update` on a batch of `size` examples up to
    `longest` symbols: out of memory said so with what to change, else `error`."""
    what = f"in update {update}, a batch of {size} examples up to {longest} symbols long"
    hint = "lower train.batch_size, or set data.max_source_length / max_target_length"
    return out_of_memory(error, what, hint) or error


def keep_large_blocks_out_of_the_heap(threshold: int = 8 << 20) -> bool:
    """Serve allocations of `threshold` bytes or more with mmap (glibc only).

    glibc raises its mmap threshold each time a large block is freed, so after a few
    batches big tensors come from the heap, whose freed space fragments and stays resident
    with batches of varying shapes. A fixed threshold returns them to the system when freed:
    measured on LSTM batches of 256, peak RSS 0.99 -> 0.90 GB at the same speed (a 4 MB
    threshold saves more but costs 10-20% speed). Returns whether it took effect.
    """
    if sys.platform != "linux":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(-3, threshold))  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        return False


def make_optimizer(model: Model, c: configuration.OptimizerConfig) -> torch.optim.Optimizer:
    """Adam or RMSprop over the trainable parameters; Adam's fused kernel where PyTorch has
    one (5x faster than the loop on the CPU). PyTorch's optimizers, without their import of
    TorchDynamo (`transduce.optimizers`)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if c.type == "rmsprop":  # rho is alpha in PyTorch; Keras' defaults: rho 0.9, eps 1e-7
        return optimizers.RMSprop(
            params, lr=c.lr, alpha=c.rho, eps=c.eps, weight_decay=c.weight_decay
        )
    kwargs: dict[str, Any] = {
        "lr": c.lr,
        "betas": (c.betas[0], c.betas[1]),
        "eps": c.eps,
        "weight_decay": c.weight_decay,
    }
    try:
        return optimizers.Adam(params, fused=True, **kwargs)
    except (RuntimeError, ValueError):
        return optimizers.Adam(params, **kwargs)


def _yaml(data: dict[str, Any]) -> str:
    from transduce.recipe_loader import dump_yaml

    return dump_yaml(data)
