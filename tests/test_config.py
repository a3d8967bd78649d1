"""Configuration: typed sections, every error at once, overrides, every recipe valid."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from transduce import config as configuration
from transduce.errors import ConfigError
from transduce.models.lstm import LSTMConfig
from transduce.models.transformer import TransformerConfig

RECIPES = sorted((Path(__file__).parent.parent / "transduce" / "recipes").rglob("*.yaml"))


def minimal(**sections) -> dict:
    data = {"data": {"format": "cmudict"}, "model": {"name": "lstm"}}
    data.update(sections)
    return data


def test_defaults_are_filled_in():
    config = configuration.parse(minimal())
    assert isinstance(config.model, LSTMConfig) and config.model_name == "lstm"
    resolved = configuration.resolved(config)
    assert resolved["train"]["optimizer"]["lr"] == 1e-3
    assert resolved["model"] == {"name": "lstm", **configuration.to_dict(LSTMConfig())}
    assert configuration.parse(resolved).train == config.train  # a resolved config re-parses


def test_every_problem_is_reported_together():
    data = minimal(
        train={"batch_size": "big", "optimiser": {"lr": 1}, "schedule": {"type": "linear"}},
        decode={"beam": 0},
        extra={},
    )
    data["model"].update(embedding_dim=2.5, attention="luong")
    with pytest.raises(ConfigError) as info:
        configuration.parse(data, "r.yaml")
    message = str(info.value)
    for fragment in (
        "r.yaml: 8 problems",
        "extra: unknown section",
        "train.batch_size: expected an integer, got 'big'",
        "train.optimiser: unknown key (did you mean optimizer?)",
        "train.schedule.type: expected one of constant, inverse_sqrt, plateau, cosine, got "
        "'linear'",
        "model.embedding_dim: expected an integer, got 2.5",
        "model.attention: expected a mapping or one of dot, general, bilinear, mlp, got 'luong'",
        "decode.beam: must be at least 1",
    ):
        assert fragment in message, fragment
    assert "\n" not in message


def test_type_and_value_problems_of_one_section_come_together():
    data = minimal(train={"seed": "x", "batch_size": 0, "clip_norm": 0, "max_minutes": 0})
    data["data"] = {"format": "tsvx"}
    data["model"] = "lstm"
    with pytest.raises(ConfigError) as info:
        configuration.parse(data)
    message = str(info.value)
    for fragment in (
        "6 problems",
        "train.seed: expected an integer, got 'x'",
        "train.batch_size: must be at least 1, not 0",
        "train.clip_norm: must be positive",
        "train.max_minutes: must be positive",
        "data.format: unknown format 'tsvx'",
        "model: expected a mapping with a name, got 'lstm'",
    ):
        assert fragment in message, fragment
    with pytest.raises(ConfigError, match="data.options: .*not an option of the tsv format"):
        configuration.parse(minimal(data={"format": "tsv", "options": {"bogus": 1}}))
    with pytest.raises(ConfigError, match="model.name: unknown model"):
        configuration.parse(minimal(model={"name": ["lstm"]}))


def test_model_rules_and_names():
    with pytest.raises(
        ConfigError,
        match="model.name: unknown model .rnn. .valid: lstm, hard, san_tagger, transformer",
    ):
        configuration.parse(minimal(model={"name": "rnn"}))
    with pytest.raises(
        ConfigError, match="attention.scorer: dot needs decoder_size = 2 . encoder_size"
    ):
        configuration.parse(minimal(model={"name": "lstm", "attention": "dot"}))
    with pytest.raises(ConfigError, match="heads: must divide d_model"):
        configuration.parse(minimal(model={"name": "transformer", "heads": 3}))
    assert isinstance(
        configuration.parse(minimal(model={"name": "transformer"})).model, TransformerConfig
    )
    with pytest.raises(ConfigError, match="give either `prepared`"):
        configuration.parse({"data": {}, "model": {"name": "lstm"}})


def test_overrides(tmp_path: Path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(minimal()), encoding="utf-8")
    config, resolved = configuration.load(
        str(recipe),
        ["train.batch_size=64", "model.dropout=0.1", "train.optimizer.betas=[0.9, 0.98]"],
    )
    assert config.train.batch_size == 64 and config.model.dropout == 0.1
    assert resolved["train"]["optimizer"]["betas"] == [0.9, 0.98]
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        configuration.load(str(recipe), ["train.batch_size"])
    with pytest.raises(ConfigError, match="train.batchsize: unknown key .did you mean batch_size"):
        configuration.load(str(recipe), ["train.batchsize=3"])


def test_recipe_names_and_bad_files(tmp_path: Path):
    assert "g2p" in configuration.shipped_recipes()
    assert configuration.recipe_path("g2p").name == "g2p.yaml"
    with pytest.raises(ConfigError, match="no such recipe file, and not a shipped recipe"):
        configuration.recipe_path("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("data: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="bad.yaml:.*not valid YAML"):
        configuration.load(str(bad))


@pytest.mark.parametrize("recipe", RECIPES, ids=[p.stem for p in RECIPES])
def test_every_recipe_is_valid(recipe: Path):
    text = recipe.read_text(encoding="utf-8")
    assert text.startswith("#"), "a recipe starts with a comment saying how to run it"
    configuration.load(str(recipe))


def test_cosine_schedule_needs_its_end():
    with pytest.raises(ConfigError, match="the cosine schedule needs the update it ends at"):
        configuration.parse(minimal(train={"schedule": {"type": "cosine"}}), "r.yaml")
    with pytest.raises(ConfigError, match="until: must be at least 2, not 1"):
        configuration.parse(minimal(train={"schedule": {"type": "cosine", "until": 1}}))
    with pytest.raises(ConfigError, match="must not exceed optimizer.lr"):
        configuration.parse(
            minimal(train={"max_updates": 10, "schedule": {"type": "cosine", "min_lr": 0.1}})
        )
    config = configuration.parse(minimal(train={"max_updates": 10, "schedule": {"type": "cosine"}}))
    assert config.train.schedule.type == "cosine" and config.train.schedule.until is None
