"""The model zoo: `MODELS` maps a name to its class; `build_model` makes one.

Importing this package registers every model family (one file each).
"""

from __future__ import annotations

from transduce.models import hard, lstm, tagger, transformer  # noqa: F401  (register the families)
from transduce.models.base import (
    MODELS,
    Model,
    ModelConfig,
    Seq2SeqModel,
    Seq2SeqOutput,
    State,
    Step,
    Tagger,
    expect,
    select_state,
)
from transduce.registry import lookup


def build_model(
    name: str, config: ModelConfig, source_vocab: int, target_vocab: int, **sizes: int
) -> Model:
    """A model of family `name` with its config and vocabulary sizes (a tagger also takes
    `chars`, the size of its character vocabulary)."""
    return lookup(MODELS, name, "model")(config, source_vocab, target_vocab, **sizes)


__all__ = [
    "MODELS",
    "Model",
    "ModelConfig",
    "Seq2SeqModel",
    "Seq2SeqOutput",
    "State",
    "Step",
    "Tagger",
    "build_model",
    "expect",
    "select_state",
]
