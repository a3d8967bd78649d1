"""Fault injection: a training run killed at every write point of a validation (and of
its end), then resumed, ends bit-identical to a run that was never stopped; a run that
cannot be resumed as asked changes nothing; one writer per run directory; a full disk.

The kills are exact, not timed: `TRANSDUCE_FAULT=POINT[@N][:SIGNAL]` makes the trainer
send itself SIGNAL the N-th time it reaches POINT (`transduce.faults.fault_point`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from transduce import checkpoint
from transduce import config as configuration
from transduce.errors import ConfigError
from transduce.experiments.runner import finished
from transduce.runs import LOCK
from transduce.runstate import Progress, check_limits

from .conftest import transduce_env
from .toy import TINY_LSTM, recipe, write_task

UPDATES, EVERY = 12, 3  # four validations


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> Path:
    return write_task(tmp_path_factory.mktemp("faults"), "copy", n=300)


def write_recipe(path: Path, prepared: Path, **train) -> Path:
    settings = {"max_updates": UPDATES, "validate_every": EVERY, "select_on": "lev"}
    data = recipe(prepared, {**TINY_LSTM, "dropout": 0.2}, threads=1, **{**settings, **train})
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def train(config: Path, out: Path, *extra: str, fault: str | None = None, wait: bool = True):
    env = transduce_env()
    env.pop("TRANSDUCE_FAULT", None)
    if fault:
        env["TRANSDUCE_FAULT"] = fault
    command = [sys.executable, "-m", "transduce", "train", "-q", "--config", str(config)]
    command += ["--out", str(out), *extra]
    if not wait:
        return subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def weights(path: Path) -> dict[str, torch.Tensor]:
    return checkpoint.load(path)["model"]


def same_weights(a: Path, b: Path) -> bool:
    x, y = weights(a), weights(b)
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def outcome(run: Path) -> dict:
    report = json.loads((run / "train.json").read_text(encoding="utf-8"))
    return {
        "test": report["test"],
        "best": report["best"],
        "history": [(h["update"], h["dev_scores"], h["train_loss"]) for h in report["history"]],
        "predictions": (run / "test.predictions").read_text(encoding="utf-8"),
    }


@pytest.fixture(scope="module")
def reference(toy, tmp_path_factory) -> tuple[Path, Path]:
    """The uninterrupted run, and its recipe."""
    root = tmp_path_factory.mktemp("reference")
    config = write_recipe(root / "recipe.yaml", toy)
    result = train(config, root / "run")
    assert result.returncode == 0, result.stderr
    return config, root / "run"


def improving_validations(run: Path) -> list[int]:
    """1-based numbers of the validations that wrote best.pt."""
    history = json.loads((run / "train.json").read_text(encoding="utf-8"))["history"]
    best, numbers = None, []
    for number, entry in enumerate(history, 1):
        score = entry["dev_scores"]["lev"]
        if best is None or score < best:
            best = score
            numbers.append(number)
    return numbers


# Every write of a validation and of the run's end, and the points between them. "@2" and
# "@3": the kill happens at a later validation, so that a resumed run has work to redo.
KILL_POINTS = [
    "validation@2",  # after the dev decode, before any checkpoint of the validation
    "before-rename:last.pt@2",  # last.pt written to its temporary file, not renamed
    "after-last@IMPROVED",  # last.pt records the new best, best.pt not yet written
    "before-rename:best.pt@IMPROVED",  # best.pt's temporary file complete, not renamed
    "after-best@2",  # both written, nothing else yet
    "before-rename:config.yaml@1",  # the resolved config, at the start
    "before-test",  # training done, test not decoded
    "before-rename:test.predictions",
    "before-report",  # test decoded, train.json not written
    "before-rename:train.json",
]


@pytest.mark.parametrize("point", KILL_POINTS)
@pytest.mark.parametrize("sig", ["KILL"])
def test_killed_at_a_write_point_then_resumed_ends_bit_identical(
    reference, tmp_path: Path, point: str, sig: str
):
    config, whole = reference
    improved = [n for n in improving_validations(whole) if n > 1]
    assert improved, "the reference run must improve after its first validation"
    point = point.replace("IMPROVED", str(improved[0]))
    run = tmp_path / "run"
    killed = train(config, run, fault=f"{point}:{sig}")
    assert killed.returncode == -getattr(signal, "SIG" + sig), killed.stderr
    assert not (run / "train.json").exists()
    if not (run / checkpoint.LAST).exists():  # killed before the first last.pt: start again
        resumed = train(config, run, "--resume")
        assert resumed.returncode == 2 and "without --resume" in resumed.stderr
        resumed = train(config, run)
    else:
        resumed = train(config, run, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert outcome(run) == outcome(whole)
    assert same_weights(run / "best.pt", whole / "best.pt")
    assert same_weights(run / "last.pt", whole / "last.pt")
    leftovers = sorted(p.name for p in run.iterdir() if p.name.startswith("."))
    assert leftovers == [], leftovers  # temporaries and the lock are gone


@pytest.mark.parametrize("sig", ["INT", "TERM"])
def test_interrupted_by_a_signal_between_last_and_best_then_resumed(
    reference, tmp_path: Path, sig: str
):
    config, whole = reference
    improved = [n for n in improving_validations(whole) if n > 1]
    run = tmp_path / "run"
    stopped = train(config, run, fault=f"after-last@{improved[0]}:{sig}")
    assert stopped.returncode != 0
    assert "Traceback" not in stopped.stderr
    resumed = train(config, run, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert outcome(run) == outcome(whole)
    assert same_weights(run / "best.pt", whole / "best.pt")


@pytest.mark.parametrize("point", ["update@1", "update@5", "update@6", "validation@2"])
def test_ctrl_c_finishes_the_update_writes_last_pt_and_train_json_and_resumes(
    reference, tmp_path: Path, point: str
):
    """Ctrl-C (SIGINT) between validations or during one: the update (and validation)
    under way finishes, last.pt and train.json (stop: interrupted) are written, the resume
    command is printed, exit 130; resumed, the run ends as the uninterrupted one."""
    config, whole = reference
    run = tmp_path / "run"
    stopped = train(config, run, fault=f"{point}:INT")
    assert stopped.returncode == 130, stopped.stderr
    assert "Traceback" not in stopped.stderr
    assert f"transduce train --out {run} --resume" in stopped.stderr
    report = json.loads((run / "train.json").read_text(encoding="utf-8"))
    assert report["stop"] == "interrupted" and report["test"] is None
    update = int(point.split("@")[1]) * (EVERY if point.startswith("validation") else 1)
    assert report["updates"] == update
    assert checkpoint.load(run / "last.pt")["training"]["progress"]["update"] == update
    assert not (run / "test.predictions").exists()
    resumed = train(config, run, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert outcome(run) == outcome(whole)
    assert same_weights(run / "best.pt", whole / "best.pt")
    assert same_weights(run / "last.pt", whole / "last.pt")


def _started(run: Path, process: subprocess.Popen) -> None:
    """Wait until the run has written last.pt (its first validation is done)."""
    for _ in range(3000):
        if (run / "last.pt").exists():
            return
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        time.sleep(0.05)
    pytest.fail("no last.pt in 150 s")


def _interrupted(toy: Path, tmp_path: Path, gaps: list[float]):
    """A long run, sent SIGINT once its first validation is done, and again after each
    of `gaps` seconds: (recipe, run directory, the ended process, its stderr)."""
    config = write_recipe(
        tmp_path / "recipe.yaml", toy, max_updates=10**6, validate_every=5, max_epochs=10**6
    )
    run = tmp_path / "run"
    process = train(config, run, wait=False)
    try:
        _started(run, process)
        process.send_signal(signal.SIGINT)
        for gap in gaps:
            time.sleep(gap)
            process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
        process.wait()
    return config, run, process, stderr


def test_ctrl_c_from_outside_stops_a_running_train_cleanly(toy, tmp_path: Path):
    """A person's Ctrl-C: SIGINT from another process at any moment of a long run."""
    config, run, process, stderr = _interrupted(toy, tmp_path, gaps=[])
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and f"transduce train --out {run} --resume" in stderr
    report = json.loads((run / "train.json").read_text(encoding="utf-8"))
    assert report["stop"] == "interrupted" and report["updates"] >= 5
    assert checkpoint.load(run / "last.pt")["training"]["progress"]["update"] == report["updates"]
    resumed = train(config, run, "--resume", "--set", f"train.max_updates={report['updates'] + 2}")
    assert resumed.returncode == 0, resumed.stderr


@pytest.mark.parametrize("gap", [0.0, 0.003, 0.03])
def test_a_second_ctrl_c_stops_at_once_and_spoils_nothing(toy, tmp_path: Path, gap: float):
    """Wherever the second Ctrl-C falls (an update, a checkpoint half-written by
    torch.save, the report): exit 130 with the resume command, no traceback, last.pt
    intact and no temporary file left."""
    _, run, process, stderr = _interrupted(toy, tmp_path, gaps=[gap])
    # 130, or (a Ctrl-C after the first one's clean exit began) ended by SIGINT itself,
    # which a shell reports as 130 too
    assert process.returncode in (130, -signal.SIGINT), stderr
    assert "Traceback" not in stderr and f"transduce train --out {run} --resume" in stderr
    assert checkpoint.load(run / "last.pt")["training"]["progress"]["update"] >= 5  # intact
    assert not [p.name for p in run.iterdir() if ".transduce-" in p.name]  # no temporaries


@pytest.mark.parametrize(
    "point", ["before-rename:update-00000006.pt", "before-rename:index.json@2", "after-best@3"]
)
def test_kept_checkpoints_survive_a_kill(reference, toy, tmp_path: Path, point: str):
    """Killed while writing a kept checkpoint or its index: resumed, the run ends as the
    uninterrupted one, keeps the checkpoints it should, and leaves no temporary file."""
    _, whole = reference
    config = write_recipe(tmp_path / "recipe.yaml", toy, keep_best=1, keep_last=1)
    run = tmp_path / "run"
    assert train(config, run, fault=point).returncode == -9
    resumed = train(config, run, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert outcome(run) == outcome(whole)
    kept = run / checkpoint.KEPT
    best = json.loads((run / "train.json").read_text(encoding="utf-8"))["best"]["update"]
    assert {e["update"] for e in checkpoint.read_index(run)} == {best, UPDATES}
    assert sorted(p.name for p in kept.iterdir()) == sorted(
        [checkpoint.INDEX, *{checkpoint.kept_name(u) for u in (best, UPDATES)}]
    )


def test_a_ctrl_c_while_last_pt_is_written_waits_for_the_write(reference, tmp_path: Path):
    """SIGINT arrives inside the atomic write of last.pt (after torch.save, before the
    rename): the write completes, then the Ctrl-C is handled as usual."""
    config, whole = reference
    run = tmp_path / "run"
    stopped = train(config, run, fault="before-rename:last.pt@2:INT")
    assert stopped.returncode == 130, stderr if (stderr := stopped.stderr) else ""
    assert "Traceback" not in stopped.stderr
    assert not [p.name for p in run.iterdir() if ".transduce-" in p.name]
    report = json.loads((run / "train.json").read_text(encoding="utf-8"))
    assert report["stop"] == "interrupted"
    assert checkpoint.load(run / "last.pt")["training"]["progress"]["update"] == report["updates"]
    resumed = train(config, run, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert outcome(run) == outcome(whole)


def test_resume_repairs_a_stale_best_pt_and_says_so(reference, tmp_path: Path):
    """The issue's case: last.pt records its own update as the best, best.pt holds an
    older one (a validation cut between the two writes): resumed, the test scores come from
    the right weights."""
    config, whole = reference
    improved = [n for n in improving_validations(whole) if n > 1]
    run = tmp_path / "run"
    assert train(config, run, fault=f"after-last@{improved[0]}").returncode == -9
    last = checkpoint.load(run / "last.pt")["training"]["progress"]
    assert last["best_update"] == last["update"]
    best = checkpoint.load(run / "best.pt")["training"]["progress"]["update"]
    assert best < last["update"]
    resumed = train(config, run, "--resume", "-v")
    assert resumed.returncode == 0
    assert "copied last.pt to best.pt" in resumed.stderr
    assert outcome(run) == outcome(whole)


def test_resume_refuses_a_best_pt_whose_weights_are_lost(reference, tmp_path: Path):
    config, whole = reference
    run = tmp_path / "run"
    shutil.copytree(whole, run)
    (run / "train.json").unlink()
    state = checkpoint.load(run / "last.pt")
    progress = state["training"]["progress"]
    if progress["best_update"] == progress["update"]:  # as if an earlier one had been best
        progress["best_update"] = progress["update"] - EVERY
        checkpoint.save(run / "last.pt", {k: v for k, v in state.items() if k != "path"})
    (run / "best.pt").unlink()
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    resumed = train(config, run, "--resume")
    assert resumed.returncode == 2 and "whose weights are in no checkpoint" in resumed.stderr
    assert len(resumed.stderr.strip().splitlines()) == 1
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before


def test_stale_temporaries_are_removed_on_resume(reference, tmp_path: Path):
    config, _ = reference
    run = tmp_path / "run"
    assert train(config, run, fault="before-rename:last.pt@2").returncode == -9
    temporaries = [p.name for p in run.iterdir() if p.name.startswith(".last.pt.")]
    assert len(temporaries) == 1
    (run / ".best.pt.transduce-abcd1234.tmp").write_bytes(b"partial")
    (run / ".notes.transduce-abcd1234.tmp").write_bytes(b"the user's")  # not ours: kept
    (run / ".last.pt.backup_1.tmp").write_bytes(b"the user's too")
    resumed = train(config, run, "--resume", "-v")
    assert resumed.returncode == 0, resumed.stderr
    assert "removed .best.pt.transduce-abcd1234.tmp" in resumed.stderr
    assert sorted(p.name for p in run.iterdir() if p.name.startswith(".")) == [
        ".last.pt.backup_1.tmp",
        ".notes.transduce-abcd1234.tmp",
    ]


def test_resume_mid_epoch_with_other_batches_is_refused_and_changes_nothing(toy, tmp_path: Path):
    """Item 2: last.pt saved mid-epoch, resumed with another batch size: refused in one line
    (it hung or crashed before), and config.yaml is not rewritten (item 3)."""
    config = write_recipe(tmp_path / "recipe.yaml", toy)  # 3 updates: mid-epoch
    run = tmp_path / "run"
    assert train(config, run, "--set", "train.max_updates=3").returncode == 0
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    for extra in (["--set", "train.batch_size=100"], ["--set", "train.seed=2"]):
        result = train(config, run, "--resume", *extra)
        assert result.returncode == 2, result.stderr
        assert "in the middle of epoch 1" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    fine = train(config, run, "--resume", "--set", "train.max_updates=6")
    assert fine.returncode == 0, fine.stderr


def test_resume_past_a_lower_limit_is_refused_and_changes_nothing(toy, tmp_path: Path):
    """A run trained on to 6 updates (a session with a higher limit), then resumed with
    a lower one: it stopped at once and reported a model trained past the limit it
    named, which `experiment run` took for its cell's run. Now refused in one line, no
    file changed; resumed with its own limits, it stops at once as before."""
    config = write_recipe(tmp_path / "recipe.yaml", toy, batch_size=128, max_epochs=100)
    run = tmp_path / "run"
    assert train(config, run, "--set", "train.max_updates=6").returncode == 0
    epochs = json.loads((run / "train.json").read_text())["epochs"]
    assert epochs >= 2  # whole epochs of 128 of the toy's pairs: 6 updates end one
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    for extra, said in (
        (["train.max_updates=3"], "has trained 6 updates, past train.max_updates 3 of this"),
        (
            ["train.max_updates=6", f"train.max_epochs={epochs - 1}"],
            f"epochs, past train.max_epochs {epochs - 1} of this",
        ),
    ):
        result = train(config, run, "--resume", *[a for e in extra for a in ("--set", e)])
        assert result.returncode == 2, result.stderr
        assert said in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    fine = train(config, run, "--resume", "--set", "train.max_updates=6")
    assert fine.returncode == 0, fine.stderr
    assert json.loads((run / "train.json").read_text())["updates"] == 6


def test_a_failed_resume_leaves_every_file_as_it_was(reference, tmp_path: Path):
    """Item 3: `--resume --set model.encoder_size=64` rewrote config.yaml before failing."""
    _, whole = reference
    run = tmp_path / "run"
    shutil.copytree(whole, run)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    for extra in (
        ["--set", "model.encoder_size=64"],
        ["--set", "model.embedding_dim=8"],
        ["--set", "train.batch_size=0"],
    ):
        result = train(run / "config.yaml", run, "--resume", *extra)
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
        assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    again = train(run / "config.yaml", run, "--resume")
    assert again.returncode == 0, again.stderr  # nothing was spoilt for a plain resume


def test_a_second_writer_is_refused_with_the_holders_pid(toy, tmp_path: Path):
    """Item 4: two `train` processes on one --out both ran and mixed their files."""
    config = write_recipe(
        tmp_path / "recipe.yaml", toy, max_updates=10**6, validate_every=10**6, max_epochs=10**6
    )
    run = tmp_path / "run"
    first = train(config, run, wait=False)
    try:
        for _ in range(3000):  # the lock is taken before the data is read
            if (run / LOCK).exists() and (run / LOCK).read_text().strip():
                break
            assert first.poll() is None, first.stderr.read() if first.stderr else ""
            time.sleep(0.05)
        else:
            pytest.fail("the first process took no lock in 150 s")
        os.kill(first.pid, signal.SIGSTOP)  # holding the lock, stopped: no CPU for the others
        second = train(config, run, "--set", "train.max_updates=2")
        assert second.returncode == 2, second.stderr
        assert f"PID {first.pid}" in second.stderr
        resumed = train(config, run, "--resume")
        assert resumed.returncode == 2 and f"PID {first.pid}" in resumed.stderr
    finally:
        first.kill()
        first.wait()
    # the kernel dropped the dead holder's lock: the run can go on
    result = train(config, run, "--set", "train.max_updates=2")
    assert result.returncode == 0, result.stderr  # no last.pt yet: a fresh start is fine


def _tmpfs(path: Path, size: str) -> bool:
    path.mkdir()
    if sys.platform != "linux" or shutil.which("mount") is None:
        return False
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
    )
    return done.returncode == 0


def test_a_full_disk_during_training_is_one_line_and_resumable(reference, tmp_path: Path):
    config, whole = reference
    disk = tmp_path / "disk"
    prepared = Path(yaml.safe_load(config.read_text())["data"]["prepared"])
    data_bytes = sum(p.stat().st_size for p in prepared.iterdir())
    checkpoint_bytes = (whole / "last.pt").stat().st_size
    # room for the data, the first last.pt and part of the first best.pt
    room = data_bytes + 4096 * len(list(prepared.iterdir())) + checkpoint_bytes * 3 // 2
    if not _tmpfs(disk, f"{room // 1024 + 8}k"):
        pytest.skip("cannot mount a small tmpfs here (needs root and mount)")
    try:
        local = disk / "data"
        shutil.copytree(prepared, local)
        data = yaml.safe_load(config.read_text())
        data["data"]["prepared"] = str(local)
        recipe_file = disk / "recipe.yaml"
        recipe_file.write_text(yaml.safe_dump(data))
        run = disk / "run"
        full = train(recipe_file, run)
        assert full.returncode == 2, full.stderr
        assert "No space left on device" in full.stderr
        assert ".tmp" not in full.stderr and ".pt: " in full.stderr  # the user's file, named
        assert len(full.stderr.strip().splitlines()) == 1 and "Traceback" not in full.stderr
        assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]
        # the run moves to a disk with room: the partial run resumes and ends as the whole
        moved = tmp_path / "run"
        shutil.copytree(run, moved)
        resumed = (
            train(config, moved, "--resume")
            if (moved / "last.pt").exists()
            else train(config, moved)
        )
        assert resumed.returncode == 0, resumed.stderr
        assert outcome(moved) == outcome(whole)
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)


def test_the_fault_hook_is_inert_without_the_variable(monkeypatch):
    from transduce import faults
    from transduce.faults import fault_point

    monkeypatch.setattr(faults, "_fault_counts", {})
    monkeypatch.delenv("TRANSDUCE_FAULT", raising=False)
    fault_point("validation")  # nothing happens
    monkeypatch.setenv("TRANSDUCE_FAULT", "validation@2:INT")
    fault_point("after-last")  # another point: nothing
    fault_point("validation")  # the first time: nothing
    with pytest.raises(KeyboardInterrupt):
        fault_point("validation")
    assert os.environ["TRANSDUCE_FAULT"] == "validation@2:INT"


# ---------------------------------------------------------------------- prepare --force


def prepare(out: Path, source: Path, *extra: str, fault: str | None = None, exchange=True):
    env = transduce_env()
    env.pop("TRANSDUCE_FAULT", None)
    if fault:
        env["TRANSDUCE_FAULT"] = fault
    code = (
        "import sys, transduce.io as io\n"
        + ("" if exchange else "io._exchange = lambda a, b: False\n")
        + "from transduce.cli import app\n"
        + "app(prog_name='transduce', args=sys.argv[1:])\n"
    )
    command = [sys.executable, "-c", code, "prepare", "tsv", str(source), "-o", str(out), *extra]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def tree(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.mark.parametrize(
    ("exchange", "point"),
    [
        (True, "before-rename:out"),  # the new directory complete, not in place
        (True, "after-exchange:out"),  # in place; the old one not yet deleted
        (False, "before-rename:out"),
        (False, "between-renames:out"),  # the old one moved away, the new not in place
    ],
    ids=["exchange-before", "exchange-after", "renames-before", "renames-between"],
)
def test_prepare_force_killed_anywhere_leaves_a_whole_dataset(
    tmp_path: Path, exchange: bool, point: str
):
    """Item 11: a crash between --force's two renames left nothing at --out. Now --out
    always holds the old or the new dataset, and the next prepare cleans up."""
    first, second = tmp_path / "first.tsv", tmp_path / "second.tsv"
    first.write_text("".join(f"w{i}\tW {i}\n" for i in range(60)), encoding="utf-8")
    second.write_text("".join(f"v{i}\tV {i}\n" for i in range(80)), encoding="utf-8")
    out = tmp_path / "out"
    assert prepare(out, first).returncode == 0
    old = tree(out)
    killed = prepare(out, second, "--force", fault=point, exchange=exchange)
    assert killed.returncode == -9, killed.stderr
    if point == "between-renames:out":
        assert not out.exists()  # what a crash here leaves; the next prepare puts it back
        again = prepare(out, second, "--force", exchange=exchange)
        assert again.returncode == 0, again.stderr
        assert "put back the directory" in again.stderr
    else:
        assert out.is_dir()
        assert (tree(out) == old) == (point == "before-rename:out")
        again = prepare(out, second, "--force", exchange=exchange)
        assert again.returncode == 0, again.stderr
    assert "train.tsv" in tree(out) and b"V" in tree(out)["train.tsv"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["first.tsv", "out", "second.tsv"]


def test_a_second_prepare_on_one_output_is_refused(tmp_path: Path):
    source = tmp_path / "words.tsv"
    source.write_text("".join(f"w{i}\tW {i}\n" for i in range(60)), encoding="utf-8")
    out = tmp_path / "out"
    from transduce.locking import DirectoryLock

    with DirectoryLock(tmp_path / ".out.lock", out):
        result = prepare(out, source)
    assert result.returncode == 2 and f"PID {os.getpid()}" in result.stderr
    assert not out.exists()


def test_an_error_raised_while_a_ctrl_c_was_handled_counts_as_the_ctrl_c():
    from transduce.errors import interrupted

    def save() -> None:
        try:
            raise KeyboardInterrupt
        finally:
            raise RuntimeError("unexpected pos 400960 vs 400848")  # torch.save's clean-up

    with pytest.raises(RuntimeError) as caught:
        save()
    assert interrupted(caught.value) and interrupted(KeyboardInterrupt())
    assert not interrupted(RuntimeError("a bug"))
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise ValueError("unrelated") from None  # the context was dropped on purpose
    except ValueError as error:
        assert not interrupted(error)


def test_a_ctrl_c_that_cuts_an_import_short_still_exits_130(toy, tmp_path: Path, run, monkeypatch):
    """CI's failure: the second Ctrl-C fell inside an import, while Python's import machinery
    was handling the FileNotFoundError of a missing sys.path entry (python311.zip). The
    exit that followed (click's Exit, a RuntimeError) was taken for a failed file operation
    and became "error: .../python311.zip: No such file or directory", exit 2."""
    import transduce.training

    class CutShort:
        def __init__(self, *args, **kwargs) -> None:
            self.notes: list[str] = []

        def run(self) -> None:
            try:
                raise FileNotFoundError(2, "No such file or directory", "/lib/python311.zip")
            except FileNotFoundError:
                raise KeyboardInterrupt  # noqa: B904 (a signal raises it so: context kept)

    monkeypatch.setattr(transduce.training, "Trainer", CutShort)
    config = write_recipe(tmp_path / "recipe.yaml", toy)
    result = run("train", "-q", "--config", config, "--out", tmp_path / "run")
    assert result.exit_code == 130, result.output
    assert "stopped at once" in result.output and "python311.zip" not in result.output
    from transduce.errors import chained_os_error

    with pytest.raises(RuntimeError) as caught:
        try:
            raise OSError(28, "No space left on device", "x")
        except OSError:
            raise RuntimeError("writing the zip failed")  # noqa: B904 (the context is the point)
    assert chained_os_error(caught.value).filename == "x"


def _file_size_limit(limit: int):
    """For `preexec_fn`: files this process writes stop at `limit` bytes (EFBIG, as a full
    disk stops them with ENOSPC), the signal that would kill it ignored."""

    def apply() -> None:
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE and SIGXFSZ")
def test_a_disk_that_fills_inside_torchs_zip_writer_is_one_line(reference, tmp_path: Path):
    """N3: torch.save turns the OSError of a full disk into a RuntimeError ("[enforce fail
    at inline_container.cc] unexpected pos"), which came out as a 73-line traceback."""
    _, whole = reference
    out = tmp_path / "averaged.pt"
    command = [sys.executable, "-m", "transduce", "average", str(whole / "best.pt")]
    command += [str(whole / "last.pt"), "--out", str(out)]
    result = subprocess.run(
        command,
        env=transduce_env(),
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_file_size_limit(4096),
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert f"{out}: File too large" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temporary left either


def test_a_symlinked_checkpoints_folder_is_refused_when_keeping(reference, toy, tmp_path):
    """N4: pruning deleted `update-*.pt` files it did not write, through a checkpoints/
    linked to a folder shared by runs."""
    _, whole = reference
    config = write_recipe(tmp_path / "recipe.yaml", toy, keep_last=1)
    run = tmp_path / "run"
    shutil.copytree(whole, run)
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "update-00000001.pt").write_bytes(b"another run's checkpoint")
    (run / checkpoint.KEPT).symlink_to(shared)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    result = train(config, run, "--resume", "--set", f"train.max_updates={UPDATES + 3}")
    assert result.returncode == 2, result.stderr
    assert "checkpoints: is a symbolic link" in result.stderr and "Traceback" not in result.stderr
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    assert sorted(p.name for p in shared.iterdir()) == ["update-00000001.pt"]


def test_pruning_deletes_only_the_kept_checkpoints_the_index_wrote(toy, tmp_path: Path):
    """N4: a file named like a kept checkpoint that the run did not write survives the
    pruning; the run's own are pruned as before."""
    config = write_recipe(tmp_path / "recipe.yaml", toy, keep_last=1, max_updates=EVERY)
    run = tmp_path / "run"
    assert train(config, run).returncode == 0
    mine = run / checkpoint.KEPT / checkpoint.kept_name(1)
    mine.write_bytes(b"the user's own")
    resumed = train(config, run, "--resume", "--set", f"train.max_updates={3 * EVERY}")
    assert resumed.returncode == 0, resumed.stderr
    assert mine.read_bytes() == b"the user's own"
    assert sorted(p.name for p in (run / checkpoint.KEPT).iterdir()) == sorted(
        [checkpoint.INDEX, checkpoint.kept_name(1), checkpoint.kept_name(3 * EVERY)]
    )


def test_a_newer_versions_progress_key_is_left_out_with_a_warning(reference, tmp_path: Path):
    """N8: a last.pt whose progress has a key this version does not know (as a newer
    version's would) failed with `TypeError: Progress.__init__() got an unexpected keyword`."""
    config, whole = reference
    run = tmp_path / "run"
    shutil.copytree(whole, run)
    state = torch.load(run / "last.pt", weights_only=True)
    state["training"]["progress"]["from_the_future"] = 1
    torch.save(state, run / "last.pt")
    result = train(config, run, "--resume", "--set", f"train.max_updates={UPDATES + EVERY}")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "from_the_future" not in checkpoint.progress_of(checkpoint.load(run / "last.pt"))


@pytest.fixture(scope="module")
def averaging(toy, tmp_path_factory) -> tuple[Path, Path]:
    """An uninterrupted run with train.average_best_last, and its recipe."""
    root = tmp_path_factory.mktemp("averaging")
    config = write_recipe(root / "recipe.yaml", toy, average_best_last=True)
    result = train(config, root / "run")
    assert result.returncode == 0, result.stderr
    return config, root / "run"


@pytest.mark.parametrize("point", ["before-rename:final.pt", "before-test"])
def test_an_averaging_run_killed_at_its_end_resumes_to_the_same_final_pt(
    averaging, tmp_path: Path, point: str
):
    """Killed with final.pt's temporary file complete, or with final.pt written and the
    test not decoded: the resumed run averages again and ends as the uninterrupted one."""
    config, whole = averaging
    run = tmp_path / "run"
    killed = train(config, run, fault=f"{point}:KILL")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not (run / "train.json").exists()
    resumed = train(config, run, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert outcome(run) == outcome(whole)
    assert same_weights(run / "final.pt", whole / "final.pt")
    finals = [json.loads((r / "train.json").read_text("utf-8"))["final"] for r in (run, whole)]
    assert finals[0] == finals[1] and finals[0]["updates"][1] == UPDATES
    leftovers = sorted(p.name for p in run.iterdir() if p.name.startswith("."))
    assert leftovers == [], leftovers


def test_a_finished_run_trained_on_and_killed_does_not_say_it_finished(averaging, tmp_path: Path):
    """A finished run continued to a higher update limit and killed after its first new
    checkpoints: train.json no longer reports the earlier end (its test scores were
    final.pt's, which is gone), so an experiment does not take it for finished; resumed,
    the run ends as one trained to the new limit without a stop."""
    config, whole = averaging
    run = tmp_path / "run"
    shutil.copytree(whole, run)
    more = ("--set", f"train.max_updates={UPDATES + 2 * EVERY}")
    killed = train(config, run, "--resume", *more, fault="after-best@1:KILL")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    before = json.loads((whole / "train.json").read_text("utf-8"))
    report = json.loads((run / "train.json").read_text("utf-8"))
    assert before["stop"] and before["test"] and before["final"]  # what was there
    assert report["stop"] is None and report["test"] is None and report["final"] is None
    assert report["data"]["test_predictions_sha256"] is None
    assert report["history"] == before["history"]  # the rest as it was
    assert not finished(run) and not (run / "final.pt").exists()
    resumed = train(config, run, "--resume", *more)
    assert resumed.returncode == 0, resumed.stderr
    straight = train(config, tmp_path / "straight", *more)
    assert straight.returncode == 0, straight.stderr
    assert outcome(run) == outcome(tmp_path / "straight") and finished(run)
    assert same_weights(run / "final.pt", tmp_path / "straight" / "final.pt")


@pytest.mark.parametrize(
    ("progress", "limits", "refused"),
    [
        ({"update": 6}, {"max_updates": 6}, None),  # stopped at it: resumes, stops
        ({"update": 7}, {"max_updates": 6}, "has trained 7 updates, past train.max_updates 6"),
        ({"update": 7}, {"max_updates": None, "max_epochs": 5}, None),
        ({"epoch": 2}, {"max_epochs": 2}, None),  # an epoch limit stops at an epoch's end
        (
            {"epoch": 2, "batch": 3},
            {"max_epochs": 2},
            "2 epochs and 3 batches, past train.max_epochs 2",
        ),
        ({"epoch": 3}, {"max_epochs": 2}, "has trained 3 epochs, past train.max_epochs 2"),
        ({"epoch": 1, "batch": 3}, {"max_epochs": 2}, None),
    ],
)
def test_check_limits_by_hand(progress, limits, refused):
    """`runstate.check_limits`: past a limit is refused, with what was trained and the
    least limit that resumes it; at it or under it is not (a part of an epoch counts)."""
    train = configuration.TrainConfig(**{"max_updates": None, "max_epochs": None, **limits})
    state = Progress(**progress)
    if refused is None:
        check_limits(state, train, Path("run/last.pt"))
        return
    with pytest.raises(ConfigError, match=refused) as error:
        check_limits(state, train, Path("run/last.pt"))
    assert str(error.value).startswith("run/last.pt: ") and "\n" not in str(error.value)
