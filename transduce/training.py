"""The training loop: batches, updates, schedules, validation on freely decoded dev data.

Validation decodes the dev set (every distinct source once, greedy by default) and scores
it with the metric module against all of a source's targets; the best checkpoint is the
one with the best `train.select_on` score on that decoded output, not on teacher-forced
accuracy. `last.pt` (after each validation) resumes a run where it stopped: with the same
seed on the CPU, a run stopped at a validation point and resumed ends with the same
weights, bit for bit, as a run that was never stopped.
"""

from __future__ import annotations

import ctypes
import math
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from transduce import checkpoint
from transduce import config as configuration
from transduce.data import tokens
from transduce.data.batching import collate, plan_batches
from transduce.data.dataset import EvalSet, Pair, Prepared, build_vocabs, eval_set, load_prepared
from transduce.data.prepare import PrepareRequest, prepare
from transduce.data.vocab import Vocab
from transduce.decoding import decode_all
from transduce.errors import ConfigError, DataError, TransduceError
from transduce.io import atomic_write_text, sha256_file
from transduce.metrics import get_metric
from transduce.metrics.corpus import Corpus
from transduce.models import Model, build_model
from transduce.monotonicity import MonotonicityStats, monotonicity_loss, select_mechanisms
from transduce.precision import autocast, use_bf16
from transduce.progress import Reporter
from transduce.reporting import versions, write_json

REPORT_SCHEMA = "transduce.train/1"
EVAL_METRICS = ("acc", "wer", "per", "lev")


# ------------------------------------------------------------------------ schedules


class Schedule:
    """Learning-rate schedules (see `transduce.config.ScheduleConfig`)."""

    def __init__(
        self,
        config: configuration.ScheduleConfig,
        optimizer: torch.optim.Optimizer,
        lr: float,
        max_updates: int | None = None,
    ):
        self.config, self.optimizer, self.base = config, optimizer, lr
        self.until = config.until or max_updates
        if config.type == "cosine" and (self.until is None or self.until < 2):
            raise ConfigError(
                "train.schedule: the cosine schedule needs the update it ends at "
                "(schedule.until, or train.max_updates), at least 2"
            )
        self.lr = lr if config.type != "inverse_sqrt" else 0.0
        self.best: float | None = None
        self.bad = 0
        self._apply()

    def _apply(self) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr

    def before_update(self, update: int) -> None:
        """Set the rate of update number `update` (1-based)."""
        if self.config.type == "inverse_sqrt":
            warmup = self.config.warmup
            self.lr = self.base * min(update / warmup, math.sqrt(warmup / update))
            self._apply()
        elif self.config.type == "cosine":
            low, until = self.config.min_lr, self.until
            done = min(update - 1, until - 1) / (until - 1)  # type: ignore[operator]
            self.lr = low + (self.base - low) * (1 + math.cos(math.pi * done)) / 2
            self._apply()

    def after_validation(self, value: float, lower_is_better: bool) -> bool:
        """Plateau: reduce after `patience` bad validations. True: the rate fell under min_lr."""
        if self.config.type != "plateau":
            return False
        better = self.best is None or (value < self.best if lower_is_better else value > self.best)
        if better:
            self.best, self.bad = value, 0
            return False
        self.bad += 1
        if self.bad >= self.config.patience:
            self.lr *= self.config.factor
            self.bad = 0
            self._apply()
        return self.lr < self.config.min_lr

    def state_dict(self) -> dict[str, Any]:
        return {"lr": self.lr, "best": self.best, "bad": self.bad, "until": self.until}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume. A cosine schedule keeps the end it was started with unless the config
        names one (`schedule.until`): resuming with a larger max_updates goes on at min_lr
        rather than jumping back up the curve."""
        self.lr, self.best, self.bad = state["lr"], state["best"], state["bad"]
        if self.config.until is None and state.get("until") is not None:
            self.until = state["until"]
        self._apply()


# --------------------------------------------------------------------------- state


@dataclass
class Progress:
    """Where a run is; saved in every checkpoint (plain values only)."""

    update: int = 0
    epoch: int = 0  # epochs completed
    batch: int = 0  # batches done in the current epoch
    elapsed: float = 0.0  # seconds of training and validation so far
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


@dataclass
class Data:
    prepared: Prepared
    source_vocab: Vocab
    target_vocab: Vocab
    train: list[tuple[list[int], list[int]]]
    dev: list[tuple[list[int], list[int]]]
    dev_eval: EvalSet
    test_eval: EvalSet | None
    skipped_long: int


def encode_pairs(
    pairs: Sequence[Pair], source: Vocab, target: Vocab
) -> list[tuple[list[int], list[int]]]:
    """(source ids, target ids) of the pairs that have a target."""
    return [
        (source.encode(p.source), target.encode(p.target)) for p in pairs if p.target is not None
    ]


# -------------------------------------------------------------------------- trainer


def make_trainer(config: configuration.Config, run_dir: Path, **kwargs: Any) -> Trainer:
    """The trainer of the model's task: `Trainer`, or `TaggingTrainer` for taggers."""
    from transduce.models import MODELS

    if MODELS[config.model_name].task == "tagging":
        from transduce.tagging import TaggingTrainer

        return TaggingTrainer(config, run_dir, **kwargs)
    return Trainer(config, run_dir, **kwargs)


class Trainer:
    """Train a sequence-to-sequence model as a configuration says, in a run directory.

    Args:
        config: The validated configuration.
        run_dir: Where the resolved config, prepared data, checkpoints and train.json go.
        resume: Continue from `run_dir/last.pt`.
        reporter: Receives progress (the CLI prints it).
    """

    task = "seq2seq"  # the models it trains (`Model.task`)

    def __init__(
        self,
        config: configuration.Config,
        run_dir: Path,
        resume: bool = False,
        reporter: Reporter | None = None,
    ) -> None:
        from transduce.models import MODELS

        if MODELS[config.model_name].task != self.task:
            raise ConfigError(
                f"model {config.model_name} is a {MODELS[config.model_name].task} model: "
                "train it with transduce.training.make_trainer"
            )
        if self.task == "seq2seq" and config.train.select_on == "tagacc":
            raise ConfigError("train.select_on: tagacc scores taggers; choose another metric")
        self.config, self.run_dir, self.resume = config, Path(run_dir), resume
        self.reporter = reporter or Reporter()
        self.device = self._device(config.train.device)
        self.bf16, self._bf16_warning = use_bf16(config.train.bf16, self.device)
        self.metrics = list(dict.fromkeys([config.train.select_on, *EVAL_METRICS]))
        self.mechanisms: list[int] = []  # the monotonicity loss's, set with the model
        self.data: Data | None = None  # set by `run`

    @staticmethod
    def _device(name: str) -> torch.device:
        if name == "auto":
            name = "cuda" if torch.cuda.is_available() else "cpu"
        if name == "cuda" and not torch.cuda.is_available():
            raise ConfigError("train.device: cuda requested, but PyTorch sees no CUDA device")
        return torch.device(name)

    # ------------------------------------------------------------------ data

    def _prepared_dir(self) -> Path:
        data = self.config.data
        if data.prepared is not None:
            return Path(data.prepared)
        target = self.run_dir / "data"
        if (target / "manifest.json").is_file():
            return target  # prepared by an earlier start of this run
        inputs = {
            split: [Path(p) for p in getattr(data, split)]
            for split in ("train", "dev", "test")
            if getattr(data, split)
        }
        prepare(
            PrepareRequest(
                data.format,  # type: ignore[arg-type]
                target,
                inputs=inputs,
                options=dict(data.options),
                dev_ratio=data.dev_ratio,
                test_ratio=data.test_ratio,
                seed=data.split_seed,
            )
        )
        return target

    def read_splits(self) -> tuple[Prepared, list[Pair], int, list[Pair], list[Pair]]:
        """The prepared data: (prepared, kept training pairs, how many were too long, dev
        pairs with targets, test pairs)."""
        prepared = load_prepared(self._prepared_dir())
        c = self.config
        train_pairs = [p for p in prepared.splits["train"] if p.target is not None]
        kept = [
            p
            for p in train_pairs
            if (c.data.max_source_length is None or len(p.source) <= c.data.max_source_length)
            and (c.data.max_target_length is None or len(p.target) <= c.data.max_target_length)  # type: ignore[arg-type]
        ]
        if not kept:
            raise DataError(
                "no training example left (check data.max_source_length)", prepared.directory
            )
        prepared.splits["train"] = []  # encoded next: the symbol tuples would only take memory
        dev_pairs = [p for p in prepared.splits["dev"] if p.target is not None]
        if not dev_pairs:
            raise DataError(
                "the dev split has no examples with targets: nothing to validate on",
                prepared.directory,
            )
        return prepared, kept, len(train_pairs) - len(kept), dev_pairs, prepared.splits["test"]

    def vocabularies(self, kept: Sequence[Pair]) -> tuple[Vocab, Vocab]:
        c = self.config
        shared = getattr(c.model, "tie_embeddings", None) == "all"
        return build_vocabs(kept, shared, c.data.min_count, c.data.vocab_fraction)

    def load_data_for(self, state: dict[str, Any] | None) -> Data:
        """The data, encoded with the vocabularies of `state` (a resumed run) or new ones."""
        if state is None:
            return self.load_data()
        return self.load_data((Vocab(state["vocab"]["source"]), Vocab(state["vocab"]["target"])))

    def load_data(self, vocabs: tuple[Vocab, Vocab] | None = None) -> Data:
        prepared, kept, too_long, dev_pairs, test_pairs = self.read_splits()
        source_vocab, target_vocab = vocabs or self.vocabularies(kept)
        test = (
            eval_set(test_pairs)
            if test_pairs and all(p.target is not None for p in test_pairs)
            else None
        )
        return Data(
            prepared,
            source_vocab,
            target_vocab,
            encode_pairs(kept, source_vocab, target_vocab),
            encode_pairs(dev_pairs, source_vocab, target_vocab),
            eval_set(dev_pairs),
            test,
            too_long,
        )

    # ----------------------------------------------------------------- pieces

    def _model(self, data: Data) -> Model:
        c = self.config
        try:
            model = build_model(
                c.model_name, c.model, len(data.source_vocab), len(data.target_vocab)
            )
        except ValueError as error:
            raise ConfigError(f"model: {error}") from None
        self.check_lengths(model, data)
        m = c.loss.monotonicity
        self.mechanisms = select_mechanisms(model.attention_names, m.layers, m.heads)
        return model.to(self.device)

    def longest(self, data: Data) -> dict[str, int]:
        """The most positions a sequence of each split takes."""
        return {
            "train": max(max(len(s), len(g) + 1) for s, g in data.train),  # + BOS
            "dev": max(len(s) for s, _ in data.dev),
            "test": max(map(len, data.test_eval.sources)) if data.test_eval else 0,
        }

    def check_lengths(self, model: Model, data: Data) -> None:
        """A sequence the model cannot take: say so before training."""
        limit = model.max_length
        if limit is not None:
            for split, longest in self.longest(data).items():
                if longest > limit:
                    hint = (
                        "leave long training examples out with data.max_source_length "
                        "and data.max_target_length"
                        if split == "train"
                        else f"shorten the {split} split"
                    )
                    key = (
                        "max_length"
                        if hasattr(self.config.model, "max_length")
                        else ("max_positions")
                    )
                    raise ConfigError(
                        f"model: the {split} split has a sequence of {longest} positions, more "
                        f"than the model takes ({limit}): raise model.{key}, or {hint}"
                    )

    def _autocast(self) -> Any:
        return autocast(self.device, self.bf16)

    def _batches(self, data: Data, epoch: int) -> list[list[int]]:
        t = self.config.train
        rng = random.Random(t.seed * 1_000_003 + epoch)  # the same order when resumed
        lengths = [(len(s), len(g)) for s, g in data.train]
        return plan_batches(lengths, t.batch_size, t.batch_by, t.bucketing, rng)

    def _payload(
        self, model: Model, optimizer: Any, schedule: Schedule, data: Data, progress: Progress
    ) -> dict[str, Any]:
        rng = {"torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        return {
            "model_name": self.config.model_name,
            "config": configuration.resolved(self.config),
            "model": model.state_dict(),
            "vocab": {"source": data.source_vocab.symbols, "target": data.target_vocab.symbols},
            "sides": data.prepared.sides,
            "subwords": _subword_models(data.prepared),
            "training": {
                "optimizer": optimizer.state_dict(),
                "schedule": schedule.state_dict(),
                "rng": rng,
                "progress": asdict(progress),
            },
            "versions": versions(),
        }

    # ------------------------------------------------------------- evaluation

    def dev_loss(
        self, model: Model, pairs: list[tuple[list[int], list[int]]]
    ) -> tuple[float, dict[str, Any]]:
        """Teacher-forced negative log-likelihood per target token, and the monotonicity
        (L_mono and %mono at the configured margin) of the selected attention mechanisms."""
        model.eval()
        total, count = 0.0, 0
        m = self.config.loss.monotonicity
        names = [model.attention_names[k] for k in self.mechanisms]
        stats = MonotonicityStats(names, m.margin, m.reverse)
        lengths = [(len(s), len(t)) for s, t in pairs]
        with torch.inference_mode(), self._autocast():
            for chunk in plan_batches(lengths, self.config.train.dev_batch_size, bucketing=True):
                batch = collate([pairs[i][0] for i in chunk], [pairs[i][1] for i in chunk]).to(
                    self.device
                )
                tokens_ = int(batch.target_mask.sum())
                output = model(batch)
                total += float(model.loss(batch, output)["nll"]) * tokens_
                count += tokens_
                stats.add(
                    output.attention[:, self.mechanisms],
                    batch.source,
                    batch.source_mask,
                    batch.target_mask,
                )
        model.train()
        return total / max(count, 1), stats.summary()

    def evaluate(
        self, model: Model, data: Data, evalset: EvalSet
    ) -> tuple[dict[str, float], list[list[str]]]:
        """Decode the distinct sources and score them: (scores, output symbols)."""
        d = self.config.decode
        sources = [data.source_vocab.encode(s) for s in evalset.sources]
        with self._autocast():
            hyps = decode_all(
                model,
                sources,
                self.device,
                self.config.train.dev_batch_size,
                d.beam,
                d.length_penalty,
                1,
                d.max_output_length,
            )
        outputs = [data.target_vocab.decode(h[0].tokens) for h in hyps]
        return score_outputs(
            outputs, evalset.references, data.prepared.sides["target"], self.metrics
        ), outputs

    # ------------------------------------------------------------------- loop

    def run(self) -> dict[str, Any]:
        c, t = self.config, self.config.train
        start_time = time.perf_counter()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        state: dict[str, Any] | None = None
        if self.resume:
            state = checkpoint.load(self.run_dir / checkpoint.LAST)
            if "training" not in state:
                raise TransduceError(f"{state['path']}: has no training state to resume from")
        atomic_write_text(self.run_dir / "config.yaml", _yaml(configuration.resolved(c)))
        if t.threads:
            torch.set_num_threads(t.threads)
        keep_large_blocks_out_of_the_heap()
        data = self.data = self.load_data_for(state)
        torch.manual_seed(t.seed)
        model = self._model(data)
        self.reporter.message(f"model {c.model_name}: {model.parameter_count():,} parameters")
        if self._bf16_warning:
            self.reporter.message(f"warning: {self._bf16_warning}")
        if c.loss.monotonicity.weight > 0 and getattr(c.model, "attention_dropout", 0) > 0:
            self.reporter.message(
                "warning: loss.monotonicity.weight > 0 with model.attention_dropout > 0: "
                "Rios et al. (2021) found this combination reaches a degenerate optimum"
            )
        optimizer = make_optimizer(model, t.optimizer)
        schedule = Schedule(t.schedule, optimizer, t.optimizer.lr, t.max_updates)
        progress = Progress()
        if state is not None:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["training"]["optimizer"])
            schedule.load_state_dict(state["training"]["schedule"])
            progress = Progress(**state["training"]["progress"])
            progress.stop = None
            torch.set_rng_state(state["training"]["rng"]["torch"])
            if "cuda" in state["training"]["rng"] and torch.cuda.is_available():
                torch.cuda.set_rng_state_all(state["training"]["rng"]["cuda"])
            self.reporter.message(f"resuming at update {progress.update}, epoch {progress.epoch}")
        lower_is_better = not get_metric(t.select_on).higher_is_better
        total = t.max_updates
        if total is None and t.max_epochs is not None:
            total = t.max_epochs * len(self._batches(data, 0))
        self.reporter.start(total, progress.update)
        clock = time.perf_counter() - progress.elapsed

        def out_of_time() -> bool:
            return t.max_minutes is not None and time.perf_counter() - clock >= 60 * t.max_minutes

        def limit_reached() -> str | None:
            """Why training must not go on (checked before every update, so a resumed run
            that already met its limits stops at once)."""
            if t.max_epochs is not None and progress.epoch >= t.max_epochs:
                return f"reached max_epochs ({t.max_epochs})"
            if t.max_updates is not None and progress.update >= t.max_updates:
                return f"reached max_updates ({t.max_updates})"
            if out_of_time():
                return f"reached max_minutes ({t.max_minutes})"
            if t.patience is not None and progress.bad_validations >= t.patience:
                return f"no better dev {t.select_on} in {t.patience} validations"
            if t.schedule.type == "plateau" and schedule.lr < t.schedule.min_lr:
                return f"learning rate under min_lr ({t.schedule.min_lr})"
            return None

        model.train()
        progress.stop = limit_reached()
        while progress.stop is None:
            batches = self._batches(data, progress.epoch)
            while progress.batch < len(batches):
                indices = batches[progress.batch]
                tick = time.perf_counter()
                progress.update += 1
                loss = self.update(model, optimizer, schedule, data, indices, progress.update)
                progress.batch += 1
                progress.loss_sum += loss
                progress.loss_updates += 1
                progress.examples += len(indices)
                progress.train_seconds += time.perf_counter() - tick
                rate = progress.examples / max(progress.train_seconds, 1e-9)
                epoch_float = progress.epoch + progress.batch / len(batches)
                self.reporter.update(
                    progress.update,
                    progress.epoch + 1,
                    progress.loss_sum / progress.loss_updates,
                    rate,
                )
                if progress.batch == len(batches):
                    progress.epoch += 1
                    progress.batch = 0
                    at_epoch_end = True
                else:
                    at_epoch_end = False
                due = (
                    t.validate_every is not None and progress.update % t.validate_every == 0
                ) or (t.validate_every is None and at_epoch_end)
                progress.stop = limit_reached()
                if due or progress.stop is not None:
                    progress.elapsed = time.perf_counter() - clock
                    self._validate(
                        model, optimizer, schedule, data, progress, epoch_float, lower_is_better
                    )
                    progress.stop = progress.stop or limit_reached()
                if progress.stop is not None or at_epoch_end:
                    break
            if progress.stop is None:
                progress.stop = limit_reached()
        if progress.last_validation != progress.update:  # stopped between validations
            progress.elapsed = time.perf_counter() - clock
            self._validate(
                model, optimizer, schedule, data, progress, float(progress.epoch), lower_is_better
            )
        self.reporter.stop()
        self.reporter.message(f"stopped: {progress.stop}")
        return self._finish(model, data, progress, time.perf_counter() - start_time)

    def update(
        self,
        model: Model,
        optimizer: Any,
        schedule: Schedule,
        data: Data,
        indices: list[int],
        number: int,
    ) -> float:
        """One update on the training examples `indices`; returns the loss."""
        batch = collate(
            [data.train[i][0] for i in indices], [data.train[i][1] for i in indices]
        ).to(self.device)
        schedule.before_update(number)
        m = self.config.loss.monotonicity
        weight = m.weight_at(number)
        with self._autocast():
            output = model(batch)
            losses = model.loss(batch, output, self.config.loss.label_smoothing)
            if weight > 0:  # Rios et al. (2021): NLL + lambda * L_mono, eq. (4)
                mono = monotonicity_loss(
                    output.attention.float(),
                    batch.source,
                    batch.source_mask,
                    batch.target_mask,
                    m.margin,
                    self.mechanisms,
                    m.reverse,
                )
                losses["loss"] = losses["loss"] + weight * mono
        return self.step(model, optimizer, losses["loss"])

    def step(self, model: Model, optimizer: Any, loss: torch.Tensor) -> float:
        """Backpropagate `loss`, clip the gradient norm if asked, update; returns the loss."""
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        clip = self.config.train.clip_norm
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        return loss.item()

    def _validate(
        self,
        model: Model,
        optimizer: Any,
        schedule: Schedule,
        data: Data,
        progress: Progress,
        epoch: float,
        lower_is_better: bool,
    ) -> None:
        t = self.config.train
        dev_loss, monotonicity = self.dev_loss(model, data.dev)
        scores, _ = self.evaluate(model, data, data.dev_eval)
        score = scores[t.select_on]
        improved = progress.best_score is None or (
            score < progress.best_score if lower_is_better else score > progress.best_score
        )
        entry = {
            "update": progress.update,
            "epoch": round(epoch, 4),
            "train_loss": progress.loss_sum / max(progress.loss_updates, 1),
            "dev_loss": dev_loss,
            "dev_scores": scores,
            "dev_monotonicity": monotonicity,
            "lr": schedule.lr,
            "elapsed": progress.elapsed,
            "examples_per_s": progress.examples / max(progress.train_seconds, 1e-9),
        }
        progress.history.append(entry)
        progress.loss_sum, progress.loss_updates = 0.0, 0
        progress.examples, progress.train_seconds = 0, 0.0
        progress.last_validation = progress.update
        if improved:
            progress.best_score, progress.best_update, progress.bad_validations = (
                score,
                progress.update,
                0,
            )
        else:
            progress.bad_validations += 1
        monitored = dev_loss if t.schedule.monitor == "loss" else score
        schedule.after_validation(monitored, lower_is_better or t.schedule.monitor == "loss")
        payload = self._payload(model, optimizer, schedule, data, progress)
        checkpoint.save(self.run_dir / checkpoint.LAST, payload)
        if improved:
            checkpoint.save(self.run_dir / checkpoint.BEST, payload)
        self.reporter.validation(entry)

    def _finish(self, model: Model, data: Data, progress: Progress, wall: float) -> dict[str, Any]:
        best = checkpoint.load(self.run_dir / checkpoint.BEST)
        model.load_state_dict(best["model"])
        test_scores = None
        if data.test_eval is not None:
            test_scores, outputs = self.evaluate(model, data, data.test_eval)
            by_source = dict(zip(data.test_eval.sources, outputs))
            side = data.prepared.sides["target"]
            lines = [
                tokens.detokenize(by_source[p.source], side) for p in data.prepared.splits["test"]
            ]
            atomic_write_text(
                self.run_dir / "test.predictions", "".join(line + "\n" for line in lines)
            )
        manifest = data.prepared.directory / "manifest.json"
        report = {
            "schema": REPORT_SCHEMA,
            "config": configuration.resolved(self.config),
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
            },
            "vocab": {"source": len(data.source_vocab), "target": len(data.target_vocab)},
            "parameters": model.parameter_count(),
            "device": str(self.device),
            "bf16": self.bf16,  # train.bf16 as honoured by this device
            "threads": torch.get_num_threads(),
            "history": progress.history,
            "best": {
                "update": progress.best_update,
                "metric": self.config.train.select_on,
                "score": progress.best_score,
            },
            "test": test_scores,
            "stop": progress.stop,
            "updates": progress.update,
            "epochs": progress.epoch,
            "training_seconds": progress.elapsed,  # training and validation, all sessions
            "wall_seconds": wall,  # this process: data, training, test decoding
            "versions": versions(),
        }
        write_json(self.run_dir / "train.json", report)
        return report


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
    one (5x faster than the loop on the CPU)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if c.type == "rmsprop":  # rho is alpha in PyTorch; Keras' defaults: rho 0.9, eps 1e-7
        return torch.optim.RMSprop(
            params, lr=c.lr, alpha=c.rho, eps=c.eps, weight_decay=c.weight_decay
        )
    kwargs = {"lr": c.lr, "betas": tuple(c.betas), "eps": c.eps, "weight_decay": c.weight_decay}
    try:
        return torch.optim.Adam(params, fused=True, **kwargs)
    except (RuntimeError, ValueError):
        return torch.optim.Adam(params, **kwargs)


def score_outputs(
    outputs: Sequence[Sequence[str]],
    references: Sequence[Sequence[Sequence[str]]],
    side: dict[str, Any],
    metrics: Sequence[str],
) -> dict[str, float]:
    """Score output symbols against reference symbols as `transduce score` would score the
    printed text: both turned into the target's own text, then cut by its unit."""
    hyps = [tokens.detokenize(o, side) for o in outputs]
    refs = [[tokens.detokenize(r, side) for r in alts] for alts in references]
    unit = tokens.CHAR if side.get("unit") == tokens.CHAR else tokens.SYMBOL
    corpus = Corpus(hyps, refs, unit)
    return {name: get_metric(name, unit=unit).score(corpus).value for name in metrics}


def _subword_models(prepared: Prepared) -> dict[str, Any]:
    """The BPE model files of the data, embedded so a checkpoint decodes raw text alone."""
    models = {}
    for side in ("source", "target"):
        spec = prepared.sides.get(side, {})
        if spec.get("unit") == tokens.SUBWORD and spec.get("model"):
            path = prepared.directory / spec["model"]
            models[side] = {
                "library": spec["library"],
                "name": spec["model"],
                "data": path.read_bytes(),
            }
    return models


def _yaml(data: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
