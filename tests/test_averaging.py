"""Kept checkpoints (`train.keep_best`, `train.keep_last`) and `transduce average`."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from transduce import checkpoint
from transduce.averaging import average, average_weights
from transduce.cli import app
from transduce.data.prepare import PrepareRequest, prepare
from transduce.errors import CheckpointError
from transduce.experiments.report import best_dev
from transduce.runs import RunDir, RunReport

from .toy import TINY_LSTM, recipe, write_task


def test_averaging_the_same_weights_gives_them_back_and_two_give_their_mean():
    torch.manual_seed(0)
    state = {"w": torch.randn(3, 4), "b": torch.randn(4).half(), "steps": torch.tensor([7])}
    again = average_weights([state, state, state], ["a", "a", "a"])
    assert all(torch.equal(again[k], state[k]) and again[k].dtype == state[k].dtype for k in state)
    other = {"w": state["w"] + 2.0, "b": state["b"], "steps": torch.tensor([7])}
    mean = average_weights([state, other], ["a", "b"])
    assert torch.allclose(mean["w"], state["w"] + 1.0)
    with pytest.raises(CheckpointError, match="steps differs"):
        average_weights([state, {**other, "steps": torch.tensor([8])}], ["a", "b"])
    with pytest.raises(CheckpointError, match="has shape"):
        average_weights([state, {**other, "w": torch.zeros(4, 3)}], ["a", "b"])


@pytest.fixture(scope="module")
def kept(tmp_path_factory) -> Path:
    """A toy run of 8 validations that keeps its 2 best and 2 last checkpoints."""
    root = tmp_path_factory.mktemp("kept")
    prepared = write_task(root, "reverse", n=150)
    settings = recipe(
        prepared, TINY_LSTM, max_updates=40, validate_every=5, keep_best=2, keep_last=2,
        select_on="lev",
    )  # fmt: skip
    config = root / "recipe.yaml"
    config.write_text(yaml.safe_dump(settings), encoding="utf-8")
    run = root / "run"
    result = CliRunner().invoke(
        app, ["train", "-q", "--config", str(config), "--out", str(run), "--no-test"]
    )
    assert result.exit_code == 0, result.output
    return run


def _history(run: Path) -> list[tuple[int, float]]:
    report = json.loads((run / "train.json").read_text(encoding="utf-8"))
    return [(h["update"], h["dev_scores"]["lev"]) for h in report["history"]]


def _best(history: list[tuple[int, float]], count: int) -> list[int]:
    """The `count` best updates by dev lev (lower is better; ties: the earlier update, as
    best.pt keeps it), computed here from train.json."""
    return sorted(u for u, _ in sorted(history, key=lambda e: (e[1], e[0]))[:count])


def test_a_run_keeps_its_best_and_last_checkpoints(kept: Path):
    history = _history(kept)
    assert [u for u, _ in history] == [5, 10, 15, 20, 25, 30, 35, 40]
    assert len({score for _, score in history}) > 2  # the scores differ: the choice is real
    best = _best(history, 2)
    assert set(best) != {35, 40}  # the best are not simply the last ones
    wanted = set(best) | {35, 40}
    index = checkpoint.read_index(kept)
    assert {e["update"] for e in index} == wanted
    files = sorted(p.name for p in (kept / checkpoint.KEPT).glob("*.pt"))
    assert files == sorted(checkpoint.kept_name(u) for u in wanted)
    for entry in index:
        payload = checkpoint.load(kept / checkpoint.KEPT / entry["file"])
        assert payload["training"]["progress"]["update"] == entry["update"]
        assert "optimizer" not in payload["training"]  # weights only: half the size
        assert dict(history)[entry["update"]] == entry["score"]


def test_average_the_best_or_the_last(run, kept: Path, tmp_path: Path):
    history = _history(kept)
    best = _best(history, 2)
    out = tmp_path / "best2.pt"
    result = run("average", kept, "--best", "2", "--out", out)
    assert result.exit_code == 0, result.output
    averaged = checkpoint.load(out)
    assert averaged["averaged"]["updates"] == best and "training" not in averaged
    members = [checkpoint.load(kept / checkpoint.KEPT / checkpoint.kept_name(u)) for u in best]
    for key, value in averaged["model"].items():
        expected = (members[0]["model"][key].double() + members[1]["model"][key].double()) / 2
        assert torch.allclose(value.double(), expected, atol=1e-6), key
    decoded = run("decode", out, input="abc\ncab\n")
    assert decoded.exit_code == 0 and len(decoded.stdout.splitlines()) == 2
    last = run("average", kept, "--last", "2", "--out", tmp_path / "last2.pt")
    assert last.exit_code == 0, last.output
    assert checkpoint.load(tmp_path / "last2.pt")["averaged"]["updates"] == [35, 40]
    # files given directly: the same checkpoint three times is that checkpoint
    one = kept / checkpoint.KEPT / checkpoint.kept_name(40)
    same = run("average", one, one, one, "--out", tmp_path / "same.pt")
    assert same.exit_code == 0, same.output
    a, b = checkpoint.load(one)["model"], checkpoint.load(tmp_path / "same.pt")["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--best", "5"], "--best 5: "),
        (["--last", "3"], "keeps its 2 last checkpoints"),
        (["--best", "1", "--last", "1"], "give one of them"),
        ([], "say which checkpoints"),
        (["--best", "0"], "must be at least 1"),
    ],
)
def test_average_refuses_in_one_line(run, kept: Path, tmp_path: Path, args, message):
    result = run("average", kept, *args, "--out", tmp_path / "x.pt")
    assert result.exit_code == 2 and message in result.output
    if args[:2] == ["--best", "5"]:
        assert "keeps its 2 best checkpoints (train.keep_best: 2)" in result.output
    assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1
    assert not (tmp_path / "x.pt").exists()


def test_average_refuses_other_models_and_an_existing_out(run, kept: Path, tmp_path: Path):
    unkept = tmp_path / "unkept"
    unkept.mkdir()
    result = run("average", unkept, "--best", "2", "--out", tmp_path / "x.pt")
    assert result.exit_code == 2 and "no kept checkpoints" in result.output
    one = kept / checkpoint.KEPT / checkpoint.kept_name(40)
    other = checkpoint.load(one)
    other["vocab"] = {**other["vocab"], "target": [*other["vocab"]["target"], "Z"]}
    checkpoint.save(tmp_path / "other.pt", {k: v for k, v in other.items() if k != "path"})
    with pytest.raises(CheckpointError, match="vocabularies differ"):
        average([one, tmp_path / "other.pt"])
    (tmp_path / "taken.pt").write_bytes(b"mine")
    result = run("average", one, one, "--out", tmp_path / "taken.pt")
    assert result.exit_code == 2 and "exists" in result.output
    assert (tmp_path / "taken.pt").read_bytes() == b"mine"


def test_a_checkpoint_from_before_an_option_averages_with_one_from_after(kept, tmp_path):
    """A model option added since (here `tag_input`, `attend_tags`) is absent from older
    checkpoints: at its default it is the same model; at another value it is not."""
    one = kept / checkpoint.KEPT / checkpoint.kept_name(40)
    old = checkpoint.load(one)
    for key in ("tag_input", "attend_tags"):
        old["config"]["model"].pop(key, None)
    checkpoint.save(tmp_path / "old.pt", {k: v for k, v in old.items() if k != "path"})
    averaged = average([one, tmp_path / "old.pt"])
    assert set(averaged["model"]) == set(old["model"])
    other = checkpoint.load(one)
    other["config"]["model"]["tag_input"] = True
    checkpoint.save(tmp_path / "other.pt", {k: v for k, v in other.items() if k != "path"})
    with pytest.raises(CheckpointError, match="model options differ"):
        average([one, tmp_path / "other.pt"])


# ----------------------------------------------------- train.average_best_last (final.pt)


def _unreachable_dev(root: Path) -> Path:
    """The reverse task with dev references it never learns to produce (each reversed word
    with "z", a symbol of no training target, after it): dev accuracy is 0 at every
    validation, so the best one is the
    first (a later one must be strictly better) and best.pt and last.pt hold different
    updates whatever the machine. Train and test are the plain reverse task."""
    rng = random.Random(5)
    words = sorted(
        {"".join(rng.choice("abcdefg") for _ in range(rng.randint(2, 6))) for _ in range(400)}
    )
    rng.shuffle(words)
    splits = {"train": words[:300], "dev": words[300:340], "test": words[340:]}
    inputs = {}
    for split, chosen in splits.items():
        extra = " z" if split == "dev" else ""
        path = root / f"{split}.tsv"
        path.write_text("".join(f"{w}\t{' '.join(w[::-1])}{extra}\n" for w in chosen), "utf-8")
        inputs[split] = [path]
    out = root / "prepared"
    prepare(PrepareRequest("tsv", out, inputs=inputs))
    return out


@pytest.fixture(scope="module")
def averaged_run(tmp_path_factory) -> Path:
    """A toy run of 6 validations with train.average_best_last: best update 5, last 30."""
    root = tmp_path_factory.mktemp("final")
    settings = recipe(
        _unreachable_dev(root), TINY_LSTM, max_updates=30, validate_every=5,
        average_best_last=True, device="cpu",
    )  # fmt: skip
    config = root / "recipe.yaml"
    config.write_text(yaml.safe_dump(settings), encoding="utf-8")
    run = root / "run"
    result = CliRunner().invoke(app, ["train", "-q", "--config", str(config), "--out", str(run)])
    assert result.exit_code == 0, result.output
    return run


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return checkpoint.load(path)["model"]


def test_a_run_that_averages_makes_final_pt_the_mean_of_best_and_last(averaged_run: Path):
    report = json.loads((averaged_run / "train.json").read_text(encoding="utf-8"))
    assert report["best"]["update"] == 5 and report["updates"] == 30
    final = report["final"]
    assert final["checkpoints"] == ["best.pt", "last.pt"] and final["updates"] == [5, 30]
    best, last = _weights(averaged_run / "best.pt"), _weights(averaged_run / "last.pt")
    averaged = _weights(averaged_run / "final.pt")
    changed = 0
    for key, value in averaged.items():
        mean = ((best[key].double() + last[key].double()) / 2).to(value.dtype)
        assert torch.equal(value, mean), key
        changed += not torch.equal(value, best[key])
    assert changed > len(averaged) // 2  # not best.pt again: the option was not ignored
    assert "training" not in checkpoint.load(averaged_run / "final.pt")  # not resumable
    # the run's model, for decode, export, ensembles and init_from, is final.pt
    assert checkpoint.load(averaged_run)["path"] == str(averaged_run / "final.pt")
    assert RunDir(averaged_run).model == averaged_run / "final.pt"
    # its dev validation: the unreachable references keep accuracy at 0, lev is measured
    assert final["dev_scores"]["acc"] == 0.0 and final["dev_scores"]["lev"] > 0
    assert set(final["dev_scores"]) == set(report["history"][0]["dev_scores"])


def test_the_test_split_is_decoded_with_the_averaged_model(averaged_run: Path, tmp_path: Path):
    words = _test_sources(averaged_run, tmp_path)
    predicted = (averaged_run / "test.predictions").read_text("utf-8").splitlines()
    assert predicted == _decode(averaged_run, "final.pt", words)


def _test_sources(run: Path, tmp_path: Path) -> Path:
    """The toy task's test sources, a line each, in a file to decode."""
    lines = (run.parent / "test.tsv").read_text("utf-8").splitlines()
    words = tmp_path / "words.txt"
    words.write_text("".join(line.split("\t")[0] + "\n" for line in lines), encoding="utf-8")
    return words


def _decode(run: Path, model: str, words: Path) -> list[str]:
    result = CliRunner().invoke(
        app, ["decode", "-q", str(run / model), str(words), "--device", "cpu"]
    )
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def test_resuming_with_the_option_switched_tests_the_model_it_names(
    averaged_run: Path, tmp_path: Path
):
    """A finished run resumed with nothing to train: with the option off, final.pt is
    deleted and best.pt tested (the averaged test scores are not kept); on again,
    final.pt is made again, the same, and tested; on a third time, nothing changes and
    the test scores are kept."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(averaged_run, run)
    config = averaged_run.parent / "recipe.yaml"
    words = _test_sources(averaged_run, tmp_path)
    before = json.loads((averaged_run / "train.json").read_text(encoding="utf-8"))

    def resume(average: bool) -> tuple[dict, str]:
        result = CliRunner().invoke(
            app,
            ["train", "--config", str(config), "--out", str(run), "--resume",
             "--set", f"train.average_best_last={str(average).lower()}"],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        return json.loads((run / "train.json").read_text(encoding="utf-8")), result.output

    report, _ = resume(False)
    assert not (run / "final.pt").exists() and report["final"] is None
    predicted = (run / "test.predictions").read_text("utf-8").splitlines()
    assert predicted == _decode(run, "best.pt", words)
    assert checkpoint.load(run)["path"] == str(run / "best.pt")
    report, _ = resume(True)
    assert report["final"] == before["final"] and report["test"] == before["test"]
    assert _weights(run / "final.pt").keys() == _weights(averaged_run / "final.pt").keys()
    assert all(
        torch.equal(v, _weights(averaged_run / "final.pt")[k])
        for k, v in _weights(run / "final.pt").items()
    )
    predicted = (run / "test.predictions").read_text("utf-8").splitlines()
    assert predicted == _decode(run, "final.pt", words)
    report, said = resume(True)
    assert "test scores and test.predictions are kept" in said
    assert report["test"] == before["test"] and report["final"] == before["final"]


def test_a_new_checkpoint_removes_a_final_pt_of_an_earlier_session(tmp_path: Path):
    """A resumed run that trains on: once last.pt moves on, final.pt (the mean of the old
    last.pt) is no longer the run's model."""
    (tmp_path / "final.pt").write_bytes(b"old")
    checkpoint.Checkpointer(tmp_path).save({"model": {}}, improved=False)
    assert not (tmp_path / "final.pt").exists() and (tmp_path / "last.pt").is_file()


def test_a_new_checkpoint_retires_the_report_of_an_earlier_end(tmp_path: Path):
    """An earlier session's train.json that says the run stopped: rewritten as a run not
    stopped, without its test scores and averaged model; one not stopped, or damaged,
    is left as it is (byte for byte)."""
    ended = {
        "stop": "reached max_updates (30)", "test": {"acc": 90.0}, "final": {"updates": [5, 30]},
        "test_monotonicity": {"mono": 99.0}, "history": [{"update": 5}], "config": {},
        "data": {"test_predictions_sha256": "ab", "test_sources": 3},
    }  # fmt: skip
    report = tmp_path / "train.json"
    report.write_text(json.dumps(ended), encoding="utf-8")
    checkpoint.Checkpointer(tmp_path).save({"model": {}}, improved=False)
    now = json.loads(report.read_text(encoding="utf-8"))
    assert now == {
        **ended, "stop": None, "test": None, "final": None, "test_monotonicity": None,
        "data": {"test_predictions_sha256": None, "test_sources": 3},
    }  # fmt: skip
    assert not RunReport(now).finished
    for text in (json.dumps(now, indent=3), '{"stop": "reached", "test": '):
        report.write_text(text, encoding="utf-8")
        checkpoint.Checkpointer(tmp_path).save({"model": {}}, improved=False)
        assert report.read_text(encoding="utf-8") == text


def test_the_report_reads_dev_from_the_averaged_model():
    history = [
        {"update": 5, "dev_scores": {"acc": 50.0}},
        {"update": 10, "dev_scores": {"acc": 40.0}},
    ]
    fields = {"history": history, "best": {"update": 5, "metric": "acc", "score": 50.0}}
    assert best_dev(RunReport(fields)) == {"acc": 50.0}
    final = {"updates": [5, 10], "dev_scores": {"acc": 55.0}, "dev_monotonicity": None}
    assert best_dev(RunReport({**fields, "final": final})) == {"acc": 55.0}
