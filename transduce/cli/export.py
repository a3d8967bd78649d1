"""`transduce export RUN_DIR|CHECKPOINT --out FILE [--format torchscript]`: a trained model
as one self-contained file that runs without transduce (`transduce.export`)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from transduce.cli import ui
from transduce.cli.app import app
from transduce.cli.common import Verbosity
from transduce.errors import ConfigError
from transduce.outputs import check_outputs


class Format(str, Enum):
    torchscript = "torchscript"
    onnx = "onnx"


@app.command(name="export")
def export_command(
    model: Annotated[
        str,
        typer.Argument(
            metavar="RUN_DIR|CHECKPOINT",
            help="A run directory (its final.pt or best.pt) or a checkpoint file.",
            show_default=False,
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="The file to write.")],
    format: Annotated[
        Format,
        typer.Option(
            "--format",
            help="torchscript: one file for torch.jit.load, greedy decoding with its "
            "tokenization (m.transduce(lines)). onnx: refused (it cannot hold the "
            "tokenization).",
        ),
    ] = Format.torchscript,
    verbosity: Verbosity = None,
) -> None:
    """Export a trained model (its vocabularies and tokenization with it) for use without
    transduce: `m = torch.jit.load(FILE); m.transduce(["word", ...])`."""
    value = format.value
    if value == "onnx":
        raise ConfigError(
            "--format onnx: ONNX's standard operators cannot cut a UTF-8 string into "
            "characters, so an ONNX file cannot hold the tokenization (a graph of ids in and "
            "ids out is possible, not written); use --format torchscript"
        )
    if out.is_dir():
        raise ConfigError(f"--out {out}: a folder; give the file to write")
    check_outputs([out], [model])
    from transduce.export import export

    metadata = export(model, out, value)
    ui.info(f"exported {metadata['checkpoint']} ({metadata['model']}, greedy, float32) to {out}")
