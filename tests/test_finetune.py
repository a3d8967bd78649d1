"""`train.init_from`: fine-tuning a trained model on new data (transduce.finetune)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from transduce import checkpoint
from transduce import config as configuration
from transduce.cli import app
from transduce.data.prepare import PrepareRequest, prepare
from transduce.training import Trainer

from .toy import TINY_LSTM, TINY_TRANSFORMER, recipe, write_task


def write_other(directory: Path, alphabet: str, seed: int = 3) -> Path:
    """A copy task over another alphabet, prepared."""
    rng = random.Random(seed)
    words = sorted(
        {"".join(rng.choice(alphabet) for _ in range(rng.randint(2, 5))) for _ in range(200)}
    )
    raw = directory / "other.tsv"
    raw.write_text("".join(f"{w}\t{' '.join(w)}\n" for w in words), encoding="utf-8")
    out = directory / "other-prepared"
    prepare(PrepareRequest("tsv", out, inputs={"train": [raw]}, seed=seed))
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("finetune")
    prepared = write_task(root, "copy", n=200)  # letters a-g
    run = root / "base"
    Trainer(configuration.parse(recipe(prepared, TINY_LSTM, max_updates=300)), run).run()
    return run, root


@pytest.mark.parametrize("model", [TINY_LSTM, TINY_TRANSFORMER], ids=["lstm", "transformer"])
def test_the_weights_start_from_the_trained_model_row_by_symbol(tmp_path, model):
    """Shared symbols keep their trained rows (in another order: the new data's
    frequencies), a new symbol (h) keeps the fresh row of a model built without init_from,
    a dropped one (f, g) is gone; every other weight is the trained one."""
    base_data = write_task(tmp_path, "copy", n=200)
    base = tmp_path / "base"
    Trainer(configuration.parse(recipe(base_data, model, max_updates=10)), base).run()
    other = write_other(tmp_path, "abcdeh")
    data = recipe(other, model, max_updates=1, seed=7)
    data["train"]["init_from"] = str(base)
    scratch = recipe(other, model, max_updates=1, seed=7)
    built = {}
    for name, settings in (("tuned", data), ("scratch", scratch)):
        trainer = Trainer(configuration.parse(settings), tmp_path / name)
        built[name] = trainer.setup().model
        if name == "tuned":
            record = trainer.initialized
    old = checkpoint.load(base)
    tuned, fresh = built["tuned"].state_dict(), built["scratch"].state_dict()
    symbols = trainer_vocab(tmp_path / "tuned", other, data)
    assert "h" in symbols["source"] and "f" not in symbols["source"]
    for side, weight in (("source", "source_embedding.weight"), ("target", "output.weight")):
        for row, symbol in enumerate(symbols[side]):
            if symbol in old["vocab"][side]:
                expected = old["model"][weight][old["vocab"][side].index(symbol)]
            else:  # new: the row the model was built with
                expected = fresh[weight][row]
            assert torch.equal(tuned[weight][row], expected), (side, symbol)
    for name, value in tuned.items():
        if not name.startswith(("source_embedding.", "target_embedding.", "output.")):
            assert torch.equal(value, old["model"][name]), name
    assert record["source_symbols_new"] == 1 and record["source_symbols_dropped"] == 2


def trainer_vocab(run: Path, prepared: Path, data: dict) -> dict[str, list[str]]:
    trainer = Trainer(configuration.parse(data), run)
    loaded = trainer.task.load_data(prepared)
    return {k: v.symbols for k, v in loaded.vocabs.items()}


def test_a_run_records_what_it_started_from_and_keeps_it_on_resume(trained, tmp_path):
    base, _ = trained
    other = write_other(tmp_path, "abcdeh")
    data = recipe(other, TINY_LSTM, max_updates=4, validate_every=2)
    data["train"]["init_from"] = str(base)
    run = tmp_path / "tuned"
    report = Trainer(configuration.parse(data), run).run()
    started = report["init_from"]
    assert started["checkpoint"] == str(base / checkpoint.BEST)
    assert started["update"] == checkpoint.load(base)["training"]["progress"]["update"]
    assert started["source_symbols_new"] == 1 and started["target_symbols_dropped"] == 2
    data["train"]["max_updates"] = 6
    again = Trainer(configuration.parse(data), run, resume=True).run()
    assert again["init_from"] == started and again["updates"] == 6


def test_other_model_options_are_refused_before_anything_is_written(trained, tmp_path):
    base, _ = trained
    other = write_other(tmp_path, "abcdeh")
    for model, message in (
        ({**TINY_LSTM, "encoder_size": 64}, "its model.encoder_size is 32, this recipe's 64"),
        (TINY_TRANSFORMER, "a lstm model; this recipe's is transformer"),
    ):
        data = recipe(other, model, max_updates=2)
        data["train"]["init_from"] = str(base)
        config = tmp_path / "r.yaml"
        config.write_text(yaml.safe_dump(data), encoding="utf-8")
        result = CliRunner().invoke(app, ["train", "-c", str(config), "-o", str(tmp_path / "x")])
        assert result.exit_code == 2, result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and message in lines[0], result.output
        assert not (tmp_path / "x").exists()
    dropout = recipe(other, {**TINY_LSTM, "dropout": 0.3}, max_updates=2)
    dropout["train"]["init_from"] = str(base)  # dropout shapes no weight: allowed
    assert Trainer(configuration.parse(dropout), tmp_path / "d").run()["updates"] == 2


def test_fine_tuning_starts_where_the_trained_model_is(trained, tmp_path):
    """On the task it was trained for, the first validation of a fine-tuned run is about
    the trained model's, far above a run from scratch at the same update."""
    base, root = trained
    prepared = root / "copy-prepared"
    results = {}
    for name in ("tuned", "scratch"):
        data = recipe(prepared, TINY_LSTM, max_updates=2, validate_every=2, optimizer={"lr": 1e-6})
        if name == "tuned":
            data["train"]["init_from"] = str(base)
        results[name] = Trainer(configuration.parse(data), tmp_path / name).run()
    before = json.loads((base / "train.json").read_text())["best"]["score"]
    tuned = results["tuned"]["history"][0]["dev_scores"]["acc"]
    assert tuned == pytest.approx(before, abs=5.0)
    assert tuned > results["scratch"]["history"][0]["dev_scores"]["acc"] + 20


def test_a_tagger_starts_from_a_trained_tagger(tmp_path):
    """Words, characters and tags are mapped row by symbol (a word new to the data keeps
    its fresh row); on the data it was trained on, the first validation of the fine-tuned
    tagger is about the trained tagger's, far above a tagger from scratch."""
    from .test_tagger import recipe as tagger_recipe
    from .test_tagger import write_conllu

    for split, n, seed in (("train", 300, 0), ("dev", 40, 1), ("test", 40, 2)):
        write_conllu(tmp_path / f"{split}.conllu", n, seed)
    base = tmp_path / "base"
    Trainer(configuration.parse(tagger_recipe(tmp_path)), base).run()
    trained = json.loads((base / "train.json").read_text())["best"]["score"]
    results = {}
    for name in ("tuned", "scratch"):
        data = tagger_recipe(tmp_path)
        data["train"].update(max_updates=2, validate_every=2, optimizer={"lr": 1e-6})
        if name == "tuned":
            data["train"]["init_from"] = str(base)
        results[name] = Trainer(configuration.parse(data), tmp_path / name).run()
    tuned = results["tuned"]["history"][0]["dev_scores"]["tagacc"]
    assert tuned == pytest.approx(trained, abs=5.0)
    assert tuned > results["scratch"]["history"][0]["dev_scores"]["tagacc"] + 20
    record = results["tuned"]["init_from"]
    assert record["chars_symbols_new"] == 0 and record["source_symbols_dropped"] == 0

    # another corpus: its words in another order, one word the trained tagger never saw
    extra = tmp_path / "extra"
    extra.mkdir()
    write_conllu(extra / "train.conllu", 300, 5)
    text = (extra / "train.conllu").read_text(encoding="utf-8")
    first = next(line for line in text.splitlines() if line and not line.startswith("#"))
    word = first.split("\t")[1]
    (extra / "train.conllu").write_text(text.replace(f"\t{word}\t{word}\t", "\tzyzzyva\tz\t", 1))
    for split in ("dev", "test"):
        (extra / f"{split}.conllu").write_text((tmp_path / f"{split}.conllu").read_text())
    data = tagger_recipe(extra)
    data["train"]["init_from"] = str(base)
    trainer = Trainer(configuration.parse(data), tmp_path / "other")
    built = trainer.setup()
    model = built.model
    old = checkpoint.load(base)
    state = model.state_dict()
    loaded = {k: v.symbols for k, v in built.data.vocabs.items()}
    assert "zyzzyva" in loaded["source"]
    for side, weight in (
        ("source", "embedding.weight"),
        ("chars", "char_cnn.embedding.weight"),
        ("target", "output.weight"),
    ):
        for row, symbol in enumerate(loaded[side]):
            if symbol in old["vocab"][side]:
                expected = old["model"][weight][old["vocab"][side].index(symbol)]
                assert torch.equal(state[weight][row], expected), (side, symbol)
    assert trainer.initialized["source_symbols_new"] == 1
