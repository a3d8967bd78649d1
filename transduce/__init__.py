"""transduce: neural character- and word-level transduction from the command line.

From Python: `transduce.load(RUN_DIR or CHECKPOINT)` gives a `Transducer`, whose
`.transduce(lines, beam=..., nbest=...)` returns a `Prediction` (`.texts`, `.scores`) per line;
`transduce.score(hypotheses, references, metrics=["wer", "per"])` scores lines as
`transduce score` scores files (a `Score` per metric: `.value`, `.signature`).
"""

from __future__ import annotations

from os import PathLike
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

    from transduce.inference import Transducer

from transduce.version import __version__ as __version__


def load(
    path: str | PathLike[str] | Sequence[str | PathLike[str]],
    device: str = "cpu",
    bf16: bool | None = None,
    ensemble_mean: str = "probability",
) -> Transducer:
    """The trained model of a run directory (its final.pt or best.pt) or of a checkpoint file, ready
    to transduce; a list of them decodes as an ensemble (`transduce.ensemble`). torch is
    imported here, not by `import transduce`."""
    from transduce.inference import Transducer, check_device

    if not isinstance(bf16, bool | None):
        raise TypeError(f"bf16: True, False or None, not {bf16!r}")
    check_device(device)
    if isinstance(path, (str, PathLike)):
        return Transducer.from_checkpoint(path, device, bf16)
    return Transducer.ensemble(list(path), device, bf16, ensemble_mean)


def __getattr__(name: str) -> Any:
    if name == "score":  # `transduce.scoring.score_lines`, imported when first asked for
        from transduce.scoring import score_lines

        return score_lines
    if name == "Transducer":
        from transduce.inference import Transducer

        return Transducer
    raise AttributeError(f"module 'transduce' has no attribute {name!r}")
