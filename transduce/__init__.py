"""transduce: neural character- and word-level transduction from the command line.

From Python: `transduce.load(RUN_DIR or CHECKPOINT)` gives a `Transducer`, whose
`.transduce(lines, beam=..., nbest=...)` returns a `Prediction` (`.texts`, `.scores`) per line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from os import PathLike

    from transduce.inference import Transducer

from transduce.version import __version__ as __version__


def load(path: str | PathLike[str], device: str = "cpu", bf16: bool | None = None) -> Transducer:
    """The trained model of a run directory (its best.pt) or of a checkpoint file, ready
    to transduce (torch is imported here, not by `import transduce`)."""
    from transduce.inference import Transducer

    return Transducer.from_checkpoint(path, device, bf16)


def __getattr__(name: str) -> Any:
    if name == "Transducer":
        from transduce.inference import Transducer

        return Transducer
    raise AttributeError(f"module 'transduce' has no attribute {name!r}")
