"""The trainer: toy tasks learned, resume bit for bit, checkpoints, reports."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from transduce import checkpoint
from transduce import config as configuration
from transduce.errors import ConfigError, TransduceError
from transduce.schedules import Schedule
from transduce.training import Trainer

from .toy import DEV_BAR, TEST_BAR, TINY_LSTM, TINY_TRANSFORMER, recipe, write_task


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("toy")
    return {task: write_task(root, task) for task in ("copy", "reverse")}


def train(run_dir: Path, data: dict, resume: bool = False) -> dict:
    return Trainer(configuration.parse(data), run_dir, resume=resume).run()


@pytest.mark.parametrize(
    ("model", "task", "epochs", "extra"),
    [
        (TINY_LSTM, "reverse", 40, {}),
        ({**TINY_LSTM, "input_feeding": True, "attention": "mlp"}, "copy", 25, {}),
        (TINY_TRANSFORMER, "copy", 25, {"schedule": {"type": "inverse_sqrt", "warmup": 100}}),
    ],
    ids=["lstm-reverse", "lstm-feeding-copy", "transformer-copy"],
)
def test_models_learn_toy_tasks(tasks, tmp_path: Path, model, task, epochs, extra):
    report = train(tmp_path / "run", recipe(tasks[task], model, max_epochs=epochs, **extra))
    assert report["best"]["score"] >= DEV_BAR, [h["dev_scores"]["acc"] for h in report["history"]]
    assert report["test"]["acc"] >= TEST_BAR
    predictions = (tmp_path / "run" / "test.predictions").read_text(encoding="utf-8").splitlines()
    test_lines = (tasks[task] / "test.tsv").read_text(encoding="utf-8").splitlines()
    assert len(predictions) == len(test_lines)


def test_resume_ends_bit_identical(tasks, tmp_path: Path):
    data = recipe(tasks["copy"], {**TINY_LSTM, "dropout": 0.2}, max_epochs=3, batch_size=32)
    whole = train(tmp_path / "whole", data)
    first = recipe(tasks["copy"], {**TINY_LSTM, "dropout": 0.2}, max_epochs=1, batch_size=32)
    train(tmp_path / "parts", first)
    resumed = train(tmp_path / "parts", data, resume=True)
    a = checkpoint.load(tmp_path / "whole" / "last.pt")["model"]
    b = checkpoint.load(tmp_path / "parts" / "last.pt")["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert [h["dev_scores"] for h in whole["history"]] == [
        h["dev_scores"] for h in resumed["history"]
    ]
    assert [h["train_loss"] for h in whole["history"]] == [
        h["train_loss"] for h in resumed["history"]
    ]


def test_resume_after_the_stop_trains_no_further(tasks, tmp_path: Path):
    data = recipe(tasks["copy"], TINY_LSTM, max_updates=7, validate_every=5)
    first = train(tmp_path / "run", data)
    before = checkpoint.load(tmp_path / "run" / checkpoint.LAST)["model"]
    predictions = (tmp_path / "run" / "test.predictions").stat().st_mtime_ns
    again = train(tmp_path / "run", data, resume=True)
    assert (tmp_path / "run" / "test.predictions").stat().st_mtime_ns == predictions
    assert first["updates"] == again["updates"] == 7
    assert again["stop"] == "reached max_updates (7)"
    assert len(again["history"]) == len(first["history"]) == 2
    after = checkpoint.load(tmp_path / "run" / checkpoint.LAST)["model"]
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert again["test"] == first["test"]  # kept, not decoded again
    beam = recipe(tasks["copy"], TINY_LSTM, max_updates=7, validate_every=5)
    beam["decode"]["beam"] = 3  # another decoding: the test set is decoded again
    train(tmp_path / "run", beam, resume=True)
    assert (tmp_path / "run" / "test.predictions").stat().st_mtime_ns != predictions


def test_cpu_seconds_count_the_process_time_over_resumed_sessions(
    tasks, tmp_path: Path, monkeypatch
):
    """train.json's `cpu_seconds`: the process's CPU time in training and validation, added
    over the sessions of a resumed run; a session that sleeps (as a run does whose cores
    are taken by other processes) adds wall time to `training_seconds`, not CPU time; a run
    resumed from a checkpoint that did not count them records None, not a part."""
    import time

    nap, burn = 0.05, {"seconds": 0.05}
    step = Trainer.train_step

    def slow_step(self, batches):
        time.sleep(nap)  # wall time that is not this process's CPU time
        start = time.process_time()
        while time.process_time() - start < burn["seconds"]:  # CPU time of this process
            pass
        return step(self, batches)

    monkeypatch.setattr(Trainer, "train_step", slow_step)
    model = {**TINY_LSTM, "dropout": 0.2}
    first = recipe(tasks["copy"], model, max_epochs=1, batch_size=32, threads=1)
    whole = recipe(tasks["copy"], model, max_epochs=3, batch_size=32, threads=1)
    cpu_before = time.process_time()
    one = train(tmp_path / "run", first)
    cpu_one = time.process_time() - cpu_before
    assert 0.9 * burn["seconds"] * one["updates"] <= one["cpu_seconds"] <= cpu_one, one
    assert one["machine"]["cpus"] >= 1 and one["machine"]["gpu"] is None  # what trained it
    assert one["training_seconds"] - one["cpu_seconds"] >= 0.9 * nap * one["updates"], one
    burn["seconds"] = 0.0  # the second session costs less than the first: if it did not
    cpu_before = time.process_time()  # add to the first's, the total would be lower
    two = train(tmp_path / "run", whole, resume=True)
    cpu_two = time.process_time() - cpu_before
    assert 0 < two["cpu_seconds"] - one["cpu_seconds"] <= cpu_two  # the first session's kept
    assert two["training_seconds"] - two["cpu_seconds"] >= 0.9 * nap * two["updates"]
    # an earlier version's checkpoint has no cpu_seconds: the sum is unknown
    train(tmp_path / "old", first)
    last = tmp_path / "old" / checkpoint.LAST
    saved = checkpoint.load(last)
    del saved["training"]["progress"]["cpu_seconds"]
    checkpoint.save(last, saved)
    old = train(tmp_path / "old", whole, resume=True)
    assert old["updates"] == two["updates"] and old["cpu_seconds"] is None
    written = json.loads((tmp_path / "old" / "train.json").read_text())
    assert "cpu_seconds" in written and written["cpu_seconds"] is None


def test_machine_read_from_cpuinfo(tmp_path: Path):
    """train.json's `machine`: the first processor's model name, family and model (a later
    processor's lines are not read over them), the CPUs this process may use, torch's
    kernels; Nones where there is no cpuinfo; and in words for the report."""
    import os

    from transduce.reporting import machine
    from transduce.runs import RunReport

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
        "model name\t: AMD EPYC 9B14\nflags\t\t: fpu avx2\n\n"
        "processor\t: 1\ncpu family\t: 6\nmodel\t\t: 143\nmodel name\t: Other\n\n"
    )
    facts = machine("cpu", cpuinfo)
    assert facts["cpu"] == "AMD EPYC 9B14" and facts["cpu_family"] == "25"
    assert facts["cpu_model"] == "17" and facts["gpu"] is None
    assert facts["cpus"] == len(os.sched_getaffinity(0))
    assert facts["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    missing = machine(None, tmp_path / "none")
    assert (missing["cpu"], missing["cpu_family"], missing["cpu_model"]) == (None, None, None)
    facts["cpu_capability"], facts["cpus"] = "AVX512", 2
    words = RunReport({"machine": facts}).machine
    assert words == "AMD EPYC 9B14 (family 25, model 17), AVX512 kernels, 2 CPUs"
    assert RunReport({"machine": {**missing, "cpus": 4}}).machine == (
        f"unknown CPU, {missing['cpu_capability']} kernels, 4 CPUs"
    )
    family_only = {"cpu": "C", "cpu_family": "6", "cpu_capability": None, "cpus": None}
    assert RunReport({"machine": family_only}).machine == "C (family 6)"
    assert RunReport({}).machine is None


def test_dev_subset_and_no_test(tasks, tmp_path: Path):
    data = recipe(tasks["copy"], TINY_LSTM, max_updates=4, validate_every=2, dev_subset=10)
    data["train"]["test"] = False
    report = train(tmp_path / "run", data)
    assert report["data"]["dev_sources"] == 10 and report["test"] is None
    assert report["data"]["test_sources"] is None
    assert not (tmp_path / "run" / "test.predictions").exists()
    again = train(tmp_path / "again", data)  # the same seed draws the same words
    assert [h["dev_scores"] for h in again["history"]] == [
        h["dev_scores"] for h in report["history"]
    ]
    whole = train(tmp_path / "whole", recipe(tasks["copy"], TINY_LSTM, max_updates=4))
    assert whole["data"]["dev_sources"] > 10 and whole["test"] is not None


def test_resume_with_other_model_options_is_refused_before_anything_is_written(
    tasks, tmp_path: Path
):
    data = recipe(tasks["copy"], TINY_LSTM, max_updates=4, validate_every=2)
    train(tmp_path / "run", data)
    saved = (tmp_path / "run" / "config.yaml").read_text(encoding="utf-8")
    before = (tmp_path / "run" / checkpoint.LAST).read_bytes()
    other = recipe(tasks["copy"], {**TINY_LSTM, "encoder_size": 64}, max_updates=8)
    with pytest.raises(ConfigError, match=r"last.pt: the run was trained with model.encoder_size"):
        train(tmp_path / "run", other, resume=True)
    assert (tmp_path / "run" / "config.yaml").read_text(encoding="utf-8") == saved
    assert (tmp_path / "run" / checkpoint.LAST).read_bytes() == before
    # an option newer than the checkpoint (absent from its config) is taken at its
    # default, which kept the old behaviour: the same value resumes, another is refused
    state = checkpoint.load(tmp_path / "run" / checkpoint.LAST)
    del state["config"]["model"]["input_feeding"]  # default false, as trained
    del state["config"]["model"]["dropout"]  # default 0.4; this run's recipe has 0.0
    checkpoint.save(tmp_path / "run" / checkpoint.LAST, state)
    longer = {**data, "train": {**data["train"], "max_updates": 6}}
    with pytest.raises(ConfigError, match=r"trained with model.dropout 0.4, not 0.0"):
        train(tmp_path / "run", longer, resume=True)
    state["config"]["model"]["dropout"] = 0.0
    checkpoint.save(tmp_path / "run" / checkpoint.LAST, state)
    train(tmp_path / "run", longer, resume=True)


def test_a_local_m_checkpoint_of_transduce_0_2_reads_as_local_m_gaussian():
    payload = {
        "config": {"model": {"name": "lstm", "attention": {"type": "local_m", "window": 2}}},
        "versions": {"transduce": "0.2.0"},
    }
    assert checkpoint.upgrade(payload)["config"]["model"]["attention"]["type"] == (
        "local_m_gaussian"
    )
    payload["config"]["model"]["attention"]["type"] = "local_m"
    payload["versions"]["transduce"] = "0.3.0"
    assert checkpoint.upgrade(payload)["config"]["model"]["attention"]["type"] == "local_m"


def test_checkpoints_and_report(tasks, tmp_path: Path):
    run = tmp_path / "run"
    report = train(run, recipe(tasks["copy"], TINY_LSTM, max_updates=30, validate_every=10))
    payload = torch.load(run / "best.pt", weights_only=True)  # plain containers only
    assert payload["format"] == "transduce.checkpoint/1" and payload["model_name"] == "lstm"
    assert payload["vocab"]["source"][:5] == ["<pad>", "<s>", "</s>", "<unk>", "<sep>"]
    training = {"optimizer", "schedule", "scaler", "rng", "progress", "init_from"}
    assert set(payload["training"]) == training and payload["training"]["init_from"] is None
    assert report["updates"] == 30 and len(report["history"]) == 3
    entry = report["history"][0]
    assert set(entry) == {
        "update",
        "epoch",
        "train_loss",
        "dev_loss",
        "dev_scores",
        "dev_monotonicity",
        "lr",
        "elapsed",
        "examples_per_s",
    }
    assert set(entry["dev_scores"]) == {"acc", "wer", "per", "lev"}
    saved = json.loads((run / "train.json").read_text(encoding="utf-8"))
    assert saved["parameters"] == report["parameters"] > 0
    assert saved["data"]["manifest_sha256"] and saved["stop"] == "reached max_updates (30)"
    resolved = configuration.read_yaml(run / "config.yaml")
    assert resolved["train"]["max_updates"] == 30 and resolved["model"]["name"] == "lstm"
    with pytest.raises(TransduceError, match="no such checkpoint"):
        Trainer(configuration.parse(resolved), tmp_path / "elsewhere", resume=True).run()


def test_early_stopping_and_plateau(tasks, tmp_path: Path):
    data = recipe(
        tasks["copy"],
        TINY_LSTM,
        max_epochs=50,
        patience=2,
        optimizer={"lr": 1e-6},  # learns nothing: no better dev score
        schedule={"type": "plateau", "patience": 1, "factor": 0.5, "min_lr": 1e-9},
    )
    report = train(tmp_path / "run", data)
    assert report["stop"] == "no better dev acc in 2 validations"
    assert [round(h["lr"] / 1e-6, 3) for h in report["history"]] == [
        1.0,
        1.0,
        0.5,
    ]  # rate used until then


@pytest.mark.parametrize(
    ("stop_at_min_lr", "stop"),
    [(True, "learning rate under min_lr (8e-07)"), (False, "no better dev acc in 3 validations")],
)
def test_the_run_stops_at_min_lr_or_only_by_patience(tasks, tmp_path: Path, stop_at_min_lr, stop):
    schedule = {"type": "plateau", "patience": 1, "factor": 0.5, "min_lr": 8e-7}
    schedule["stop_at_min_lr"] = stop_at_min_lr
    data = recipe(
        tasks["copy"], TINY_LSTM, max_epochs=50, patience=3, optimizer={"lr": 1e-6},
        schedule=schedule,
    )  # fmt: skip
    assert train(tmp_path / "run", data)["stop"] == stop


def test_schedules():
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([parameter], lr=1.0)
    schedule = Schedule(configuration.ScheduleConfig(type="inverse_sqrt", warmup=4), optimizer, 1.0)
    rates = []
    for update in range(1, 9):
        schedule.before_update(update)
        rates.append(optimizer.param_groups[0]["lr"])
    assert rates == pytest.approx(
        [0.25, 0.5, 0.75, 1.0, (4 / 5) ** 0.5, (4 / 6) ** 0.5, (4 / 7) ** 0.5, 0.5**0.5 * 1.0]
    )
    plateau = Schedule(
        configuration.ScheduleConfig(type="plateau", patience=2, factor=0.1, min_lr=0.05),
        optimizer,
        1.0,
    )
    stops = [plateau.after_validation(v, lower_is_better=True) for v in (5, 4, 4, 4, 3, 3, 3)]
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.01)
    assert stops == [False, False, False, False, False, False, True]
    sockeye = Schedule(  # Sockeye's plateau-reduce: the rate falls on, nothing stops
        configuration.ScheduleConfig(
            type="plateau", patience=2, factor=0.1, min_lr=0.05, stop_at_min_lr=False
        ),
        optimizer,
        1.0,
    )
    stops = [sockeye.after_validation(v, lower_is_better=True) for v in (5, 4, 4, 4, 3, 3, 3)]
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.01) and not any(stops)
    for _ in range(2):
        sockeye.after_validation(3, lower_is_better=True)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.001)  # below min_lr
    cosine = Schedule(
        configuration.ScheduleConfig(type="cosine", min_lr=0.1), optimizer, 1.0, max_updates=5
    )
    rates = []
    for update in range(1, 8):
        cosine.before_update(update)
        rates.append(optimizer.param_groups[0]["lr"])
    # 0.1 + 0.9 (1 + cos(pi k / 4)) / 2 for k = 0..4, then min_lr: computed by hand
    assert rates == pytest.approx([1.0, 0.868198, 0.55, 0.231802, 0.1, 0.1, 0.1], abs=1e-6)
    # resumed with a larger max_updates, it keeps its end: min_lr, not back up the curve
    longer = Schedule(
        configuration.ScheduleConfig(type="cosine", min_lr=0.1), optimizer, 1.0, max_updates=10
    )
    longer.load_state_dict(cosine.state_dict())
    longer.before_update(6)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.1)
    with pytest.raises(ConfigError, match="cosine schedule needs the update it ends at"):
        Schedule(configuration.ScheduleConfig(type="cosine"), optimizer, 1.0)


def test_sequences_longer_than_learned_positions_are_a_config_error(tasks, tmp_path: Path):
    model = {**TINY_TRANSFORMER, "positions": "learned", "max_positions": 4}  # words: 2-6
    with pytest.raises(
        TransduceError, match="train split has a sequence of 7 positions, more than the model"
    ):
        train(tmp_path / "run", recipe(tasks["copy"], model, max_updates=2))
    data = recipe(tasks["copy"], {**model, "max_positions": 7}, max_updates=2)
    assert train(tmp_path / "ok", data)["updates"] == 2


def test_min_count_leaves_rare_symbols_to_unk(tmp_path: Path):
    from transduce.data.vocab import Vocab
    from transduce.special import SPECIALS, UNK_ID

    vocab = Vocab.build([["a", "b", "a"], ["c", "a", "b"]], min_count=2)
    assert vocab.symbols == [*SPECIALS, "a", "b"]
    assert vocab.encode(["c", "a"]) == [UNK_ID, vocab.index["a"]]
    from transduce.data.prepare import PrepareRequest, prepare

    train, dev = tmp_path / "train.tsv", tmp_path / "dev.tsv"  # z, Z once: <unk> at 2
    train.write_text("".join(f"ab{i % 3}\tA B\n" for i in range(40)) + "abz\tA Z\n")
    dev.write_text("ab\tA B\n")
    inputs = {"train": [train], "dev": [dev], "test": [dev]}
    prepare(PrepareRequest("tsv", tmp_path / "p", inputs=inputs))
    data = recipe(tmp_path / "p", TINY_LSTM, max_updates=1)
    data["data"]["min_count"] = 2
    trainer = Trainer(configuration.parse(data), tmp_path / "run")
    loaded = trainer.task.load_data(trainer.task.prepared_dir(trainer.run_dir))
    assert "z" not in loaded.source_vocab and "Z" not in loaded.target_vocab
    assert "b" in loaded.source_vocab and "B" in loaded.target_vocab


def test_the_sockeye_schedule_at_hand_computed_points():
    """Sockeye 1.18's fixed-rate-inv-sqrt-t with warm-up 4000 and a half life of 10
    checkpoints of 400 updates (Rios et al. 2021): min(lr / sqrt(1 + 3t / 4000),
    lr (t + 1) / 4001), by hand at four updates."""
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([parameter], lr=1e-3)
    config = configuration.ScheduleConfig(type="sockeye_inv_sqrt", warmup=4000, half_life=4000)
    schedule = Schedule(config, optimizer, 1e-3)
    expected = {
        1: 1e-3 * 2 / 4001,  # warming up: 5.00e-7
        2393: 1e-3 / math.sqrt(1 + 3 * 2393 / 4000),  # the peak, 5.98e-4 (warm-up: 5.98e-4)
        4000: 0.5e-3,  # one half life
        100_000: 1e-3 / math.sqrt(76),  # 1.15e-4
    }
    for update, rate in expected.items():
        schedule.before_update(update)
        assert optimizer.param_groups[0]["lr"] == pytest.approx(rate, rel=1e-9)
    assert 1e-3 * 2394 / 4001 > expected[2393] > 1e-3 / math.sqrt(1 + 3 * 2394 / 4000)


def _dev_sources(prepared: Path, tmp_path: Path, **train: object) -> list:
    trainer = Trainer(
        configuration.parse(recipe(prepared, TINY_LSTM, max_updates=1, **train)), tmp_path
    )
    data = trainer.setup().data
    return data.dev_eval.sources


def test_dev_subset_seed_gives_every_seed_the_same_sample(tasks, tmp_path: Path):
    """Sockeye's checkpoint decoder samples the dev set with seed 42 whatever the run's
    seed: `dev_subset_seed` does the same; without it each seed draws its own."""
    fixed = [
        _dev_sources(tasks["copy"], tmp_path / f"f{s}", seed=s, dev_subset=8, dev_subset_seed=42)
        for s in (1, 2)
    ]
    own = [_dev_sources(tasks["copy"], tmp_path / f"o{s}", seed=s, dev_subset=8) for s in (1, 2)]
    assert fixed[0] == fixed[1] and len(fixed[0]) == 8
    assert own[0] != own[1]
    assert fixed[0] == _dev_sources(tasks["copy"], tmp_path / "o42", seed=42, dev_subset=8)


def _best_by_rule(history: list[dict], metrics: list[str], strict: bool) -> int:
    """The best update of a history by the selection rule, computed independently."""
    higher = {"acc": True, "per": False, "wer": False}
    best = history[0]
    for entry in history[1:]:
        now, then = entry["dev_scores"], best["dev_scores"]
        if strict:
            name = metrics[0]
            if (now[name] > then[name]) if higher[name] else (now[name] < then[name]):
                best = entry
        elif all((now[m] >= then[m]) if higher[m] else (now[m] <= then[m]) for m in metrics):
            best = entry
    return best["update"]


def test_select_also_keeps_the_validation_best_on_every_metric(tasks, tmp_path: Path):
    """Wu's two-metric choice: a validation replaces the best only if it is at least as
    good on PER and on accuracy (ties: the later); select_on alone: strictly better. Both
    checked against the rule applied to the run's own history; a select_also that is
    not a metric, or a tagging metric, is refused."""
    settings = {"max_updates": 120, "validate_every": 10, "optimizer": {"lr": 0.01}}
    both = train(
        tmp_path / "both",
        recipe(tasks["copy"], TINY_LSTM, select_on="per", select_also=["acc"], **settings),
    )
    assert len(both["history"]) == 12
    assert both["best"]["update"] == _best_by_rule(both["history"], ["per", "acc"], False)
    alone = train(tmp_path / "alone", recipe(tasks["copy"], TINY_LSTM, select_on="per", **settings))
    assert alone["best"]["update"] == _best_by_rule(alone["history"], ["per"], True)
    for wrong, message in ((["nope"], "unknown metric"), (["per"], "select_on already")):
        data = recipe(tasks["copy"], TINY_LSTM, select_on="per", select_also=wrong)
        with pytest.raises(ConfigError, match=message):
            configuration.parse(data)
    data = recipe(tasks["copy"], TINY_LSTM, select_on="per", select_also=["tagacc"])
    with pytest.raises(ConfigError, match="scores taggers"):
        Trainer(configuration.parse(data), tmp_path / "tag")


def test_the_two_metric_rule_by_hand(tasks, tmp_path: Path):
    """`Progress.improved_by` on hand-made validations: better PER with worse accuracy is
    not a new best under select_also (it is under select_on alone); equal on both is (the
    later)."""
    from transduce.runstate import Progress

    def train_config(**extra: object) -> configuration.TrainConfig:
        data = recipe(tasks["copy"], TINY_LSTM, select_on="per", **extra)
        return configuration.parse(data).train

    progress = Progress(best_score=10.0, best_update=5)
    progress.history = [{"update": 5, "dev_scores": {"per": 10.0, "acc": 50.0}}]
    wu, alone = train_config(select_also=["acc"]), train_config()
    assert not progress.improved_by({"per": 8.0, "acc": 49.0}, wu)
    assert progress.improved_by({"per": 8.0, "acc": 49.0}, alone)
    assert progress.improved_by({"per": 10.0, "acc": 50.0}, wu)  # a tie: the later
    assert not progress.improved_by({"per": 10.0, "acc": 50.0}, alone)
    assert progress.improved_by({"per": 9.0, "acc": 51.0}, wu)
    assert not progress.improved_by({"per": 11.0, "acc": 60.0}, wu)
    assert Progress().improved_by({"per": 99.0, "acc": 0.0}, wu)  # the first one


def test_dev_loss_is_the_mean_over_every_dev_token(tmp_path):
    """`dev_loss` sums on the device and reads once: it equals the negative log-likelihood
    of each dev pair decoded alone (a batch of one), summed and divided by the number of
    target tokens (each pair's symbols and its end symbol)."""
    from transduce.data.batching import collate

    prepared = write_task(tmp_path, "reverse", n=200)
    data = recipe(prepared, TINY_LSTM, max_updates=1, device="cpu", dev_batch_size=7)
    trainer = Trainer(configuration.parse(data), tmp_path / "run")
    state = trainer.setup()
    model, loaded = state.model, state.data
    loss, _ = trainer.task.dev_loss(model, loaded)
    model.eval()
    total, tokens = 0.0, 0
    with torch.inference_mode():
        for source, target in loaded.dev:
            batch = collate([source], [target])
            total += float(model.loss(batch, model(batch))["nll"]) * (len(target) + 1)
            tokens += len(target) + 1
    assert len(loaded.dev) > 7 and loss == pytest.approx(total / tokens, rel=1e-5)
