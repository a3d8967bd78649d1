"""Configuration: typed sections, every error at once, overrides, every recipe valid;
recipes by name, composed with `base:`, data paths under the data root."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from transduce import config as configuration
from transduce import recipe_loader
from transduce.errors import ConfigError, DataError
from transduce.models.lstm import LSTMConfig
from transduce.models.transformer import TransformerConfig

REPO_RECIPES = Path(__file__).parent.parent / "transduce" / "recipes"
RECIPES = sorted(REPO_RECIPES.rglob("*.yaml"))
SHIPPED = recipe_loader.shipped_recipes()


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
        "train.schedule.type: expected one of constant, inverse_sqrt, plateau, cosine, "
        "sockeye_inv_sqrt, got 'linear'",
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
    nested = "paper/rios2021/transformer-g2p-cmudict"
    assert nested in configuration.shipped_recipes()
    for name in (nested, f"{nested}.yaml"):
        assert configuration.recipe_path(name) == REPO_RECIPES / f"{nested}.yaml"
    with pytest.raises(ConfigError, match="no such recipe file, and not a shipped recipe"):
        configuration.recipe_path("nope")
    with pytest.raises(ConfigError, match=f"did you mean {nested}\\?"):
        configuration.recipe_path("paper/rios2021/transformer-g2p-cmudic")
    for outside in ("../pyproject", "paper/../g2p", "/g2p", "paper//rios2021"):
        with pytest.raises(ConfigError, match="not a shipped recipe"):
            configuration.recipe_path(outside)
    bad = tmp_path / "bad.yaml"
    bad.write_text("data: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="bad.yaml:.*not valid YAML"):
        configuration.load(str(bad))


def test_an_existing_file_wins_over_a_shipped_name(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("g2p").write_text(yaml.safe_dump(minimal(train={"seed": 7})), encoding="utf-8")
    config, _ = configuration.load("g2p")
    assert config.train.seed == 7


@pytest.mark.parametrize("recipe", RECIPES, ids=[p.stem for p in RECIPES])
def test_every_recipe_is_valid(recipe: Path):
    text = recipe.read_text(encoding="utf-8")
    assert text.startswith("#"), "a recipe starts with a comment saying how to run it"
    configuration.load(str(recipe), check_data=False)


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_recipe_loads_by_name(name: str):
    """By name, as `train --config NAME` loads it after `pip install` (no data needed)."""
    config, resolved = configuration.load(name, check_data=False)
    assert config.model_name == resolved["model"]["name"]
    purpose = recipe_loader.purpose(name)
    assert 10 <= len(purpose) <= 105, f"the first line says what {name} is for, briefly"
    text = recipe_loader.shipped_recipe(name).read_text(encoding="utf-8")  # type: ignore[union-attr]
    assert f"--config {name}" in text, "its comment says how to run it, by name"
    settings = [line for line in text.splitlines() if not line.startswith("#")]
    assert not any("shared/data" in line for line in settings), "data paths start with $DATA/"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


BASE = """\
data: {format: cmudict, options: {keep_stress: true}}
model: {name: lstm, embedding_dim: 64, attention: {scorer: general}}
train:
  max_epochs: 20
  optimizer: {lr: 0.01, betas: [0.9, 0.98]}
  select_on: wer
"""


def test_base_merges_mappings_and_replaces_other_values(tmp_path: Path):
    write(tmp_path / "base.yaml", BASE)
    variant = write(
        tmp_path / "sub" / "variant.yaml",
        "base: ../base.yaml\n"
        "model: {attention: mlp, dropout: 0.3}\n"
        "train: {max_epochs: null, max_updates: 50, optimizer: {lr: 0.5}}\n",
    )
    config, resolved = configuration.load(str(variant), ["train.optimizer.lr=0.25"])
    assert config.model.embedding_dim == 64 and config.model.dropout == 0.3  # merged
    assert config.model.attention.scorer == "mlp"  # a string replaces the base's mapping
    assert config.train.max_epochs is None and config.train.max_updates == 50  # null is a value
    assert config.train.optimizer.betas == [0.9, 0.98] and config.train.optimizer.lr == 0.25
    assert config.train.select_on == "wer" and resolved["data"]["options"] == {"keep_stress": True}
    # a chain, with a base named without .yaml; lists replace, they are not appended to
    third = write(
        tmp_path / "third.yaml", "base: sub/variant\ntrain: {optimizer: {betas: [0.8, 0.9]}}\n"
    )
    config, _ = configuration.load(str(third))
    assert config.train.optimizer.betas == [0.8, 0.9] and config.train.optimizer.lr == 0.5
    assert config.model.embedding_dim == 64 and config.train.max_updates == 50
    # a shipped recipe by name, from anywhere
    shipped = write(tmp_path / "mine.yaml", "base: g2p\ntrain: {batch_size: 32}\n")
    config, _ = configuration.load(str(shipped))
    g2p, _ = configuration.load("g2p")
    assert config.train.batch_size == 32 and config.model == g2p.model
    assert config.train.optimizer == g2p.train.optimizer


def test_a_local_copy_builds_on_the_shipped_recipe_of_its_name(tmp_path: Path):
    """`./g2p.yaml` with `base: g2p` means the shipped g2p, not itself (no cycle)."""
    local = write(tmp_path / "g2p.yaml", "base: g2p\ntrain: {batch_size: 32}\n")
    config, _ = configuration.load(str(local))
    g2p, _ = configuration.load("g2p")
    assert config.train.batch_size == 32 and config.model == g2p.model
    write(tmp_path / "mine.yaml", "base: mine\n")  # no shipped recipe of that name: a cycle
    with pytest.raises(ConfigError, match="cycle"):
        configuration.load(str(tmp_path / "mine.yaml"))


def test_a_variant_of_another_model_family_replaces_the_model_section(tmp_path: Path):
    write(tmp_path / "base.yaml", BASE)  # an lstm with lstm-only options
    variant = write(
        tmp_path / "t.yaml",
        "base: base.yaml\nmodel: {name: transformer, d_model: 32, heads: 2}\n",
    )
    config, resolved = configuration.load(str(variant))
    assert resolved["model"]["name"] == "transformer" and "embedding_dim" not in resolved["model"]
    assert isinstance(config.model, TransformerConfig) and config.model.d_model == 32
    assert config.train.select_on == "wer"  # the other sections still merge
    same = write(tmp_path / "s.yaml", "base: base.yaml\nmodel: {name: lstm, dropout: 0.3}\n")
    config, _ = configuration.load(str(same))
    assert config.model.embedding_dim == 64 and config.model.dropout == 0.3


def test_a_hard_variant_of_an_lstm_recipe_keeps_its_sizes(tmp_path: Path):
    """hard is of the lstm family: its section merges with the base's (sizes, dropout)."""
    write(tmp_path / "base.yaml", BASE)
    variant = write(tmp_path / "h.yaml", "base: base.yaml\nmodel: {name: hard}\n")
    config, resolved = configuration.load(str(variant))
    base, _ = configuration.load(str(tmp_path / "base.yaml"))
    assert resolved["model"]["name"] == "hard" and config.model.embedding_dim == 64
    assert {k: v for k, v in vars(config.model).items() if k in vars(base.model)} == vars(
        base.model
    )


def test_the_model_families_are_the_config_classes():
    """Two models share a family (recipe_loader.EXTENDS) exactly when one's config class
    extends the other's, and an extension's own options are the fields it adds."""
    import dataclasses

    from transduce.models import MODELS
    from transduce.recipe_loader import EXTENDS, family

    for a, first in MODELS.items():
        for b, second in MODELS.items():
            related = issubclass(first.Config, second.Config) or issubclass(
                second.Config, first.Config
            )
            assert (family(a) == family(b)) == related, (a, b)
    for child, (parent, own) in EXTENDS.items():
        fields = {f.name for f in dataclasses.fields(MODELS[child].Config)}
        inherited = {f.name for f in dataclasses.fields(MODELS[parent].Config)}
        assert set(own) == fields - inherited


def test_an_lstm_variant_of_a_hard_recipe_keeps_the_sizes_not_the_hard_options(tmp_path):
    write(tmp_path / "base.yaml", BASE)
    write(tmp_path / "h.yaml", "base: base.yaml\nmodel: {name: hard, estimator: reinforce}\n")
    variant = write(tmp_path / "s.yaml", "base: h.yaml\nmodel: {name: lstm}\n")
    config, resolved = configuration.load(str(variant))
    assert resolved["model"]["name"] == "lstm" and "estimator" not in resolved["model"]
    assert config.model.embedding_dim == 64


def test_every_shipped_hard_recipe_has_the_sizes_of_its_soft_recipe():
    """Wu et al. 2018 compare systems of the same size: each hard-* recipe is its soft
    counterpart's model with hard attention (input feeding as its name says)."""
    from transduce.recipe_loader import shipped_recipes

    sizes = ("embedding_dim", "encoder_layers", "encoder_size", "decoder_layers")
    sizes += ("decoder_size", "dropout")
    checked = 0
    for name in shipped_recipes():
        if not name.startswith("paper/wu2018/hard-"):
            continue
        soft = name.replace("/hard-reinforce-", "/soft-").replace("/hard-monotonic-", "/soft-")
        soft = soft.replace("/hard-", "/soft-")
        hard, _ = configuration.load(name, check_data=False)
        base, _ = configuration.load(soft, check_data=False)
        assert hard.model_name == "hard", name
        assert [getattr(hard.model, k) for k in sizes] == [getattr(base.model, k) for k in sizes], (
            name
        )
        checked += 1
    assert checked == 40


def test_small_g2p_lstm_is_small_g2p_with_soft_attention():
    """`small/g2p-lstm` is `small/g2p` (hard monotonic attention since 2026-12-07) with the
    soft-attention LSTM it had before, every other setting the same (the grids' soft systems,
    such as small-data-sigmorphon2020-g2p's `small`, moved to it with their cells'
    configurations unchanged: checked once, when they moved)."""
    _, hard = configuration.load("small/g2p", check_data=False)
    _, soft = configuration.load("small/g2p-lstm", check_data=False)
    assert hard["model"]["name"] == "hard" and hard["model"]["monotonic"] is True
    assert soft["model"]["name"] == "lstm" and "monotonic" not in soft["model"]
    own = ("name", *recipe_loader.EXTENDS["hard"][1])  # hard's options beyond the LSTM's
    assert {k: v for k, v in hard["model"].items() if k not in own} == {
        k: v for k, v in soft["model"].items() if k != "name"
    }
    assert {k: v for k, v in hard.items() if k != "model"} == {
        k: v for k, v in soft.items() if k != "model"
    }


def test_base_errors_are_one_line(tmp_path: Path):
    write(tmp_path / "a.yaml", "base: b.yaml\n")
    write(tmp_path / "b.yaml", "base: c\n")
    write(tmp_path / "c.yaml", "base: a.yaml\n")
    with pytest.raises(ConfigError) as info:
        configuration.load(str(tmp_path / "a.yaml"))
    message = str(info.value)
    assert "cycle" in message and "\n" not in message
    assert message.count("a.yaml") == 3 and "b.yaml -> " in message and "c.yaml -> " in message
    write(tmp_path / "self.yaml", "base: self.yaml\n")
    with pytest.raises(ConfigError, match="cycle: .*self.yaml -> .*self.yaml"):
        configuration.load(str(tmp_path / "self.yaml"))
    missing = write(tmp_path / "m.yaml", "base: nowhere.yaml\nmodel: {name: lstm}\n")
    with pytest.raises(ConfigError) as info:
        configuration.load(str(missing))
    message = str(info.value)
    assert message.startswith(f"{missing}: base: no recipe 'nowhere.yaml'") and "\n" not in message
    write(tmp_path / "list.yaml", "base: [a.yaml]\n")
    with pytest.raises(ConfigError, match="list.yaml: base: expected a recipe path or name"):
        configuration.load(str(tmp_path / "list.yaml"))
    # problems of the composed recipe name the variant and its bases
    write(tmp_path / "good.yaml", BASE)
    write(tmp_path / "typo.yaml", "base: good.yaml\ntrain: {batchsize: 3}\n")
    with pytest.raises(ConfigError, match=r"typo.yaml \(base: good.yaml\): 1 problem: train.b"):
        configuration.load(str(tmp_path / "typo.yaml"))


DATA_RECIPE = """\
data:
  format: tsv
  train: [$DATA/set/train.tsv]
  dev: [$DATA/set/dev.tsv]
  test: [relative/test.tsv]
model: {name: lstm}
"""


def test_data_root(tmp_path: Path, monkeypatch):
    recipe = str(write(tmp_path / "r.yaml", DATA_RECIPE))
    for root in ("option", "env", "cwd/../shared/data"):
        for split in ("train", "dev"):
            write(tmp_path / root / "set" / f"{split}.tsv", "a\tb\n")
    monkeypatch.delenv("TRANSDUCE_DATA", raising=False)
    monkeypatch.chdir(write(tmp_path / "cwd" / "x", "").parent)
    _, resolved = configuration.load(recipe)  # the default, ../shared/data
    default = tmp_path / "cwd" / ".." / "shared" / "data"
    assert resolved["data"]["train"] == [str(default.resolve() / "set" / "train.tsv")]
    assert resolved["data"]["test"] == ["relative/test.tsv"]  # not under the data root
    monkeypatch.setenv("TRANSDUCE_DATA", str(tmp_path / "env"))
    _, resolved = configuration.load(recipe)
    assert resolved["data"]["dev"] == [str(tmp_path / "env" / "set" / "dev.tsv")]
    config, resolved = configuration.load(recipe, data_root=tmp_path / "option")
    assert config.data.train == [str(tmp_path / "option" / "set" / "train.tsv")]
    # resolved paths are absolute: the run's config.yaml needs no data root to resume
    assert configuration.parse(resolved).data == config.data
    _, resolved = configuration.load(recipe, ["data.test=[$DATA/set/dev.tsv]"], "../option")
    assert resolved["data"]["test"] == [str(tmp_path / "option" / "set" / "dev.tsv")]


def test_a_missing_data_file_is_one_line_before_any_data_is_read(tmp_path: Path, monkeypatch):
    recipe = str(write(tmp_path / "r.yaml", DATA_RECIPE))
    write(tmp_path / "root" / "set" / "dev.tsv", "a\tb\n")
    monkeypatch.setenv("TRANSDUCE_DATA", str(tmp_path / "root"))
    with pytest.raises(DataError) as info:
        configuration.load(recipe)
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'root' / 'set' / 'train.tsv'}: no such data file")
    for fragment in ("(TRANSDUCE_DATA)", "--data-root DIR", "set TRANSDUCE_DATA"):
        assert fragment in message, fragment
    assert "\n" not in message
    with pytest.raises(DataError, match=r"and 1 other .*\(--data-root, which does not exist\)"):
        configuration.load(recipe, data_root=tmp_path / "nowhere")
    config, _ = configuration.load(recipe, data_root=tmp_path / "nowhere", check_data=False)
    assert config.data.train == [str(tmp_path / "nowhere" / "set" / "train.tsv")]
    with pytest.raises(ConfigError, match="train.batchsize: unknown key"):  # config problems first
        configuration.load(recipe, ["train.batchsize=3"], data_root=tmp_path / "nowhere")


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
