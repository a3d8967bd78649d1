"""`train.init_from`: a new run that starts from a trained model's weights (fine-tuning on
new data, with a new recipe).

The model's options must be those of the checkpoint (its family and every option but the
dropouts, which shape no weight): a difference is refused in one line naming the option.
The vocabularies are the new data's: the rows of the vocabulary-indexed weights (the
`source_embedding`, `target_embedding` and `output` weights of every sequence-to-sequence
family, whose first dimension runs over the symbols) are copied symbol by symbol, so a
symbol new to the vocabulary keeps the fresh row the model was built with (seeded by
`train.seed`) and a symbol that left it is dropped. Every other weight is copied as it is.
A tagger's vocabulary-indexed weights are its word embeddings (`embedding`, the source
words), its character embeddings (`char_cnn.embedding`, the characters) and its output
layer (`output`, the tags), mapped the same way (`TAGGER_ROWS`).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from transduce import checkpoint
from transduce import config as configuration
from transduce.errors import ConfigError
from transduce.models import Model, Seq2SeqModel

# the weights whose first dimension is a vocabulary: prefix -> the vocabulary
VOCABULARY_ROWS = {
    "source_embedding.": "source",
    "target_embedding.": "target",
    "output.": "target",
}
TAGGER_ROWS = {
    "embedding.": "source",
    "char_cnn.embedding.": "chars",
    "output.": "target",
}


def _differences(before: Any, now: Any) -> list[tuple[str, Any, Any]]:
    """The model options that differ (dropouts aside), as (key, before, now)."""
    old, new = asdict(before), asdict(now)
    return [
        (key, old.get(key), new.get(key))
        for key in sorted(set(old) | set(new))
        if "dropout" not in key and "drophead" not in key and old.get(key) != new.get(key)
    ]


def check(path: str, config: configuration.Config) -> dict[str, Any]:
    """The checkpoint at `path`, if this recipe can start from it (before anything is
    written: `Trainer` checks it first).

    Raises:
        ConfigError: another model family, or other model options.
        CheckpointError: not a checkpoint of this version.
    """
    from transduce.models import MODELS

    where = f"train.init_from: {path}"
    if MODELS[config.model_name].task not in ("seq2seq", "tagging"):
        raise ConfigError(f"{where}: fine-tuning is not built for {config.model_name} models")
    payload = checkpoint.load(path)
    trained = configuration.parse(payload["config"], payload.get("path", str(path)))
    if trained.model_name != config.model_name:
        raise ConfigError(
            f"{where}: a {trained.model_name} model; this recipe's is {config.model_name}"
        )
    differ = _differences(trained.model, config.model)
    if differ:
        key, old, new = differ[0]
        raise ConfigError(
            f"{where}: its model.{key} is {old!r}, this recipe's {new!r}; fine-tuning keeps "
            "the trained model's options (dropouts aside)"
        )
    return payload


def init_from(
    model: Model, vocabs: dict[str, list[str]], path: str, config: configuration.Config
) -> dict[str, Any]:
    """Load the weights of the checkpoint at `path` (a run directory: its final.pt or best.pt) into
    `model`, built for `vocabs`; what was done, for train.json.

    Raises:
        ConfigError: another model family, or other model options.
        CheckpointError: not a checkpoint of this version.
    """
    where = f"train.init_from: {path}"
    payload = check(path, config)
    old_vocabs = payload["vocab"]
    old_state, state = payload["model"], model.state_dict()
    rows = VOCABULARY_ROWS if isinstance(model, Seq2SeqModel) else TAGGER_ROWS
    counts = {"copied": 0, "by_symbol": 0}
    for name, value in state.items():
        if name not in old_state:
            raise ConfigError(f"{where}: it has no weight {name} (another version of the model)")
        side = next((v for p, v in rows.items() if name.startswith(p)), None)
        if side is not None:
            state[name] = _rows(old_state[name], value, old_vocabs[side], vocabs[side])
            counts["by_symbol"] += 1
        elif old_state[name].shape == value.shape:
            state[name] = old_state[name].to(value.dtype)
            counts["copied"] += 1
        else:
            raise ConfigError(
                f"{where}: its {name} has shape {tuple(old_state[name].shape)}, this model's "
                f"{tuple(value.shape)}"
            )
    model.load_state_dict(state)
    record: dict[str, Any] = {
        "checkpoint": payload.get("path", str(path)),
        "update": ((payload.get("training") or {}).get("progress") or {}).get("update"),
        # an averaged checkpoint (final.pt, `transduce average`) has no update of its own:
        # the checkpoints and updates it averages
        "averaged": payload.get("averaged"),
        "weights_copied": counts["copied"],
        "weights_by_symbol": counts["by_symbol"],
    }
    for side in sorted(set(rows.values())):
        old, new = set(old_vocabs[side]), set(vocabs[side])
        record[f"{side}_symbols_new"] = len(new - old)  # fresh rows
        record[f"{side}_symbols_dropped"] = len(old - new)
    return record


def _rows(
    old: torch.Tensor, fresh: torch.Tensor, before: list[str], now: list[str]
) -> torch.Tensor:
    """`fresh` (first dimension: the symbols `now`) with the rows of the symbols also in
    `before` taken from `old`."""
    if old.shape[1:] != fresh.shape[1:]:
        raise ConfigError(
            f"train.init_from: a weight of shape {tuple(old.shape)} cannot seed "
            f"{tuple(fresh.shape)}"
        )
    index = {symbol: i for i, symbol in enumerate(before)}
    out = fresh.clone()
    for row, symbol in enumerate(now):
        if symbol in index:
            out[row] = old[index[symbol]].to(fresh.dtype)
    return out


def describe(record: dict[str, Any]) -> str:
    """The note `train` prints."""
    return (
        f"initialized from {Path(record['checkpoint'])} (update {record['update']}): "
        f"{record['source_symbols_new']} new and {record['source_symbols_dropped']} dropped "
        f"source symbols, {record['target_symbols_new']} new and "
        f"{record['target_symbols_dropped']} dropped target symbols"
    )
