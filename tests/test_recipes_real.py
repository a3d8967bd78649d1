"""Slow tests: every paper recipe runs on the real datasets (../shared/data).

    python -m pytest -m slow tests/test_recipes_real.py

For each recipe under `recipes/paper/`, loaded with the datasets found as its data root
(`--data-root`): the data section is prepared (once per distinct data section), the model
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

from transduce import config as configuration
from transduce.training import Trainer

from .conftest import REPO

pytestmark = pytest.mark.slow

PAPER = sorted((REPO / "transduce" / "recipes" / "paper").rglob("*.yaml"))
PREPARED: dict[str, Path] = {}  # data section (JSON) -> prepared directory, shared by tests


@pytest.mark.parametrize("recipe", PAPER, ids=[f"{p.parent.name}/{p.stem}" for p in PAPER])
def test_paper_recipe_trains(shared: Path, tmp_path_factory, recipe: Path):
    # the recipe's $DATA/ paths under the datasets found; a missing file fails here
    _, data = configuration.load(str(recipe), data_root=shared)
    section = data["data"]
    subwords = section["options"].get("subwords")
    if subwords == "subword-nmt" and importlib.util.find_spec("subword_nmt") is None:
        pytest.skip("needs subword-nmt (pip install 'transduce[bpe]')")
    key = json.dumps(section, sort_keys=True)
    if key not in PREPARED:
        run = tmp_path_factory.mktemp("prepare")
        trainer = Trainer(configuration.parse(data), run)
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
    state = trainer.setup()
    assert sum(p.numel() for p in state.model.parameters()) > 100_000
    batches = trainer.batches(state.data, 1)
    losses = [trainer.update(batches[0], n) for n in (1, 2)]
    assert all(math.isfinite(loss) for loss in losses) and losses[0] != losses[1]
