"""Slow tests: every paper recipe runs on the real datasets (../shared/data).

    python -m pytest -m slow tests/test_recipes_real.py

For each recipe under `recipes/paper/`, with its `../shared/data` paths pointed at the
datasets found: the data section is prepared (once per distinct data section), the model
is built with the recipe's sizes, and two training updates with the recipe's optimizer,
schedule, loss and batching run with a finite loss that changes. Full training runs take
hours; the default tests train small models to convergence on toy tasks.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import yaml

from transduce import config as configuration
from transduce.schedules import Schedule
from transduce.training import Trainer, make_optimizer

from .conftest import REPO

pytestmark = pytest.mark.slow

PAPER = sorted((REPO / "transduce" / "recipes" / "paper").rglob("*.yaml"))
PREPARED: dict[str, Path] = {}  # data section (JSON) -> prepared directory, shared by tests


def point_at(value, root: Path):
    """The recipe's data paths with ../shared/data replaced by `root`."""
    if isinstance(value, str) and value.startswith("../shared/data/"):
        return str(root / value.removeprefix("../shared/data/"))
    if isinstance(value, list):
        return [point_at(v, root) for v in value]
    return value


@pytest.mark.parametrize("recipe", PAPER, ids=[f"{p.parent.name}/{p.stem}" for p in PAPER])
def test_paper_recipe_trains(shared: Path, tmp_path_factory, recipe: Path):
    data = yaml.safe_load(recipe.read_text(encoding="utf-8"))
    section = {key: point_at(value, shared) for key, value in data["data"].items()}
    for split in ("train", "dev", "test"):
        for path in section.get(split) or []:
            assert Path(path).is_file(), f"{recipe.name}: {split} file missing: {path}"
    subwords = section.get("options", {}).get("subwords")
    if subwords == "subword-nmt" and importlib.util.find_spec("subword_nmt") is None:
        pytest.skip("needs subword-nmt (pip install 'transduce[bpe]')")
    key = json.dumps(section, sort_keys=True)
    if key not in PREPARED:
        run = tmp_path_factory.mktemp("prepare")
        trainer = Trainer(configuration.parse({**data, "data": section}), run)
        PREPARED[key] = trainer.task.prepared_dir(run)
    data["data"] = {
        "prepared": str(PREPARED[key]),
        **{
            k: v
            for k, v in section.items()
            if k.startswith("max_") or k in ("min_count", "vocab_fraction")
        },
    }
    config = configuration.parse(data)
    trainer = Trainer(config, tmp_path_factory.mktemp("run"))
    prepared, model, _, _, _ = trainer.setup()
    assert sum(p.numel() for p in model.parameters()) > 100_000
    optimizer = make_optimizer(model, config.train.optimizer)
    schedule = Schedule(config.train.schedule, optimizer, config.train.optimizer.lr)
    batches = trainer.batches(prepared, 1)
    losses = [trainer.update(model, optimizer, schedule, prepared, batches[0], n) for n in (1, 2)]
    assert all(math.isfinite(loss) for loss in losses) and losses[0] != losses[1]
